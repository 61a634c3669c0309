"""The merged findings as pages: ``index.html`` (Jinja2, autoescaped: every message, path and
reason came from a run or a suite), ``summary.md`` for a CI job's page and ``bugs.json``."""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path

from runner.campaign.merge import Bug, Campaign
from runner.cause import MECHANISMS
from runner.explore.finding import sized
from runner.files import write_atomic
from runner.report.render import templates

CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


def write_report(campaign: Campaign, out: Path) -> tuple[Path, Path, Path]:
    """`out`/index.html, summary.md and bugs.json, each written whole."""
    out.mkdir(parents=True, exist_ok=True)

    def link(path: Path) -> str:
        return os.path.relpath(path.resolve(), out.resolve())

    page = (
        templates("runner.campaign")
        .get_template("report.html.j2")
        .render(c=campaign, link=link, CSP=CSP, mechanisms=MECHANISMS)
    )
    html = write_atomic(out / "index.html", page.encode())
    summary = write_atomic(out / "summary.md", markdown(campaign).encode())
    data = write_atomic(
        out / "bugs.json", (json.dumps(as_data(campaign), indent=2) + "\n").encode()
    )
    return html, summary, data


def _cell(text: object) -> str:
    """Text in a Markdown table cell: no pipe, newline or markup of its own."""
    plain = str(text).replace("\n", " ").replace("|", "\\|")
    for char in "`*_[]<>":
        plain = plain.replace(char, "\\" + char)
    return plain


def _where(bug: Bug) -> str:
    return ", ".join(f"{t} {v}" for t, v in bug.where)


def markdown(campaign: Campaign) -> str:
    c = campaign.coverage
    new = [b for b in campaign.bugs if b.new]
    lines = [
        "## explore campaign",
        "",
        f"{len(campaign.bugs)} bug(s) found, **{len(new)} new**, "
        f"{len(campaign.bugs) - len(new)} pinned by {_cell(campaign.bugs_folder)}; "
        f"{len(c.jobs)} job(s), {c.examples} examples (scenarios or models), {c.steps} steps "
        f"or cases in {c.seconds:.0f} s "
        f"over {len(c.targets)} target(s) and {len(c.models)} model(s).",
        "",
    ]
    if c.ops:
        values = sum(len(op.values) for op in c.ops)
        each = ", ".join(f"{op.op} {op.nodes}" for op in c.ops)
        lines += [
            f"Drawn models judged covered {len(c.ops)} ops and {values} attribute values "
            f"(nodes per op: {_cell(each)}).",
            "",
        ]
    if campaign.bugs:
        lines += ["| | cause | verdict | failing step | message | faults | seen on | finding |"]
        lines += ["| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for bug in campaign.bugs:
            key, ops = bug.key, bug.ops
            first, others = bug.scenarios[0], len(bug.scenarios) - 1
            more = (f": {', '.join(ops)}" if ops else "") + (
                f"; {others} other finding(s)" if others else ""
            )
            lines.append(
                f"| {'**new**' if bug.new else 'pinned'} | {_cell(key.cause) or '-'} | "
                f"{_cell(bug.verdict)} | {_cell(key.action) or '-'} | {_cell(bug.message)} | "
                f"{_cell(', '.join(key.faults)) or '-'} | {_cell(_where(bug))}"
                f" | {_cell(first.yaml)} ({sized(first.finding.size, first.finding.unit)}{more}) |"
            )
        lines.append("")
    if campaign.refusals:
        lines += [
            "What the targets do not do (not bugs: a capture refused, an op not run on the GPU):",
            "",
            "| refused | nodes | message | seen on |",
            "| --- | --- | --- | --- |",
        ]
        for refusal in campaign.refusals:
            where = ", ".join(f"{t} {v}" for t, v in refusal.where)
            lines.append(
                f"| {_cell(refusal.verdict)} | {_cell('; '.join(refusal.nodes))} | "
                f"{_cell(refusal.message)} | {_cell(where)} |"
            )
        lines.append("")
    lines += [
        "| target | version | jobs | examples | steps or cases | seconds | drawn models by "
        "dimension |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for target, version in c.targets:
        jobs = [j for j in c.jobs if (j.record.target, j.record.version) == (target, version)]
        dimensions = collections.Counter()
        for job in jobs:
            dimensions.update(job.record.dimensions)
        each = ", ".join(f"{bucket} {n}" for bucket, n in sorted(dimensions.items()))
        lines.append(
            f"| {_cell(target)} | {_cell(version)} | {len(jobs)} | "
            f"{sum(j.record.examples for j in jobs)} | {sum(j.record.steps for j in jobs)} | "
            f"{sum(j.record.seconds for j in jobs):.0f} | {_cell(each or '–')} |"
        )
    return "\n".join(lines) + "\n"


def as_data(campaign: Campaign) -> dict:
    """The merged rows for other tools."""
    return {
        "bugs": [
            {
                "cause": b.key.cause,
                "verdict": b.verdict,
                "action": b.key.action,
                "text": b.key.text,
                "faults": list(b.key.faults),
                "ops": list(b.ops),
                "new": b.new,
                "pinned_by": list(b.pinned_by),
                "message": b.message,
                "seen_on": [list(w) for w in b.where],
                "findings": [
                    {
                        "target": s.job.record.target,
                        "version": s.job.record.version,
                        "yaml": str(s.yaml),
                        "bundle": str(s.bundle),
                        "size": sized(s.finding.size, s.finding.unit),
                    }
                    for s in b.sightings
                ],
                "check_versions": list(b.check_versions),
            }
            for b in campaign.bugs
        ],
        "refusals": [
            {
                "verdict": r.verdict,
                "nodes": list(r.nodes),
                "message": r.message,
                "seen_on": [list(w) for w in r.where],
            }
            for r in campaign.refusals
        ],
        "jobs": [
            {"folder": str(j.folder), "target": j.record.target, "version": j.record.version}
            for j in campaign.coverage.jobs
        ],
    }
