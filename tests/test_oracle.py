"""The oracle: onnxruntime CPU references, cached on disk so a rerun computes none."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from runner import oracle
from runner.oracle import ReferenceCache, cache_key
from runner.workload import Workload


def _workload(scale: float) -> Workload:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])
    s = helper.make_tensor("s", TensorProto.FLOAT, [], [scale])
    graph = helper.make_graph([helper.make_node("Mul", ["x", "s"], ["y"])], "g", [x], [y], [s])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    inputs = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    return Workload(f"key-{scale}", model.SerializeToString(), inputs, ("y",), {"n": 2})


def test_reference_values_and_cache(tmp_path):
    cache = ReferenceCache(tmp_path)
    out = cache.reference(_workload(2.0))
    np.testing.assert_array_equal(out["y"], np.arange(6, dtype=np.float32).reshape(2, 3) * 2)
    cache.reference(_workload(2.0))
    assert cache.computed == 1  # the second call came from memory

    again = ReferenceCache(tmp_path)  # a new run over the same folder
    np.testing.assert_array_equal(again.reference(_workload(2.0))["y"], out["y"])
    assert again.computed == 0
    again.reference(_workload(3.0))
    assert again.computed == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{cache_key(_workload(scale))}.npz" for scale in (2.0, 3.0)
    )


def test_another_onnxruntime_version_recomputes(tmp_path, monkeypatch):
    """The cached reference belongs to the onnxruntime that computed it: after an upgrade the
    same workload is computed again, under another key, and the old entry stays for the old
    version."""
    ReferenceCache(tmp_path).reference(_workload(2.0))
    installed = cache_key(_workload(2.0))
    assert installed != _workload(2.0).key
    monkeypatch.setattr(oracle, "onnxruntime_version", lambda: "0.0.0-another")
    upgraded = ReferenceCache(tmp_path)
    assert upgraded.reference(_workload(2.0))["y"][1, 2] == 10.0
    assert upgraded.computed == 1
    assert sorted(p.stem for p in tmp_path.iterdir()) == sorted(
        [installed, cache_key(_workload(2.0))]
    )
    monkeypatch.setattr(oracle, "PROVIDER", "AnotherExecutionProvider")
    assert cache_key(_workload(2.0)) not in {installed, *(p.stem for p in tmp_path.iterdir())}


def test_corrupt_cache_entry_is_recomputed(tmp_path):
    (tmp_path / f"{cache_key(_workload(2.0))}.npz").write_bytes(b"truncated")
    cache = ReferenceCache(tmp_path)
    assert cache.reference(_workload(2.0))["y"][1, 2] == 10.0
    assert cache.computed == 1


def test_model_is_unchanged_by_serialization():
    model = onnx.load_from_string(_workload(1.0).model)
    onnx.checker.check_model(model)
