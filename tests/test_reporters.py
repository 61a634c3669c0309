"""What `run` prints: reporters as listeners, and the end-of-run summary in a log."""

from __future__ import annotations

import io

from rich.console import Console

from runner.history import RunStatus
from runner.listeners import Listeners, RunListener, as_listener
from runner.pipeline import RunSummary
from runner.reporters import LogLines, print_summary
from runner.verdicts import VERDICTS as ALL_VERDICTS

from .conftest import case_result

# Backend ids as runs over several versions and builds write them: longer than rich's share of
# 80 columns, which it used to cut to "ort-…".
BACKENDS = (
    "ort-web@1.31.0-dev.20260914-8d85527a0:jspi",
    "ort-web@1.31.0-dev.20260914-8d85527a0:webgpu",
    "ort-web@1.24.3:jsep",
    "wgpu",
)
VERDICTS = ("pass", "capture-mismatch", "stale-layout", "capture-not-engaged", "reference-mismatch")


def _summary() -> RunSummary:
    results = tuple(
        case_result(
            result_id=f"r{n}",
            case_id=f"enc/b=1/layout=a/{backend}/capture",
            backend=backend,
            verdict=verdict,
            verdicts=[verdict],
        )
        for n, (backend, verdict) in enumerate(
            (b, v) for b in BACKENDS for v in VERDICTS if (b, v) != ("wgpu", "stale-layout")
        )
    )
    return RunSummary("R1", RunStatus.COMPLETE, results, 0)


def test_the_summary_in_a_log_of_80_columns_names_every_backend_in_full(tmp_path):
    written = io.StringIO()
    # as `run` makes its console (runner.cli), writing to a log of 80 columns
    console = Console(file=written, width=80, force_terminal=False, highlight=False, soft_wrap=True)
    assert not console.is_terminal
    print_summary(console, _summary(), tmp_path)
    lines = written.getvalue().splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:6]}
    assert lines[1].split() == ["backend", *(v for v in ALL_VERDICTS if v in VERDICTS)]
    assert sorted(rows) == sorted(BACKENDS)
    assert rows["wgpu"] == ["1", "1", "1", "1"]  # its blank stale-layout column left out
    assert rows[BACKENDS[0]] == ["1"] * 5
    assert "…" not in written.getvalue()
    # every failure after the table, its case id in full too
    failing = [line for line in lines if line.startswith("unexpected ")]
    assert len(failing) == len(_summary().results) - len(BACKENDS)
    assert all(any(b in line for b in BACKENDS) for line in failing)


def test_on_a_terminal_the_summary_is_a_table_that_keeps_backend_ids_whole(tmp_path):
    written = io.StringIO()
    console = Console(file=written, width=200, force_terminal=True, color_system=None)
    print_summary(console, _summary(), tmp_path)
    text = written.getvalue()
    assert "┃ backend" in text
    for backend in BACKENDS:
        assert f"│ {backend} " in text


def test_listeners_hear_every_event_in_turn():
    heard = []

    class Recorder(RunListener):
        def __init__(self, name):
            self.name = name

        def on_backend(self, backend, seconds):
            heard.append((self.name, backend, seconds))

    listener = as_listener([Recorder("a"), Recorder("b")])
    assert isinstance(listener, Listeners)
    listener.on_backend("wgpu", 0.5)
    listener.on_start(None)  # not overridden: ignored
    assert heard == [("a", "wgpu", 0.5), ("b", "wgpu", 0.5)]
    only = Recorder("c")
    assert as_listener(only) is only


def test_log_lines_write_a_line_per_backend_and_case_and_the_failure_with_v():
    lines = []
    log = LogLines(verbose=True, write=lines.append)
    log.on_backend("wgpu", 0.412)
    result = case_result(verdict="capture-mismatch", message="outputs differ", wall_ms=1500.0)
    log.on_result(result)
    assert lines == [
        "opened wgpu in 0.41 s",
        f"capture-mismatch    {result.case_id} 1.50 s UNEXPECTED",
        "    expected pass: outputs differ",
    ]
