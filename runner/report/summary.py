"""``reports/summary.md``: the latest run in a few lines of Markdown, for a CI job summary
(``cat reports/summary.md >> $GITHUB_STEP_SUMMARY``), laid out from the report model.

Suite text is escaped so a case id or message cannot turn into markup, links or HTML.
"""

from __future__ import annotations

import re
from urllib.parse import quote

from runner.history import CaseResult
from runner.report.analysis import KIND_LABELS
from runner.report.model import LatestRun, Link, Report
from runner.repro.command import repro_command

MAX_ROWS = 50  # GitHub caps a job summary at 1 MiB; the HTML report has everything

MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>|&~#!])")

URL_SAFE = ":/?#@!$&'*+,;=%~"  # percent-encode the rest: spaces and parentheses end a link


def md(value: object) -> str:
    """Plain text for a Markdown table cell: one line, markup characters escaped."""
    text = " ".join(str(value).split())
    return MARKDOWN_SPECIAL.sub(r"\\\1", text)


def md_bug(bug: Link | None) -> str:
    if bug is None:
        return ""
    return f"[{md(bug.text)}]({quote(bug.url, safe=URL_SAFE)})" if bug.url else md(bug.text)


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows[:MAX_ROWS]]
    if len(rows) > MAX_ROWS:
        lines.append(f"\n…and {len(rows) - MAX_ROWS} more in `reports/index.html`.")
    return lines + [""]


def _outcome_counts(latest: LatestRun) -> list[str]:
    headers = ["backend", *(KIND_LABELS[k] for k in KIND_LABELS)]
    rows = [
        [md(backend), *(str(counts[k]) for k in KIND_LABELS)]
        for backend, counts in latest.kinds_by_backend
    ]
    return _table(headers, rows)


def _repro(result: CaseResult) -> str:
    command = repro_command(result)
    return f"`{re.sub(r'[^0-9A-Za-z -]', '', command)}`" if command else ""


def render_summary(report: Report) -> str:
    latest = report.latest
    if latest is None:
        return "## Regression report\n\nNo runs yet.\n"
    run, results = latest.run, latest.results
    lines = [f"## Regression run {md(run.run_id)}: {md(latest.status)}", ""]
    if latest.status != "complete":
        why = run.message or "the run did not record its end"
        lines += [
            f"> **Run {md(latest.status)}**: {md(why)}. {len(results)} of "
            f"{md(run.cases or '?')} planned cases have results.",
            "",
        ]
    outcomes = latest.outcomes
    lines += [
        f"**{len(results)} results**: {outcomes.get('unexpected', 0)} unexpected, "
        f"{outcomes.get('unexpected-pass', 0)} unexpected pass, "
        f"{outcomes.get('skipped', 0)} skipped.",
        "",
    ]
    if results:
        lines += _outcome_counts(latest)
    if latest.previous_id is None:
        lines += ["No earlier comparable run.", ""]
    else:
        lines += [f"### Changes since run {md(latest.previous_id)}", ""]
        rows = [
            [
                md(c.change),
                md(c.case_id),
                md(c.before_verdict or "not run"),
                md(c.verdict),
                md_bug(c.bug),
            ]
            for c in latest.changes
        ]
        lines += (
            _table(["change", "case", "before", "now", "bug"], rows)
            if rows
            else ["No verdict changed.", ""]
        )
    if latest.unexpected:
        lines += ["### Unexpected results", ""]
        lines += _table(
            ["case", "verdict", "outcome", "message", "YAML case", "repro bundle"],
            [
                [
                    md(r.case_id),
                    md(r.verdict),
                    md(r.outcome),
                    md(r.message),
                    f"`python -m runner new-case {re.sub(r'[^0-9A-Za-z]', '', r.result_id)}`",
                    _repro(r),
                ]
                for r in latest.unexpected
            ],
        )
    lines.append("Details, trends and ready-made YAML cases: `reports/index.html`.")
    return "\n".join(lines) + "\n"
