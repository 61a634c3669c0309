"""What explore draws from: models from a source (``ModelSource``), on the one backend target
the selection names.

A source hands explore ``ExploredModel``s through a Hypothesis strategy: each the model's
declaration, the suite it runs in (tolerance, layouts, timeout), the shape, its `models:` entry
as a finding's suite file writes it and its digest, which findings and the example database are
keyed on. ``SuiteModels`` is the suites' own models, over which explore draws scenarios;
``GeneratedModels`` draws models itself (``runner.explore.generated``), each judged as a suite's
cases are.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import yaml
from hypothesis import strategies as st

from runner.backends import REGISTRY, resolve_targets
from runner.errors import InvalidInput
from runner.explore.generated import (
    DTYPES,
    OPSET,
    OPSETS,
    GeneratedModel,
    generated_models,
    write_suite,
)
from runner.explore.vocabulary import LEAVABLE, MAX_NODES, OPS, SIZES, WHOLE_DRAW, Narrowing
from runner.files import cache_root
from runner.selection import Selection, load, named_targets
from runner.suite import load_suite
from runner.suite.spec import STATIC_SHAPE, BackendTarget, ModelSpec, Shape, Suite

FILTER_KEYS = ("model", "suite")


@dataclass(frozen=True)
class ExploredModel:
    """A model explore draws examples over (scenarios, or its own cases), at one shape."""

    suite: Suite  # what it runs in: its tolerance, layouts and timeout
    model: ModelSpec
    shape: Shape
    # Its `models:` entry as a finding's suite writes it, a model file's `path` absolute
    entry: Mapping[str, Any]
    digest: str  # what tells it from other models: the entry, the file's content and the shape
    generated: GeneratedModel | None = None  # a drawn model: its ops, layouts and tolerance


# What explore's lines count, by what a source's examples are: (examples, their parts)
COUNTED = {"scenarios": ("scenarios", "steps"), "cases": ("models", "cases")}


class ModelSource(Protocol):
    """Where explore's models come from."""

    # What an example is: "scenarios" (sessions over one model, ``runner.explore.machine``) or
    # "cases" (the model's case matrix: its layouts, eager and capture)
    draws: str

    @property
    def firsts(self) -> tuple[str, ...]:
        """The ops explore hands `strategy` in turn, a pass each, for its models to start with
        (none: its models are not drawn op by op)."""

    def strategy(self, first: str | None = None) -> st.SearchStrategy[ExploredModel]:
        """The models an example draws from, simplest first; those starting with the op
        `first` (one of ``firsts``) where one is given."""

    def key(self) -> str:
        """What tells this source's examples from another's (the example database's key)."""


def suite_model(suite: Suite, model: ModelSpec, shape: Shape) -> ExploredModel:
    """`model` of `suite` at `shape`, its entry read from the suite's file."""
    entry = dict(yaml.safe_load(suite.path.read_text())["models"][model.name])
    content = dict(entry)
    if "path" in entry:
        file = (suite.path.parent / entry["path"]).resolve()
        entry["path"] = str(file)
        content["path"] = hashlib.sha256(file.read_bytes()).hexdigest()
    text = json.dumps([content, shape.as_dict()], sort_keys=True, default=str)
    return ExploredModel(suite, model, shape, entry, hashlib.sha256(text.encode()).hexdigest())


@dataclass(frozen=True)
class SuiteModels:
    """The suites' encoders and model files, each at the shape its scenarios default to;
    explore draws scenarios over them (no decoder loop and no op test)."""

    models: tuple[ExploredModel, ...]
    draws = "scenarios"
    firsts = ()

    @classmethod
    def of(cls, suites: tuple[Suite, ...], filters: tuple[str, ...] = ()) -> SuiteModels:
        """Those of `suites` that `filters` (``model=`` or ``suite=`` globs) keep;
        InvalidInput when none is left."""
        models = tuple(
            suite_model(suite, model, (model.shapes or suite.shapes or (STATIC_SHAPE,))[0])
            for suite in suites
            for model in suite.models
            if model.op_test is None and model.decoder is None and _wanted(suite, model, filters)
        )
        if not models:
            raise InvalidInput(
                "no model to explore: the suites have no encoder or model file"
                + (f" matching {', '.join(filters)}" if filters else "")
                + " (explore draws no decoder loop and no op test)"
            )
        return cls(models)

    def strategy(self, first: str | None = None) -> st.SearchStrategy[ExploredModel]:
        return st.sampled_from(self.models)

    def key(self) -> str:
        return repr(sorted(m.digest for m in self.models))


def _wanted(suite: Suite, model: ModelSpec, filters: tuple[str, ...]) -> bool:
    fields = {"model": model.name, "suite": suite.name}
    return all(
        fnmatch.fnmatchcase(fields[key], glob)
        for key, _, glob in (f.partition("=") for f in filters)
    )


