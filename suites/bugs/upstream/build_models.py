"""Builds the zoo's models: the smallest graph that shows each upstream bug, with onnx.helper.

`python suites/bugs/upstream/build_models.py` writes them into models/ beside this file; the
output is byte-for-byte the same on every run (weights from a seeded generator per model), and
tests/test_zoo.py checks that the committed files are what this script builds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FOLDER = Path(__file__).parent / "models"
OPSET = 20
MICROSOFT = "com.microsoft"

F32, F16, BOOL = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BOOL


def _value(name: str, dtype: int, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def _weight(name: str, shape: list[int], dtype=np.float32) -> onnx.TensorProto:
    values = np.random.default_rng(0).uniform(-1, 1, shape).astype(dtype)
    return numpy_helper.from_array(values, name)


def _model(nodes, inputs, outputs, initializers=(), opset: int = OPSET) -> onnx.ModelProto:
    contrib = any(node.domain == MICROSOFT for node in nodes)
    imports = [helper.make_opsetid("", opset)]
    imports += [helper.make_opsetid(MICROSOFT, 1)] if contrib else []
    graph = helper.make_graph(nodes, "zoo", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=imports, ir_version=9)
    if not contrib:  # the checker knows no contrib op; onnxruntime CPU runs them as the oracle
        onnx.checker.check_model(model, full_check=True)
    return model


def and_swapped_broadcast() -> onnx.ModelProto:
    """a[2, 1] AND b[1, 4], and b AND a: one program for both broadcasts."""
    nodes = [
        helper.make_node("And", ["a", "b"], ["ab"]),
        helper.make_node("And", ["b", "a"], ["ba"]),
    ]
    inputs = [_value("a", BOOL, [2, 1]), _value("b", BOOL, [1, 4])]
    return _model(nodes, inputs, [_value("ab", BOOL, [2, 4]), _value("ba", BOOL, [2, 4])])


def instancenorm_epsilon_twins() -> onnx.ModelProto:
    """Two InstanceNormalizations of one input, epsilon 1e-5 and 10: one program for both."""
    nodes = [
        helper.make_node("InstanceNormalization", ["x", "scale", "bias"], ["small"], epsilon=1e-5),
        helper.make_node("InstanceNormalization", ["x", "scale", "bias"], ["large"], epsilon=10.0),
    ]
    shape = [1, 3, 4, 4]
    outputs = [_value("small", F32, shape), _value("large", F32, shape)]
    weights = [_weight("scale", [3]), _weight("bias", [3])]
    return _model(nodes, [_value("x", F32, shape)], outputs, weights)


def _skip_norm(op: str, weights: list[str], shape: list[int], skip: list[int]) -> onnx.ModelProto:
    """A contrib skip-norm op of x and skip, its `weights` ([hidden] each) in their slots."""
    node = helper.make_node(op, ["x", "skip", *weights], ["y"], domain=MICROSOFT, epsilon=1e-5)
    inputs = [_value("x", F32, shape), _value("skip", F32, skip)]
    constants = [_weight(name, [shape[-1]]) for name in weights]
    return _model([node], inputs, [_value("y", F32, shape)], constants)


def skip_simplified_layernorm_bias() -> onnx.ModelProto:
    """SkipSimplifiedLayerNormalization with its fourth input, the bias."""
    return _skip_norm("SkipSimplifiedLayerNormalization", ["gamma", "bias"], [1, 4, 16], [1, 4, 16])


def skip_simplified_layernorm_bias_beside_add() -> onnx.ModelProto:
    """The same beside an Add of another input, which JSEP's wrong values land in."""
    model = skip_simplified_layernorm_bias()
    graph = model.graph
    graph.node.insert(0, helper.make_node("Add", ["a", "offset"], ["sum"]))
    graph.input.insert(0, _value("a", F32, [4]))
    graph.output.insert(0, _value("sum", F32, [4]))
    graph.initializer.append(_weight("offset", [4]))
    return model


def skip_layernorm_skip_broadcast() -> onnx.ModelProto:
    """SkipLayerNormalization of x[2, 4, 16] with a skip of [1, 4, 16], broadcast over the batch."""
    return _skip_norm("SkipLayerNormalization", ["gamma", "beta"], [2, 4, 16], [1, 4, 16])


def transpose_rank1() -> onnx.ModelProto:
    """A Transpose of a rank-1 tensor (perm [0]: it moves nothing)."""
    node = helper.make_node("Transpose", ["x"], ["y"], perm=[0])
    return _model([node], [_value("x", F32, [5])], [_value("y", F32, [5])])


def transpose_rank1_then_relu() -> onnx.ModelProto:
    """The rank-1 Transpose read by a Relu: its wrong values show in the Relu's output, the
    graph's only one."""
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0]),
        helper.make_node("Relu", ["t"], ["y"]),
    ]
    return _model(nodes, [_value("x", F32, [5])], [_value("y", F32, [5])])


