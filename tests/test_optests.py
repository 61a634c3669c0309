"""ONNX Runtime Web's operator test files as suites (``ort_op_tests:``): reading the format as it
is, the one-node models, ids and filters, skip reasons, the three judges, and runs over this
project's fixtures in that format (tests/data/optests/) on the reference and wgpu backends.
The ort-web builds run the same fixtures in tests/test_optests_browser.py."""

from __future__ import annotations

import collections
import dataclasses
import json
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest

from runner.backends import REGISTRY
from runner.backends.base import BackendOptions, BackendRun, Timings
from runner.errors import InvalidInput
from runner.history import RunFolder
from runner.judge import Evidence, Twin, judge
from runner.matrix import Case, expand_matrix, select_cases
from runner.pipeline import execute
from runner.report import optests as summary
from runner.schedule import BASE
from runner.selection import RunPlan
from runner.skips import platform_description, skip_reason
from runner.suite import load_suite
from runner.suite.jsonc import JsoncError, load_jsonc
from runner.suite.optests import op_test_files
from runner.suite.spec import BackendTarget, OpAttribute
from runner.workload import materialize, workload_key
from runner.workload.optest import expected_outputs, op_test_model

from .conftest import REPO, RESULT_VALIDATOR

FIXTURES = REPO / "tests/data/optests"
EXAMPLE = REPO / "suites/ort-ops.example.yaml"
WGPU = BackendTarget("wgpu")

# What each fixture test gives on the reference and wgpu backends, in both modes: a verdict, or
# `skipped` with the reason its message starts with. (The ort-web builds: the browser tests.)
PASS = "pass"
PLATFORM = "skipped: platform condition not met"
TYPE = "skipped: element type the backend lacks"
BACKEND = "skipped: backend lacks the operator or type"
WRONG_FILE = "expected-mismatch"
COMMON = {
    "Add with broadcast": PASS,
    "Add int32": PASS,
    "Add zero-sized": PASS,
    "LayerNorm without bias": PASS,
    "LayerNorm with bias, symbolic batch": PASS,
    "LayerNorm, expected output deliberately wrong": WRONG_FILE,
    "Softmax static": PASS,
    "Softmax where Linux is not": PLATFORM,
    "Softmax on 64-bit platforms": PASS,
    "Transpose perm=[1,0,2]": PASS,
    "Gather int64 indices": PASS,
    "Equal int32": PASS,
    "BiasSplitGelu": BACKEND,  # onnxruntime CPU lacks it: the reference backend too
    "SkipLayerNormalization has output[3]": PASS,
    "Gelu tanh": PASS,
    "StringNormalizer": TYPE,
}
ON_REFERENCE = {
    **COMMON,
    "FastGelu": PASS,
    "FastGelu with a bias that broadcasts": "error",  # onnxruntime CPU refuses it
    "Concat zero-sized preserving dims": "error",
    "Clip with max only": PASS,
    "Scaler": PASS,
    "Add float16": PASS,
}
ON_WGPU = {
    **COMMON,
    "FastGelu": BACKEND,
    "FastGelu with a bias that broadcasts": BACKEND,
    "Concat zero-sized preserving dims": PASS,  # the zero-sized input left out
    "SkipLayerNormalization has output[3]": BACKEND,
    "Clip with max only": BACKEND,
    "Scaler": BACKEND,
    "Add float16": PASS,  # lavapipe has shader-f16
}


def example_cases(backend: BackendTarget) -> list[Case]:
    """The bundled example suite's cases (it runs the fixtures), on one backend."""
    return expand_matrix([dataclasses.replace(load_suite(EXAMPLE, REGISTRY), backends=(backend,))])


def outcomes(results) -> dict[str, set[str]]:
    """Per test name, what its cases gave in both modes (skips with their reason)."""
    found: dict[str, set[str]] = collections.defaultdict(set)
    for result in results:
        test = result.model.split("/")[2]
        if result.verdict == "skipped":
            found[test].add(f"skipped: {summary.skip_category(result.message)}")
        else:
            found[test].add(result.verdict)
    return dict(found)


def op_models(suite):
    return {model.name: model for model in suite.models}


# -- the format --------------------------------------------------------------------------------


