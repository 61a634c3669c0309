"""A per-bug YAML case for one result, ready to paste into a suite's ``cases:``.

The report shows one under each failure, a repro bundle's ISSUE.md quotes it, and
``python -m runner new-case RESULT_ID`` prints it: a module of its own, which the report and
repro both import (it imports only the stored result and the suite's vocabulary).
The entry is valid against the ``cases`` items of ``schemas/suite.schema.json``; where the
failure came from (model, shape, layout, backend) rides along as comments.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from runner.history import CaseResult
from runner.suite.spec import shape_label

BUG_PLACEHOLDER = "FILL IN: a bug URL or owner/repo#number"

# Anything that would end a YAML comment line or that YAML refuses in a stream.
NOT_COMMENT_SAFE = re.compile(
    r"[^\t\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]+"
)


class _SnippetDumper(yaml.SafeDumper):
    """Writes multi-line strings (messages) as literal blocks, as a person would."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar(
        "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None
    )


_SnippetDumper.add_representer(str, _represent_str)


def glob_literal(text: str) -> str:
    """`text` as a glob matching only itself (``cases: match:`` values are globs)."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def _comment(text: str) -> str:
    return "# " + NOT_COMMENT_SAFE.sub(" ", text).strip()


# what a line about the divergent node says; its inputs, attributes and worst elements are
# the repro bundle's ISSUE.md's
NODE_SUMMARY = (
    "op_type", "name", "max_abs", "against", "output", "mismatched", "total", "copy", "alone",
    "seen_in",
)  # fmt: skip


def node_text(node: dict[str, Any]) -> str:
    """The divergent node in words, op type and name first."""
    shown = [k for k in NODE_SUMMARY if k in node and (k != "name" or node[k])]
    shown += sorted(k for k in set(node) - set(NODE_SUMMARY) if k == "error")
    return ", ".join(f"{k} {node[k]}" for k in shown)


def _number(value: float | None) -> str:
    return "none" if value is None else f"{value:.3g}"


def _context(result: CaseResult) -> list[str]:
    layout = result.layout
    details = []
    if result.layout_order:
        details.append("order " + ", ".join(result.layout_order))
    if result.layout_values:
        values = result.layout_values.items()
        details.append("values " + ", ".join(f"{k}={v}" for k, v in values))
    if details:
        layout += f" ({'; '.join(details)})"
    lines = [
        f"For suite {result.suite} ({result.suite_path}):",
        "add the entry below to the suite's cases: list"
        + ("." if result.bug else ", then fill in the bug."),
        f"Seen in run {result.run_id} (result {result.result_id}): {result.verdict}, "
        f"outcome {result.outcome}, max abs error {_number(result.max_abs_error)} "
        f"(tolerance {_number((result.tolerance or {}).get('abs'))}).",
        f"model {result.model}, shape {shape_label(result.shape or {})}, layout {layout}",
        f"backend {result.backend}, build {result.bundle or 'none'}, mode {result.capture}",
    ]
    if result.attribution:
        lines.append(f"attribution: {result.attribution}")
    node = result.divergent_node
    if node:
        lines.append(f"first divergent node: {node_text(node)}")
    return [_comment(line) for line in lines]


def case_entry(result: CaseResult) -> dict[str, Any]:
    """The ``cases:`` item expecting what `result` saw."""
    return {
        "match": {"id": glob_literal(result.case_id)},
        "bug": result.bug or BUG_PLACEHOLDER,
        "expect": sorted(result.verdicts),
        "reason": result.message or result.verdict,
    }


def case_snippet(result: CaseResult) -> str:
    body = yaml.dump(
        {"cases": [case_entry(result)]},
        Dumper=_SnippetDumper,
        sort_keys=False,
        allow_unicode=True,
        width=100,
    )
    return "\n".join(_context(result)) + "\n" + body