def tanh() -> onnx.ModelProto:
    """A Tanh of x[4, 8] (the suite feeds values past 88, where exp overflows float32)."""
    node = helper.make_node("Tanh", ["x"], ["y"])
    return _model([node], [_value("x", F32, [4, 8])], [_value("y", F32, [4, 8])])


def softmax_middle_axis() -> onnx.ModelProto:
    """A Softmax over axis 1 of x[1, 84, 20], as YOLOv8's head takes it: not the last axis."""
    node = helper.make_node("Softmax", ["x"], ["y"], axis=1)
    return _model([node], [_value("x", F32, [1, 84, 20])], [_value("y", F32, [1, 84, 20])])


def conv_tanh() -> onnx.ModelProto:
    """A Conv then a Tanh, which onnxruntime fuses into one FusedConv with a Tanh activation."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3]),
        helper.make_node("Tanh", ["c"], ["y"]),
    ]
    inputs, outputs = [_value("x", F32, [1, 2, 6, 6])], [_value("y", F32, [1, 2, 4, 4])]
    return _model(nodes, inputs, outputs, [_weight("w", [2, 2, 3, 3])])


def where_one_condition() -> onnx.ModelProto:
    """A Where whose condition is a [1] broadcast over [3, 5] values."""
    node = helper.make_node("Where", ["condition", "a", "b"], ["y"])
    inputs = [_value("condition", BOOL, [1]), _value("a", F32, [3, 5]), _value("b", F32, [3, 5])]
    return _model([node], inputs, [_value("y", F32, [3, 5])])


def gemm_identity_transpose() -> onnx.ModelProto:
    """A Gemm without its bias, then a Transpose whose perm [0, 1] leaves its [2, 4] output as it
    is: onnxruntime's GemmTransposeFusion folds it into the Gemm as if it swapped the axes."""
    nodes = [
        helper.make_node("Gemm", ["x", "w"], ["g"]),
        helper.make_node("Transpose", ["g"], ["y"], perm=[0, 1]),
    ]
    inputs, outputs = [_value("x", F32, [2, 3])], [_value("y", F32, [2, 4])]
    return _model(nodes, inputs, outputs, [_weight("w", [3, 4])])


def averagepool_ceil_pad(opset: int) -> Callable[[], onnx.ModelProto]:
    def build() -> onnx.ModelProto:
        """A 3x3 AveragePool, stride 2, pads 1, ceil_mode and count_include_pad: the last
        window hangs past the padding, and its divisor must count only what it covers."""
        node = helper.make_node(
            "AveragePool",
            ["x"],
            ["y"],
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[1, 1, 1, 1],
            ceil_mode=1,
            count_include_pad=1,
        )
        inputs, outputs = [_value("x", F32, [1, 1, 6, 6])], [_value("y", F32, [1, 1, 4, 4])]
        return _model([node], inputs, outputs, opset=opset)

    return build


def averagepool_end_pad() -> onnx.ModelProto:
    """A 2x2 AveragePool of x[1, 1, 3, 3] padded at the end of each axis only, opset 19, with
    count_include_pad: the last row's and column's windows must count their padded cells."""
    node = helper.make_node(
        "AveragePool", ["x"], ["y"], kernel_shape=[2, 2], pads=[0, 0, 1, 1], count_include_pad=1
    )
    inputs, outputs = [_value("x", F32, [1, 1, 3, 3])], [_value("y", F32, [1, 1, 3, 3])]
    return _model([node], inputs, outputs, opset=19)


def convtranspose_channels(channels: int) -> Callable[[], onnx.ModelProto]:
    def build() -> onnx.ModelProto:
        """A 1x1 ConvTranspose of x[1, `channels`, 2, 2] into one channel."""
        node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], kernel_shape=[1, 1])
        inputs = [_value("x", F32, [1, channels, 2, 2])]
        weights = [_weight("w", [channels, 1, 1, 1])]
        return _model([node], inputs, [_value("y", F32, [1, 1, 2, 2])], weights)

    return build


def convtranspose_float16(width: int) -> Callable[[], onnx.ModelProto]:
    def build() -> onnx.ModelProto:
        """A float16 ConvTranspose of kernel [1, 3] over a row `width` long."""
        node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], kernel_shape=[1, 3])
        inputs = [_value("x", F16, [1, 1, 1, width])]
        outputs = [_value("y", F16, [1, 1, 1, width + 2])]
        return _model([node], inputs, outputs, [_weight("w", [1, 1, 1, 3], np.float16)])

    return build