def test_jsonc_reads_comments_trailing_commas_and_positions(tmp_path):
    path = tmp_path / "t.jsonc"
    path.write_text(
        '// a comment\n[\n  /* block\n */ {"name": "a // b /* c */", '
        '"x": [1, -2.5e1, true, null,],},\n]\n'
    )
    located = load_jsonc(path)
    assert located.data == [{"name": "a // b /* c */", "x": [1, -25.0, True, None]}]
    assert located.values[(0, "x", 1)] == (4, 41)
    assert located.keys[(0, "x")] == (4, 32)


@pytest.mark.parametrize(
    "text, where, message",
    [
        ('[{"a": 1 "b": 2}]', (1, 10), "expected ',' or '}'"),
        ("[1, 2", (1, 6), "expected ',' or ']'"),
        ("[/* open", (1, 2), "comment never closed"),
        ('{"a": 1, "a": 2}', (1, 10), "duplicate key 'a'"),
    ],
)
def test_jsonc_syntax_errors_are_located(tmp_path, text, where, message):
    path = tmp_path / "t.jsonc"
    path.write_text(text)
    with pytest.raises(JsoncError) as error:
        load_jsonc(path)
    assert (error.value.line, error.value.column, error.value.message) == (*where, message)


def test_fixtures_read_every_field():
    models = op_models(load_suite(EXAMPLE, REGISTRY))
    tests = {m.op_test.test for m in models.values()}
    assert len({t.file for t in tests}) == 7 and len(tests) == 22 and len(models) == 27

    unbiased = models["ort-ops/layer-norm/LayerNorm without bias/T[3,4]"]
    test = unbiased.op_test.test
    assert (test.operator, test.domain, test.opset) == ("LayerNormalization", "", 17)
    assert test.attributes == (
        OpAttribute("axis", "int", -1),
        OpAttribute("epsilon", "float", 1e-5),
    )
    assert test.input_types == ("float32", "float32", None)  # `{"data": null, "type": ...}`
    assert test.input_shapes == (  # rankOnly
        ("_input_0_d0", "_input_0_d1"),
        ("_input_1_d0",),
        None,
    )
    assert unbiased.shapes[0].as_dict() == {"_input_0_d0": 3, "_input_0_d1": 4, "_input_1_d0": 4}

    batch = models["ort-ops/layer-norm/LayerNorm with bias, symbolic batch/batch=3"]
    assert batch.op_test.test.input_shapes == (("batch", 4), (4,), (4,))
    assert batch.shapes[0].as_dict() == {"batch": 3}
    assert models["ort-ops/softmax/Softmax static/T[2,3] small"].op_test.test.input_shapes == (
        (2, 3),
    )
    transpose = models["ort-ops/data-movement/Transpose perm=[1,0,2]/T[2,3,2]"].op_test.test
    assert transpose.input_shapes == (None,) and transpose.attributes == (
        OpAttribute("perm", "ints", (1, 0, 2)),
    )
    assert (
        models["ort-ops/softmax/Softmax where Linux is not/T[3]"].op_test.test.platform_condition
        == "^((?!Linux).)*$"
    )

    default = models["ort-ops/add/Add with broadcast/T[2,3] T[3]"].op_test.test
    assert (default.domain, default.opset) == ("", 18)  # no opset: ORT-web runner's default
    contrib = models["ort-ops/contrib/FastGelu/T[2,3]"].op_test.test
    assert (contrib.domain, contrib.opset) == ("com.microsoft", 1)
    scaler = models["ort-ops/attributes-and-types/Scaler/T[2,2]"].op_test.test
    assert (scaler.domain, scaler.attributes[0]) == (
        "ai.onnx.ml",
        OpAttribute("offset", "floats", (1, 2)),
    )
    normalizer = models["ort-ops/attributes-and-types/StringNormalizer/S[3]"].op_test.test
    assert normalizer.attributes == (
        OpAttribute("stopwords", "strings", ("the",)),
        OpAttribute("case_change_action", "string", "LOWER"),
    )
    clip = models["ort-ops/attributes-and-types/Clip with max only/T[6] max=1.5"].op_test
    assert clip.test.input_types == ("float32", None, "float32") and clip.inputs[1] is None

    equal = models["ort-ops/data-movement/Equal int32/T[4] T[4]"].op_test
    assert equal.test.input_types == ("int32", "int32") and equal.test.output_types == ("bool",)
    assert expected_outputs(equal)["output_0"].tolist() == [True, False, True, False]
    half = models["ort-ops/attributes-and-types/Add float16/H[4] H[4]"].op_test
    assert expected_outputs(half)["output_0"].dtype == np.float16
    zero = models["ort-ops/add/Add zero-sized/T[2,0] T[2,1]"].op_test
    assert zero.inputs[0].dims == (2, 0) and zero.inputs[0].data == ()