@dataclass(frozen=True)
class GeneratedModels:
    """Models drawn from an op vocabulary, each written as a suite of its own into `folder`
    and judged as its cases are (eager, capture, its layouts back to back)."""

    vocabulary: tuple[str, ...]
    target: BackendTarget
    folder: Path  # where drawn models and their suites are written while explore runs
    dtypes: tuple[str, ...] = ("float32",)  # of DTYPES, the float types drawn
    opsets: tuple[int, ...] = (OPSET,)  # of OPSETS, the opsets drawn models import
    preferred_layouts: bool = False  # the target's sessions take preferredLayout: drawn too
    narrowing: Narrowing = WHOLE_DRAW  # what the user left out (--sizes, --max-ops, --without)
    draws = "cases"

    @property
    def firsts(self) -> tuple[str, ...]:
        return self.vocabulary

    def strategy(self, first: str | None = None) -> st.SearchStrategy[ExploredModel]:
        drawn = generated_models(
            self.vocabulary,
            self.dtypes,
            self.opsets,
            self.preferred_layouts,
            first,
            self.narrowing,
        )
        return drawn.map(self.explored)

    def key(self) -> str:
        # the second data layout and a narrowing only where drawn: the rest keep their key
        layouts = ("preferred layouts",) if self.preferred_layouts else ()
        narrowed = (self.narrowing,) if self.narrowing != WHOLE_DRAW else ()
        return repr(("generated", self.vocabulary, self.dtypes, self.opsets, *layouts, *narrowed))

    def explored(self, generated: GeneratedModel) -> ExploredModel:
        """`generated` written as a suite of its own into the folder, loaded on the target."""
        written = write_suite(generated, self.folder, self.target.entry())
        suite = replace(load_suite(written.path, REGISTRY), backends=(self.target,))
        model = suite.models[0]
        entry = {"path": str(self.folder / f"{written.model_name}.onnx")}
        return ExploredModel(suite, model, STATIC_SHAPE, entry, generated.digest, generated)


def vocabulary(ops: tuple[str, ...], lacking: Mapping[str, str]) -> tuple[str, ...]:
    """The ops to draw: `ops` (all of ``OPS`` when empty) but those the target lacks;
    InvalidInput for an unknown op or an empty vocabulary."""
    unknown = sorted(set(ops) - OPS.keys())
    if unknown:
        raise InvalidInput(
            f"--ops {', '.join(unknown)}: no such op to draw; expected some of {', '.join(OPS)}"
        )
    wanted = tuple(op for op in OPS if op in (ops or OPS) and op not in lacking)
    if not wanted:
        lacks = "; ".join(f"{op}: {why}" for op, why in sorted(lacking.items()) if op in ops)
        raise InvalidInput(
            f"--ops {', '.join(ops)}: nothing left to draw, the target lacks them ({lacks}); "
            f"expected an op of {', '.join(op for op in OPS if op not in lacking)}"
        )
    return wanted


def float_types(dtypes: tuple[str, ...], lacking: Mapping[str, str]) -> tuple[str, ...]:
    """The float types to draw: `dtypes` (all of ``DTYPES`` when empty) but those the target
    lacks; InvalidInput for an unknown one or none left."""
    unknown = sorted(set(dtypes) - DTYPES.keys())
    if unknown:
        raise InvalidInput(
            f"--dtypes {', '.join(unknown)}: no such float type to draw; expected some of "
            f"{', '.join(DTYPES)}"
        )
    wanted = tuple(d for d in DTYPES if d in (dtypes or DTYPES) and d not in lacking)
    if not wanted:
        raise InvalidInput(
            f"--dtypes {', '.join(dtypes)}: the target lacks it ({lacking[dtypes[0]]}); "
            f"expected one of {', '.join(d for d in DTYPES if d not in lacking)}"
        )
    return wanted


def model_opsets(opsets: tuple[str, ...]) -> tuple[int, ...]:
    """The opsets drawn models import: `opsets` (all of ``OPSETS`` when empty), in the order
    ``OPSETS`` has them; InvalidInput for one it does not draw."""
    unknown = sorted(set(opsets) - {str(o) for o in OPSETS})
    if unknown:
        raise InvalidInput(
            f"--opsets {', '.join(unknown)}: no such opset to draw; expected some of "
            f"{', '.join(map(str, OPSETS))}"
        )
    return tuple(o for o in OPSETS if str(o) in (opsets or map(str, OPSETS)))


