"""What explore draws from: a selection's models, on the one backend target it names."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from runner.backends import REGISTRY, resolve_targets
from runner.errors import InvalidInput
from runner.selection import Selection, load
from runner.suite.spec import STATIC_SHAPE, BackendTarget, ModelSpec, Shape, Suite

FILTER_KEYS = ("model", "suite")


@dataclass(frozen=True)
class ExploredModel:
    """A suite's model at the shape its scenarios default to."""

    suite: Suite
    model: ModelSpec
    shape: Shape


@dataclass(frozen=True)
class Space:
    """The models, the target and the steps its backend runs."""

    models: tuple[ExploredModel, ...]
    target: BackendTarget
    actions: tuple[str, ...]


def explore_space(selection: Selection, inject: frozenset[str]) -> Space:
    """The selection's encoder and model-file models (filters: ``model=`` or ``suite=`` globs)
    on its one backend target, resolved; InvalidInput for anything else."""
    for pattern in selection.filters:
        key, sep, _ = pattern.partition("=")
        if not sep or key not in FILTER_KEYS:
            raise InvalidInput(
                f"--filter {pattern!r}: explore filters models; expected model=GLOB or suite=GLOB"
            )
    suites = load(selection)
    targets = list(dict.fromkeys(t for suite in suites for t in suite.backends))
    if len(targets) != 1:
        raise InvalidInput(
            f"explore runs on one backend target; --backend names {len(targets)}: "
            f"{', '.join(t.id for t in targets)} (name one build, e.g. ort-web:webgpu)"
        )
    target = resolve_targets(targets)[targets[0]]
    descriptor = REGISTRY[target.name]
    if not descriptor.scenario_actions:
        explorable = [d.name for d in REGISTRY.values() if d.scenario_actions]
        raise InvalidInput(
            f"{target.name} runs no scenarios; explore one of {', '.join(explorable)}"
        )
    unknown = sorted(inject - set(descriptor.faults))
    if unknown:
        raise InvalidInput(
            f"--inject {', '.join(unknown)}: no such fault on {target.name}; expected one of "
            f"{', '.join(descriptor.faults) or '(none)'}"
        )
    models = tuple(
        ExploredModel(suite, model, (model.shapes or suite.shapes or (STATIC_SHAPE,))[0])
        for suite in suites
        for model in suite.models
        if model.op_test is None and model.decoder is None and _wanted(suite, model, selection)
    )
    if not models:
        raise InvalidInput(
            "no model to explore: the suites have no encoder or model file"
            + (f" matching {', '.join(selection.filters)}" if selection.filters else "")
            + " (explore draws no decoder loop and no op test)"
        )
    return Space(models, target, descriptor.scenario_actions)


def _wanted(suite: Suite, model: ModelSpec, selection: Selection) -> bool:
    fields = {"model": model.name, "suite": suite.name}
    return all(
        fnmatch.fnmatchcase(fields[key], glob)
        for key, _, glob in (f.partition("=") for f in selection.filters)
    )
