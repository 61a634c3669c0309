"""``repro`` without a browser or GPU: where models are cut, what is refused and why, the
fallback to the full model, what the reports offer, and the ort-web page's text.

Histories are real: a suite runs on the ``reference`` backend through the pipeline, and a
failing result of another backend is that record with the failure written in (what a run of
that backend stores), so that the case, suite and model it names are real.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from runner import cli
from runner.backends import REGISTRY
from runner.backends.base import BackendOptions, BackendRun, BackendTarget, ReproRequest
from runner.backends.ortweb.package import published_url
from runner.backends.ortweb.repro import write_runner
from runner.errors import InvalidInput
from runner.history import CaseResult, SqliteHistory
from runner.judge import Evidence, Twin, judge
from runner.matrix import expand_matrix, expand_suite
from runner.oracle import compute_reference
from runner.pipeline import execute
from runner.report import build_reports
from runner.repro import make
from runner.repro.cut import anchor, cut_workload, exposed, plan_cuts
from runner.repro.verify import Rerun
from runner.selection import RunPlan
from runner.suite import load_suite, loader
from runner.workload import materialize

from .conftest import REPO, RESULT_VALIDATOR, regress

SUITE = """
name: chain
models:
  chain:
    path: chain.onnx
backends: [reference]
"""
FULL_NODES = 4


def _chain_model(path: Path, scale: float = 0.1) -> None:
    """y = tanh(relu(x) @ w + b), static shapes: four nodes in a chain."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4) * scale, "w")
    b = numpy_helper.from_array(np.full(4, 0.5, np.float32), "b")
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w"], ["m"], name="matmul"),
        helper.make_node("Add", ["m", "b"], ["a"], name="add"),
        helper.make_node("Tanh", ["a"], ["y"], name="tanh"),
    ]
    graph = helper.make_graph(nodes, "chain", [x], [y], [w, b])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.fixture
def history(write_suite, suite_dir, tmp_path):
    """reports/ with the chain suite run on the reference backend, and a failing wgpu capture
    result of its capture case (first divergent node: the MatMul)."""
    _chain_model(suite_dir / "chain.onnx")
    suite = write_suite(SUITE)
    out = tmp_path / "reports"
    summary = execute(
        RunPlan(tuple(expand_matrix([load_suite(suite, REGISTRY)]))), out, BackendOptions(runs=3)
    )
    assert [r.verdict for r in summary.results] == ["pass", "pass"]
    records = {r.capture: r.to_dict() for r in summary.results}
    failing = _failing(records["capture"], "wgpu", "fa11ed000001")
    store = SqliteHistory(out / "history.sqlite")
    store.record(CaseResult.from_dict(failing))
    store.record(CaseResult.from_dict(_failing(records["capture"], "reference", "fa11ed000002")))
    store.record(
        CaseResult.from_dict(
            {**_failing(records["capture"], "wgpu", "fa11ed000003"), "injected": ["racy-replay"]}
        )
    )
    store.close()
    return {"out": out, "suite": suite, "passing": records["capture"], "failing": failing}


def _failing(record: dict, backend: str, rid: str) -> dict:
    node = {"op_type": "MatMul", "name": "matmul", "output": "m", "against": "eager"}
    return {
        **record,
        "result_id": rid,
        "backend": backend,
        "case_id": record["case_id"].replace("/reference/", f"/{backend}/"),
        "verdict": "capture-mismatch",
        "verdicts": ["capture-mismatch"],
        "outcome": "unexpected",
        "message": "capture output 'y' differs from eager: 8/8 elements, max abs 0.3",
        "divergent_node": {**node, "max_abs": 0.3, "mismatched": 8, "total": 8},
    }


def test_results_record_the_digest_of_the_model_they_ran(history):
    record = history["passing"]
    RESULT_VALIDATOR.validate(record)
    [_, case] = expand_suite(load_suite(history["suite"], REGISTRY))
    assert record["model_digest"] == hashlib.sha256(materialize(case).model).hexdigest()


def _repro(history, *args):
    return regress("repro", *args, "--reports", history["out"])


def test_bad_requests_are_refused_with_the_reason_and_exit_2(history, tmp_path):
    cases = [
        (("abcdef12",), "no result 'abcdef12'"),
        (("zz",), "expected at least 4 hex digits"),
        ((history["passing"]["result_id"],), "is pass: nothing to reproduce (--force"),
        (("fa11ed000002",), "ran on reference, which writes no repro bundles"),
        (("fa11ed000003",), "injected fault(s) racy-replay"),
    ]
    for args, message in cases:
        proc = _repro(history, *args, "--out", tmp_path / "never")
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "never").exists()


