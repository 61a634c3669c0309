"""What a suite declares, as frozen values; built by ``runner.suite.builder``.

These are descriptions only: nothing here builds a model or touches a device.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from runner.cause import Cause
from runner.errors import Problem
from runner.measure import Tolerance
from runner.packages import PackageFile


@dataclass(frozen=True)
class BackendTarget:
    """One column of the matrix: a backend, and which of its versions, builds or adapters.

    A suite names versions (``1.24.3``, ``dev``); which exact version that is may take a
    registry to say, so loading a suite leaves ``version`` None where files alone cannot tell,
    and ``runner.backends.resolve_targets`` fills it in for the cases about to run or be listed.
    """

    name: str  # a registered backend (runner.backends.REGISTRY)
    bundle: str | None = None  # the build, for backends that have several (ort-web's bundles)
    adapter: str | None = None  # wgpu: adapter name or backend type to prefer
    version: str | None = None  # the exact version it runs; None: not resolved (or no versions)
    label: str | None = None  # how ids name the version, when the run has several
    # The version as the suite or --NAME-version spells it (``local`` for a build folder);
    # None: the backend's default version.
    declared: str | None = None
    # Where that spelling is, for messages about it (a suite's line; None: the command line).
    source: Problem | None = field(default=None, compare=False)

    @property
    def id(self) -> str:
        """``name[@label][:build]``, e.g. ``ort-web@1.29.0:webgpu``."""
        name = f"{self.name}@{self.label}" if self.label else self.name
        return f"{name}:{self.bundle}" if self.bundle else name

    def entry(self) -> str | dict[str, Any]:
        """The target as a suite's ``backends:`` entry names it (a finding's suite file)."""
        entry: dict[str, Any] = {"name": self.name}
        if self.version:
            entry["version"] = self.version
        if self.bundle:
            entry["bundle"] = self.bundle
        if self.adapter:
            entry["adapter"] = self.adapter
        return entry if len(entry) > 1 else self.name

    @property
    def build_id(self) -> str:
        """``name[:build]`` whatever the version: what ``backend=`` filters and rules match,
        so that a rule for ``ort-web:jsep`` holds on every version (``version=`` tells them
        apart)."""
        return f"{self.name}:{self.bundle}" if self.bundle else self.name


class TargetProblem(ValueError):
    """Values of a suite's ``backends:`` entry that name nothing: (where, message, expected)
    each, `where` the value's path in the entry (``("version", 1)``) for FILE:LINE:COL."""

    def __init__(self, problems: list[tuple[tuple, str, str]]):
        super().__init__(
            "; ".join(f"{message}; expected {expected}" for _, message, expected in problems)
        )
        self.problems = problems


class TargetParser(Protocol):
    """What the loader is handed per backend name to parse a ``backends:`` entry with (a
    ``runner.backends.base.BackendDescriptor``), so that loading a suite needs no backend."""

    def targets(self, entry: Mapping[str, Any], base: Path) -> tuple[BackendTarget, ...]:
        """The targets the entry expands into, from files alone; raises TargetProblem."""


def label_versions(targets: Iterable[BackendTarget]) -> dict[BackendTarget, BackendTarget]:
    """Each target as ids show it: one target per backend, build, adapter and version (two
    spellings of one exact version, ``pinned`` and the default, are one column and one page),
    named by version only where its backend runs more than one version among `targets`, by
    the first spelling a suite or option gave that version (``pinned``, ``dev``), else the
    exact version. Unresolved targets are told apart by their spelling."""
    targets = list(dict.fromkeys(targets))

    def key(target: BackendTarget) -> tuple:
        version = target.version or target.declared
        return target.name, target.bundle, target.adapter, version

    declared: dict[tuple, str | None] = {}  # (backend, version) -> its first spelling
    for target in targets:
        name, _, _, version = key(target)
        if declared.get((name, version)) is None:
            declared[(name, version)] = target.declared
    versions: dict[str, set] = {}
    for name, version in declared:
        versions.setdefault(name, set()).add(version)
    canonical: dict[tuple, BackendTarget] = {}
    labelled = {}
    for target in targets:
        name, _, _, version = key(target)
        spelling = declared[(name, version)]
        label = spelling or version if len(versions[name]) > 1 else None
        labelled[target] = canonical.setdefault(
            key(target), dataclasses.replace(target, label=label, declared=spelling)
        )
    return labelled


