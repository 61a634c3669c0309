"""Materialize a case: the ONNX model variant for its layout and the input tensors.

Backends and the oracle both consume a ``Workload``; neither builds models or inputs itself.
A workload materialized for a number of runs also holds the input sequence: the schedule of its
runs (which graph, which inputs) and every run's inputs, so that eager, capture and the oracle
see the same sequence.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from runner.matrix import Case
from runner.schedule import BASE, PREFILL_DRAW, Feed, Variant, input_schedule
from runner.suite.spec import DecoderParams, EncoderParams, GenerationLoop, InputSpec, Layout
from runner.workload.decoder import build_decoder, cache_names, generate_reference
from runner.workload.encoder import build_encoder
from runner.workload.inputs import make_inputs, vary_given
from runner.workload.optest import case_inputs, expected_outputs, op_test_model
from runner.workload.variants import apply_layout


@dataclass(frozen=True)
class DeviceCache:
    """A decoder's KV caches as they live on the device between a generator's runs (genai's
    static cache). A graph's first run writes every input: its prefill's zeroed caches, or with
    ``prefill: cpu`` onnxruntime CPU's after its prefill. Every later run of the graph writes all
    but `inputs` and reads the caches its earlier runs left, which the backend carries (in
    place, swapped, or copied). The CPU's caches in those runs' inputs are for the oracle only."""

    inputs: tuple[str, ...]  # the past caches
    # A run of this variant first zeroes the caches' positions from this length on (a rewind,
    # which leaves them as onnxruntime CPU's loop has them)
    rewinds: Mapping[Variant, int] = field(default_factory=dict)
    prefill_shape: Mapping[str, int] = field(default_factory=dict)  # the dims of a prefill run


@dataclass(frozen=True)
class Workload:
    key: str  # content hash of model bytes, shape and inputs: the oracle's cache key
    model: bytes  # serialized ONNX; symbolic dims kept (backends pin them from `shape`)
    inputs: Mapping[str, np.ndarray]  # the case's own inputs: variant BASE
    output_names: tuple[str, ...]
    shape: Mapping[str, int]  # symbolic dim -> value (ort-web's freeDimensionOverrides)
    uniform_order: tuple[str, ...] = ()  # the layout's field order (wgpu uniform structs)
    preferred_layout: str | None = None  # the layout's EP option preferredLayout; None: default
    # The input sequence, when materialized for a number of runs: every run's (graph, inputs)
    # in order, and the inputs of each variant. Empty: every run takes `inputs` in graph 0.
    schedule: tuple[Feed, ...] = ()
    variants: Mapping[Variant, Mapping[str, np.ndarray]] = field(default_factory=dict)
    # Outputs a capture run writes in place into an input's buffer (output -> input): a
    # decoder's present KV caches into its past ones, one buffer each, as onnxruntime-genai
    # binds them (onnxruntime's WebGPU GroupQueryAttention refuses capture otherwise).
    in_place: Mapping[str, str] = field(default_factory=dict)
    # With `in_place`: each graph keeps a second buffer for every such input, and its runs trade
    # the two: a run's outputs go into the buffers its inputs do not use, which are the next
    # run's inputs (a decoder's swapped caches, onnxruntime-genai #2244).
    swapped: bool = False
    device_cache: DeviceCache | None = None  # a decoder's: what its runs carry on the device

    def feeds(self, runs: int) -> tuple[Feed, ...]:
        """What each run gets: the schedule, or else `runs` runs of `inputs`."""
        return self.schedule or (Feed(0, BASE),) * max(1, runs)

    def inputs_of(self, variant: Variant) -> Mapping[str, np.ndarray]:
        return self.variants.get(variant, self.inputs)

    @property
    def shared_shape(self) -> Mapping[str, int]:
        """The dims every run has alike, which a session serving them all may pin: a device
        prefill's prompt length leaves ``sequence_length`` out."""
        prefill = self.device_cache.prefill_shape if self.device_cache is not None else {}
        return {dim: v for dim, v in self.shape.items() if prefill.get(dim, v) == v}

    def shape_of(self, variant: Variant) -> Mapping[str, int]:
        """The dims pinned for `variant`'s run: a prefill's are the prompt's."""
        if variant[1] == PREFILL_DRAW and self.device_cache is not None:
            return self.device_cache.prefill_shape
        return self.shape

    def all_variants(self) -> dict[Variant, Mapping[str, np.ndarray]]:
        """Every variant the runs use, BASE first (what the oracle computes)."""
        return {BASE: self.inputs, **self.variants}

    def defined(self, variant: Variant, outputs: Mapping[str, np.ndarray]) -> dict:
        """`outputs` of a run of `variant` as far as the model defines them, the rest zeroed: a
        decoder's present KV caches hold the sequence's positions (its attention mask's ones),
        and GroupQueryAttention leaves every later position to whatever its buffer held
        (onnxruntime-web 1.29.0's C++ EP, eager: another kernel's leftovers; onnxruntime CPU:
        zeros). No step reads them, so no side is judged on them."""
        defined = dict(outputs)
        mask = self.inputs_of(variant).get("attention_mask")
        if self.device_cache is None or mask is None:
            return defined
        lengths = np.asarray(mask).reshape(len(mask), -1).sum(axis=1)
        for name in self.in_place.keys() & defined.keys():  # the present caches
            cache = np.array(defined[name])  # a copy: [batch, kv heads, positions, head]
            if cache.ndim == 4 and len(cache) == len(lengths):
                for row, length in enumerate(lengths):
                    cache[row, :, int(length) :] = 0
                defined[name] = cache
        return defined

    @property
    def model_digest(self) -> str:
        """sha256 of the model bytes: results record it, so that ``repro`` can tell whether
        the suite still builds the model a result ran."""
        return hashlib.sha256(self.model).hexdigest()