def test_an_occupied_folder_is_refused_without_force(history, tmp_path):
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "notes.txt").write_text("mine")
    proc = _repro(history, "fa11ed000001", "--out", occupied)
    assert proc.returncode == 2 and "the folder exists and is not empty; --force" in proc.stderr
    assert [p.name for p in occupied.iterdir()] == ["notes.txt"]


def test_a_model_changed_since_the_run_is_refused_naming_both_digests(history, suite_dir):
    recorded = history["failing"]["model_digest"]
    _chain_model(suite_dir / "chain.onnx", scale=0.2)
    now = hashlib.sha256(materialize(expand_suite(load_suite(history["suite"], REGISTRY))[1]).model)
    proc = _repro(history, "fa11ed000001", "--out", suite_dir / "bundle")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"with sha256 {recorded[:16]}" in proc.stderr
    assert f"now builds sha256 {now.hexdigest()[:16]}" in proc.stderr
    assert "changed since run" in proc.stderr


def _cpu_values(subject, names, options):
    """What `eager_values` gives, computed by onnxruntime CPU (no backend here)."""
    values = []
    for _, workload in (*subject.earlier, (subject.eager, subject.workload)):
        wanted = [n for n in names if n not in workload.inputs]
        more = exposed(workload, wanted)
        session = onnxruntime.InferenceSession(more.model)
        per_variant = {}
        for variant, inputs in workload.all_variants().items():
            outputs = dict(zip(more.output_names, session.run(None, dict(inputs)), strict=True))
            per_variant[variant] = {**inputs, **{n: outputs[n] for n in wanted}}
        values.append(per_variant)
    return tuple(values)


def _full_model_off_by(offset: float):
    """A fake rerun: the cuts exact, the full model's capture off by `offset` in every run (what
    a failure needing the whole model would look like; 0: a failure that did not come back)."""

    def rerun(subject, workload, earlier, options):
        references = {v: compute_reference(workload, v) for v in workload.all_variants()}
        off = np.float32(offset if workload.key == subject.workload.key else 0)
        feeds = workload.feeds(subject.runs)
        eager = BackendRun(runs=tuple(references[f.variant] for f in feeds))
        run = BackendRun(
            runs=tuple({k: v + off for k, v in references[f.variant].items()} for f in feeds)
        )
        evidence = Evidence(subject.case, run, references, feeds=feeds, eager=Twin(eager, feeds))
        return Rerun(judge(evidence), run, eager, references, ())

    return rerun


_only_the_full_model_fails = _full_model_off_by(0.25)


def _repro_with(monkeypatch, rerun, history, folder, result_id="fa11ed000001", *more) -> int:
    """`repro` of a failing result through the CLI, the backend replaced by `rerun`."""
    monkeypatch.setattr(make, "eager_values", _cpu_values)
    monkeypatch.setattr(make, "rerun", rerun)
    args = ["repro", result_id, "--reports", str(history["out"]), "--out", str(folder), *more]
    return cli.main(args)


def test_a_cut_that_no_longer_fails_falls_back_to_the_full_model_and_says_so(
    history, tmp_path, monkeypatch, capsys
):
    folder = tmp_path / "bundle"
    code = _repro_with(monkeypatch, _only_the_full_model_fails, history, folder)
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "cutting at `matmul` (MatMul), first divergent node: 2 cut(s) to try" in printed.err
    assert "the cut 0 level(s) above the anchor (1 of 4 nodes): pass" in printed.err
    assert "the cut 1 level(s) above the anchor (2 of 4 nodes): pass" in printed.err
    assert "the full model (4 nodes): capture-mismatch (kept)" in printed.err
    assert f"model.onnx: the full model ({FULL_NODES} nodes)" in printed.out
    assert "reproduced: capture-mismatch" in printed.out
    assert len(onnx.load(folder / "model.onnx").graph.node) == FULL_NODES
    issue = (folder / "ISSUE.md").read_text()
    assert (
        "`model.onnx` is the suite's full model (4 node(s): Add 1, MatMul 1, Relu 1, Tanh 1): "
        "no cut failed the same way (the cut 0 level(s) above the anchor (1 of 4 nodes): pass; "
        "the cut 1 level(s) above the anchor (2 of 4 nodes): pass)." in issue
    )
    assert "| `y` | capture against eager | 0.25 | 8/8 |" in issue
    assert "`matmul` (MatMul)" in issue
    # the onnx.helper lines that build it, to read in the issue
    assert "helper.make_node('MatMul', ['r', 'w'], ['m'], name='matmul')," in issue
    assert "`repro.py` imports webgpu-capture-regress" in issue
    # a suite outside the folder the command ran in is named by its file alone
    assert "the entry that pins it in `suite.yaml`:" in issue and str(tmp_path) not in issue
    manifest = json.loads((folder / "repro.json").read_text())
    assert manifest["cut"] is None
    assert [(s["name"], s["mode"]) for s in manifest["steps"]] == [
        ("layout default, eager", "eager"),
        ("layout default, capture", "capture"),
    ]
    assert manifest["judge"] == {"step": 1, "eager": 0}
    assert sorted(manifest["files"]) == sorted(
        str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()
    )
    main = manifest["workloads"]["main"]
    # 3 runs: the case's inputs, then new ones, repeated (the determinism check's replay pair)
    assert main["schedule"] == [[0, 0], [0, 1], [0, 1]]
    assert [(v["graph"], v["draw"]) for v in main["variants"]] == [(0, 0), (0, 1)]
    assert main["variants"][0]["inputs"] == main["inputs"]
    assert main["variants"][1]["inputs"][0]["npy"] == "inputs/0-1/00-x.npy"
    assert "run 1 `inputs/`; run 2 `inputs/0-1/`; run 3 `inputs/0-1/`" in issue
    actual = np.load(folder / manifest["recorded"]["actual"][0]["npy"])  # the last run's
    expected = np.load(folder / main["variants"][1]["cpu"][0]["npy"])
    np.testing.assert_allclose(actual - expected, 0.25, atol=1e-6)
    assert (folder / "repro.py").read_text() == (
        REPO / "runner/backends/wgpu/repro_script.py"
    ).read_text()


