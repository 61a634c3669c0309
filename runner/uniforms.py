"""The vocabulary of named uniform fields a layout may order or change.

A layout (see the suite format) is an order of these names and/or new values for some of them.
The `wgpu` backend orders each kernel's uniform struct by it; the `ort-web` backend realizes it
as an equivalent model variant (node and initializer emission order, changed constants). The
suite loader checks layouts against this table, so it lives apart from both.
"""

from __future__ import annotations

UNIFORM_FIELDS: dict[str, str] = {
    "eps": "layer-norm epsilon",
    "heads": "attention head count",
    "head_dim": "size of one attention head",
    "scale": "attention score scale, 1/sqrt(head_dim)",
    "hidden": "hidden size",
    "ffn": "feed-forward inner size",
    "seq": "sequence length",
    "rows": "rows a kernel reduces over or iterates",
    "cols": "length of the innermost axis",
    "inner": "elements after a kernel's axis, where it is not the last (Softmax's)",
    "size": "element count of the tensor a kernel writes",
    "strides": "input strides (broadcast, transpose, slice)",
}

# Fields whose value a content-variant layout may change (same shapes, other constants).
VALUE_FIELDS: dict[str, type] = {"eps": float, "heads": int}
