"""Input tensors for a model at one static shape, from the suite's ``inputs:`` specs.

Deterministic: the same model, specs, shape and seed always give the same arrays, so the oracle's
cache and a case's eager/capture twins see identical inputs.

A case feeds new inputs to every run, as applications do (``vary``): run variant ``(graph, draw)``
draws each generated input again from the same spec with a seed of its own, so token ids stay in
their ``range`` and a ``fill`` stays constant; data given as it is (``npy:``, an op test's file)
is shuffled only where that cannot break it (see ``vary_given``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import helper

from runner.schedule import BASE, Variant
from runner.suite.spec import InputSpec

SUPPORTED_DTYPES = ("float32", "float16", "int32", "int64", "bool")

# `range` when a spec gives none: small signed floats, 0/1 integers (ids, masks).
DEFAULT_FLOAT_RANGE = (-1.0, 1.0)
DEFAULT_INT_RANGE = (0, 2)


def make_inputs(
    model: onnx.ModelProto,
    specs: Mapping[str, InputSpec],
    shape: Mapping[str, int],
    seed: int,
    variant: Variant = BASE,
) -> dict[str, np.ndarray]:
    """One array per graph input (initializers excluded), in the graph's input order; another
    `variant` draws every generated input again (npy inputs: ``vary_given``)."""
    graph_inputs = _graph_inputs(model)
    unknown = sorted(set(specs) - {i.name for i in graph_inputs})
    if unknown:
        names = [i.name for i in graph_inputs]
        raise ValueError(f"inputs {unknown} are not inputs of the model; its inputs are {names}")
    return {
        value.name: _make_input(
            value.name,
            specs.get(value.name, InputSpec()),
            _static_shape(value, shape),
            _model_dtype(value),
            seed,
            variant,
        )
        for value in graph_inputs
    }


def vary_given(name: str, array: np.ndarray, variant: Variant) -> np.ndarray:
    """Another run's version of an input given as data (an npy file, an op test's tensor).

    Float tensors of rank 2 or more are data: their elements are shuffled, which keeps every
    value (so a mask, NaN or infinity stays one). Integers and booleans may be indices, axes or
    shapes, and rank 0 or 1 floats sizes or scales (Resize, Range): they stay as given.
    """
    if variant == BASE or array.dtype.kind != "f" or array.ndim < 2:
        return array
    rng = np.random.default_rng([input_seed(0, name), *variant])
    return rng.permutation(array.ravel()).reshape(array.shape)


def input_seed(seed: int, name: str) -> int:
    """A stable per-input seed (Python's ``hash`` is salted per process)."""
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def _graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    initializers = {init.name for init in model.graph.initializer}
    return [value for value in model.graph.input if value.name not in initializers]


def _static_shape(value: onnx.ValueInfoProto, shape: Mapping[str, int]) -> tuple[int, ...]:
    dims = []
    for index, dim in enumerate(value.type.tensor_type.shape.dim):
        if dim.HasField("dim_value"):
            dims.append(dim.dim_value)
        elif dim.dim_param in shape:
            dims.append(int(shape[dim.dim_param]))
        elif dim.dim_param:
            raise ValueError(
                f"input {value.name!r} has symbolic dim {dim.dim_param!r} but the shape gives "
                f"only {sorted(shape)}; add {dim.dim_param}: <size> to the suite's shapes"
            )
        else:
            raise ValueError(f"input {value.name!r} dim {index} has neither a size nor a name")
    return tuple(dims)


def _model_dtype(value: onnx.ValueInfoProto) -> np.dtype:
    return np.dtype(helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type))


def _make_input(
    name: str,
    spec: InputSpec,
    shape: tuple[int, ...],
    model_dtype: np.dtype,
    seed: int,
    variant: Variant = BASE,
) -> np.ndarray:
    dtype = np.dtype(spec.dtype) if spec.dtype else model_dtype
    if dtype.name not in SUPPORTED_DTYPES:
        raise ValueError(f"input {name!r} has dtype {dtype.name}; supported: {SUPPORTED_DTYPES}")
    if spec.npy is not None:
        return vary_given(name, _load_npy(name, spec, shape, dtype), variant)
    if spec.fill is not None:
        return np.full(shape, spec.fill, dtype)
    own = spec.seed if spec.seed is not None else input_seed(seed, name)
    rng = np.random.default_rng(own if variant == BASE else [own, *variant])
    is_float = dtype.kind == "f"
    low, high = DEFAULT_FLOAT_RANGE if is_float else DEFAULT_INT_RANGE
    low = low if spec.low is None else spec.low
    high = high if spec.high is None else spec.high
    if high <= low:
        raise ValueError(f"input {name!r}: range [{low}, {high}) is empty")
    if is_float:
        return rng.uniform(low, high, shape).astype(dtype)
    return rng.integers(int(low), int(high), shape).astype(dtype)


def _load_npy(name: str, spec: InputSpec, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    try:
        array = np.load(spec.npy, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise ValueError(f"input {name!r}: cannot load {spec.npy}: {error}") from None
    if array.shape != shape or array.dtype != dtype:
        raise ValueError(
            f"input {name!r}: {spec.npy} holds {array.dtype.name}{list(array.shape)}, "
            f"expected {dtype.name}{list(shape)}"
        )
    return array