def test_a_node_without_a_name_is_named_by_its_op_type_and_output(
    history, tmp_path, monkeypatch, capsys
):
    unnamed = _failing(history["passing"], "wgpu", "fa11ed000004")
    unnamed["divergent_node"] = {**unnamed["divergent_node"], "name": ""}
    store = SqliteHistory(history["out"] / "history.sqlite")
    store.record(CaseResult.from_dict(unnamed))
    store.close()
    folder = tmp_path / "bundle"
    code = _repro_with(monkeypatch, _only_the_full_model_fails, history, folder, "fa11ed000004")
    printed = capsys.readouterr()
    assert code == 0, printed.err
    issue = (folder / "ISSUE.md").read_text()
    assert "the MatMul node producing `m`: in the suite's localization" in issue
    assert "`` (MatMul)" not in issue


def test_the_issue_lists_only_the_faults_of_the_bundles_backend(
    history, tmp_path, monkeypatch, capsys
):
    """A run injecting faults of two backends (a rule or --inject may): a wgpu bundle carries
    and lists wgpu's alone."""
    both = {
        **_failing(history["passing"], "wgpu", "fa11ed000005"),
        "injected": ["racy-replay", "stale-uniform-binding"],
    }
    store = SqliteHistory(history["out"] / "history.sqlite")
    store.record(CaseResult.from_dict(both))
    store.close()
    folder = tmp_path / "bundle"
    code = _repro_with(
        monkeypatch, _only_the_full_model_fails, history, folder, "fa11ed000005", "--with-fault"
    )
    assert code == 0, capsys.readouterr().err
    issue = (folder / "ISSUE.md").read_text()
    assert issue.startswith("# [injected fault racy-replay] [WebGPU]")
    assert "> - `racy-replay`: replays alternate between two recorded command lists" in issue
    assert "stale-uniform-binding" not in issue


def test_a_failure_the_rerun_does_not_show_is_bundled_and_said_with_exit_1(
    history, tmp_path, monkeypatch, capsys
):
    folder = tmp_path / "bundle"
    code = _repro_with(monkeypatch, _full_model_off_by(0.0), history, folder)
    printed = capsys.readouterr()
    assert code == 1, printed.err
    assert "not reproduced: the rerun gave pass, the result capture-mismatch" in printed.err
    assert (
        "**The rerun did not fail the same way** (it gave pass)"
        in (folder / "ISSUE.md").read_text()
    )