@dataclass(frozen=True)
class _Variant:
    """A built model variant, shared by every case of one model and layout. Never mutated."""

    model: onnx.ModelProto
    data: bytes
    digest: bytes  # sha256 of `data`


def materialize(
    case: Case, runs: int | None = None, schedule: tuple[Feed, ...] | None = None
) -> Workload:
    """The model variant for the case's layout and its inputs at the case's shape; with `runs`,
    the input sequence of that many rounds of its graphs too (``input_schedule``); with
    `schedule`, that sequence (a scenario's runs)."""
    spec = case.model
    if spec.op_test is not None:
        return _with_schedule(_op_test_workload(case), runs, case.graphs, _vary_op_test)
    if spec.loop is not None:  # the builtin decoder, or a file of its shape
        return _decoder_workload(case, runs)
    if spec.builtin is not None:
        if spec.builtin != "encoder":
            raise ValueError(f"model {spec.name!r}: unknown builtin {spec.builtin!r}")
        params = spec.encoder or EncoderParams()
        variant = _builtin_variant(params, case.layout)
        specs = {**_builtin_input_defaults(params), **spec.inputs}
        seed = params.seed
    elif spec.path is not None:
        variant, specs, seed = _file(case), spec.inputs, 0
    else:
        raise ValueError(f"model {spec.name!r} has neither a builtin nor a path")
    shape = case.shape.as_dict()
    workload = _of_variant(variant, case, make_inputs(variant.model, specs, shape, seed))
    return _with_schedule(
        workload,
        runs,
        case.graphs,
        lambda _, drawn: make_inputs(variant.model, specs, shape, seed, drawn),
        schedule,
    )


