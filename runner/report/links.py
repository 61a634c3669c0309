"""Bug references as links: only http(s) URLs and GitHub ``owner/repo#123`` ids become links,
so a suite's text can never smuggle a ``javascript:`` or other scheme into the report."""

from __future__ import annotations

import re

GITHUB_ISSUE = re.compile(r"([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)#([0-9]+)")


def bug_url(bug: str | None) -> str | None:
    """The URL a bug reference points to, or None when it is plain text."""
    if not bug:
        return None
    bug = bug.strip()
    if bug.startswith(("http://", "https://")):
        return bug
    issue = GITHUB_ISSUE.fullmatch(bug)
    if issue:
        owner, repo, number = issue.groups()
        return f"https://github.com/{owner}/{repo}/issues/{number}"
    return None
