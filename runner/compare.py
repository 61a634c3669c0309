"""Elementwise comparison of one output against its expected values.

The rule is ORT-web's op-test runner's (js/web/test/test-runner.ts): equal values (infinities of
one sign included) and NaN against NaN pass; otherwise an element passes within `abs`, or when
both have the same sign and the larger over the smaller is within 1 + `rel`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from runner.suite.spec import Tolerance


@dataclass(frozen=True)
class Comparison:
    max_abs: float  # over finite pairs; inf when a non-finite value mismatches
    max_rel: float
    mismatched: int  # elements outside tolerance
    total: int
    # (actual, expected) where the shapes differ: then no element is compared, and an empty
    # output is wrong by its shape alone
    shapes: tuple[tuple[int, ...], tuple[int, ...]] | None = None

    @property
    def shape_ok(self) -> bool:
        return self.shapes is None

    @property
    def ok(self) -> bool:
        return self.shape_ok and self.mismatched == 0

    def describe(self) -> str:
        """What differs, in words: both shapes, or how many elements and by how much."""
        if self.shapes is not None:
            actual, expected = self.shapes
            return f"shape {list(actual)} where {list(expected)} was expected"
        return f"{self.mismatched}/{self.total} elements, max abs {self.max_abs:.3g}"


def compare(actual: np.ndarray, expected: np.ndarray, tolerance: Tolerance) -> Comparison:
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
    return Comparison(
        max_abs=float(diff.max()),
        max_rel=float(rel.max()),
        mismatched=int((~passed).sum()),
        total=int(a.size),
    )


def compare_outputs(
    actual: dict[str, np.ndarray], expected: dict[str, np.ndarray], tolerance: Tolerance
) -> dict[str, Comparison]:
    """Per expected output; an output the backend did not return counts as all mismatched."""
    missing = np.full((), np.nan)
    return {
        name: compare(actual.get(name, missing), value, tolerance)
        for name, value in expected.items()
    }


def worst(comparisons: dict[str, Comparison]) -> tuple[float, float]:
    """(max abs, max rel) error over all outputs."""
    if not comparisons:
        return 0.0, 0.0
    return (
        max(c.max_abs for c in comparisons.values()),
        max(c.max_rel for c in comparisons.values()),
    )
