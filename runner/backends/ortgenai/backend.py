"""``GenaiBackend``: the ``ort-genai`` backend as the runner sees it, importing no onnxruntime
and no onnxruntime-genai. It takes a decoder case of the plain loop (the prompt prefilled on the
device, shared caches, one generator) and hands it to a child process
(``runner.backends.isolated``) whose ``generator.GenaiSteps`` drives onnxruntime-genai; any
other case is ``skipped`` with the reason. On the WebGPU EP the child's ``sys.path`` starts with
ort-native's environment of the pinned pair (``ortnative.environments``), for the plugin; with
``--adapter cpu`` genai runs on onnxruntime's CPU EP and needs no plugin. A machine where the
child finds no WebGPU EP device skips every case with what was tried and what was missing.
"""

from __future__ import annotations

from typing import Any

from runner.backends.base import BackendOptions, BackendRun, CaseWork, Diagnosis, Work
from runner.backends.isolated import IsolatedBackend
from runner.backends.ortnative.environments import install
from runner.backends.ortnative.versions import NativeVersion
from runner.environment import package_version
from runner.errors import EnvironmentUnusable
from runner.scenario.values import ScenarioRun

NAME = "ort-genai"
CHILD_FACTORY = "runner.backends.ortgenai.generator:GenaiSteps"
GENAI_PACKAGE = "onnxruntime-genai"


def unsupported(work: CaseWork) -> str:
    """Why genai's loop cannot run `work`'s case as the suite declares it ("" if it can)."""
    case = work.case
    loop = case.model.loop
    if loop is None:
        return (
            f"ort-genai runs decoder cases only (onnxruntime-genai's generator loop); model "
            f"{case.model.name!r} is not a decoder (no `generate:`)"
        )
    if loop.prefill != "device":
        return "ort-genai: `prefill: cpu` is not genai's loop (genai prefills on its own device)"
    if loop.caches != "shared":
        return (
            "ort-genai: `caches: swapped` is not how genai binds its caches "
            "(past_present_share_buffer: one buffer per cache)"
        )
    if loop.rewind is not None:
        return "ort-genai: `rewind:` is not driven through genai (its rewind_to) yet"
    if case.graphs != 1:
        return f"ort-genai: `graphs: {case.graphs}` (several generators) is not driven yet"
    if case.inject:
        return f"ort-genai has no faults to inject ({', '.join(sorted(case.inject))})"
    return ""


def open_child(options: BackendOptions) -> tuple[IsolatedBackend, dict[str, Any]]:
    """A booted child and what it runs; EnvironmentUnusable when this machine cannot run it
    (no onnxruntime-genai, no plugin API in it, no WebGPU EP device)."""
    if package_version(GENAI_PACKAGE) is None:
        raise EnvironmentUnusable(
            f"{GENAI_PACKAGE} is not installed (pip install -e '.[real]' installs it)"
        )
    path: tuple[str, ...] = ()
    if not options.on_cpu:  # the plugin, as ort-native installs it for its pinned pair
        path = (str(install(NativeVersion.plugin())),)
    child = IsolatedBackend(NAME, CHILD_FACTORY, options, path=path)
    try:
        environment = child.environment()
    except EnvironmentUnusable:
        child.close()
        raise
    return child, environment


class GenaiBackend:
    name = NAME

    def __init__(self, options: BackendOptions):
        self.options = options
        self._child: IsolatedBackend | None = None
        self._environment: dict[str, Any] | None = None

    def _started(self) -> IsolatedBackend | None:
        """The child, started on the first case it takes; None if it cannot run here."""
        if self._environment is None:
            try:
                self._child, self._environment = open_child(self.options)
            except EnvironmentUnusable as unusable:
                self._environment = {"unusable": str(unusable)}
        return self._child

    def environment(self) -> dict[str, Any]:
        return {GENAI_PACKAGE: package_version(GENAI_PACKAGE), **(self._environment or {})}

    def run(self, work: Work) -> BackendRun | ScenarioRun:
        if not isinstance(work, CaseWork):  # the descriptor lists no steps: never handed one
            return work.unrun("skipped", "ort-genai runs no scenarios")
        reason = unsupported(work)
        if reason:
            return work.unrun("skipped", reason)
        child = self._started()
        if child is None:
            return work.unrun("skipped", self._environment["unusable"])
        return child.run(work)

    def close(self) -> None:
        if self._child is not None:
            self._child.close()
            self._child = None


def prepare_run(targets, say) -> dict[str, Any]:
    return {"onnxruntime_genai": package_version(GENAI_PACKAGE)}


def diagnose() -> list[Diagnosis]:
    version = package_version(GENAI_PACKAGE)
    if version is None:
        fix = "pip install -e '.[real]' (onnxruntime-genai)"
        return [Diagnosis(GENAI_PACKAGE, False, "not installed", fix, skips=True)]
    checks = [Diagnosis(GENAI_PACKAGE, True, version)]
    try:
        child, environment = open_child(BackendOptions())
    except EnvironmentUnusable as unusable:
        detail = f"{unusable}; ort-genai cases are skipped"
        fix = "run on a machine with a GPU and its Vulkan (Linux), Metal or D3D12 driver"
        return [*checks, Diagnosis("WebGPU EP device", False, detail, fix, skips=True)]
    child.close()
    return [*checks, Diagnosis("WebGPU EP device", True, environment["device"])]
