"""A campaign of real explores on wgpu (lavapipe) with injected faults: a second job replays the
first's findings from its database at once, read-only; ``explore-report`` merges the jobs'
folders into one row per bug with every target and version it was seen on, marks a finding
pinned by a bugs folder's scenario (same verdict, model and steps) and not new, escapes what
runs wrote, and refuses a folder or record it cannot read (exit 2, nothing written)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from runner.cli import main
from runner.errors import ExitCode
from runner.explore.record import read_record
from tests.test_explore_database import SUITE

from .conftest import REPO, regress

# what an explore finds within its budget: one such test at a time (tests/conftest.py)
pytestmark = pytest.mark.clock

SNAPSHOT, EAGER = "input-snapshot-at-capture", "capture-falls-back-to-eager"


@dataclass(frozen=True)
class Jobs:
    root: Path
    first: Path  # the canary found, its database shared (--database)
    replay: Path  # the canary replayed from the first's database (--replay-from)
    other_fault: Path  # another fault's findings: seen on wgpu only
    database: Path
    database_before: dict[str, bytes]


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> Jobs:
    """Three explores in a row, as a campaign's jobs: about 25 s on 2 busy cores."""
    root = tmp_path_factory.mktemp("campaign")
    suite = root / "tiny.yaml"
    suite.write_text(SUITE)
    env = {"REGRESS_CACHE_DIR": str(root / "cache")}

    def job(out: str, fault: str, *extra: str) -> Path:
        explored = regress(
            "explore", suite, "--backend", "wgpu", "--inject", fault, "--out", root / out,
            *extra, env=env, process=True,
        )  # fmt: skip
        assert explored.returncode == 1, explored.stderr  # found something
        return root / out

    database = root / "database"
    first = job("found-1", SNAPSHOT, "--database", str(database), "--budget", "10s", "--seed", "1")
    before = _files(database)
    replay = job(
        "found-2",
        SNAPSHOT,
        "--database",
        str(root / "database-2"),
        "--replay-from",
        str(database),
        "--budget",
        "3s",
    )
    other = job("found-3", EAGER, "--budget", "10s", "--seed", "1", "--max-findings", "1")
    return Jobs(root, first, replay, other, database, before)


def _record(folder: Path):
    (path,) = folder.glob("explore-*.json")
    return path, read_record(path)


@pytest.mark.gpu
def test_a_second_job_replays_the_first_jobs_findings_at_once_without_writing_them(jobs):
    _, found = _record(jobs.first)
    _, replayed = _record(jobs.replay)
    assert [f.verdict for f in found.findings] == ["stale-input"]
    assert [(f.verdict, f.examples_before) for f in replayed.findings] == [("stale-input", 1)]
    assert replayed.findings[0].seconds_to_first < 2
    assert replayed.findings[0].yaml == found.findings[0].yaml  # the same minimal scenario
    assert _files(jobs.database) == jobs.database_before  # read-only
    assert (found.target, found.inject, found.seed) == ("wgpu", (SNAPSHOT,), 1)
    assert (
        found.examples > 20
        and found.steps > found.examples
        and found.draws == "scenarios"
        and found.seconds >= 10
    )
    assert "llvmpipe" in found.adapter and found.budget_s == 10
    assert (jobs.first / found.findings[0].bundle / "repro.json").is_file()


def _as_another_target(jobs: Jobs, message: str | None = None) -> Path:
    """The first job's folder as if explore had run it on ort-web 1.30.0's webgpu build (a
    browser explore takes minutes here): its record's target rewritten, its files as found."""
    folder = jobs.root / f"as-ort-web-{len(list(jobs.root.glob('as-ort-web-*')))}"
    shutil.copytree(jobs.first, folder)
    path, _ = _record(folder)
    data = json.loads(path.read_text())
    data.update(target="ort-web:webgpu", backend="ort-web", build="webgpu", version="1.30.0")
    if message:
        data["findings"][0]["message"] = message
    path.write_text(json.dumps(data))
    return folder