def test_repeated_and_slashed_names_stay_unique_and_readable(write_suite, suite_dir):
    tensor = '{ "data": [1], "dims": [1], "type": "float32" }'
    case = f'{{ "name": "a/b", "inputs": [{tensor}], "outputs": [{tensor}] }}'
    test = f'{{ "name": "Same  name", "operator": "Relu", "cases": [{case}, {case}] }}'
    (suite_dir / "ops").mkdir()
    (suite_dir / "ops/relu.jsonc").write_text(f"[{test}, {test}]")
    path = write_suite("models:\n  ops: {ort_op_tests: ops}\nbackends: [reference]\n")
    assert [m.name for m in load_suite(path, REGISTRY).models] == [
        "ops/relu/Same name/a-b",
        "ops/relu/Same name/a-b #2",
        "ops/relu/Same name #2/a-b",
        "ops/relu/Same name #2/a-b #2",
    ]


def test_text_not_in_the_format_is_a_problem_at_file_line_col(write_suite, suite_dir):
    (suite_dir / "bad.jsonc").write_text("""[
  { "name": "no operator", "cases": [] },
  {
    "name": "wrong types",
    "operator": "Add",
    "attributes": [{ "name": "alpha", "data": "x", "type": "float" }],
    "inputShapeDefinitions": "dynamic",
    "cases": [
      {
        "name": "c",
        "inputs": [{ "data": [1], "dims": [1], "type": "complex64" }],
        "outputs": [{ "data": [1, "2"], "dims": [2], "type": "float32" }],
      },
    ],
  },
]
""")
    (suite_dir / "broken.jsonc").write_text('[{"name": "x",, }]')
    path = write_suite("models:\n  ops: {ort_op_tests: '*.jsonc'}\nbackends: [reference]\n")
    with pytest.raises(InvalidInput) as error:
        load_suite(path, REGISTRY)
    bad, broken = suite_dir / "bad.jsonc", suite_dir / "broken.jsonc"
    assert [str(p) for p in error.value.problems] == [
        f"{bad}:2:3: field 'operator' is missing",
        f"{bad}:6:47: float attribute 'alpha' has data text ('x'); expected a number",
        f"{bad}:7:30: inputShapeDefinitions is text ('dynamic'); expected none, rankOnly, "
        "static, or a list with per input a list of dims or null",
        f"{bad}:11:56: unknown tensor type 'complex64'; expected one of float32, float16, "
        "float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64, bool, string",
        f"{bad}:12:31: float32 tensor data holds text ('2'); expected a flat list of numbers",
        f"{broken}:1:15: not an op-test file: expected a quoted key; expected JSON with comments",
    ]


def test_files_by_folder_glob_and_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("OPS_DIR", str(FIXTURES))
    names = sorted(p.name for p in FIXTURES.glob("*.jsonc"))
    assert len(names) == 7
    for pattern in ("$OPS_DIR", "${OPS_DIR}/*.jsonc", str(FIXTURES.parent / "**/*.jsonc")):
        assert [p.name for p in op_test_files(pattern, tmp_path)] == names, pattern
    assert [p.name for p in op_test_files("../optests/add.jsonc", FIXTURES)] == ["add.jsonc"]