def _decoder_workload(case: Case, runs: int | None) -> Workload:
    """A generation loop, a run per step: the backend prefills the prompt (or onnxruntime CPU
    does, with ``prefill: cpu``) and onnxruntime CPU chooses every next token (greedy), so each
    backend is fed the same tokens; each decode step gets its token and static mask and reads
    the KV caches the device holds (``DeviceCache``), and the last step runs twice (two replays
    of one input, for the determinism check). With ``graphs: N``, N generators (prompts of their
    own), graph g's steps as its variants (g, step), interleaved step by step, their prefills
    first. `runs` only asks for the sequence: the loop sets it."""
    params, loop = case.model.decoder, case.model.loop
    variant = _decoder_variant(params, case.layout) if case.model.path is None else _file(case)
    loops = [_decode_steps(variant.data, params, loop, graph) for graph in range(case.graphs)]
    prefilled = loop.prefill == "device"
    rewinds = {}
    if loop.rewind is not None:  # decode step after+1 (draw `after`) follows the rewind
        length = loop.prompt + loop.rewind.after - loop.rewind.by
        rewinds = {(graph, loop.rewind.after): length for graph in range(case.graphs)}
    prefill_shape = _dims_given(variant.model, loops[0][0].inputs) if prefilled else {}
    workload = _of_variant(
        variant,
        case,
        dict(loops[0][1].inputs),
        in_place={past.replace("past_key_values", "present"): past for past in cache_names(params)},
        swapped=loop.caches == "swapped",
        device_cache=DeviceCache(
            tuple(cache_names(params)),
            rewinds,
            prefill_shape,
        ),
    )
    if runs is None:
        return workload
    steps = len(loops[0]) - 1
    draws = [*range(steps), steps - 1]
    schedule = tuple(Feed(graph, (graph, draw)) for draw in draws for graph in range(case.graphs))
    variants = {
        (graph, draw): dict(loops[graph][draw + 1].inputs)
        for graph in range(case.graphs)
        for draw in range(steps)
    }
    if prefilled:
        prefills = tuple(Feed(graph, (graph, PREFILL_DRAW)) for graph in range(case.graphs))
        schedule = prefills + schedule
        variants.update({feed.variant: dict(loops[feed.graph][0].inputs) for feed in prefills})
    del variants[BASE]
    return dataclasses.replace(workload, schedule=schedule, variants=variants)


def _dims_given(model: onnx.ModelProto, inputs: Mapping[str, np.ndarray]) -> dict[str, int]:
    """The values `inputs` give the symbolic dims of `model`'s inputs."""
    return {
        dim.dim_param: np.shape(inputs[tensor.name])[axis]
        for tensor in model.graph.input
        if tensor.name in inputs
        for axis, dim in enumerate(tensor.type.tensor_type.shape.dim)
        if dim.dim_param
    }


def _of_variant(
    variant: _Variant, case: Case, inputs: Mapping[str, np.ndarray], **fields
) -> Workload:
    """A built model variant with its base inputs, at the case's shape and layout."""
    shape = case.shape.as_dict()
    return Workload(
        key=workload_key(variant.digest, shape, inputs),
        model=variant.data,
        inputs=inputs,
        output_names=tuple(output.name for output in variant.model.graph.output),
        shape=shape,
        uniform_order=case.layout.order,
        preferred_layout=case.layout.preferred_layout,
        **fields,
    )


@functools.lru_cache(maxsize=8)
def _decoder_variant(params: DecoderParams, layout: Layout) -> _Variant:
    return _variant(apply_layout(build_decoder(params), layout))


@functools.lru_cache(maxsize=8)
def _decode_steps(model: bytes, params: DecoderParams, loop: GenerationLoop, graph: int) -> tuple:
    """onnxruntime CPU's generation for generator `graph`: the prefill, then each decode step
    (``DecodeStep``). Generator 0's prompt is the loop's tokens or drawn from the seed, another's
    drawn from (seed, graph)."""
    if graph == 0 and loop.tokens is not None:
        prompt = list(loop.tokens)
    else:
        rng = np.random.default_rng(params.seed if graph == 0 else (params.seed, graph))
        prompt = rng.integers(0, params.vocab, loop.prompt).tolist()
    return generate_reference(model, params, prompt, loop.steps, loop.rewind)


