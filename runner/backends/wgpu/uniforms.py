"""Uniform structs whose field order follows the case's layout, and their host-side packing.

Every kernel reads its constants (epsilon, sizes, strides, ...) from one uniform struct named
``Params`` at binding ``UNIFORM_SLOT``. A kernel declares its fields in a default order; the
layout's order (``Workload.uniform_order``, names from ``runner.uniforms.UNIFORM_FIELDS``) moves
the fields it lists to the front, in the layout's order, and the rest follow in their default
order. So a permuted layout changes both the WGSL struct declaration and the bytes the host
writes, and two layouts never share a struct unless they order a kernel's fields alike.

Offsets follow WGSL's uniform address space rules: scalars align to 4, ``array<vec4<i32>, N>``
aligns to 16 with a stride of 16, and the struct's size rounds up to its alignment.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from runner.uniforms import UNIFORM_FIELDS

# Tensors bind at [0, UNIFORM_SLOT), the uniform struct at UNIFORM_SLOT: the slot ranges never
# overlap, so a uniform can never be bound where a tensor is expected (the seed's slot rule).
UNIFORM_SLOT = 16

# kind -> (WGSL type, alignment, byte size of one element)
_KINDS = {
    "f32": ("f32", 4, 4),
    "u32": ("u32", 4, 4),
    "vec4i": ("vec4<i32>", 16, 16),
}


@dataclass(frozen=True)
class Field:
    """One struct member; ``vec4i`` fields are ``array<vec4<i32>, count>``."""

    name: str
    kind: str
    count: int = 1

    def __post_init__(self) -> None:
        if self.name not in UNIFORM_FIELDS:
            raise ValueError(f"uniform field {self.name!r} is not in runner.uniforms")
        if self.kind not in _KINDS:
            raise ValueError(f"uniform field kind {self.kind!r} is not one of {list(_KINDS)}")

    @property
    def wgsl_type(self) -> str:
        element = _KINDS[self.kind][0]
        return f"array<{element}, {self.count}>" if self.kind == "vec4i" else element

    @property
    def align(self) -> int:
        return _KINDS[self.kind][1]

    @property
    def size(self) -> int:
        return _KINDS[self.kind][2] * self.count


def order_fields(fields: Sequence[Field], order: Sequence[str]) -> tuple[Field, ...]:
    """Fields the layout lists first, in its order; then the others in their default order."""
    rank = {name: i for i, name in enumerate(order)}
    indexed = sorted(enumerate(fields), key=lambda f: (rank.get(f[1].name, len(rank)), f[0]))
    return tuple(field for _, field in indexed)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class StructLayout:
    """The ``Params`` struct of one kernel under one layout: member order, offsets, size."""

    fields: tuple[Field, ...]
    offsets: tuple[int, ...]
    size: int

    @classmethod
    def of(cls, fields: Sequence[Field], order: Sequence[str] = ()) -> StructLayout:
        ordered = order_fields(fields, order)
        offsets, end = [], 0
        for field in ordered:
            offset = _round_up(end, field.align)
            offsets.append(offset)
            end = offset + field.size
        alignment = max((f.align for f in ordered), default=4)
        return cls(ordered, tuple(offsets), max(_round_up(end, alignment), 16))

    def wgsl(self) -> str:
        members = "".join(f"  {f.name}: {f.wgsl_type},\n" for f in self.fields)
        return f"struct Params {{\n{members}}};\n"

    def pack(self, values: Mapping[str, float | int | Iterable[int]]) -> bytes:
        data = bytearray(self.size)
        for field, offset in zip(self.fields, self.offsets, strict=True):
            value = values[field.name]
            if field.kind == "f32":
                struct.pack_into("<f", data, offset, float(value))
            elif field.kind == "u32":
                struct.pack_into("<I", data, offset, int(value))
            else:
                ints = list(value)  # type: ignore[arg-type]
                if len(ints) > 4 * field.count:
                    raise ValueError(f"{field.name}: {len(ints)} values for {field.count} vec4")
                struct.pack_into(f"<{len(ints)}i", data, offset, *ints)
        return bytes(data)