def _report(tmp_path: Path, folders, bugs: Path = REPO / "suites" / "bugs") -> dict:
    out = tmp_path / "report"
    code = main(["explore-report", *map(str, folders), "--out", str(out), "--bugs", str(bugs)])
    assert code == ExitCode.OK  # new findings are news, not a red build
    return json.loads((out / "bugs.json").read_text())


@pytest.mark.gpu
def test_findings_merge_one_row_per_bug_with_every_target_and_version_it_was_seen_on(
    jobs, tmp_path
):
    other_target = _as_another_target(jobs)
    merged = _report(tmp_path, [jobs.first, jobs.replay, jobs.other_fault, other_target])
    rows = {(row["verdict"], tuple(row["faults"])): row for row in merged["bugs"]}
    assert len(rows) == len(merged["bugs"]) == 2
    stale = rows.pop(("stale-input", (SNAPSHOT,)))
    assert stale["seen_on"] == [["ort-web:webgpu", "1.30.0"], ["wgpu", "0.32.0"]]
    assert len(stale["findings"]) == 3  # the first job, its replay and the other target's
    assert stale["new"] and stale["pinned_by"] == []  # nothing in suites/bugs pins a canary
    (check,) = stale["check_versions"]  # ort-web has versions; wgpu none
    assert check.startswith(f"python -m runner run {other_target}/stale-input-")
    assert check.endswith(".yaml --ort-web-version 1.30.0")
    # the other fault's finding, seen on wgpu only
    (eager,) = rows.values()
    assert (eager["verdict"], eager["faults"]) == ("capture-not-engaged", [EAGER])
    assert eager["seen_on"] == [["wgpu", "0.32.0"]] and eager["check_versions"] == []
    assert [job["target"] for job in merged["jobs"]] == ["wgpu"] * 3 + ["ort-web:webgpu"]
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert f"{len(merged['bugs'])} bug(s) found, **{len(merged['bugs'])} new**" in summary
    assert "| ort-web:webgpu | 1.30.0 | 1 |" in summary


@pytest.mark.gpu
def test_a_finding_pinned_by_a_bugs_scenario_is_marked_not_new(jobs, tmp_path):
    """The canary's written file kept as a case beside the real bugs suites, as a user pins a
    finding; the same steps expecting another verdict pin nothing."""
    _, found = _record(jobs.first)
    written = jobs.first / found.findings[0].yaml
    bugs = tmp_path / "bugs"
    shutil.copytree(REPO / "suites" / "bugs", bugs)
    shutil.copy(written, bugs / "pinned-canary.yaml")
    merged = _report(tmp_path, [jobs.first, jobs.other_fault], bugs)
    (pinned,) = [row for row in merged["bugs"] if not row["new"]]
    (scenario,) = yaml.safe_load(written.read_text())["scenarios"]
    assert pinned["verdict"] == "stale-input"
    assert pinned["pinned_by"] == [f"{bugs / 'pinned-canary.yaml'}: {scenario['name']}"]
    assert all(row["new"] for row in merged["bugs"] if row is not pinned)
    assert "pinned by" in (tmp_path / "report" / "index.html").read_text()

    other = yaml.safe_load(written.read_text())
    other["scenarios"][0]["expect"] = "capture-mismatch"
    (bugs / "pinned-canary.yaml").write_text(yaml.safe_dump(other))
    assert all(row["new"] for row in _report(tmp_path, [jobs.first], bugs)["bugs"])


@pytest.mark.gpu
def test_what_runs_wrote_is_escaped_in_the_page_and_the_summary(jobs, tmp_path):
    hostile = "<script>alert(1)</script> | *bold*"
    _report(tmp_path, [_as_another_target(jobs, hostile)])
    page = (tmp_path / "report" / "index.html").read_text()
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert "\\<script\\>alert(1)\\</script\\> \\| \\*bold\\*" in summary