# ORT-web's own WebGPU op-test thresholds (js/web/test/test-runner.ts): an element passes if
# within `abs`, or if actual/expected is within 1 + `rel`.


@dataclass(frozen=True)
class InputSpec:
    """How to make one model input. Unset fields come from the model (dtype) or defaults."""

    dtype: str | None = None
    low: float | None = None  # `range: [low, high)`; integers draw from [low, high)
    high: float | None = None
    fill: float | None = None  # constant value, e.g. attention_mask = 1
    seed: int | None = None
    npy: Path | None = None  # absolute, resolved against the suite file


@dataclass(frozen=True)
class EncoderParams:
    """Parameters of the builtin encoder (``builtin: encoder``)."""

    style: str = "compact"  # compact: LayerNormalization, Gelu; exported: what torch.onnx writes
    layers: int = 2
    hidden: int = 32
    heads: int = 4
    ffn: int = 64
    eps: float = 1e-5
    activation: str = "gelu"  # gelu | gelu-tanh | relu (exported style always uses Erf GELU)
    dtype: str = "float32"  # float32 | float16: every float tensor of the compact style
    seed: int = 0
    vocab: int = 100  # exported style: token ids are in [0, vocab)
    max_positions: int = 512  # exported style: rows of the position-embedding table


@dataclass(frozen=True)
class DecoderParams:
    """Parameters of the builtin decoder (``builtin: decoder``, ``runner.workload.decoder``)."""

    layers: int = 2
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 128
    vocab: int = 96
    max_length: int = 32
    seed: int = 0
    quantized: bool = False
    block_size: int = 32  # MatMulNBits block size
    accuracy_level: int = 4  # MatMulNBits accuracy_level (the builder's default for cpu, webgpu)
    static_mask: bool = False  # the builder's enable_webgpu_graph mask subgraph
    cache_dtype: str = "float32"  # the KV caches' numpy type (a decoder file's may be float16)
    dtype: str = "float32"  # the builtin's every float tensor: float32 | float16

    def __post_init__(self) -> None:
        if min(self.layers, self.hidden, self.heads, self.kv_heads, self.vocab) < 1:
            raise ValueError(f"decoder sizes must be positive: {self}")
        if self.hidden % self.heads:
            raise ValueError(f"heads={self.heads} does not divide hidden={self.hidden}")
        if self.heads % self.kv_heads:
            raise ValueError(f"kv_heads={self.kv_heads} does not divide heads={self.heads}")
        if self.head_size % 16:
            raise ValueError(
                f"head_size={self.head_size} (hidden/heads): GroupQueryAttention with rotary "
                "embedding needs a multiple of 16"
            )
        if self.max_length < 2:
            raise ValueError(f"max_length={self.max_length}: a prefill and a step need 2")
        if self.block_size < 16 or self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size={self.block_size}: a power of 2, at least 16")
        if self.accuracy_level not in range(5):
            raise ValueError(f"accuracy_level={self.accuracy_level}: expected 0 to 4")
        if self.dtype not in ("float32", "float16"):
            raise ValueError(f"dtype={self.dtype!r}: expected float32 or float16")

    @property
    def head_size(self) -> int:
        return self.hidden // self.heads


# How a decoder's capture binds its present KV caches (``generate: {caches: ...}``).
CACHE_BINDINGS = ("shared", "swapped")
# Where a decoder's prompt is prefilled (``generate: {prefill: ...}``).
PREFILLS = ("device", "cpu")


@dataclass(frozen=True)
class Rewind:
    """``generate: {rewind: {after, by}}``: after decode step ``after`` the sequence length goes
    back ``by`` positions (onnxruntime-genai's ``rewind_to``) and the loop continues from there."""

    after: int
    by: int


@dataclass(frozen=True)
class GenerationLoop:
    """A decoder's generation loop (``generate:``): a prefill of ``prompt`` tokens, then
    ``steps`` greedy decode steps, each a run of the case. ``caches``: ``shared`` binds each
    present cache in its past cache's buffer (genai's static cache); ``swapped`` into a second
    buffer set, which is the next step's past (the sets trade places every step). ``prefill``:
    ``device`` runs the prompt on the backend, uncaptured, before the decode steps (genai's
    ``gpu_graph_id -1`` run); ``cpu`` leaves it to onnxruntime CPU, whose caches the first decode
    step is fed. ``tokens``: the prompt's token ids as the model's own tokenizer wrote them (a
    real model's real prompt); None draws ``prompt`` ids from the decoder's seed."""

    prompt: int = 4
    steps: int = 4
    rewind: Rewind | None = None
    caches: str = "shared"
    prefill: str = "device"
    tokens: tuple[int, ...] | None = None

    @property
    def positions(self) -> int:
        """The longest the sequence gets: what the caches must hold."""
        if self.rewind is None:
            return self.prompt + self.steps
        return self.prompt + max(self.rewind.after, self.steps - self.rewind.by)


