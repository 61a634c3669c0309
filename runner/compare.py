"""Elementwise comparison of one output against its expected values.

The rule is ORT-web's op-test runner's (js/web/test/test-runner.ts): equal values (infinities of
one sign included) and NaN against NaN pass; otherwise an element passes within `abs`, or when
both have the same sign and the larger over the smaller is within 1 + `rel`. Against
onnxruntime CPU an element also passes within `abs` plus its slack: what rounding the inputs
moves it by (``runner.oracle.conditioning``), so that an ill-conditioned computation's float
rounding is no bug while a well-conditioned one's real error still is.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from runner.measure import EXACT, Comparison, Outputs, Tolerance


def compare(
    actual: np.ndarray,
    expected: np.ndarray,
    tolerance: Tolerance,
    slack: np.ndarray | None = None,
) -> Comparison:
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape:
        shapes = (actual.shape, expected.shape)
        return Comparison(float("inf"), float("inf"), expected.size, expected.size, shapes)
    if expected.size == 0:
        return Comparison(0.0, 0.0, 0, 0)
    a = actual.astype(np.float64).ravel()
    e = expected.astype(np.float64).ravel()
    same = (a == e) | (np.isnan(a) & np.isnan(e))
    finite = np.isfinite(a) & np.isfinite(e)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        diff = np.where(finite, np.abs(a - e), np.inf)
        diff[same] = 0.0
        big, small = np.maximum(np.abs(a), np.abs(e)), np.minimum(np.abs(a), np.abs(e))
        ratio = np.where(finite & (a * e > 0), big / small, np.inf)
        rel = np.where(finite & (np.abs(e) > 0), diff / np.abs(e), np.where(diff > 0, np.inf, 0.0))
    ratio[same] = 1.0
    rel[same] = 0.0
    passed = same | (diff <= tolerance.abs) | (ratio <= 1.0 + tolerance.rel)
    if slack is not None:
        passed |= diff <= tolerance.abs + np.asarray(slack, dtype=np.float64).ravel()
    return Comparison(
        max_abs=float(diff.max()),
        max_rel=float(rel.max()),
        mismatched=int((~passed).sum()),
        total=int(a.size),
        non_finite=int((np.isfinite(e) & ~np.isfinite(a)).sum()),
    )


def compare_outputs(
    actual: Mapping[str, np.ndarray],
    expected: Mapping[str, np.ndarray],
    tolerance: Tolerance,
    exact_integers: bool = False,
    slack: Mapping[str, np.ndarray] | None = None,
) -> dict[str, Comparison]:
    """Per expected output; an output the backend did not return counts as all mismatched.
    `exact_integers`: integer outputs exactly (as ORT-web's runner compares with a file);
    `slack`: per output, each element's further allowance."""
    return {
        name: compare(
            actual[name],
            value,
            EXACT if exact_integers and np.asarray(value).dtype.kind not in "fc" else tolerance,
            None if slack is None else slack.get(name),
        )
        if name in actual
        else _missing(np.asarray(value))
        for name, value in expected.items()
    }


def _missing(expected: np.ndarray) -> Comparison:
    """An output the backend did not return: no element compared (as the page's script says)."""
    inf = float("inf")
    return Comparison(inf, inf, expected.size, expected.size, ((), expected.shape))


class NumpyMeasure:
    """The suite's `runner.measure.Measure`: outputs are numpy arrays."""

    def compare(
        self,
        actual: Outputs,
        expected: Outputs,
        tolerance: Tolerance,
        exact_integers: bool = False,
        slack: Outputs | None = None,
    ) -> dict[str, Comparison]:
        return compare_outputs(actual, expected, tolerance, exact_integers, slack)

    def first_difference(self, a: Outputs, b: Outputs) -> str | None:
        return next(
            (n for n, value in a.items() if not np.array_equal(value, b.get(n), equal_nan=True)),
            None,
        )


NUMPY = NumpyMeasure()