@pytest.mark.gpu
def test_the_next_campaigns_databases_are_the_jobs_and_the_targets_no_job_ran(jobs, tmp_path):
    """Job 2 replayed job 1's databases (the previous campaign's): the next campaign's hold what
    job 2 saved for its target, not what only the previous one held for it (Hypothesis did
    not save it again: it passed), and, as they were, the previous databases of targets no job
    ran."""
    _, replayed = _record(jobs.replay)
    previous = tmp_path / "previous"
    shutil.copytree(jobs.database, previous)
    passed = previous / replayed.database / "0123456789abcdef" / "fedcba9876543210"
    passed.parent.mkdir()
    passed.write_bytes(b"an example that passed in job 2")
    not_run = previous / "ort-web-webgpu-0123456789ab" / "0123456789abcdef" / "0123456789abcdef"
    not_run.parent.mkdir(parents=True)
    not_run.write_bytes(b"an example of a target no job ran")
    nxt = tmp_path / "next"
    code = main(
        ["explore-report", str(jobs.replay), "--out", str(tmp_path / "report")]
        + ["--database", str(jobs.root / "database-2"), "--previous-database", str(previous)]
        + ["--database-out", str(nxt)]
    )
    assert code == ExitCode.OK
    saved = _files(jobs.root / "database-2" / replayed.database)
    assert saved and _files(nxt / replayed.database) == saved
    assert _files(nxt / not_run.parent.parent.name) == _files(not_run.parent.parent)
    assert sorted(p.name for p in nxt.iterdir()) == sorted(
        ["explore-database.json", replayed.database, not_run.parent.parent.name]
    )


def test_a_backend_failure_a_bugs_reason_quotes_is_pinned_and_another_message_is_not(tmp_path):
    """A real ort-web explore (tests/data/explore-ort-web): its gpuBufferMetadata TypeError,
    shrunk to other steps than suites/bugs/' cases (outputs `rewrite`, not `fresh`), is pinned
    by the cases whose reason quotes its message; its clean-up trap ("memory access out of
    bounds", where the pinned case's reason says "null function") is new."""
    merged = _report(tmp_path, [REPO / "tests" / "data" / "explore-ort-web"])
    rows = {(row["verdict"], row["text"]): row for row in merged["bugs"]}
    assert len(rows) == len(merged["bugs"]) == 6
    message = "Cannot set properties of undefined (setting 'Symbol(gpuBufferMetadata)')"
    type_error = rows[("error", message)]
    bugs = REPO / "suites" / "bugs"
    assert not type_error["new"]
    assert {
        f"{bugs / 'ort-prealloc-replay-after-other-run.yaml'}: "
        "fresh-prealloc-replay-after-other-run (its message)",
        f"{bugs / 'ort-held-output.yaml'}: prealloc-replay-while-output-held (its message)",
    } <= set(type_error["pinned_by"])
    trap = next(row for (verdict, text), row in rows.items() if "clean-up" in text)
    assert trap["new"] and trap["seen_on"] == [["ort-web:webgpu", "1.30.0"]]
    assert sum(row["new"] for row in merged["bugs"]) == 5


def test_a_bugs_suite_in_a_subfolder_pins_as_one_beside_them_does(tmp_path):
    """The zoo lives in suites/bugs/upstream/: a rule there quoting a backend's message pins
    the finding with that message, as one in suites/bugs/ itself does."""
    upstream = tmp_path / "bugs" / "upstream"
    upstream.mkdir(parents=True)
    shutil.copy(REPO / "suites" / "bugs" / "ort-held-output.yaml", upstream)
    (upstream / "models").symlink_to(REPO / "suites" / "bugs" / "models")
    merged = _report(tmp_path, [REPO / "tests" / "data" / "explore-ort-web"], tmp_path / "bugs")
    message = "Cannot set properties of undefined (setting 'Symbol(gpuBufferMetadata)')"
    [row] = [row for row in merged["bugs"] if row["text"] == message]
    assert row["pinned_by"] == [
        f"{upstream / 'ort-held-output.yaml'}: prealloc-replay-while-output-held (its message)"
    ]