def _file(case: Case) -> _Variant:
    """The case's model file, for its layout."""
    path = Path(case.model.path)
    if not path.is_file():
        raise ValueError(f"model {case.model.name!r}: no model file at {path}")
    stat = path.stat()
    return _path_variant(path, stat.st_mtime_ns, stat.st_size, case.layout)


def _with_schedule(workload: Workload, runs, graphs: int, vary, schedule=None) -> Workload:
    """`workload` with the input sequence of `runs` rounds, or `schedule` (none when both are
    None); ``vary(workload, variant)`` makes one variant's inputs. The key stays the base inputs'
    (the oracle keys each variant apart: ``variant_key``)."""
    if runs is None and schedule is None:
        return workload
    schedule = schedule or input_schedule(runs, graphs)
    variants = {
        feed.variant: vary(workload, feed.variant) for feed in schedule if feed.variant != BASE
    }
    return dataclasses.replace(workload, schedule=schedule, variants=variants)


def variant_key(workload: Workload, variant: Variant) -> str:
    """The content hash of the workload run on `variant`'s inputs: the base's is its key."""
    if variant == BASE:
        return workload.key
    digest = hashlib.sha256(workload.key.encode())
    digest.update(repr(variant).encode())
    digest.update(workload_key(b"", {}, workload.inputs_of(variant)).encode())
    return digest.hexdigest()


def _vary_op_test(workload: Workload, variant: Variant) -> dict[str, np.ndarray]:
    return {name: vary_given(name, array, variant) for name, array in workload.inputs.items()}


def _op_test_workload(case: Case) -> Workload:
    """An op-test case's one-node model and the file's inputs; refuses a case that ORT-web's
    runner would refuse too."""
    op_case = case.model.op_test
    if op_case.invalid:
        raise ValueError(op_case.invalid)
    model = op_test_model(op_case.test)
    inputs = case_inputs(op_case)
    shape = case.shape.as_dict()
    return Workload(
        key=workload_key(hashlib.sha256(model).digest(), shape, inputs),
        model=model,
        inputs=inputs,
        output_names=tuple(expected_outputs(op_case)),
        shape=shape,
        uniform_order=case.layout.order,
        preferred_layout=case.layout.preferred_layout,
    )


def _builtin_input_defaults(params: EncoderParams) -> dict[str, InputSpec]:
    """Meaningful inputs for the exported encoder: valid token ids, nothing masked."""
    if params.style != "exported":
        return {}
    return {"input_ids": InputSpec(low=0, high=params.vocab), "attention_mask": InputSpec(fill=1)}


@functools.lru_cache(maxsize=32)
def _builtin_variant(params: EncoderParams, layout: Layout) -> _Variant:
    """The builder realizes the layout's values itself; ``apply_layout`` only orders."""
    model = build_encoder(params, layout.values_dict())
    return _variant(apply_layout(model, dataclasses.replace(layout, values=())))


@functools.lru_cache(maxsize=8)
def _path_variant(path: Path, mtime_ns: int, size: int, layout: Layout) -> _Variant:
    """Keyed on the file's mtime and size too, so an edited model file is rebuilt."""
    return _variant(apply_layout(onnx.load(str(path)), layout))


def _variant(model: onnx.ModelProto) -> _Variant:
    data = model.SerializeToString()
    return _Variant(model, data, hashlib.sha256(data).digest())


def workload_key(
    model_digest: bytes, shape: Mapping[str, int], inputs: Mapping[str, np.ndarray]
) -> str:
    digest = hashlib.sha256(model_digest)
    digest.update(repr(sorted(shape.items())).encode())
    for name in sorted(inputs):
        array = np.asarray(inputs[name])  # not ascontiguousarray: it makes a 0-d array 1-d
        digest.update(f"{name}:{array.dtype.str}:{array.shape}".encode())
        digest.update(array.tobytes())  # row-major whatever the layout
    return digest.hexdigest()
