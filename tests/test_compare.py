"""Tolerance edges: NaN, Inf, zeros, signs, shapes; the abs-or-ratio rule of ORT-web's runner."""

from __future__ import annotations

import math

import numpy as np
import pytest

from runner.compare import compare, compare_outputs
from runner.measure import worst
from runner.suite.spec import Tolerance

TOL = Tolerance(abs=1e-3, rel=1e-5)


def c(actual, expected, tol=TOL):
    return compare(np.array(actual, np.float32), np.array(expected, np.float32), tol)


def test_identical_arrays_pass_with_zero_error():
    result = c([1.0, -2.0, 0.0], [1.0, -2.0, 0.0])
    assert result.ok and result.max_abs == 0.0 and result.max_rel == 0.0 and result.total == 3


def test_absolute_threshold_edges():
    assert c([0.0], [0.0009]).ok
    assert not c([0.0], [0.0011]).ok
    assert c([0.0], [0.0011]).mismatched == 1


def test_ratio_rescues_large_values():
    # 1000 vs 1000.005: diff 5e-3 > abs, ratio 1.000005 <= 1 + 1e-5
    assert c([1000.0], [1000.005]).ok
    # 1000 vs 1000.05: ratio 1.00005 > 1 + 1e-5
    assert not c([1000.0], [1000.05]).ok


def test_opposite_signs_fail_unless_within_abs():
    assert c([-0.0004], [0.0004]).ok
    assert not c([-5.0], [5.0]).ok


def test_nan_handling():
    assert c([math.nan, 1.0], [math.nan, 1.0]).ok  # NaN against NaN is equal
    result = c([math.nan], [1.0])
    assert not result.ok and result.max_abs == math.inf
    assert not c([1.0], [math.nan]).ok


def test_inf_handling():
    assert c([math.inf, -math.inf], [math.inf, -math.inf]).ok
    assert not c([math.inf], [-math.inf]).ok
    assert not c([math.inf], [1e30]).ok
    assert not c([3.0], [math.inf]).ok


def test_zero_expected_relative_error():
    result = c([0.5], [0.0])
    assert not result.ok and result.max_rel == math.inf and result.max_abs == 0.5
    assert c([0.0], [0.0]).max_rel == 0.0


def test_shape_mismatch_fails_everything():
    result = compare(np.zeros((2, 3)), np.zeros((3, 2)), TOL)
    assert not result.ok and not result.shape_ok and result.mismatched == 6
    assert result.describe() == "shape [2, 3] where [3, 2] was expected"


def test_an_empty_output_is_judged_by_its_shape():
    wrong = compare(np.zeros((2, 3)), np.zeros((0, 3)), TOL)
    assert not wrong.ok and wrong.describe() == "shape [2, 3] where [0, 3] was expected"
    assert compare(np.zeros((0, 3)), np.zeros((0, 3)), TOL).describe() == (
        "0/0 elements, max abs 0"
    )


def test_empty_and_integer_outputs():
    assert compare(np.zeros((0, 4)), np.zeros((0, 4)), TOL).ok
    assert compare(np.array([1, 2], np.int64), np.array([1, 2], np.int64), TOL).ok
    assert not compare(np.array([1, 3], np.int64), np.array([1, 2], np.int64), TOL).ok


@pytest.mark.parametrize(("abs_", "ok"), [(0.1, True), (0.01, False)])
def test_custom_tolerance(abs_, ok):
    assert c([1.05], [1.0], Tolerance(abs=abs_, rel=0.0)).ok is ok


def test_compare_outputs_and_worst():
    expected = {"y": np.ones(4, np.float32), "z": np.zeros(2, np.float32)}
    comparisons = compare_outputs({"y": np.full(4, 1.5, np.float32)}, expected, TOL)
    assert not comparisons["y"].ok and comparisons["y"].max_abs == pytest.approx(0.5)
    assert not comparisons["z"].ok, "a missing output must fail"
    assert worst({"y": comparisons["y"]}) == (pytest.approx(0.5), pytest.approx(0.5))
