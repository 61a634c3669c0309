"""What comparing outputs yields, and the comparisons the judge asks for (``Measure``).

The judge (``runner.judge``) reasons over `Comparison`s and never touches an array itself, so
that it runs where numpy does not: a repro bundle's page judges under Pyodide, its arrays held
by the page's script. ``runner.compare`` measures with numpy, the page with JavaScript; both
follow ORT-web's op-test rule. This module imports nothing beyond the standard library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

DEFAULT_ABS = 1e-3
DEFAULT_REL = 1e-5

Outputs = Mapping[str, Any]  # output name -> array; opaque here, only a `Measure` reads it


@dataclass(frozen=True)
class Tolerance:
    abs: float = DEFAULT_ABS
    rel: float = DEFAULT_REL


EXACT = Tolerance(abs=0.0, rel=0.0)
# float16's own rounding: 4 units in the last place at 1 (2^-8), absolute or relative, for a
# result rounded to float16 at every op on both sides (onnxruntime CPU computes float16 that way)
FLOAT16 = Tolerance(abs=2.0**-8, rel=2.0**-8)


@dataclass(frozen=True)
class Comparison:
    max_abs: float  # over finite pairs; inf when a non-finite value mismatches
    max_rel: float
    mismatched: int  # elements outside tolerance
    total: int
    # (actual, expected) where the shapes differ: then no element is compared, and an empty
    # output is wrong by its shape alone
    shapes: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    non_finite: int = 0  # elements NaN or infinite where the expected ones are finite

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


class Measure(Protocol):
    """The two questions the judge asks of outputs."""

    def compare(
        self,
        actual: Outputs,
        expected: Outputs,
        tolerance: Tolerance,
        exact_integers: bool = False,
        slack: Outputs | None = None,
    ) -> dict[str, Comparison]:
        """Per expected output; one `actual` lacks counts as all mismatched. `exact_integers`:
        integer outputs exactly, as ORT-web's runner compares with an op test's file. `slack`:
        per output, a further absolute allowance per element (``runner.oracle.conditioning``)."""
        ...

    def first_difference(self, a: Outputs, b: Outputs) -> str | None:
        """The first output of `a` that `b` does not equal bit for bit (NaN equals NaN)."""
        ...


def worst(comparisons: Mapping[str, Comparison]) -> tuple[float, float]:
    """(max abs, max rel) error over all outputs."""
    if not comparisons:
        return 0.0, 0.0
    return (
        max(c.max_abs for c in comparisons.values()),
        max(c.max_rel for c in comparisons.values()),
    )