def shape_label(dims: Mapping[str, int]) -> str:
    """A shape as case ids write it (``batch=1,sequence=16``)."""
    return ",".join(f"{k}={v}" for k, v in dims.items()) or "static"


@dataclass(frozen=True)
class Shape:
    """Values for a model's symbolic dims; one static case each."""

    dims: tuple[tuple[str, int], ...]

    @property
    def label(self) -> str:
        return shape_label(dict(self.dims))

    def as_dict(self) -> dict[str, int]:
        return dict(self.dims)


# The one shape of a model without symbolic dims (case ids leave it out).
STATIC_SHAPE = Shape(())


@dataclass(frozen=True)
class OpTensor:
    """A tensor of an ORT-web op-test file: `type` as ORT-web spells it (float32, int64...)."""

    type: str
    dims: tuple[int, ...]
    data: tuple[Any, ...]  # flat, row-major


@dataclass(frozen=True)
class OpAttribute:
    name: str
    type: str  # int | float | string | ints | floats | strings
    value: Any  # a number or string; a tuple of them for the list types


@dataclass(frozen=True)
class OpTest:
    """One test of an ORT-web op-test file: what its one-node model is made of.

    Inputs and outputs are named ``input_<i>`` / ``output_<i>`` as ORT-web names them.
    """

    file: Path
    name: str  # unique within the file (a repeated name gets " #2", ...)
    operator: str
    domain: str
    opset: int
    attributes: tuple[OpAttribute, ...]
    input_types: tuple[str | None, ...]  # None: an omitted optional input (`data: null`)
    output_types: tuple[str, ...]
    # Per input, its declared dims (ints, or names of symbolic dims), or None for no shape.
    input_shapes: tuple[tuple[int | str, ...] | None, ...]
    platform_condition: str | None = None  # a regex the platform description must match


@dataclass(frozen=True)
class OpTestCase:
    """One case of an op test: a static-shape case of the test's model."""

    test: OpTest
    name: str  # unique within the test
    inputs: tuple[OpTensor | None, ...]  # None where the test omits the input
    outputs: tuple[OpTensor | None, ...]  # None where the case does not check the output
    # Why ORT-web's own runner would refuse this case (its test's cases disagree on input
    # count, a tensor's data does not fill its dims...): the case fails as `error` with it.
    invalid: str | None = None


# How a capture case hands its inputs and outputs to the backend, run after run.
INPUT_BUFFER_MODES = ("rewrite", "fresh")
OUTPUT_BUFFER_MODES = ("none", "rewrite", "fresh")


@dataclass(frozen=True)
class BufferModes:
    """A suite's ``buffers:``: ``rewrite`` keeps one GPU buffer per input (per output) and writes
    each run's data into it, as the #29594 reporter does; ``fresh`` hands a new GPU buffer to
    every run; outputs ``none`` let the backend allocate them (no pre-allocated outputs).
    ``allocator`` says who makes those buffers on ort-web: the page (``GPUDevice.createBuffer``,
    as applications do) or onnxruntime-web itself (outputs of a session of the page's, kept),
    which the C++ builds' replays of pre-allocated outputs need
    (suites/bugs/ort-prealloc-handle.yaml), but where a capture session keeps its first run's
    buffers bound for good (suites/bugs/ort-graph-ids.yaml)."""

    inputs: str = "rewrite"
    outputs: str = "none"
    allocator: str = "page"

    @property
    def label(self) -> str:
        """As ``--filter buffers=...`` matches it: ``<inputs>/<outputs>``."""
        return f"{self.inputs}/{self.outputs}"