def test_force_replaces_a_previous_bundle_and_keeps_other_files(
    history, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(make, "eager_values", _cpu_values)
    monkeypatch.setattr(make, "rerun", _only_the_full_model_fails)
    folder = tmp_path / "bundle"
    args = ["repro", "fa11ed000001", "--reports", str(history["out"]), "--out", str(folder)]
    assert cli.main(args) == 0
    stale = folder / "expected" / "leftover.npy"
    stale.write_bytes(b"")
    (folder / "notes.txt").write_text("mine")
    assert cli.main(args) == 2  # occupied
    assert "not empty" in capsys.readouterr().err
    assert cli.main([*args, "--force", "--full-model"]) == 0
    assert not stale.exists() and (folder / "notes.txt").read_text() == "mine"
    assert "--full-model: the model was not cut" in (folder / "ISSUE.md").read_text()


def test_repro_reads_the_results_suite_once(history, tmp_path, monkeypatch):
    """The case, its layout sequence and its twins come from one reading of the suite."""
    monkeypatch.setattr(make, "eager_values", _cpu_values)
    monkeypatch.setattr(make, "rerun", _only_the_full_model_fails)
    read: list[Path] = []
    located = loader.load_located
    monkeypatch.setattr(loader, "load_located", lambda path: read.append(path) or located(path))
    args = ["repro", "fa11ed000001", "--reports", str(history["out"]), "--out", str(tmp_path / "b")]
    assert cli.main(args) == 0
    assert read == [history["suite"]]


def test_cuts_start_at_the_divergent_node_and_widen_by_producer_levels():
    suite = load_suite(REPO / "suites/canaries.yaml", REGISTRY)
    [case] = [
        c
        for c in expand_suite(suite)
        if c.id == "stale-cache/batch=1,sequence=12/layout=eps-1e-2/wgpu/capture"
    ]
    workload = materialize(case, 3)  # with the input sequence of 3 runs: 2 inputs
    assert len(workload.all_variants()) == 2
    model = onnx.load_from_string(workload.model)
    assert len(model.graph.node) == 30
    norm1 = {"output": "/layers.0.norm1/LayerNormalization_output_0"}
    [first] = plan_cuts(model, anchor(model, norm1))
    assert (first.depth, first.nodes, first.inputs) == (0, 1, ("x",))
    last = anchor(model, None)  # no divergent node: the model's output
    assert (last.node, last.op_type) == ("/norm/LayerNormalization", "LayerNormalization")
    cuts = plan_cuts(model, last)
    assert [(c.depth, c.nodes) for c in cuts] == [(0, 1), (1, 2), (2, 4), (4, 8), (8, 16)]
    assert cuts[0].inputs == ("/layers.0/Add_1_output_0",)
    # each cut, fed with the full model's values for each run's inputs, computes what the full
    # model computes for them
    names = sorted({n for c in cuts for n in c.inputs} - {"x"})
    more = exposed(workload, names)
    session = onnxruntime.InferenceSession(more.model)
    values = {
        variant: {
            **inputs,
            **dict(zip(more.output_names, session.run(None, dict(inputs)), strict=True)),
        }
        for variant, inputs in workload.all_variants().items()
    }
    for cut in cuts:
        part = cut_workload(workload, cut, values)
        assert part.schedule == workload.schedule
        dims = [
            [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in onnx.load_from_string(part.model).graph.input
        ]
        # symbolic where the case pins the name (freeDimensionOverrides apply), else static
        assert all(d in ("batch", "sequence") or isinstance(d, int) for s in dims for d in s)
        assert "batch" in dims[0]
        for variant in workload.all_variants():
            got = compute_reference(part, variant)["y"]
            np.testing.assert_allclose(got, values[variant]["y"], atol=1e-5)
    assert not np.allclose(*(v["y"] for v in values.values()))  # the runs' inputs differ


def test_the_report_offers_the_repro_command_for_failures_it_can_bundle(history):
    build_reports(history["out"])
    page = (history["out"] / "index.html").read_text()
    junit = (history["out"] / "junit.xml").read_text()
    summary = (history["out"] / "summary.md").read_text()
    assert "python -m runner repro fa11ed000001</code>" in page
    assert "python -m runner repro fa11ed000003 --with-fault</code>" in page
    assert "repro fa11ed000002" not in page  # the reference backend writes no bundles
    assert "repro bundle: python -m runner repro fa11ed000001" in junit
    assert "| `python -m runner repro fa11ed000001` |" in summary


def test_the_ort_web_page_imports_the_published_build_by_default(tmp_path):
    assert published_url("1.30.0", "ort.webgpu.mjs") == (
        "https://cdn.jsdelivr.net/npm/onnxruntime-web@1.30.0/dist/ort.webgpu.mjs"
    )
    target = BackendTarget("ort-web", "webgpu", None, "1.30.0")
    request = ReproRequest(tmp_path, target, frozenset({"stale-uniform-binding"}), False, {})
    runner = write_runner(request)
    assert runner.files == (
        "index.html",
        "repro.mjs",
        "feeds.mjs",
        "scenario.mjs",
        "context.onnx",
        "allocator.onnx",
        "faults.js",
    )
    head = (tmp_path / "repro.mjs").read_text().splitlines()[:6]
    assert head[1] == (
        'const ORT_URL = "https://cdn.jsdelivr.net/npm/onnxruntime-web@1.30.0/dist/ort.webgpu.mjs";'
    )
    assert 'const FAULTS = ["stale-uniform-binding"];' in head
    assert not (tmp_path / "dist").exists()
    assert runner.product == "onnxruntime-web 1.30.0, ort.webgpu.mjs"
    local_build = dataclasses.replace(target, version="file:/somewhere/onnxruntime/js/web")
    with pytest.raises(InvalidInput, match="no published URL: --local"):
        write_runner(ReproRequest(tmp_path / "x", local_build, frozenset(), False, {}))
