"""Suite loading: every problem at once, each at its exact FILE:LINE:COL."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from runner.backends import REGISTRY
from runner.errors import InvalidInput
from runner.suite import load_suite
from runner.suite.spec import STATIC_SHAPE, BackendTarget, Tolerance

from .conftest import REPO

GOOD = """
# yaml-language-server: $schema=../schemas/suite.schema.json
models:
  enc:
    builtin: encoder
    hidden: 32
    heads: 4
shapes:
  - {batch: 1, sequence: 8}
backends: [wgpu, {name: ort-web, bundle: [jsep, jspi]}]
"""


def problems(path: Path) -> list[str]:
    with pytest.raises(InvalidInput) as info:
        load_suite(path, REGISTRY)
    return [str(p) for p in info.value.problems]


def test_good_suite_loads_with_defaults(write_suite):
    suite = load_suite(write_suite(GOOD), REGISTRY)
    assert suite.name == "suite"
    assert suite.backends == (  # ort-web on the pinned version; ids leave a sole version out
        BackendTarget("wgpu"),
        BackendTarget("ort-web", "jsep", version="1.30.0"),
        BackendTarget("ort-web", "jspi", version="1.30.0"),
    )
    assert suite.capture == ("eager", "capture")
    assert suite.tolerance == Tolerance(1e-3, 1e-5)
    assert [layout.label for layout in suite.layouts] == ["default"]
    assert suite.models[0].encoder.heads == 4 and suite.models[0].encoder.layers == 2


def test_schema_errors_name_line_and_column(write_suite):
    path = write_suite("""
        models:
          enc:
            builtin: encoder
            hiden: 32
            layers: two
        shapes:
          - {batch: 0, sequence: 8}
        backends:
          - name: ort-web
            bundle: wasm
        capture: always
        """)
    assert problems(path) == [
        f"{path}:4:5: unknown key 'hiden'; expected one of activation, buffers, builtin, dtype, "
        "eps, ffn, generate, graphs, heads, hidden, inputs, intermediate, kv_heads, layers, "
        "max_length, max_positions, package, path, quantized, seed, shapes, style, vocab",
        f"{path}:5:13: 'two' is not of type 'integer'; expected a value of type integer",
        f"{path}:7:13: 0 is less than the minimum of 1; expected a number >= 1",
        f'{path}:10:13: "wasm" is not valid here; expected ort-web builds: jsep (JavaScript EP), '
        "webgpu (C++ EP, asyncify), jspi (C++ EP, JSPI); a list expands.",
        f'{path}:11:10: "always" is not valid here; expected Modes to run: dynamic (eager with no '
        "dim pinned), eager, capture; default eager and capture.",
    ]


def test_semantic_errors_all_at_once(write_suite, suite_dir):
    (suite_dir / "bad.onnx").write_bytes(b"definitely not protobuf \xff\xfe")
    path = write_suite("""
        models:
          enc:
            builtin: encoder
            hidden: 30
            heads: 4
          missing:
            path: nowhere.onnx
          corrupt:
            path: bad.onnx
        shapes:
          - {batch: 1}
        layouts:
          - [eps, frobnicate]
        backends: [wgpu]
        """)
    assert problems(path) == [
        f"{path}:5:12: heads=4 does not divide hidden=30; expected a divisor of hidden",
        f"{path}:7:11: model file {path.parent / 'nowhere.onnx'} does not exist; "
        "expected an ONNX file",
        f"{path}:9:11: bad.onnx is not an ONNX model (DecodeError); expected an ONNX file",
        f"{path}:11:5: symbolic dim sequence of model 'enc' is left unpinned; "
        "expected a value for every symbolic dim",
        f"{path}:13:11: unknown uniform field 'frobnicate'; expected one of "
        "eps, heads, head_dim, scale, hidden, ffn, seq, rows, cols, inner, size, strides",
    ]


def test_a_float16_encoder_of_the_exported_style_is_refused_at_its_line(write_suite):
    path = write_suite("""
        models:
          enc:
            builtin: encoder
            style: exported
            dtype: float16
        shapes:
          - {batch: 1, sequence: 4}
        backends: [wgpu]
        """)
    assert problems(path) == [
        f"{path}:5:12: dtype float16 of the exported style; expected float32: only the compact "
        "style is built in float16",
    ]


def test_model_path_outside_repository_is_refused(write_suite, tmp_path_factory):
    outside = tmp_path_factory.mktemp("elsewhere") / "m.onnx"
    outside.write_bytes(b"")
    path = write_suite(f"""
        models:
          m:
            path: {outside}
        backends: [wgpu]
        """)
    [message] = problems(path)
    assert message.startswith(f"{path}:3:11: model path resolves outside the repository")


def _tiny_model(path: Path, dim: str | int = "n") -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [dim, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    onnx.save(helper.make_model(graph), path)


def test_model_file_dims_and_inputs_are_checked(write_suite, suite_dir):
    _tiny_model(suite_dir / "relu.onnx")
    path = write_suite("""
        models:
          relu:
            path: relu.onnx
            inputs:
              z: {range: [0, 1]}
        shapes:
          - {batch: 1}
        backends: [reference]
        """)
    assert problems(path) == [
        f"{path}:5:7: model 'relu' has no input 'z'; expected one of x",
        f"{path}:7:5: symbolic dim n of model 'relu' is left unpinned; "
        "expected a value for every symbolic dim",
        f"{path}:7:6: no model of the suite has a symbolic dim 'batch'; expected one of n",
    ]
    path.write_text(path.read_text().replace("z:", "x:").replace("batch", "n"))
    suite = load_suite(path, REGISTRY)
    assert suite.models[0].path == suite_dir / "relu.onnx"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "models: {a: {builtin: encoder}}\nmodels: {}\n",
            "2:1: duplicate key 'models' (first on line 1); expected each key once",
        ),
        (
            "models:\n\t- a\n",
            "2:1: invalid YAML: found character '\\t' that cannot start any token",
        ),
        (
            "a: !!python/object:os.system {}\n",
            "1:4: tag 'tag:yaml.org,2002:python/object:os.system' is not allowed; "
            "expected plain YAML values",
        ),
        ("", "1:1: file is empty; expected a YAML mapping"),
        ("- just\n- a list\n", "1:1: suite is not a mapping; expected keys such as models:"),
        ("a: [\n", "2:1: invalid YAML: expected the node content, but found '<stream end>'"),
    ],
)
def test_bad_yaml(write_suite, text, expected):
    path = write_suite("")
    path.write_text(text)
    assert problems(path) == [f"{path}:{expected}"]


def test_non_utf8_and_alias_bomb(write_suite):
    path = write_suite("")
    path.write_bytes(b"models:\n  caf\xe9: 1\n")
    assert problems(path) == [f"{path}:2:1: file is not UTF-8; expected UTF-8 text"]
    bomb = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 8):
        bomb.append(f"{chr(97 + i)}: &{chr(97 + i)} [" + ", ".join([f"*{chr(96 + i)}"] * 10) + "]")
    path.write_text("\n".join(bomb) + "\n")
    [message] = problems(path)
    assert "alias bomb" in message


def test_layouts_expand_and_label(write_suite):
    path = write_suite(
        GOOD
        + """