def test_suite_level_problems(write_suite, monkeypatch):
    monkeypatch.delenv("NO_SUCH_CHECKOUT", raising=False)
    path = write_suite("""
        models:
          none: {ort_op_tests: nothing/*.jsonc}
          unset: {ort_op_tests: $NO_SUCH_CHECKOUT/ops}
          typo: {ort_op_tests: x.jsonc, opst: 18}
        layouts: [[eps]]
        backends: [wgpu]
        """)
    with pytest.raises(InvalidInput) as error:
        load_suite(path, REGISTRY)
    assert [str(p) for p in error.value.problems] == [
        f"{path}:4:33: unknown key 'opst'; expected one of buffers, graphs, opset, ort_op_tests",
    ]
    path.write_text(path.read_text().replace(", opst: 18", ""))
    with pytest.raises(InvalidInput) as error:
        load_suite(path, REGISTRY)
    assert [str(p) for p in error.value.problems] == [
        f"{path}:2:24: no op-test files match 'nothing/*.jsonc'; expected a .jsonc file, a "
        "folder of them, or a glob",
        f"{path}:3:25: ort_op_tests '$NO_SUCH_CHECKOUT/ops': environment variable "
        "NO_SUCH_CHECKOUT is not set; expected a path or glob, with only variables that are set",
        f"{path}:4:24: no op-test files match 'x.jsonc'; expected a .jsonc file, a folder of "
        "them, or a glob",
        f"{path}:5:10: ORT-web op tests (none, unset, typo) run under the default layout only; "
        "expected no `layouts:` in a suite of op tests",
    ]


# -- models, ids, filters ----------------------------------------------------------------------


def test_one_node_model_as_ort_web_builds_it():
    models = op_models(load_suite(EXAMPLE, REGISTRY))
    clip = onnx.load_from_string(
        op_test_model(
            models["ort-ops/attributes-and-types/Clip with max only/T[6] max=1.5"].op_test.test
        )
    )
    [node] = clip.graph.node
    assert (node.op_type, node.name, list(node.input), list(node.output)) == (
        "Clip",
        "Clip",
        ["input_0", "", "input_2"],
        ["output_0"],
    )  # the omitted min: ""
    assert [i.name for i in clip.graph.input] == ["input_0", "input_2"]

    norm = onnx.load_from_string(
        op_test_model(
            models["ort-ops/layer-norm/LayerNorm with bias, symbolic batch/batch=1"].op_test.test
        )
    )
    assert [(o.domain, o.version) for o in norm.opset_import] == [("", 17)]
    dims = norm.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["batch", 4]
    assert {a.name: onnx.helper.get_attribute_value(a) for a in norm.graph.node[0].attribute} == {
        "epsilon": pytest.approx(1e-3)
    }
    unbiased = onnx.load_from_string(
        op_test_model(models["ort-ops/layer-norm/LayerNorm without bias/T[2,4]"].op_test.test)
    )
    assert list(unbiased.graph.node[0].input) == ["input_0", "input_1"]  # trailing omitted: gone

    scaler = onnx.load_from_string(
        op_test_model(models["ort-ops/attributes-and-types/Scaler/T[2,2]"].op_test.test)
    )
    assert [(o.domain, o.version) for o in scaler.opset_import] == [("ai.onnx.ml", 1)]
    assert list(scaler.graph.node[0].attribute[0].floats) == [1.0, 2.0]


def test_a_case_materializes_with_the_files_tensors_and_pinned_dims():
    [case] = select_cases(
        example_cases(WGPU), ["*/LayerNorm with bias, symbolic batch/batch=3/wgpu/capture"]
    )
    workload = materialize(case)
    assert workload.shape == {"batch": 3}
    assert workload.output_names == ("output_0",)
    assert workload.inputs["input_0"].shape == (3, 4)
    assert workload.inputs["input_2"].tolist() == [0, 0.5, 0, -0.5]


def test_a_scalar_input_keeps_its_rank():
    [scalar] = select_cases(example_cases(WGPU), ["*/T[[]3,2] I[[]]/wgpu/eager"])
    workload = materialize(scalar)
    assert workload.inputs["input_1"].shape == ()
    as_vector = dict(workload.inputs, input_1=workload.inputs["input_1"].reshape(1))
    assert workload_key(b"m", {}, workload.inputs) != workload_key(b"m", {}, as_vector), (
        "the oracle must not serve a [1] index's reference to a scalar index"
    )