def conv3d(written: bool) -> Callable[[], onnx.ModelProto]:
    def build() -> onnx.ModelProto:
        """A 3x3x3 Conv of x[1, 2, 4, 4, 4] into 3 channels, padded; `written`: its strides,
        dilations and kernel shape written out, else left to their defaults."""
        spelled = {"strides": [1] * 3, "dilations": [1] * 3, "kernel_shape": [3] * 3}
        node = helper.make_node(
            "Conv", ["x", "w"], ["y"], pads=[1] * 6, **(spelled if written else {})
        )
        inputs = [_value("x", F32, [1, 2, 4, 4, 4])]
        outputs = [_value("y", F32, [1, 3, 4, 4, 4])]
        return _model([node], inputs, outputs, [_weight("w", [3, 2, 3, 3, 3])])

    return build


def conv3d_grouped() -> onnx.ModelProto:
    """The 3x3x3 Conv of x[1, 2, 4, 4, 4] in two groups of one channel each."""
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1] * 6, group=2)
    outputs = [_value("y", F32, [1, 2, 4, 4, 4])]
    return _model(
        [node], [_value("x", F32, [1, 2, 4, 4, 4])], outputs, [_weight("w", [2, 1, 3, 3, 3])]
    )


def convtranspose3d() -> onnx.ModelProto:
    """A 2x2x2 ConvTranspose of x[1, 2, 3, 3, 3]: a rank-5 input."""
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], kernel_shape=[2] * 3)
    outputs = [_value("y", F32, [1, 2, 4, 4, 4])]
    return _model([node], [_value("x", F32, [1, 2, 3, 3, 3])], outputs, [_weight("w", [2] * 5)])


def layernorm_decomposed(dtype: int) -> Callable[[], onnx.ModelProto]:
    def build() -> onnx.ModelProto:
        """LayerNorm as an opset-16 export writes it (ReduceMean, Sub, Pow, ReduceMean, Add,
        Sqrt, Div), which onnxruntime fuses into one LayerNormalization where it registers the
        fusion for the EP."""
        nodes = [
            helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1]),
            helper.make_node("Sub", ["x", "mean"], ["centred"]),
            helper.make_node("Pow", ["centred", "two"], ["squared"]),
            helper.make_node("ReduceMean", ["squared"], ["variance"], axes=[-1]),
            helper.make_node("Add", ["variance", "epsilon"], ["shifted"]),
            helper.make_node("Sqrt", ["shifted"], ["deviation"]),
            helper.make_node("Div", ["centred", "deviation"], ["y"]),
        ]
        numpy_dtype = helper.tensor_dtype_to_np_dtype(dtype)
        constants = [
            numpy_helper.from_array(np.array(2, numpy_dtype), "two"),
            numpy_helper.from_array(np.array(1e-5, numpy_dtype), "epsilon"),
        ]
        shape = [2, 64]
        return _model(
            nodes, [_value("x", dtype, shape)], [_value("y", dtype, shape)], constants, 16
        )

    return build


MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "and-swapped-broadcast": and_swapped_broadcast,
    "instancenorm-epsilon-twins": instancenorm_epsilon_twins,
    "skip-simplified-layernorm-bias": skip_simplified_layernorm_bias,
    "skip-simplified-layernorm-bias-beside-add": skip_simplified_layernorm_bias_beside_add,
    "skip-layernorm-skip-broadcast": skip_layernorm_skip_broadcast,
    "transpose-rank1": transpose_rank1,
    "transpose-rank1-then-relu": transpose_rank1_then_relu,
    "tanh": tanh,
    "softmax-middle-axis": softmax_middle_axis,
    "conv-tanh": conv_tanh,
    "where-one-condition": where_one_condition,
    "gemm-identity-transpose": gemm_identity_transpose,
    "averagepool-ceil-pad-opset18": averagepool_ceil_pad(18),
    "averagepool-ceil-pad-opset19": averagepool_ceil_pad(19),
    "averagepool-end-pad": averagepool_end_pad,
    "convtranspose-4-channels": convtranspose_channels(4),
    "convtranspose-5-channels": convtranspose_channels(5),
    "convtranspose-float16-2047": convtranspose_float16(2047),
    "convtranspose-float16-2100": convtranspose_float16(2100),
    "layernorm-decomposed-float16": layernorm_decomposed(F16),
    "layernorm-decomposed-float32": layernorm_decomposed(F32),
    "conv3d": conv3d(written=False),
    "conv3d-attributes-written": conv3d(written=True),
    "conv3d-grouped": conv3d_grouped,
    "convtranspose3d": convtranspose3d,
}


def build(folder: Path = FOLDER) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, make in MODELS.items():
        path = folder / f"{name}.onnx"
        path.write_bytes(make().SerializeToString())
        written.append(path)
    return written


if __name__ == "__main__":
    for path in build():
        print(path)
