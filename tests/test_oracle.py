"""The oracle: onnxruntime CPU references, cached on disk so a rerun computes none."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import TensorProto, helper

from runner import oracle
from runner.oracle import ReferenceCache, cache_key
from runner.schedule import BASE
from runner.workload import Feed, Workload


def _workload(scale: float) -> Workload:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])
    s = helper.make_tensor("s", TensorProto.FLOAT, [], [scale])
    graph = helper.make_graph([helper.make_node("Mul", ["x", "s"], ["y"])], "g", [x], [y], [s])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    inputs = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    return Workload(f"key-{scale}", model.SerializeToString(), inputs, ("y",), {"n": 2})


def _entry(scale: float) -> str:
    return f"{cache_key(_workload(scale), BASE)}.npz"


def test_reference_values_and_cache(tmp_path):
    cache = ReferenceCache(tmp_path)
    out = cache.references(_workload(2.0))[BASE]
    np.testing.assert_array_equal(out["y"], np.arange(6, dtype=np.float32).reshape(2, 3) * 2)
    cache.references(_workload(2.0))
    assert cache.computed == 1  # the second call came from memory

    again = ReferenceCache(tmp_path)  # a new run over the same folder
    np.testing.assert_array_equal(again.references(_workload(2.0))[BASE]["y"], out["y"])
    assert again.computed == 0
    again.references(_workload(3.0))
    assert again.computed == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([_entry(2.0), _entry(3.0)])


def test_every_run_inputs_get_their_reference_in_one_entry(tmp_path):
    base = _workload(2.0)
    later = {"x": -base.inputs["x"]}
    workload = dataclasses.replace(
        base,
        schedule=(Feed(0, BASE), Feed(0, (0, 1)), Feed(0, (0, 1))),
        variants={(0, 1): later},
    )
    cache = ReferenceCache(tmp_path)
    references = cache.references(workload)
    assert set(references) == {BASE, (0, 1)} and cache.computed == 2
    np.testing.assert_array_equal(references[(0, 1)]["y"], later["x"] * 2)
    again = ReferenceCache(tmp_path)
    np.testing.assert_array_equal(again.references(workload)[(0, 1)]["y"], later["x"] * 2)
    assert again.computed == 0 and len(list(tmp_path.iterdir())) == 2
    # a run of one round (base inputs only) finds the base in the cache
    assert again.references(base)[BASE]["y"][1, 2] == 10.0 and again.computed == 0


def test_another_onnxruntime_version_recomputes(tmp_path, monkeypatch):
    """The cached reference belongs to the onnxruntime that computed it: after an upgrade the
    same workload is computed again, under another key, and the old entry stays for the old
    version."""
    ReferenceCache(tmp_path).references(_workload(2.0))
    installed = _entry(2.0)
    monkeypatch.setattr(oracle, "onnxruntime_version", lambda: "0.0.0-another")
    upgraded = ReferenceCache(tmp_path)
    assert upgraded.references(_workload(2.0))[BASE]["y"][1, 2] == 10.0
    assert upgraded.computed == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([installed, _entry(2.0)])
    monkeypatch.setattr(oracle, "PROVIDER", "AnotherExecutionProvider")
    assert _entry(2.0) not in {installed, *(p.name for p in tmp_path.iterdir())}


def test_corrupt_cache_entry_is_recomputed(tmp_path):
    (tmp_path / _entry(2.0)).write_bytes(b"truncated")
    cache = ReferenceCache(tmp_path)
    assert cache.references(_workload(2.0))[BASE]["y"][1, 2] == 10.0
    assert cache.computed == 1


def test_a_model_serialized_again_finds_its_reference(tmp_path):
    """The cache key covers the model's bytes: the same model parsed and serialized again (as a
    rerun builds it) keeps its bytes, so its reference comes from the cache."""
    workload = _workload(1.0)
    again = onnx.load_from_string(workload.model)
    onnx.checker.check_model(again)
    assert again.SerializeToString() == workload.model
    ReferenceCache(tmp_path).references(workload)
    cache = ReferenceCache(tmp_path)
    cache.references(dataclasses.replace(workload, model=again.SerializeToString()))
    assert cache.computed == 0