def test_ids_are_readable_and_file_test_operator_select():
    cases = example_cases(WGPU)
    ids = [case.id for case in cases]
    assert len(ids) == len(set(ids)) == 54
    assert "ort-ops/layer-norm/LayerNorm without bias/T[2,4]/wgpu/capture" in ids
    norm = select_cases(cases, ["operator=LayerNormalization"])
    assert {c.model.op_test.test.name for c in norm} == {
        "LayerNorm without bias",
        "LayerNorm with bias, symbolic batch",
        "LayerNorm, expected output deliberately wrong",
    }
    assert len(select_cases(cases, ["file=softmax.jsonc"])) == 8
    assert [c.id for c in select_cases(cases, ["test=Gelu*", "capture=eager"])] == [
        "ort-ops/contrib/Gelu tanh/T[2,3]/wgpu/eager"
    ]
    wrong = select_cases(cases, ["*deliberately*"])
    assert {c.expectation.expect for c in wrong} == {frozenset({"expected-mismatch"})}


# -- skips and judges --------------------------------------------------------------------------


def test_skip_reasons_are_known_before_running():
    cases = {c.id: c for c in example_cases(WGPU)}
    reasons = {
        test: skip_reason(cases[f"ort-ops/{test}/wgpu/eager"])
        for test in (
            "softmax/Softmax where Linux is not/T[3]",
            "attributes-and-types/Add float16/H[4] H[4]",
            "attributes-and-types/StringNormalizer/S[3]",
            "contrib/BiasSplitGelu/T[1,1,4] B[4]",
            "add/Add int32/T[4] T[4]",
        )
    }
    assert platform_description("wgpu").startswith("wgpu-native on Linux")
    assert reasons == {
        "softmax/Softmax where Linux is not/T[3]": "platform condition not met: "
        "'^((?!Linux).)*$' does not match 'wgpu-native on Linux 64-bit'",
        "attributes-and-types/Add float16/H[4] H[4]": None,  # the adapter decides: shader-f16
        "attributes-and-types/StringNormalizer/S[3]": "element type the backend lacks: "
        "string tensors (the judge compares numbers only)",
        "contrib/BiasSplitGelu/T[1,1,4] B[4]": None,  # onnxruntime CPU lacks it: it runs anyway
        "add/Add int32/T[4] T[4]": None,
    }


def test_wgpu_device_types_are_its_descriptors_element_types():
    from onnx import helper

    from runner.backends import REGISTRY
    from runner.backends.wgpu.tensors import DEVICE_TYPES

    assert REGISTRY["wgpu"].element_types == {
        np.dtype(helper.tensor_dtype_to_np_dtype(t)).name for t in DEVICE_TYPES
    }


def _runs(outputs) -> BackendRun:
    return BackendRun(runs=(outputs,) * 3, timings=Timings(runs=3))


def _evidence(case, run, references, **twins) -> Evidence:
    """An op test's evidence as the pipeline gives it: with its file's expected outputs."""
    return Evidence(case, run, references, expected=expected_outputs(case.model.op_test), **twins)


@pytest.fixture(scope="module")
def wrong_file_cases():
    cases = {c.capture: c for c in select_cases(example_cases(WGPU), ["*deliberately*"])}
    reference = {"output_0": np.array([[-1.3411044, -0.3940696, 0.4470348, 2.1822088]], np.float32)}
    return cases, reference, expected_outputs(cases[False].model.op_test)


def test_a_wrong_file_says_so(wrong_file_cases):
    cases, reference, _ = wrong_file_cases
    eager = _runs(reference)
    judgement = judge(_evidence(cases[False], eager, {BASE: reference}))
    assert judgement.verdicts == {"expected-mismatch"} and judgement.attribution == "eager too"
    assert judgement.message == (
        "eager output differs from the file's expected output on 'output_0': 1/4 elements, "
        "max abs 0.5; the file's expected output disagrees with onnxruntime CPU on 'output_0': "
        "1/4 elements, max abs 0.5"
    )
    capture = judge(_evidence(cases[True], _runs(reference), {BASE: reference}, eager=Twin(eager)))
    assert capture.verdicts == {"expected-mismatch"}
    assert capture.message.startswith("eager twin differs from the file's expected output")


