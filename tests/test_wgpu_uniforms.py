"""Uniform structs ordered by the layout: WGSL offsets, host packing, and on the device."""

from __future__ import annotations

import itertools
import struct

import numpy as np
import pytest

from runner.backends.wgpu.kernels import compose
from runner.backends.wgpu.kernels.rows import layer_norm_kernel
from runner.backends.wgpu.uniforms import Field, StructLayout, order_fields
from tests.test_wgpu_kernels import assert_matches_onnxruntime, floats, op_model, open_wgpu

FIELDS = (Field("size", "u32"), Field("strides", "vec4i", 3), Field("eps", "f32"))


def test_listed_fields_come_first_in_the_layout_order_then_the_rest_in_default_order():
    names = [f.name for f in order_fields(FIELDS, ("eps", "heads", "size"))]
    assert names == ["eps", "size", "strides"]
    assert [f.name for f in order_fields(FIELDS, ())] == ["size", "strides", "eps"]


@pytest.mark.parametrize(
    "order, offsets, size",
    [
        ((), {"size": 0, "strides": 16, "eps": 64}, 80),
        (("eps",), {"eps": 0, "size": 4, "strides": 16}, 64),
        (("strides", "eps"), {"strides": 0, "eps": 48, "size": 52}, 64),
    ],
)
def test_offsets_follow_wgsl_uniform_alignment(order, offsets, size):
    layout = StructLayout.of(FIELDS, order)
    assert dict(zip((f.name for f in layout.fields), layout.offsets, strict=True)) == offsets
    assert layout.size == size


def test_pack_writes_every_field_at_its_offset():
    layout = StructLayout.of(FIELDS, ("eps", "strides"))
    data = layout.pack({"size": 7, "strides": [1, -2, 3, 4, 5], "eps": 0.25})
    assert len(data) == layout.size == 80
    assert struct.unpack_from("<f", data, 0) == (0.25,)
    assert struct.unpack_from("<12i", data, 16) == (1, -2, 3, 4, 5, 0, 0, 0, 0, 0, 0, 0)
    assert struct.unpack_from("<I", data, 64) == (7,)
    assert layout.wgsl().index("eps") < layout.wgsl().index("strides") < layout.wgsl().index("size")


def test_field_names_come_from_the_shared_vocabulary():
    with pytest.raises(ValueError, match="runner.uniforms"):
        Field("epsilon", "f32")


def test_an_order_changes_the_program_source_and_key():
    kernel = layer_norm_kernel(("f32",) * 3, "f32")
    default, moved = compose(kernel, ()), compose(kernel, ("eps",))
    assert default.source != moved.source and default.key != moved.key
    assert compose(kernel, ("eps", "heads")).key == moved.key  # heads: not a field of this kernel


@pytest.fixture(scope="module")
def backend():
    opened = open_wgpu(runs=1)
    yield opened
    opened.close()


@pytest.mark.gpu
@pytest.mark.parametrize("order", list(itertools.permutations(("eps", "rows", "cols"))))
def test_layer_norm_reads_its_fields_in_every_order(backend, order):
    x = floats(3, 67, low=-1, high=3)
    inputs = {"x": x, "scale": floats(67), "bias": floats(67)}
    model, feeds = op_model("LayerNormalization", inputs, ("scale", "bias"), epsilon=0.5)
    assert_matches_onnxruntime(backend, model, feeds, order=order)


@pytest.mark.gpu
@pytest.mark.parametrize("order", list(itertools.permutations(("scale", "strides", "cols"))))
def test_gemm_reads_its_fields_in_every_order(backend, order):
    inputs = {"a": floats(33, 5), "b": floats(33, 67), "c": floats(67)}
    model, feeds = op_model("Gemm", inputs, ("b", "c"), transA=1, alpha=0.37)
    assert_matches_onnxruntime(backend, model, feeds, order=order)


@pytest.mark.gpu
@pytest.mark.parametrize("order", [("strides", "size"), ("size", "strides")])
def test_elementwise_reads_its_fields_in_every_order(backend, order):
    model, feeds = op_model("Sub", {"a": floats(2, 3, 65), "b": np.float32([[1.5], [2.5], [0]])})
    assert_matches_onnxruntime(backend, model, feeds, order=order)