def test_an_untold_explore_of_jsep_1_17_0_rediscovers_zoo_bugs_pinned_by_the_zoo(tmp_path):
    """tests/data/explore-jsep-1.17.0 (its README says how it was made): the zoo's Tanh and
    Where threads pinned by the cause their rules declare, its Softmax refusal by the message
    its rule quotes, and JSEP 1.17.0 capturing nothing by the suite expecting it on 1.17.0,
    whatever the model."""
    merged = _report(tmp_path, [REPO / "tests" / "data" / "explore-jsep-1.17.0"])
    pins = {row["cause"] or row["verdict"]: row["pinned_by"] for row in merged["bugs"]}
    zoo = REPO / "suites" / "bugs" / "upstream"
    for cause, suite in (
        ("wrong-result of Tanh", zoo / "ort-19201-jsep-tanh-large.yaml"),
        ("wrong-result of Where", zoo / "ort-19009-jsep-where-one-condition.yaml"),
        ("crash", zoo / "ort-22231-jsep-softmax-middle-axis.yaml"),
        ("capture-not-engaged", REPO / "suites/bugs/ort-jsep-1.17.0-capture-not-engaged.yaml"),
    ):
        assert any(p.startswith(f"{suite}: ") for p in pins.pop(cause)), cause
    assert not pins and not any(row["new"] for row in merged["bugs"])


def test_a_25_minute_explore_of_a_cpp_build_reads_as_its_root_causes_all_pinned(tmp_path):
    """tests/data/explore-webgpu-1.29.0 (its README says how it was made): two rows, each a root
    cause suites/bugs/ declares on that target and version, so none is new; no
    LayerNormalization row (its float32 rounding over a near-constant row is no bug), and
    each ISSUE.md shows its culprit inline and names no path of the machine that found it."""
    folder = REPO / "tests" / "data" / "explore-webgpu-1.29.0"
    merged = _report(tmp_path, [folder])
    rows = {row["cause"]: row for row in merged["bugs"]}
    assert set(rows) == {"stale-copy-output", "wrong-result of Slice"}
    assert not any(row["new"] for row in merged["bugs"]) and merged["refusals"] == []
    bugs = REPO / "suites" / "bugs"
    for cause, suite in (
        ("stale-copy-output", "ort-reshape-output-stale.yaml"),
        ("wrong-result of Slice", "ort-webgpu-slice-negative-step.yaml"),
    ):
        pins = rows[cause]["pinned_by"]
        assert any(p.startswith(f"{bugs / suite}: ") and p.endswith("(its cause)") for p in pins)
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert "2 bug(s) found, **0 new**" in summary
    issue = (folder / "reference-mismatch-d4182e5c00" / "ISSUE.md").read_text()
    assert "- input `c3`: int64 [1], the constant [-1]" in issue  # the Slice's step
    assert "| element | expected | actual |" in issue
    for finding in folder.glob("*/ISSUE.md"):
        assert "/work/" not in finding.read_text() and "/tmp/" not in finding.read_text()


RECORD = {"kind": "explore-run", "format": 1}


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            {"stale-input-0ea51ca35d.yaml": "name: x\n"},
            "FOUND: no explore record in it; expected "
            "a folder explore wrote (its --out), holding its records (explore-*.json)",
        ),
        (
            {"explore-1.json": json.dumps({**RECORD, "format": 4})},
            "FOUND/explore-1.json: an "
            "explore record of format 4; this runner reads formats 1 to 3: merge it with the newer "
            "webgpu-capture-regress that wrote it",
        ),
        (
            {"explore-1.json": "{"},
            "FOUND/explore-1.json: not JSON; expected an explore record "
            "(JSON, kind 'explore-run', format 1 to 3)",
        ),
        (
            {"explore-1.json": json.dumps({"kind": "run", "format": 1})},
            "FOUND/explore-1.json: not an explore record",
        ),
        (
            {"explore-1.json": json.dumps({**RECORD, "target": "wgpu"})},
            "FOUND/explore-1.json: a malformed explore record",
        ),
        ("a file", "FOUND: not a folder; expected a folder explore wrote"),
        (None, "FOUND: not a folder; expected a folder explore wrote"),
    ],
)
def test_a_findings_folder_it_cannot_read_exits_2_saying_what_is_expected(
    tmp_path, capsys, files, message
):
    found, out = tmp_path / "FOUND", tmp_path / "report"
    if isinstance(files, str):
        found.write_text(files)
    elif files is not None:
        found.mkdir()
        for name, text in files.items():
            (found / name).write_text(text)
    code = main(["explore-report", str(found), "--out", str(out)])
    assert code == ExitCode.INVALID_INPUT == 2
    assert message.replace("FOUND", str(found)) in capsys.readouterr().err
    assert not out.exists()  # nothing written