layouts:
  - [heads, eps]
  - permute: [eps, heads, scale]
  - label: tiny-eps
    values: {eps: 1.0e-3}
  - order: [scale]
    values: {heads: 8}
  - preferred_layout: NCHW
  - label: nhwc
    preferred_layout: NHWC
"""
    )
    layouts = load_suite(path, REGISTRY).layouts
    labels = [layout.label for layout in layouts]
    assert [layout.preferred_layout for layout in layouts][-3:] == [None, "NCHW", "NHWC"]
    assert labels == [
        "heads,eps",
        "eps,heads,scale",
        "eps,scale,heads",
        "heads,eps,scale",
        "heads,scale,eps",
        "scale,eps,heads",
        "scale,heads,eps",
        "tiny-eps",
        "scale+heads=8",
        "NCHW",
        "nhwc",
    ]


def test_a_preferred_layout_the_ep_does_not_take_is_refused(write_suite):
    path = write_suite(GOOD + "layouts:\n  - preferred_layout: NHCW\n")
    assert problems(path) == [
        f'{path}:11:23: "NHCW" is not allowed here; expected one of NCHW, NHWC'
    ]


def test_duplicate_layout_label(write_suite):
    path = write_suite(GOOD + "layouts:\n  - [heads, eps]\n  - [heads, eps]\n")
    assert problems(path) == [
        f"{path}:12:5: layout label 'heads,eps' is used twice; "
        "expected distinct labels (give one with `label:`)"
    ]


def test_include_exclude_names_are_checked(write_suite):
    path = write_suite(
        GOOD
        + """
