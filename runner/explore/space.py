"""What explore draws from: models from a source (``ModelSource``), on the one backend target
the selection names.

A source hands explore ``ExploredModel``s: each the model's declaration, the suite it runs in
(tolerance, layouts, timeout), the shape, its `models:` entry as a finding's suite file writes it
and its digest, which findings and the example database are keyed on. ``SuiteModels`` is the
suites' own models; a source that generates models builds the same values.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import yaml

from runner.backends import REGISTRY, resolve_targets
from runner.errors import InvalidInput
from runner.selection import Selection, load
from runner.suite.spec import STATIC_SHAPE, BackendTarget, ModelSpec, Shape, Suite

FILTER_KEYS = ("model", "suite")


@dataclass(frozen=True)
class ExploredModel:
    """A model explore draws scenarios over, at one shape."""

    suite: Suite  # what it runs in: its tolerance, layouts and timeout
    model: ModelSpec
    shape: Shape
    # Its `models:` entry as a finding's suite writes it, a model file's `path` absolute
    entry: Mapping[str, Any]
    digest: str  # what tells it from other models: the entry, the file's content and the shape


class ModelSource(Protocol):
    """Where explore's models come from."""

    def models(self) -> tuple[ExploredModel, ...]:
        """The models to draw from; InvalidInput when there are none."""


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
    """The suites' encoders and model files (``model=`` or ``suite=`` filters), each at the
    shape its scenarios default to; explore draws no decoder loop and no op test."""

    suites: tuple[Suite, ...]
    filters: tuple[str, ...] = ()

    def models(self) -> tuple[ExploredModel, ...]:
        models = tuple(
            suite_model(suite, model, (model.shapes or suite.shapes or (STATIC_SHAPE,))[0])
            for suite in self.suites
            for model in suite.models
            if model.op_test is None and model.decoder is None and self._wanted(suite, model)
        )
        if not models:
            raise InvalidInput(
                "no model to explore: the suites have no encoder or model file"
                + (f" matching {', '.join(self.filters)}" if self.filters else "")
                + " (explore draws no decoder loop and no op test)"
            )
        return models

    def _wanted(self, suite: Suite, model: ModelSpec) -> bool:
        fields = {"model": model.name, "suite": suite.name}
        return all(
            fnmatch.fnmatchcase(fields[key], glob)
            for key, _, glob in (f.partition("=") for f in self.filters)
        )


@dataclass(frozen=True)
class Space:
    """The models, the target and the steps its backend runs."""

    models: tuple[ExploredModel, ...]
    target: BackendTarget
    actions: tuple[str, ...]


def explore_space(
    selection: Selection, inject: frozenset[str], source: ModelSource | None = None
) -> Space:
    """`source`'s models (None: the selection's encoders and model files, ``SuiteModels``) on
    the selection's one backend target, resolved; InvalidInput for anything else."""
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
    source = source or SuiteModels(tuple(suites), selection.filters)
    return Space(source.models(), target, descriptor.scenario_actions)