@pytest.mark.gpu
@pytest.mark.slow
def test_a_drawn_models_finding_is_pinned_by_a_suite_holding_its_model(tmp_path):
    """explore --models generated on wgpu with a fault (about 45 s): its finding, a suite of the
    model's cases, is new against suites/bugs and pinned once its suite and model file are
    kept in the bugs folder; another verdict expected there pins nothing."""
    out = tmp_path / "found"
    explored = regress(
        "explore", "--models", "generated", "--backend", "wgpu",
        "--inject", "program-key-without-attribute", "--budget", "30s", "--seed", "1",
        "--out", out, env={"REGRESS_CACHE_DIR": str(tmp_path / "cache")}, process=True,
    )  # fmt: skip
    assert explored.returncode == 1, explored.stderr
    _, record = _record(out)
    assert record.draws == "cases" and "LayerNormalization" in record.vocabulary
    finding = record.findings[0]
    assert finding.failing_step is None and finding.unit == "nodes"
    assert all(row["new"] for row in _report(tmp_path, [out])["bugs"])
    values = sum(len(op.values) for op in record.covered)
    assert {op.op for op in record.covered} & set(record.vocabulary)
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert f"covered {len(record.covered)} ops and {values} attribute values" in summary
    # a second job's ops add up with the first's: nodes summed, attribute values unioned
    second = tmp_path / "found-2"
    shutil.copytree(out, second)
    path, _ = _record(second)
    data = json.loads(path.read_text())
    first = record.covered[0]
    data["covered"] = [{"op": first.op, "nodes": 2, "values": ["made_up=1"]}]
    path.write_text(json.dumps(data))
    _report(tmp_path, [out, second])
    page = (tmp_path / "report" / "index.html").read_text()
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert f"covered {len(record.covered)} ops and {values + 1} attribute values" in summary
    assert f"{first.op} {first.nodes + 2}" in summary and "made_up=1" in page
    # a drawn model's root cause tells bugs apart: the same finding on two jobs is one row, and
    # one of another cause (a Slice's wrong result) is another
    assert finding.ops == tuple(sorted(set(finding.ops))) and set(finding.ops) <= set(
        record.vocabulary
    )
    assert finding.cause == "stale-layout of LayerNormalization"
    (row,) = [
        r for r in _report(tmp_path, [out, second])["bugs"] if r["verdict"] == finding.verdict
    ]
    assert row["cause"] == finding.cause and len(row["findings"]) == 2
    other_cause = tmp_path / "found-3"
    shutil.copytree(out, other_cause)
    path, _ = _record(other_cause)
    data = json.loads(path.read_text())
    data["findings"][0].update(cause="wrong-result of Slice", ops=["Slice"])
    path.write_text(json.dumps(data))
    rows = _report(tmp_path, [out, second, other_cause])["bugs"]
    apart = sorted(r["cause"] for r in rows)
    assert apart == sorted([finding.cause, "wrong-result of Slice"])
    assert ": Slice" in (tmp_path / "report" / "summary.md").read_text()
    bugs = tmp_path / "bugs"
    bugs.mkdir()
    written = out / finding.yaml
    shutil.copy(written, bugs)
    shutil.copy(written.with_suffix(".onnx"), bugs)
    rows = _report(tmp_path, [out], bugs)["bugs"]
    pinned = [row for row in rows if row["verdict"] == finding.verdict]
    suite = yaml.safe_load(written.read_text())
    (model,) = suite["models"]  # named for the finding
    assert pinned and not pinned[0]["new"]
    assert pinned[0]["pinned_by"] == [f"{bugs / finding.yaml}: {model}'s cases"]
    for rule in suite["cases"]:
        rule["expect"] = "wrong-graph"
    (bugs / finding.yaml).write_text(yaml.safe_dump(suite))
    assert all(row["new"] for row in _report(tmp_path, [out], bugs)["bugs"])