exclude:
  - {model: nope}
include:
  - {layout: default, capture: eager}
  - {model: enc, capture: capture, tolerance: {abs: 0.1}}
  - {backend: wgpu, layout: other}
"""
    )
    assert problems(path) == [
        f"{path}:12:13: exclude names unknown model 'nope'; expected one of enc",
        f"{path}:16:29: include names unknown layout 'other'; expected one of default",
    ]


def test_every_schema_field_has_a_description():
    schema = json.loads((REPO / "schemas/suite.schema.json").read_text())

    def walk(node, path):
        if isinstance(node, dict):
            for name, sub in node.get("properties", {}).items():
                assert "description" in sub or "$ref" in sub, f"{path}.{name} has no description"
            for key, sub in node.items():
                walk(sub, f"{path}.{key}")
        elif isinstance(node, list):
            for i, sub in enumerate(node):
                walk(sub, f"{path}[{i}]")

    walk(schema, "$")


def test_bundled_suites_are_valid():
    from runner.suite import load_suites

    suites = load_suites([REPO / "suites"], REGISTRY, tags=["heavy"])
    assert suites, "no bundled suites"


def test_huge_shape_is_refused_before_anything_is_allocated(write_suite):
    path = write_suite("""
        models:
          enc: {builtin: encoder, hidden: 64, heads: 4}
        shapes:
          - {batch: 1, sequence: 16}
          - {batch: 64, sequence: 65536}
        backends: [wgpu]
        """)
    assert problems(path) == [
        f"{path}:5:5: shape batch=64,sequence=65536 gives model 'enc' a tensor of "
        "4,194,304 MiB; expected at most 1024 MiB per tensor (REGRESS_MAX_TENSOR_MIB raises it)"
    ]


def test_a_model_without_symbolic_dims_needs_no_shapes(write_suite, suite_dir):
    """One static case per layout, backend and mode, the suite's shapes being for the others;
    `shapes: [{}]` says the same explicitly. Each model knows its line (for JUnit)."""
    _tiny_model(suite_dir / "static.onnx", dim=2)
    path = write_suite("""
        models:
          enc: {builtin: encoder, hidden: 32, heads: 4}
          static:
            path: static.onnx
          explicit:
            path: static.onnx
            shapes: [{}]
        shapes:
          - {batch: 1, sequence: 8}
        backends: [reference]
        """)
    suite = load_suite(path, REGISTRY)
    assert [(m.name, m.shapes, m.line) for m in suite.models] == [
        ("enc", (), 2),
        ("static", (STATIC_SHAPE,), 3),
        ("explicit", (STATIC_SHAPE,), 5),
    ]
    assert STATIC_SHAPE.label == "static"


def test_an_empty_shape_does_not_pin_symbolic_dims(write_suite):
    path = write_suite("""
        models:
          enc: {builtin: encoder}
        shapes: [{}]
        backends: [reference]
        """)
    assert problems(path) == [
        f"{path}:3:10: symbolic dim batch, sequence of model 'enc' is left unpinned; "
        "expected a value for every symbolic dim"
    ]


def test_buffer_modes_graphs_and_modes_are_checked(write_suite):
    path = write_suite("""
        buffers: {inputs: reuse}
        models:
          enc: {builtin: encoder, graphs: 0, buffers: {}}
          enc2: {builtin: encoder, buffers: {allocator: wasm}}
        shapes:
          - {batch: 1, sequence: 8}
        backends: [wgpu]
        capture: [dynamic, replay]
        cases:
          - match: {graphs: "2"}
            buffers: {outputs: fresh, keep: true}
        """)
    assert problems(path) == [
        f'{path}:1:19: "reuse" is not allowed here; expected one of rewrite, fresh',
        f"{path}:3:35: 0 is less than the minimum of 1; expected a number >= 1",
        f"{path}:3:47: {{}} should be non-empty; expected How a capture case hands its inputs "
        "and outputs to the backend, run after run (on a suite, a model or a `cases:` rule; the "
        "most specific wins, key by key). Every run gets new inputs either way.",
        f'{path}:4:49: "wasm" is not allowed here; expected one of page, onnxruntime',
        f'{path}:8:20: "replay" is not allowed here; expected one of dynamic, eager, capture',
        f"{path}:11:31: unknown key 'keep'; expected one of allocator, inputs, outputs",
    ]
