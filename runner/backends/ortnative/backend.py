"""``OrtNativeBackend``: the ``ort-native`` backend as the runner sees it, in the runner's own
process. It imports no onnxruntime: each version runs in a child process of its own
(``runner.backends.isolated``) whose ``sys.path`` starts with that version's environment
(``environments``), where ``ep.EpBackend`` does the work. A version whose child finds no WebGPU
EP device (a machine without a GPU) skips its cases with the reason; the run goes on.
"""

from __future__ import annotations

from typing import Any

from runner.backends.base import BackendOptions, BackendRun, Work
from runner.backends.isolated import IsolatedBackend
from runner.backends.ortnative import lavapipe
from runner.backends.ortnative.environments import install
from runner.backends.ortnative.versions import PINNED_WEBGPU, NativeVersion
from runner.errors import EnvironmentUnusable
from runner.scenario.values import ScenarioRun

NAME = "ort-native"
LAVAPIPE = "lavapipe"  # --adapter lavapipe: Mesa 25's, for onnxruntime-webgpu
CHILD_FACTORY = "runner.backends.ortnative.ep:EpBackend"


def open_version(version: NativeVersion, options: BackendOptions) -> tuple[IsolatedBackend, dict]:
    """A booted child running `version` and its environment (run.json); EnvironmentUnusable
    when this machine cannot run it (no GPU for the plugin, no lavapipe for onnxruntime-webgpu,
    or the environment is not what it should be)."""
    site = (str(install(version)),)
    child = IsolatedBackend(
        NAME, CHILD_FACTORY, options, path=site, environ=_vulkan(version, options)
    )
    try:
        environment = child.environment()
    except EnvironmentUnusable:
        child.close()
        raise
    ran = (environment["onnxruntime"], environment["onnxruntime_ep_webgpu"])
    if ran != (version.ort, version.ep):
        child.close()
        raise EnvironmentUnusable(
            f"{version.exact}'s environment ran onnxruntime {ran[0]} with onnxruntime-ep-webgpu "
            f"{ran[1]}"
        )
    return child, environment


def _vulkan(version: NativeVersion, options: BackendOptions) -> dict[str, str]:
    """What the child's environment adds: onnxruntime-webgpu runs on lavapipe (Mesa 25's, this
    process alone pointed at it) unless ``--adapter`` names another adapter; the plugin takes
    the GPUs ONNX Runtime finds, never lavapipe."""
    wants_lavapipe = (options.adapter or LAVAPIPE).lower() == LAVAPIPE
    if not version.builtin:
        if options.adapter and options.adapter.lower() == LAVAPIPE:
            raise EnvironmentUnusable(
                f"{version.exact} is onnxruntime's WebGPU EP plugin, which runs on the GPUs ONNX "
                f"Runtime finds, never on lavapipe: name an onnxruntime-webgpu build "
                f"(--ort-native-version webgpu-{PINNED_WEBGPU})"
            )
        return {}
    if options.on_cpu or not wants_lavapipe:
        return {}
    icd = lavapipe.icd_file()
    if icd is None:
        raise EnvironmentUnusable(
            f"no lavapipe from Mesa 25 for {version.exact}: the run installs it into the cache "
            f"folder where apt-get can (Debian 12), else set ${lavapipe.ICD_ENV}"
        )
    return {"VK_ICD_FILENAMES": str(icd)}


class OrtNativeBackend:
    name = NAME

    def __init__(self, options: BackendOptions):
        self.options = options
        self._children: dict[str, IsolatedBackend] = {}
        self._environments: dict[str, dict[str, Any]] = {}

    def _child(self, exact: str) -> IsolatedBackend | None:
        """The child of version `exact`, started on its first case; None if it cannot run."""
        if exact not in self._environments:
            try:
                child, environment = open_version(NativeVersion.parse(exact), self.options)
                self._children[exact] = child
            except EnvironmentUnusable as unusable:
                environment = {"unusable": str(unusable)}
            self._environments[exact] = environment
        return self._children.get(exact)

    def environment(self) -> dict[str, Any]:
        return {"versions": self._environments}

    def run(self, work: Work) -> BackendRun | ScenarioRun:
        exact = NativeVersion.parse(work.target.version).exact
        child = self._child(exact)
        if child is None:
            return work.unrun("skipped", self._environments[exact]["unusable"])
        return child.run(work)

    def renew(self) -> None:
        """New children: ONNX Runtime keeps one WebGPU device per process, and its programs with
        it, so nothing an earlier session compiled serves the next one."""
        for child in self._children.values():
            child.renew()

    def close(self) -> None:
        for child in self._children.values():
            child.close()
        self._children.clear()
