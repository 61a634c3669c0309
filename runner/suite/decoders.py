"""A decoder model's checks: an ONNX file read as onnxruntime-genai's decoder (its sizes from
its inputs and outputs), a generation loop checked against its caches, and the largest tensors
the two allocate. A check tells its problems to `problem` (where, under the entry it was handed;
message; what was expected), as the scenario parser does: the builder locates them."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from runner.suite.onnxfile import OnnxFile
from runner.suite.spec import DecoderParams, GenerationLoop, Rewind

Report = Callable[[tuple, str, str], None]


def decoder_file(
    file: Path, read: OnnxFile, name: str, spec: dict, problem: Report
) -> tuple[DecoderParams, dict[str, int]] | None:
    """Model `name`'s `file` (`read`), declared a decoder: the IO onnxruntime-genai's builder writes
    for a static KV cache, its sizes read from it, and its symbolic dims pinned to a decode
    step. None with a problem told (the problem stops the load)."""
    import onnx  # only where a suite declares a decoder file: loading stays light

    inputs, outputs = read.inputs, read.outputs
    layers = 0
    while f"past_key_values.{layers}.key" in inputs:
        layers += 1
    caches = [f"{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    wanted_inputs = {"input_ids", "attention_mask", *(f"past_key_values.{c}" for c in caches)}
    wanted_outputs = {"logits", *(f"present.{c}" for c in caches)}
    if not layers or set(inputs) != wanted_inputs or not wanted_outputs <= set(outputs):
        problem(
            ("path",),
            f"model {name!r} ({file.name}) is declared a decoder (`generate:`), but "
            f"its inputs are {', '.join(inputs)} and its outputs {', '.join(outputs)}",
            "onnxruntime-genai's decoder: inputs input_ids, attention_mask and "
            "past_key_values.N.key and .value for each layer N; outputs logits and "
            "present.N.key and .value",
        )
        return None
    past, logits = inputs["past_key_values.0.key"], outputs["logits"]
    head_size = past[3] if len(past) == 4 else None
    if isinstance(head_size, str):  # the builder's `kv_cache_dim`: twice rotary's width
        head_size = read.rotary_head_size
    if len(past) != 4 or not isinstance(past[1], int) or head_size is None:
        problem(
            ("path",),
            f"model {name!r}: past_key_values.0.key has dims {past}",
            "[batch, kv_heads, length, head_size], kv_heads fixed, head_size fixed or "
            "GroupQueryAttention's cos_cache half as wide",
        )
        return None
    if not logits or not isinstance(logits[-1], int) or "max_length" not in spec:
        problem(
            (),
            f"model {name!r} (a decoder file): logits {logits}, max_length "
            f"{spec.get('max_length', 'not given')}",
            "logits whose last dim (the vocabulary) is fixed, and `max_length:` (the "
            "positions its KV-cache buffers hold)",
        )
        return None
    kv_heads, length = past[1], spec["max_length"]
    try:
        params = DecoderParams(
            layers=layers,
            hidden=kv_heads * head_size,  # only head_size = hidden / heads counts here
            heads=kv_heads,
            kv_heads=kv_heads,
            vocab=logits[-1],
            max_length=length,
            seed=spec.get("seed", 0),
            static_mask=True,
            cache_dtype=onnx.helper.tensor_dtype_to_np_dtype(
                read.input_types["past_key_values.0.key"]
            ).name,
        )
    except ValueError as exc:
        problem((), f"model {name!r}: {exc}", "sizes GroupQueryAttention takes")
        return None
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    pins = [(ids[0], 1), (ids[-1], 1), (mask[-1], length), (past[2], length)]
    pins.append((past[3], head_size))
    return params, {dim: value for dim, value in pins if isinstance(dim, str)}


def generation_loop(
    name: str, spec: dict, params: DecoderParams, problem: Report
) -> GenerationLoop:
    """``generate:`` (`spec`), checked against the caches' length (the schema checks its
    keys); its problems told where they are under it."""
    rewind = Rewind(**spec["rewind"]) if "rewind" in spec else None
    tokens = spec.get("prompt")
    if isinstance(tokens, list):  # a real prompt's ids, as the model's tokenizer wrote them
        spec = {**spec, "prompt": len(tokens), "tokens": tuple(tokens)}
    loop = GenerationLoop(**{**spec, "rewind": rewind})
    if rewind is not None:
        if rewind.after >= loop.steps:
            problem(
                ("rewind", "after"),
                f"a rewind after decode step {rewind.after} of {loop.steps}",
                f"after < steps ({loop.steps}): a step must follow the rewind",
            )
        if rewind.by >= loop.prompt + rewind.after:
            problem(
                ("rewind", "by"),
                f"a rewind by {rewind.by} after decode step {rewind.after} leaves "
                f"{loop.prompt + rewind.after - rewind.by} of the {loop.prompt} + "
                f"{rewind.after} positions",
                f"by < prompt + after ({loop.prompt + rewind.after}): at least one stays",
            )
        if loop.caches == "swapped":
            problem(
                ("caches",),
                "caches: swapped with a rewind: the swapped buffer's stale positions "
                "would differ from the reference's",
                "a rewind or swapped caches, in two models",
            )
    if loop.positions > params.max_length:
        rewound = " (the longest, with the rewind)" if rewind is not None else ""
        problem(
            (),
            f"a prompt of {loop.prompt} tokens and {loop.steps} decode steps need "
            f"{loop.positions} positions{rewound}; model {name!r} holds max_length "
            f"{params.max_length}",
            f"prompt + steps <= max_length ({params.max_length})",
        )
    return loop


# A decoder's tensor: its elements, the key under the model entry that sizes it (where a refusal
# points), and what it is.
Tensor = tuple[int, tuple[str, ...], str]


def _tensor(key: tuple[str, ...], what: str, dims: dict[str, int]) -> Tensor:
    """A tensor of `dims`, each named as the suite names it, so a refusal says which to lower."""
    named = f"{' x '.join(dims)}: {' x '.join(map(str, dims.values()))}"
    return math.prod(dims.values()), key, f"{what} ({named})"


def loop_tensors(params: DecoderParams, loop: GenerationLoop) -> list[Tensor]:
    """The largest tensors a generation loop allocates, whoever built the model (a decoder file's
    own weights are on disk already): a KV cache and the prefill's logits."""
    return [
        _tensor(
            ("max_length",),
            "a KV cache",
            {
                "kv_heads": params.kv_heads,
                "max_length": params.max_length,
                "head_size": params.head_size,
            },
        ),
        _tensor(
            ("generate", "prompt"),
            "the prefill's logits",
            {"prompt": loop.prompt, "vocab": params.vocab},
        ),
    ]


def builtin_decoder_tensors(params: DecoderParams, loop: GenerationLoop) -> list[Tensor]:
    """The loop's largest tensors and the builtin decoder's: its weights, and the prefill's
    activations and attention scores (onnxruntime CPU's GroupQueryAttention holds them all)."""
    prefill = ("generate", "prompt")
    qkv = (params.heads + 2 * params.kv_heads) * params.head_size
    return loop_tensors(params, loop) + [
        _tensor(
            ("vocab",),
            "its embedding and lm_head weights",
            {"vocab": params.vocab, "hidden": params.hidden},
        ),
        _tensor(
            ("hidden",),
            "its qkv_proj weights",
            {"hidden": params.hidden, "(heads + 2 kv_heads) * head_size": qkv},
        ),
        _tensor(
            ("intermediate",),
            "its MLP weights",
            {"hidden": params.hidden, "intermediate": params.intermediate},
        ),
        _tensor(
            prefill,
            "the prefill's MLP activations",
            {"prompt": loop.prompt, "intermediate": params.intermediate},
        ),
        _tensor(
            prefill,
            "the prefill's attention scores",
            {"heads": params.heads, "prompt": loop.prompt, "max_length": params.max_length},
        ),
    ]
