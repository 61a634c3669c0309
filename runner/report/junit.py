"""``reports/junit.xml``: the latest run as pytest writes JUnit XML, for CI test views.

The layout is pytest's xunit2 family (Jenkins' junit-10.xsd): it allows ``<properties>`` on a
``<testsuite>`` but not on a ``<testcase>``, so each case is a one-test ``<testsuite>`` named by
its case id whose properties carry its backend, layout, capture mode, verdict and errors. Each
``<testcase>`` also carries ``file`` (the suite file) and ``line`` (its model's entry), the two
attributes pytest's xunit1 family writes and xunit2 leaves out: CI readers point at them
(GitLab shows the file; GitHub's mikepenz/action-junit-report, in .github/workflows/, annotates
that line; Jenkins ignores attributes it does not know). Outcomes map as pytest maps them: a
known bug's expected failure is ``<skipped type="pytest.xfail">`` with the bug, a skipped case
``<skipped type="pytest.skip">``, a case the backend failed to run (``error``, ``timeout``) an
``<error>``, any other unexpected verdict or an unexpected pass (pytest's strict xpass) a
``<failure>``.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from runner.history import CaseResult, RunRecord
from runner.repro.command import repro_command
from runner.suite.spec import shape_label

# Characters XML 1.0 cannot carry at all, even escaped.
NOT_XML = re.compile(r"[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
# Verdicts that say the case did not run to a judgement: JUnit's errors, not failures.
ERROR_VERDICTS = frozenset({"error", "timeout"})


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return NOT_XML.sub("\ufffd", text)


def case_seconds(timings: dict[str, Any]) -> float:
    """Session creation, the first run and the timed runs after it."""
    session = timings.get("session_ms") or 0.0
    first = timings.get("first_run_ms") or 0.0
    later = (timings.get("median_run_ms") or 0.0) * max((timings.get("runs") or 1) - 1, 0)
    return (session + first + later) / 1000.0


def _properties(result: CaseResult) -> list[tuple[str, Any]]:
    tolerance = result.tolerance
    named = [
        ("run_id", result.run_id),
        ("result_id", result.result_id),
        ("suite", result.suite),
        ("suite_path", result.suite_path),
        ("model", result.model),
        ("shape", shape_label(result.shape)),
        ("layout", result.layout),
        ("layout_order", result.layout_order),
        ("layout_values", result.layout_values),
        ("backend", result.backend),
        ("bundle", result.bundle),
        ("capture", result.capture),
        ("revisit", result.revisit),
        ("injected", ",".join(result.injected)),
        ("verdict", result.verdict),
        ("verdicts", ",".join(result.verdicts)),
        ("expected", ",".join(result.expected)),
        ("outcome", result.outcome),
        ("bug", result.bug),
        ("max_abs_error", result.max_abs_error),
        ("max_rel_error", result.max_rel_error),
        ("tolerance_abs", tolerance.get("abs")),
        ("tolerance_rel", tolerance.get("rel")),
        ("attribution", result.attribution),
        ("stale_from", result.stale_from),
        ("divergent_node", result.divergent_node),
        ("trace_errors", result.trace.get("errors")),
    ]
    return [(name, value) for name, value in named if value not in (None, [], {}, "")]


def _details(result: CaseResult) -> str:
    lines = [result.message]
    if result.attribution:
        lines.append(f"attribution: {result.attribution}")
    if result.divergent_node:
        lines.append(f"divergent node: {json.dumps(result.divergent_node, sort_keys=True)}")
    lines.append(
        f"max abs error {result.max_abs_error}, tolerance {(result.tolerance or {}).get('abs')}"
    )
    lines.append(f"YAML case: python -m runner new-case {result.result_id}")
    command = repro_command(result)
    if command:
        lines.append(f"repro bundle: {command}")
    return "\n".join(lines)


def _verdict_element(case: ET.Element, result: CaseResult) -> str | None:
    """Add the failure/skipped child; returns which kind it was (None: passed)."""
    outcome, verdict = result.outcome, result.verdict
    if outcome == "skipped":
        ET.SubElement(
            case,
            "skipped",
            type="pytest.skip",
            message=_text(result.reason or result.message),
        )
        return "skipped"
    if outcome == "expected" and verdict != "pass":
        message = f"expected {verdict}" + (f" ({result.bug})" if result.bug else "")
        ET.SubElement(case, "skipped", type="pytest.xfail", message=_text(message))
        return "skipped"
    if outcome == "unexpected-pass":
        failure = ET.SubElement(
            case,
            "failure",
            type="unexpected-pass",
            message=_text(
                f"[XPASS(strict)] expected {', '.join(result.expected)} but every output passed"
                + (f"; {result.bug} may be fixed" if result.bug else "")
            ),
        )
        failure.text = _text(_details(result))
        return "failure"
    if outcome == "unexpected":
        kind = "error" if verdict in ERROR_VERDICTS else "failure"
        element = ET.SubElement(
            case, kind, type=verdict, message=_text(f"{verdict}: {result.message}")
        )
        element.text = _text(_details(result))
        return kind
    return None


def _location(result: CaseResult) -> dict[str, str]:
    """``file`` relative to the working directory when inside it (CI builds the report in the
    checkout, and annotations want repository paths), and ``line`` when the record has one."""
    path, here = Path(result.suite_path), Path.cwd().resolve()
    if path.is_relative_to(here):
        path = path.relative_to(here)
    line = result.suite_line
    return {"file": _text(path.as_posix()), **({"line": str(line)} if line else {})}


def junit_xml(run: RunRecord | None, results: list[CaseResult]) -> bytes:
    """The run's results as JUnit XML; an empty ``<testsuites>`` without a run."""
    name = f"regress {run.run_id} ({run.status})" if run else "regress"
    root = ET.Element("testsuites", name=_text(name))
    total_time, failures, errors = 0.0, 0, 0
    for result in results:
        seconds = case_seconds(result.timings)
        suite = ET.SubElement(
            root,
            "testsuite",
            name=_text(result.case_id),
            tests="1",
            time=f"{seconds:.3f}",
            timestamp=_text(result.finished_at),
        )
        properties = ET.SubElement(suite, "properties")
        for key, value in _properties(result):
            ET.SubElement(properties, "property", name=key, value=_text(value))
        classname = _text(f"{result.suite}.{result.model}")
        case = ET.SubElement(
            suite,
            "testcase",
            classname=classname,
            name=_text(result.case_id),
            time=f"{seconds:.3f}",
            **_location(result),
        )
        kind = _verdict_element(case, result)
        suite.set("failures", "1" if kind == "failure" else "0")
        suite.set("errors", "1" if kind == "error" else "0")
        suite.set("skipped", "1" if kind == "skipped" else "0")
        failures += kind == "failure"
        errors += kind == "error"
        total_time += seconds
    root.set("tests", str(len(results)))
    root.set("failures", str(failures))
    root.set("errors", str(errors))
    root.set("time", f"{total_time:.3f}")
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"