@dataclass(frozen=True)
class ModelSpec:
    name: str
    builtin: str | None = None  # "encoder" or "decoder"
    encoder: EncoderParams | None = None
    decoder: DecoderParams | None = None
    loop: GenerationLoop | None = None  # a decoder's (``generate:``)
    path: Path | None = None  # absolute, resolved against the suite file
    package: PackageFile | None = None  # `package:` (then `path` is where the cache holds it)
    inputs: Mapping[str, InputSpec] = field(default_factory=dict)
    shapes: tuple[Shape, ...] = ()  # empty: the suite's shapes
    op_test: OpTestCase | None = None  # a case of an ORT-web op-test file (`ort_op_tests:`)
    line: int | None = None  # where the model's entry starts in its suite file (JUnit `line`)
    buffers: Mapping[str, str] = field(default_factory=dict)  # the keys it sets over the suite's
    graphs: int = 1  # captured graphs per session (`graphs:`), told apart by gpu_graph_id


@dataclass(frozen=True)
class Layout:
    """A uniform-field order and/or changed constants (see ``runner.uniforms``), and/or the
    data layout its sessions ask the EP for."""

    label: str
    order: tuple[str, ...] = ()
    values: tuple[tuple[str, float], ...] = ()
    # the EP option ``preferredLayout`` ("NCHW" or "NHWC") of its sessions; None: the build's
    preferred_layout: str | None = None

    def values_dict(self) -> dict[str, float]:
        return dict(self.values)


DEFAULT_LAYOUT = Layout(label="default")


@dataclass(frozen=True)
class Expectation:
    """What a case is expected to produce; ``expect`` is {"pass"} or the bug's verdicts."""

    expect: frozenset[str] = frozenset({"pass"})
    bug: str | None = None
    reason: str | None = None
    cause: Cause | None = None  # the root cause a failure must have (``runner.cause``)


# `match:` keys that name a backend and build (or a case on one), and a version: a rule that
# names neither was written for the targets its suite (or scenario) declares, and holds there
# alone; a key it names widens it to whatever that key selects.
BUILD_KEYS = frozenset({"id", "backend", "bundle"})
VERSION_KEYS = frozenset({"version"})
# The fields a scenario has for `match:` (a rule naming `scenario` is a scenario's rule).
SCENARIO_FIELDS = frozenset({"id", "suite", "scenario", "model", "backend", "bundle", "version"})


def same_version(home: BackendTarget, target: BackendTarget) -> bool:
    """Whether `target` runs the version `home` names: any, where `home` names none (a suite's
    own targets, on whichever version the versions axis runs them); the exact version when
    both know it; else the spelling (a version only a registry knows, such as ``1.24.3`` or
    ``dev``, is left unresolved at load)."""
    if home.version is None and home.declared is None:
        return True
    if home.version is not None and target.version is not None:
        return home.version == target.version
    return home.declared in (target.declared, target.version)


def written_for(target: BackendTarget, keys: Iterable[str], home: Iterable[BackendTarget]) -> bool:
    """Whether an expectation whose `match:` names `keys` holds on `target`: the one rule of
    cases, scenarios and decoder loops. It holds on the backend, build, adapter and version of
    a `home` target (what its suite or scenario was written for: ``Suite.home``,
    ``Scenario.backends``), except where it names them itself: naming a build (``backend``,
    ``bundle``, ``id``) it holds on that build at a home version of its backend (any version
    when the suite declares no such backend); naming a ``version``, on that version."""
    keys = set(keys)
    names_build, names_version = bool(BUILD_KEYS & keys), bool(VERSION_KEYS & keys)
    same = [
        h
        for h in home
        if h.name == target.name
        and (names_build or (h.bundle, h.adapter) == (target.bundle, target.adapter))
    ]
    if not same:
        return names_build
    return names_version or any(same_version(h, target) for h in same)


@dataclass(frozen=True)
class CaseRule:
    """A suite's ``cases:`` entry: an expectation (and tolerance) for the cells it matches, or,
    when its match names ``scenario``, for the scenarios it matches."""

    match: Mapping[str, Any]  # `id` glob and/or field values, as in --filter
    expectation: Expectation
    tolerance: Tolerance | None = None
    inject: frozenset[str] = frozenset()  # faults for the matched cases (canaries)
    buffers: Mapping[str, str] = field(default_factory=dict)  # the keys it sets, e.g. inputs
    graphs: int | None = None

    @property
    def for_scenarios(self) -> bool:
        """Whether the rule is a scenario's (its match names ``scenario``) rather than a case's."""
        return "scenario" in self.match

    def selects(self, fields: Mapping[str, str]) -> bool:
        """Whether every key of the match globs the field of that name."""
        return all(fnmatch.fnmatchcase(fields.get(k, ""), str(v)) for k, v in self.match.items())


