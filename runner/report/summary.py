"""``reports/summary.md``: the latest run in a few lines of Markdown, for a CI job summary
(``cat reports/summary.md >> $GITHUB_STEP_SUMMARY``).

Suite text is escaped so a case id or message cannot turn into markup, links or HTML.
"""

from __future__ import annotations

import re
from urllib.parse import quote

import pandas as pd

from runner.report import analysis
from runner.report.analysis import KIND_LABELS, outcome_kind
from runner.report.history import History
from runner.report.links import bug_url
from runner.repro.command import repro_command
from runner.verdicts import FAILING_OUTCOMES

MAX_ROWS = 50  # GitHub caps a job summary at 1 MiB; the HTML report has everything

MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>|&~#!])")

URL_SAFE = ":/?#@!$&'*+,;=%~"  # percent-encode the rest: spaces and parentheses end a link


def md(value: object) -> str:
    """Plain text for a Markdown table cell: one line, markup characters escaped."""
    text = " ".join(str(value).split())
    return MARKDOWN_SPECIAL.sub(r"\\\1", text)


def md_bug(bug: str | None) -> str:
    if not bug:
        return ""
    url = bug_url(bug)
    return f"[{md(bug)}]({quote(url, safe=URL_SAFE)})" if url else md(bug)


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows[:MAX_ROWS]]
    if len(rows) > MAX_ROWS:
        lines.append(f"\n…and {len(rows) - MAX_ROWS} more in `reports/index.html`.")
    return lines + [""]


def _outcome_counts(results: pd.DataFrame) -> list[str]:
    kinds = [
        outcome_kind(o, v) for o, v in zip(results["outcome"], results["verdict"], strict=True)
    ]
    counts = pd.crosstab(results["backend"], pd.Series(kinds, index=results.index, name="kind"))
    headers = ["backend", *(KIND_LABELS[k] for k in KIND_LABELS)]
    rows = [
        [md(backend), *(str(counts.at[backend, k]) if k in counts else "0" for k in KIND_LABELS)]
        for backend in counts.index
    ]
    return _table(headers, rows)


def _repro(record: dict) -> str:
    command = repro_command(record)
    return f"`{re.sub(r'[^0-9A-Za-z -]', '', command)}`" if command else ""


def render_summary(history: History) -> str:
    latest = analysis.latest_run(history)
    if latest is None:
        return "## Regression report\n\nNo runs yet.\n"
    results = history.run_results(latest["run_id"])
    lines = [f"## Regression run {md(latest['run_id'])}: {md(latest['status'])}", ""]
    if latest["status"] != "complete":
        why = latest["record"].message or "the run did not record its end"
        lines += [
            f"> **Run {md(latest['status'])}**: {md(why)}. {len(results)} of "
            f"{md(latest['record'].cases or '?')} planned cases have results.",
            "",
        ]
    outcomes = results["outcome"].value_counts()
    lines += [
        f"**{len(results)} results**: {outcomes.get('unexpected', 0)} unexpected, "
        f"{outcomes.get('unexpected-pass', 0)} unexpected pass, "
        f"{outcomes.get('skipped', 0)} skipped.",
        "",
    ]
    if not results.empty:
        lines += _outcome_counts(results)
    previous = analysis.previous_comparable(history, latest["run_id"])
    changed = analysis.changes(history, latest["run_id"], previous)
    if previous is None:
        lines += ["No earlier comparable run.", ""]
    else:
        lines += [f"### Changes since run {md(previous)}", ""]
        rows = [
            [
                md(r["change"]),
                md(r["case_id"]),
                md(r["before_verdict"] or "not run"),
                md(r["verdict"]),
                md_bug(r["bug"]),
            ]
            for r in changed.to_dict("records")
        ]
        lines += (
            _table(["change", "case", "before", "now", "bug"], rows)
            if rows
            else ["No verdict changed.", ""]
        )
    failing = results[results["outcome"].isin(FAILING_OUTCOMES)]
    if not failing.empty:
        lines += ["### Unexpected results", ""]
        lines += _table(
            ["case", "verdict", "outcome", "message", "YAML case", "repro bundle"],
            [
                [
                    md(r["case_id"]),
                    md(r["verdict"]),
                    md(r["outcome"]),
                    md(r["message"]),
                    f"`python -m runner new-case {re.sub(r'[^0-9A-Za-z]', '', r['result_id'])}`",
                    _repro(r["record"]),
                ]
                for r in failing.to_dict("records")
            ],
        )
    lines.append("Details, trends and ready-made YAML cases: `reports/index.html`.")
    return "\n".join(lines) + "\n"
