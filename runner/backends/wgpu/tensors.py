"""Tensors as the planner sees them, and how host arrays map onto device element types.

float32 lives on the device as f32, float16 as f16 (where the adapter has shader-f16: kernels
read it into f32 arithmetic and write it back rounded, ``kernels.compose``). WGSL has no 64-bit
integers. Integer and bool tensors live on the device as i32 (bool as 0/1):
int64 values are checked to fit when uploaded (inputs, constants) and widened back when read.
Integer tensors that are constant (shape arithmetic, Slice bounds, Reshape targets) never reach
the device at all: the planner folds them on the host.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import helper

from runner.backends.wgpu import DESCRIPTOR

_INT32 = np.iinfo(np.int32)

_FLOAT_TYPES = {"float32": "f32", "float16": "f16"}  # every other element type: i32
# The descriptor's element types, by the device type that holds them.
DEVICE_TYPES: dict[int, str] = {
    helper.np_dtype_to_tensor_dtype(np.dtype(name)): _FLOAT_TYPES.get(name, "i32")
    for name in sorted(DESCRIPTOR.element_types)
}
FLOATS = ("f32", "f16")
_HOST = {"f32": np.float32, "f16": np.float16, "i32": np.int32}


class DeviceTypeError(TypeError):
    """An element type the device has no representation for (float16, double, strings...)."""


class UnsupportedOp(Exception):
    """The graph needs an operator (or an operator form) no kernel implements."""

    def __init__(self, op_type: str, node: str, reason: str = ""):
        self.op_type = op_type
        self.node = node
        super().__init__(f"{op_type} (node {node!r})" + (f": {reason}" if reason else ""))


@dataclass(frozen=True, eq=False)
class Tensor:
    shape: tuple[int, ...]
    dtype: int  # ONNX TensorProto element type
    value: np.ndarray | None = None  # known on the host: folded, never computed on the device

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def device_type(self) -> str:
        if self.dtype not in DEVICE_TYPES:
            raise DeviceTypeError(f"element type {helper.tensor_dtype_to_string(self.dtype)}")
        return DEVICE_TYPES[self.dtype]

    @property
    def nbytes(self) -> int:
        """Device bytes, a multiple of 4 (copies and writes go by 4 bytes), at least 16 (a
        binding may not be empty)."""
        size = np.dtype(_HOST[self.device_type]).itemsize * self.size
        return max(16, -(-size // 4) * 4)


def host_tensor(value: np.ndarray) -> Tensor:
    value = np.asarray(value)
    return Tensor(tuple(value.shape), helper.np_dtype_to_tensor_dtype(value.dtype), value)


def to_device(array: np.ndarray, name: str) -> np.ndarray:
    """The array as its device element type (float32, float16 or int32), contiguous and a
    multiple of 4 bytes long."""
    array = np.asarray(array)
    if array.dtype == np.float32:
        return np.ascontiguousarray(array)
    if array.dtype == np.float16:
        return np.concatenate([array.ravel(), np.zeros(array.size % 2, np.float16)])
    if array.dtype == np.bool_ or np.issubdtype(array.dtype, np.integer):
        if array.size and (array.min() < _INT32.min or array.max() > _INT32.max):
            raise ValueError(f"{name}: integer values do not fit the device's int32")
        return np.ascontiguousarray(array, dtype=np.int32)
    raise DeviceTypeError(f"{name}: element type {array.dtype} has no device representation")


def from_device(data: memoryview | bytes, tensor: Tensor) -> np.ndarray:
    """Read back: floats stay, int32 widens to the tensor's ONNX type (bool from 0/1)."""
    device = _HOST[tensor.device_type]
    array = np.frombuffer(data, dtype=device, count=tensor.size).reshape(tensor.shape)
    return array.astype(helper.tensor_dtype_to_np_dtype(tensor.dtype))