def holding_rules(
    rules: Iterable[CaseRule],
    fields: Mapping[str, str],
    target: BackendTarget,
    home: Iterable[BackendTarget],
) -> list[CaseRule]:
    """The rules that hold on a case or a scenario (`fields`) on `target`, in order, the last
    winning: those whose match selects it, on a target they were written for (``written_for``).
    Cases and scenarios both take their expectations here, so that ``--backend`` moves neither
    an expectation to a target it was not written for."""
    home = tuple(home)
    return [r for r in rules if r.selects(fields) and written_for(target, r.match, home)]


@dataclass(frozen=True)
class Suite:
    name: str
    path: Path
    models: tuple[ModelSpec, ...]
    shapes: tuple[Shape, ...]
    layouts: tuple[Layout, ...]
    backends: tuple[BackendTarget, ...]
    capture: tuple[str, ...] = ("eager", "capture")  # modes, in MODES order
    tolerance: Tolerance = Tolerance()
    cases: tuple[CaseRule, ...] = ()
    include: tuple[Mapping[str, Any], ...] = ()
    exclude: tuple[Mapping[str, Any], ...] = ()
    tags: frozenset[str] = frozenset()
    description: str = ""
    buffers: BufferModes = BufferModes()
    # What its `cases:` rules and scenarios were written for (``written_for``): the backends
    # and builds it declares, on any version (the versions axis, bisect and repro ask its own
    # question of another version); once `--backend` moved it, the targets it declared, on
    # their versions (then moved by --NAME-version with its targets).
    home: tuple[BackendTarget, ...] = ()
    # Versions it names that loading could not check (only a registry knows them), where
    # each is spelt: `validate` says so.
    unchecked: tuple[Problem, ...] = ()
    # `scenarios:`, runner.suite.scenarios.Scenario values (built from this module's)
    scenarios: tuple[Any, ...] = ()

    def base_cells(self) -> list[tuple[ModelSpec, Shape, Layout, BackendTarget, str]]:
        """Every combination of the dimensions, less those an `exclude` entry matches."""
        cells = []
        for model in self.models:
            for shape in model.shapes or self.shapes:
                for backend in self.backends:
                    for layout in self.layouts:
                        for mode in self.capture:
                            cell = (model, shape, layout, backend, mode)
                            values = cell_values(*cell) if self.exclude else {}
                            if not any(entry_matches(e, values) for e in self.exclude):
                                cells.append(cell)
        return cells

    timeout_s: float = 120.0  # per case; `--timeout` overrides


# The modes a case runs in, in the order a cell runs them: `dynamic` (eager with no dims
# pinned), `eager` (static shapes), `capture` (static shapes, recorded once and replayed).
MODES = ("dynamic", "eager", "capture")


def mode_name(capture: bool, dynamic: bool = False) -> str:
    return "capture" if capture else "dynamic" if dynamic else "eager"


# The matrix dimensions `include` / `exclude` entries name.
DIMENSIONS = ("model", "shape", "layout", "backend", "capture")


def cell_values(model, shape, layout, backend, mode: str) -> dict[str, Any]:
    return {
        "model": model.name,
        "shape": shape.as_dict(),
        "layout": layout.label,
        "backend": backend.id,
        "capture": mode,
    }


def entry_matches(entry: Mapping[str, Any], values: Mapping[str, Any]) -> bool:
    """GitHub-Actions matching: every key the entry names equals the combination's value.

    A ``shape`` entry matches on the dims it names; ``backend: ort-web`` matches every version
    and bundle, ``backend: ort-web@1.24.3`` every bundle of that version.
    """
    for key, want in entry.items():
        if key not in DIMENSIONS:
            continue
        have = values[key]
        if key == "shape":
            if any(have.get(k) != v for k, v in dict(want).items()):
                return False
        elif key == "backend":
            # `ort-web` names every version and build, `ort-web:jsep` every version's jsep,
            # `ort-web@1.24.3` every build of that version
            have_name, _, have_build = str(have).partition(":")
            want_name, _, want_build = str(want).partition(":")
            if "@" not in want_name:
                have_name = have_name.partition("@")[0]
            if have_name != want_name or want_build and have_build != want_build:
                return False
        elif str(have) != str(want):
            return False
    return True