def test_a_backend_siding_with_the_file_against_onnxruntime_says_so(wrong_file_cases):
    cases, reference, expected = wrong_file_cases
    judgement = judge(_evidence(cases[False], _runs(expected), {BASE: reference}))
    assert judgement.verdicts == {"reference-mismatch"}
    assert judgement.message.endswith(
        "; the file's expected output disagrees with onnxruntime CPU on 'output_0': 1/4 "
        "elements, max abs 0.5, and the eager output agrees with the file"
    )


def test_a_kernel_bug_shows_against_both_and_capture_against_eager(wrong_file_cases):
    cases, reference, _ = wrong_file_cases
    broken = {"output_0": reference["output_0"] * 2}
    judgement = judge(_evidence(cases[False], _runs(broken), {BASE: reference}))
    assert judgement.verdicts == {"reference-mismatch", "expected-mismatch"}
    assert judgement.verdict == "reference-mismatch"
    capture = judge(
        _evidence(cases[True], _runs(broken), {BASE: reference}, eager=Twin(_runs(reference)))
    )
    assert capture.verdicts == {"capture-mismatch", "expected-mismatch"}


def test_integers_match_the_file_exactly():
    [case] = select_cases(example_cases(WGPU), ["*/Add int32/*/eager"])
    expected = expected_outputs(case.model.op_test)
    off_by_one = {"output_0": expected["output_0"] + np.array([0, 0, 0, 1], np.int32)}
    judgement = judge(_evidence(case, _runs(off_by_one), {BASE: expected}))
    assert judgement.verdicts == {"expected-mismatch"}, "within ratio 1.00001, but not equal"
    assert judgement.message == (
        "eager output differs from the file's expected output on "
        "'output_0': 1/4 elements, max abs 1"
    )


def test_a_backend_lacking_the_op_is_a_skip_not_a_failure(wrong_file_cases):
    cases, reference, _ = wrong_file_cases
    for status, message in [
        ("unsupported-op", "LayerNormalization (node 'x'): no WGSL kernel"),
        ("capture-unsupported", "This session cannot use the graph capture feature"),
        (
            "error",
            "Can't create a session. ERROR_CODE: 6, ERROR_MESSAGE: No Op registered for "
            "LayerNormalization with domain_version of 17",
        ),
    ]:
        judgement = judge(
            _evidence(
                cases[True],
                BackendRun(status=status, message=message),
                {BASE: reference},
                eager=Twin(_runs(reference)),
            )
        )
        assert judgement.verdicts == {"skipped"}, status
        assert judgement.message == f"backend lacks the operator or type: {status}: {message}"
    other = judge(
        _evidence(cases[True], BackendRun(status="error", message="device lost"), {BASE: reference})
    )
    assert other.verdicts == {"error"}


def test_refused_cases_fail_alone_as_errors(write_suite, suite_dir, tmp_path):
    one = '{ "data": [1], "dims": [1], "type": "float32" }'
    short = '{ "data": [1], "dims": [2], "type": "float32" }'
    (suite_dir / "relu.jsonc").write_text(f"""[
  {{ "name": "fine", "operator": "Relu", "cases": [
      {{ "name": "ok", "inputs": [{one}], "outputs": [{one}] }},
      {{ "name": "short", "inputs": [{short}], "outputs": [{short}] }} ] }},
  {{ "name": "uneven", "operator": "Add", "cases": [
      {{ "name": "two", "inputs": [{one}, {one}], "outputs": [{one}] }},
      {{ "name": "one", "inputs": [{one}], "outputs": [{one}] }} ] }},
]""")
    path = write_suite(
        "models:\n  ops: {ort_op_tests: relu.jsonc}\nbackends: [reference]\ncapture: eager\n"
    )
    summary_ = execute(
        RunPlan(tuple(expand_matrix([load_suite(path, REGISTRY)]))),
        tmp_path / "out",
        BackendOptions(),
    )
    assert {r.case_id: (r.verdict, r.message) for r in summary_.results} == {
        "ops/relu/fine/ok/reference/eager": ("pass", ""),
        "ops/relu/fine/short/reference/eager": (
            "error",
            "ValueError: input 0 has 1 values for dims [2] (2 elements)",
        ),
        "ops/relu/uneven/two/reference/eager": (
            "error",
            "ValueError: the test's cases differ in how many inputs or outputs they have",
        ),
        "ops/relu/uneven/one/reference/eager": (
            "error",
            "ValueError: the test's cases differ in how many inputs or outputs they have",
        ),
    }