def narrowing(sizes: tuple[str, ...], max_ops: int | None, without: tuple[str, ...]) -> Narrowing:
    """The draw narrowed to `sizes` (of ``SIZES``; all when empty), at most `max_ops` ops a
    model (``MAX_NODES`` when None) and `without` what of ``LEAVABLE`` it names; InvalidInput
    for anything else."""
    unknown = sorted(set(sizes) - SIZES.keys())
    if unknown:
        raise InvalidInput(
            f"--sizes {', '.join(unknown)}: no such size range; expected some of {', '.join(SIZES)}"
        )
    if max_ops is not None and not 1 <= max_ops <= MAX_NODES:
        raise InvalidInput(f"--max-ops {max_ops}: expected a number of ops from 1 to {MAX_NODES}")
    unknown = sorted(set(without) - set(LEAVABLE))
    if unknown:
        raise InvalidInput(
            f"--without {', '.join(unknown)}: nothing such to leave out; expected some of "
            f"{', '.join(LEAVABLE)}"
        )
    return Narrowing(
        tuple(size for size in SIZES if size in (sizes or SIZES)),
        MAX_NODES if max_ops is None else max_ops,
        tuple(what for what in LEAVABLE if what in without),
    )


@dataclass(frozen=True)
class Space:
    """Where models come from, the target and the scenario steps its backend runs."""

    source: ModelSource
    target: BackendTarget
    actions: tuple[str, ...]

    @property
    def counted(self) -> tuple[str, str]:
        """What its examples are and what their parts are, as explore counts them."""
        return COUNTED[self.source.draws]


def explore_space(
    selection: Selection,
    inject: frozenset[str],
    models: str = "suites",
    ops: tuple[str, ...] = (),
    dtypes: tuple[str, ...] = (),
    opsets: tuple[str, ...] = (),
    narrowed: tuple[tuple[str, ...], int | None, tuple[str, ...]] = ((), None, ()),
) -> Space:
    """The selection's one backend target, resolved, and where models come from: the
    selection's encoders and model files (`models` "suites", ``SuiteModels``) or models drawn
    from `ops` in `dtypes` at `opsets`, `narrowed` to sizes, a number of ops and without what
    it names (``narrowing``) ("generated", ``GeneratedModels``); InvalidInput for anything
    else."""
    for pattern in selection.filters:
        key, sep, _ = pattern.partition("=")
        if not sep or key not in FILTER_KEYS:
            raise InvalidInput(
                f"--filter {pattern!r}: explore filters models; expected model=GLOB or suite=GLOB"
            )
    if models not in ("suites", "generated"):
        raise InvalidInput(f"--models {models}: expected suites or generated")
    suites = load(selection) if selection.suites else []
    if suites:
        targets = list(dict.fromkeys(t for suite in suites for t in suite.backends))
    else:
        targets = named_targets(selection)
    if len(targets) != 1:
        raise InvalidInput(
            f"explore runs on one backend target; --backend names {len(targets)}: "
            f"{', '.join(t.id for t in targets) or 'none'} (name one build, e.g. ort-web:webgpu)"
        )
    target = resolve_targets(targets)[targets[0]]
    descriptor = REGISTRY[target.name]
    unknown = sorted(inject - set(descriptor.faults))
    if unknown:
        raise InvalidInput(
            f"--inject {', '.join(unknown)}: no such fault on {target.name}; expected one of "
            f"{', '.join(descriptor.faults) or '(none)'}"
        )
    if models == "generated":
        lacking = learned_lacking(target)
        drawn, types = vocabulary(ops, lacking), float_types(dtypes, lacking)
        folder = cache_root() / "explore-models"
        narrow = narrowing(*narrowed)
        layouts = descriptor.preferred_layouts and "data-layouts" not in narrow.without
        source: ModelSource = GeneratedModels(
            drawn, target, folder, types, model_opsets(opsets), layouts, narrow
        )
        return Space(source, target, descriptor.scenario_actions)
    sizes, max_ops, without = narrowed
    given = {
        "--ops": ops,
        "--dtypes": dtypes,
        "--opsets": opsets,
        "--sizes": sizes,
        "--max-ops": max_ops,
        "--without": without,
    }
    drawing = [option for option, values in given.items() if values]
    if drawing:
        raise InvalidInput(f"{drawing[0]} draws generated models: it needs --models generated")
    if not descriptor.scenario_actions:
        explorable = [d.name for d in REGISTRY.values() if d.scenario_actions]
        raise InvalidInput(
            f"{target.name} runs no scenarios; explore one of {', '.join(explorable)}"
        )
    if not suites:
        raise InvalidInput("explore draws scenarios over the models of the suites named: name one")
    return Space(
        SuiteModels.of(tuple(suites), selection.filters), target, descriptor.scenario_actions
    )


def lacking_file(target: BackendTarget) -> Path:
    """Where explore keeps what `target` (this build and version) lacks on its GPU path: ops,
    ops in float16 only ("Gelu in float16"), or float16 altogether."""
    name = f"{target.id}@{target.version}" if target.version else target.id
    return cache_root() / "explore-lacking" / f"{name.replace(':', '-')}.json"


def learned_lacking(target: BackendTarget) -> dict[str, str]:
    """What `target` lacks (an op, an op in float16, float16) -> why, as earlier explores
    learned (none yet: {})."""
    path = lacking_file(target)
    return json.loads(path.read_text()) if path.is_file() else {}