# -- runs over the fixtures --------------------------------------------------------------------


def test_fixtures_on_the_reference_backend(tmp_path):
    run = execute(
        RunPlan(tuple(example_cases(BackendTarget("reference")))), tmp_path, BackendOptions(runs=2)
    )
    assert run.status == "complete" and run.exit_code == 0
    assert outcomes(run.results) == {test: {want} for test, want in ON_REFERENCE.items()}
    results = RunFolder(tmp_path / "runs" / run.run_id).results()
    [row] = summary.summarize([load_suite(EXAMPLE, REGISTRY)], results)
    assert (row.backend, len(row.files), len(row.tests), len(row.cases), row.results) == (
        "reference",
        7,
        22,
        27,
        54,
    )
    assert (row.passed, dict(row.skipped), dict(row.failed), dict(row.expected)) == (
        42,
        {
            "platform condition not met": 2,
            "element type the backend lacks": 2,
            "backend lacks the operator or type": 2,
        },
        {"expected-mismatch": 2, "error": 4},
        {"expected-mismatch": 2, "error": 4},
    )
    assert summary.markdown([row]).splitlines()[2] == (
        "| reference | 7 | 22 | 27 | 54 | 42 | backend lacks the operator or type: 2; element "
        "type the backend lacks: 2; platform condition not met: 2 | error: 4 (4 expected); "
        "expected-mismatch: 2 (2 expected) |"
    )


@pytest.mark.gpu
def test_fixtures_on_wgpu(tmp_path):
    started = time.perf_counter()
    run = execute(RunPlan(tuple(example_cases(WGPU))), tmp_path, BackendOptions())
    elapsed = time.perf_counter() - started
    assert run.status == "complete" and run.exit_code == 0
    assert outcomes(run.results) == {test: {want} for test, want in ON_WGPU.items()}
    by_id = {r.case_id: r for r in run.results}
    clip = by_id["ort-ops/attributes-and-types/Clip with max only/T[6] max=1.5/wgpu/eager"]
    assert clip.message == (
        "backend lacks the operator or type: unsupported-op: Clip (node "
        "'Clip'): no WGSL kernel for Clip"
    )
    # onnxruntime CPU refuses this Concat: still run, judged against the file (wgpu leaves the
    # zero-sized input out, as the file expects), and said so
    concat = by_id[
        "ort-ops/found-by-ort-web-tests/Concat zero-sized preserving dims/T[0] T[2,3]/wgpu/eager"
    ]
    assert concat.verdict == "pass" and concat.outcome == "expected"
    assert concat.message.startswith("no reference: onnxruntime CPU refused the case (Fail: ")
    assert elapsed < 20, f"{elapsed:.1f} s"


def test_the_readme_commands(tmp_path):
    """Run the example suite from the command line, filtered by operator, then summarize it."""

    def command(*args):
        return subprocess.run(
            [sys.executable, *map(str, args)], capture_output=True, text=True, cwd=REPO, timeout=300
        )

    out = tmp_path / "reports"
    proc = command(
        "-m",
        "runner",
        "run",
        EXAMPLE,
        "--tag",
        "heavy",
        "--backend",
        "reference",
        "--filter",
        "operator=LayerNormalization",
        "--out",
        out,
    )
    assert proc.returncode == 0, proc.stderr
    [results] = (out / "runs").glob("*/results.jsonl")
    records = [json.loads(line) for line in results.read_text().splitlines()]
    for record in records:
        RESULT_VALIDATOR.validate(record)
    assert {r["verdict"] for r in records} == {"pass", "expected-mismatch"} and len(records) == 10
    proc = command("-m", "runner.report.optests", EXAMPLE, "--results", results)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[2] == (
        "| reference | 1 | 3 | 5 | 10 | 8 | 0 | expected-mismatch: 2 (2 expected) |"
    )
