"""The ort-web backend: onnxruntime-web's WebGPU builds in headless Chromium.

One browser per run, launched on the first case (and again after a case or a page load that
hung), with the WebGPU tracer as an init script; one page per build of the version being run,
reused across cases (a case of another version closes them: cases come grouped by version; a
scenario gets a page loaded for it), each case running next to nothing an earlier case left but
the sessions a revisit comes back to (harness.js); one local HTTP server for the pages, each
version's dist files (under a prefix of its own) and each case's model and inputs. ``close()``
stops all of it.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from runner.backends.base import (
    BackendOptions,
    BackendRun,
    CaseWork,
    ScenarioWork,
    Timings,
    Work,
    case_timeout,
    ran_on,
)
from runner.backends.ortweb import DESCRIPTOR, browser
from runner.backends.ortweb.package import (
    BUILDS,
    CAPTURE_NEEDS,
    DEFAULT_BUILD,
    OrtWebPackage,
    package_for,
    pinned_version,
)
from runner.backends.ortweb.server import AssetServer
from runner.backends.ortweb.trace import build_trace, call_counts
from runner.backends.ortweb.versions import max_opset
from runner.errors import EnvironmentUnusable
from runner.matrix import Case
from runner.scenario.values import ScenarioRun, StepRun
from runner.workload import Workload

if TYPE_CHECKING:  # page.py imports playwright: at run time only once _start() found it
    from runner.backends.ortweb.page import BundlePage

ASSETS = Path(__file__).parent / "assets"


class OrtWebBackend:
    name = DESCRIPTOR.name

    def __init__(self, options: BackendOptions):
        """Checks what can be checked without a browser: Chromium exists."""
        self.options = options
        self.chromium = browser.find_chromium(options.chromium)
        self._playwright = None
        self._browser = None
        self._context = None
        self._profile: tempfile.TemporaryDirectory | None = None  # the browser's (launch)
        self._server: AssetServer | None = None
        self._packages: dict[str, OrtWebPackage] = {}  # exact version -> its package
        self._version: str | None = None  # whose builds `_pages` hold
        self._pages: dict[str, BundlePage] = {}  # build -> page
        self.adapter: dict[str, Any] = {}
        self.launch_ms: float | None = None
        self.launches = 0  # browsers launched: one, and one more after each hang
        self._launched_after_kills = 0  # browser.browser_kills when the browser was launched

    def environment(self) -> dict[str, Any]:
        self._start()
        if not self.adapter:  # no page loaded yet: the default build's tells the adapter
            from runner.backends.ortweb.page import PageBroken

            try:
                self._loaded_page(self._version or pinned_version(), DEFAULT_BUILD)
            except PageBroken as broken:
                raise EnvironmentUnusable(str(broken)) from None
        return {
            "ort_web_versions": {v: p.package_version for v, p in self._packages.items()},
            "ort_web_pinned": pinned_version(),
            "bundles": self._modules(),
            "chromium": self._browser.version,
            "chromium_path": str(self.chromium.path),
            "chromium_found_by": self.chromium.found_by,
            "chromium_flags": list(browser.chromium_flags()),
            "adapter": self.adapter,
            "browser_launch_ms": self.launch_ms,
        }

    def run(self, work: Work) -> BackendRun | ScenarioRun:
        if isinstance(work, ScenarioWork):
            run = self._scenario(work)
        else:
            run = self._case(work)
        facts = ("vendor", "architecture", "device", "description")  # what Chromium tells
        return ran_on(run, " ".join(self.adapter[k] for k in facts if self.adapter.get(k)) or None)

    def _case(self, work: CaseWork) -> BackendRun:
        from runner.backends.ortweb.page import CaseTimedOut, PageBroken

        case, workload = work.case, work.workload
        details = _details(case.backend)
        page, status, message = self._page_for(case.backend, workload, case.capture)
        if page is None:
            return BackendRun(status=status, message=message, details=details)
        try:
            spec, registered = self._case_spec(case, workload)
        except ValueError as unknown:  # an output shape pre-allocation needs
            return BackendRun(status="error", message=str(unknown), details=details)
        try:
            try:
                result = page.run(
                    spec,
                    case_timeout(case, self.options),
                    opens=work.opens_sequence,
                    closes=work.closes_sequence,
                    fresh=self.options.fresh_sequences,
                )
            finally:
                for path in registered:
                    self._server.unregister(path)
        except CaseTimedOut as timeout:
            self.close()  # what hung may be the browser's: the next case launches a new one
            return BackendRun(status="timeout", message=str(timeout), details=details)
        except PageBroken as broken:
            return BackendRun(status="error", message=str(broken), details=details)
        return _backend_run(result, workload, details, case)

    def _scenario(self, plan: ScenarioWork) -> ScenarioRun:
        """A scenario's steps in the build's page (harness.js ``runScenario``)."""
        from runner.backends.ortweb.page import CaseTimedOut, PageBroken

        faults = sorted(plan.inject & DESCRIPTOR.faults.keys())
        details = {**_details(plan.target), **({"faults": faults} if faults else {})}
        # GPU tensors: a capture session's inputs, and outputs left on the GPU
        gpu = any(s.capture or s.location == "gpu-buffer" for s in plan.scenario.sessions)
        page, status, message = self._page_for(plan.target, plan.workload, gpu)
        if page is None:
            return ScenarioRun(status, message, details=details)
        try:
            spec, registered = self._scenario_spec(plan)
            spec["faults"] = faults  # armed while each capture session records
        except ValueError as unknown:  # an output shape pre-allocation needs
            return ScenarioRun("error", str(unknown), details=details)
        try:
            try:
                result = page.scenario(spec, plan.timeout)
            finally:
                for path in registered:
                    self._server.unregister(path)
        except CaseTimedOut as timeout:
            self.close()  # as for a case
            return ScenarioRun("timeout", str(timeout), details=details)
        except PageBroken as broken:
            return ScenarioRun("error", str(broken), details=details)
        steps = tuple(
            StepRun.counted(
                {name: _array(step["outputs"][name]) for name in plan.workload.output_names},
                step["counts"],
            )
            if "outputs" in step
            else StepRun()
            for step in result["steps"]
        )
        message = result["message"]
        if result.get("deviceLost"):
            message = f"WebGPU device lost ({result['deviceLost']}): {message}"
        return ScenarioRun(result["status"], message, steps, details)

    def _scenario_spec(self, plan: ScenarioWork) -> tuple[dict[str, Any], list[str]]:
        """What harness.js's ``runScenario`` needs, and the server paths registered for it."""
        scenario, workload = plan.scenario, plan.workload
        preallocated = any(s.outputs != "none" for s in scenario.sessions)
        outputs = output_specs(workload) if preallocated else None  # first: it may raise
        variants = list(dict.fromkeys(feed.variant for feed in plan.feeds if feed is not None))
        registered = [self._server.register(workload.model)]
        urls = []
        for variant in variants:
            urls.append([])
            for array in workload.inputs_of(variant).values():
                urls[-1].append(self._server.register(np.asarray(array, order="C").tobytes()))
                registered.append(urls[-1][-1])
        spec = {
            "key": workload.key,
            "model": registered[0],
            "inputs": [
                {"name": name, "type": array.dtype.name, "dims": np.shape(array)}
                for name, array in workload.inputs.items()
            ],
            "outputNames": list(workload.output_names),
            "outputs": outputs,
            "freeDimensionOverrides": dict(workload.shape),
            "variants": urls,
            "sessions": scenario.session_specs(),
            "steps": [
                {
                    "action": step.action,
                    "session": step.session,
                    "graph": step.graph,
                    "inputs": step.inputs,
                    "hold": step.hold,
                    "variant": None if feed is None else variants.index(feed.variant),
                }
                for step, feed in zip(scenario.steps, plan.feeds, strict=True)
            ],
        }
        return spec, registered

    def _page_for(
        self, target, workload: Workload, capture: bool
    ) -> tuple[BundlePage | None, str, str]:
        """The page of `target`'s build and version, loaded; or None, the status and why it
        cannot run `workload`, captured if `capture` (no WebGPU or no such build in the version,
        input types, no shader-f16, a broken page, a build that cannot capture)."""
        from runner.backends.ortweb.page import PageBroken

        bundle = target.bundle or DEFAULT_BUILD
        version = target.version or pinned_version()
        try:
            package = self._package(version)
        except EnvironmentUnusable as failed:  # this version, not the machine: its cases fail
            return None, "error", str(failed)
        problem = package.layout_problem()
        if problem:  # no WebGPU at all: skipped (bisect steps over it)
            return None, "error" if package.ships_webgpu() else "skipped", problem
        lacking = package.builds()[bundle]
        if lacking:
            message = (
                f"onnxruntime-web {version} has no {bundle} build "
                f"(its dist/ lacks {lacking.removeprefix('dist/')})"
            )
            return None, "skipped", message
        newest = max_opset(package.package_version)
        opset = _opset(workload) if newest is not None else None
        if opset is not None and opset > newest:
            message = (
                f"onnxruntime-web {version} takes ONNX opsets up to {newest}; the model is opset "
                f"{opset}"
            )
            return None, "skipped", message
        unsupported = sorted(
            f"{name} ({array.dtype})"
            for name, array in workload.inputs.items()
            if array.dtype.name not in DESCRIPTOR.element_types
        )
        if unsupported:
            message = f"inputs of types onnxruntime-web cannot take: {', '.join(unsupported)}"
            return None, "error", message
        try:
            page = self._loaded_page(version, bundle)
        except PageBroken as broken:
            return None, "error", str(broken)
        if "shader-f16" not in self.adapter["features"] and _uses_float16(workload):
            message = "float16 model or inputs, and the WebGPU adapter lacks shader-f16"
            return None, "skipped", message
        if capture and page.lacks:
            message = (
                f"onnxruntime-web {version} ({package.module(bundle)}) cannot capture: it has no "
                f"{', '.join(page.lacks)} ({CAPTURE_NEEDS})"
            )
            return None, "skipped", message
        return page, "ok", ""

    def close(self) -> None:
        """Stop pages, browser, Playwright and server; safe to call more than once."""
        try:
            if self._browser is not None:
                self._browser.close()  # its pages with it
        finally:
            self._pages.clear()
            self._browser = self._context = None
            if self._profile is not None:
                self._profile.cleanup()
                self._profile = None
            if self._playwright is not None:
                self._playwright = None
                browser.release_playwright()
            if self._server is not None:
                self._server.close()
                self._server = None

    def page_loads(self) -> dict[str, int]:
        """How often each build's page of the current version was (re)opened: one each unless
        a case broke a page and one more for each scenario (each runs in a page of its own);
        in explore, one more every page.INSTANCES_PER_PAGE sequences or scenarios."""
        return {bundle: page.loads for bundle, page in self._pages.items()}

    def _start(self) -> None:
        """Launch the browser and start the server: once per run, and again after the browser
        died (its pages, context and server go with it)."""
        if self._browser is not None:
            if self._browser.is_connected() and self._launched_after_kills == browser.browser_kills:
                return
            self.close()
        started = time.perf_counter()
        try:
            self._playwright = browser.acquire_playwright()
            self._profile = tempfile.TemporaryDirectory(
                prefix="regress-chromium-", ignore_cleanup_errors=True
            )
            self._context = browser.launch(
                self._playwright, self.chromium, Path(self._profile.name)
            )
            self._browser = self._context.browser
            self._launched_after_kills = browser.browser_kills
            self.launches += 1
            if self.options.fresh_sequences:  # beneath the tracer, which counts what ORT asks
                self._context.add_init_script(path=str(ASSETS / "devicepool.js"))
            self._context.add_init_script(path=str(ASSETS / "tracer.js"))
            self._context.add_init_script(path=str(ASSETS / "faults.js"))  # after the tracer
            files = {
                f"/{name}": ASSETS / name
                for name in ("harness.html", "harness.js", "feeds.mjs", "scenario.mjs")
            }
            self._server = AssetServer(files)
            for package in self._packages.values():
                self._server.serve(_dist_paths(package))
            self.launch_ms = (time.perf_counter() - started) * 1000
        except BaseException:
            self.close()
            raise

    def _modules(self) -> dict[str, dict[str, str]]:
        """Each version's module per build it ships."""
        return {
            version: {b: package.module(b) for b, lacks in package.builds().items() if not lacks}
            for version, package in self._packages.items()
        }

    def _package(self, version: str) -> OrtWebPackage:
        """The version's package, installed if need be, its dist/ served under its prefix."""
        if version not in self._packages:
            package = package_for(version)
            self._packages[version] = package
            if self._server is not None:
                self._server.serve(_dist_paths(package))
        return self._packages[version]

    def _loaded_page(self, version: str, bundle: str) -> BundlePage:
        """The build's page, loaded; its load also tells the WebGPU adapter, which every page
        of the browser shares. Pages of another version close first: cases come grouped by
        version, and each page holds a wasm instance. Raises PageBroken, or
        EnvironmentUnusable without an adapter."""
        from runner.backends.ortweb.page import BundlePage

        self._start()
        if version != self._version:
            for page in self._pages.values():
                page.close()
            self._pages.clear()
            self._version = version
        if bundle not in self._pages:
            package = self._package(version)
            module = f"{_dist_prefix(package)}/{package.module(bundle)}"
            self._pages[bundle] = BundlePage(
                self._context,
                self._server,
                module,
                renews=self.options.fresh_sequences,
                stuck_after_error=BUILDS[bundle].stuck_after_error,
            )
        adapter = self._pages[bundle].open()
        if not adapter:
            raise EnvironmentUnusable(
                f"Chromium ({self.chromium.path}) offers no WebGPU adapter with flags "
                f"{' '.join(browser.chromium_flags())}; without a GPU, Chromium's SwiftShader "
                "must be installed with it (Debian's chromium package ships it)"
            )
        self.adapter = adapter
        return self._pages[bundle]

    def _case_spec(self, case: Case, workload: Workload) -> tuple[dict[str, Any], list[str]]:
        """What harness.js needs for a case, and the server paths registered for it."""
        # A capture case's outputs bound in place need the others bound too: the C++ builds
        # replay onnxruntime-allocated outputs beside them into a TypeError (measured).
        preallocated = case.capture and (case.buffers.outputs != "none" or bool(workload.in_place))
        outputs = output_specs(workload) if preallocated else None  # first: it may raise
        model = self._server.register(workload.model)
        registered = [model]
        feeds = workload.feeds(self.options.runs)
        variants = list(dict.fromkeys(feed.variant for feed in feeds))
        urls = []
        for variant in variants:
            urls.append([])
            for array in workload.inputs_of(variant).values():
                array = np.asarray(array, order="C")  # keeps 0-d inputs 0-d (ascontiguousarray not)
                urls[-1].append(self._server.register(array.tobytes()))
                registered.append(urls[-1][-1])
        spec = {
            "key": workload.key,
            "mode": case.mode,
            "model": model,
            "inputs": [
                {"name": name, "type": array.dtype.name, "dims": np.shape(array)}
                for name, array in workload.inputs.items()
            ],
            "variants": urls,
            "schedule": [[f.graph, variants.index(f.variant), f.prefill] for f in feeds],
            "graphs": case.graphs,
            "outputNames": list(workload.output_names),
            "buffers": dataclasses.asdict(case.buffers),
            "reuseSession": case.revisit,
            "keepSession": case.revisited,
            "faults": sorted(case.inject & DESCRIPTOR.faults.keys()),
        }
        if not case.dynamic:  # a decoder's prefill runs at its own sequence length
            spec["freeDimensionOverrides"] = dict(workload.shared_shape)
        if workload.preferred_layout:
            spec["preferredLayout"] = workload.preferred_layout
        if outputs is not None:
            spec["outputs"] = outputs
        if case.capture and workload.in_place:
            spec["inPlace"] = dict(workload.in_place)
            spec["swapped"] = workload.swapped
        cache = workload.device_cache
        if cache is not None:
            spec["deviceCache"] = {
                "caches": {past: present for present, past in workload.in_place.items()},
                "rewinds": {
                    variants.index(v): n for v, n in cache.rewinds.items() if v in variants
                },
            }
            prefill = next((feed.variant for feed in feeds if feed.prefill), None)
            if prefill is not None:
                spec["prefillInputs"] = [
                    {"name": name, "type": array.dtype.name, "dims": np.shape(array)}
                    for name, array in workload.inputs_of(prefill).items()
                ]
                if case.capture:
                    spec["prefillOutputs"] = output_specs(workload, workload.shape_of(prefill))
        return spec, registered


def _backend_run(
    result: Mapping[str, Any], workload: Workload, details: dict, case: Case
) -> BackendRun:
    feeds = workload.feeds(len(result.get("records") or ()))
    graphs = [None if feed.prefill else feed.graph for feed in feeds]
    trace = build_trace(result, graphs, case.capture)
    details = {**details, "warnings": list(dict.fromkeys(result.get("warnings", ())))}
    if result["status"] != "ok":
        message = result["message"]
        if result.get("deviceLost"):  # the cause; ORT's message names only what failed next
            message = f"WebGPU device lost ({result['deviceLost']}): {message}"
        timings = _timings(result["timings"], runs=0) if "timings" in result else Timings()
        return BackendRun(
            status=result["status"], message=message, timings=timings, trace=trace, details=details
        )
    types = {output["type"] for outputs in result["runs"] for output in outputs.values()}
    if not types <= DESCRIPTOR.element_types:
        unreadable = sorted(types - DESCRIPTOR.element_types)
        message = f"outputs of types this backend cannot read: {unreadable}"
        return BackendRun(status="error", message=message, trace=trace, details=details)
    runs = tuple(
        {name: _array(outputs[name]) for name in workload.output_names}
        for outputs in result["runs"]
    )
    return BackendRun(
        status="ok",
        runs=runs,
        timings=_timings(result["timings"], runs=len(runs)),
        trace=trace,
        details={**details, **call_counts(result), "reused_session": result["reusedSession"]},
    )


def _details(target) -> dict[str, Any]:
    return {
        "bundle": target.bundle or DEFAULT_BUILD,
        "ort_web_version": target.version or pinned_version(),
    }


def _timings(timings: Mapping[str, Any], runs: int) -> Timings:
    return Timings(
        session_ms=timings["sessionMs"],
        first_run_ms=timings["firstRunMs"],
        median_run_ms=timings["medianRunMs"],
        runs=runs,
    )


def _array(output: Mapping[str, Any]) -> np.ndarray:
    data = base64.b64decode(output["data"])
    return np.frombuffer(data, dtype=np.dtype(output["type"])).reshape(output["dims"])


def output_specs(workload: Workload, dims: Mapping[str, int] | None = None) -> list[dict[str, Any]]:
    """Name, type and static dims of each output, for pre-allocated output buffers: as the model
    declares them with the case's dims (or `dims`: a decoder's prefill's) pinned, else as ONNX
    shape inference finds them (it cannot see through contrib ops). Raises ValueError if both
    leave one open."""
    model = onnx.load_from_string(workload.model)
    pinned = workload.shape if dims is None else dims
    for value in (*model.graph.input, *model.graph.output):
        for dim in value.type.tensor_type.shape.dim:
            if dim.HasField("dim_param") and dim.dim_param in pinned:
                dim.dim_value = pinned[dim.dim_param]
    declared = {value.name: value for value in model.graph.output}
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True).graph.output
    specs = []
    for value in inferred:
        if value.name not in workload.output_names:
            continue
        dims = _static_dims(declared[value.name]) or _static_dims(value)
        if dims is None:
            raise ValueError(
                f"pre-allocated outputs: the shape of output {value.name!r} is unknown"
            )
        dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        specs.append({"name": value.name, "type": np.dtype(dtype).name, "dims": dims})
    return specs


def _static_dims(value: onnx.ValueInfoProto) -> list[int] | None:
    shape = value.type.tensor_type
    if not shape.HasField("shape"):
        return None
    dims = [d.dim_value if d.HasField("dim_value") else None for d in shape.shape.dim]
    return None if None in dims else dims


def _opset(workload: Workload) -> int:
    """The model's ai.onnx opset."""
    model = onnx.load_from_string(workload.model)
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def _uses_float16(workload: Workload) -> bool:
    """Whether the case needs shader-f16: float16 inputs, graph inputs/outputs or weights."""
    if any(array.dtype == np.float16 for array in workload.inputs.values()):
        return True
    graph = onnx.load_from_string(workload.model).graph
    float16 = onnx.TensorProto.FLOAT16
    return any(
        value.type.tensor_type.elem_type == float16 for value in (*graph.input, *graph.output)
    ) or any(initializer.data_type == float16 for initializer in graph.initializer)


def _dist_prefix(package: OrtWebPackage) -> str:
    """Where the server serves a version's dist/: a path of its own per version, so that a
    bundle's relative imports and wasm fetches stay within its version."""
    return "/ort/" + hashlib.sha256(package.version.encode()).hexdigest()[:16]


def _dist_paths(package: OrtWebPackage) -> dict[str, Path]:
    prefix = _dist_prefix(package)
    return {f"{prefix}/{name}": file for name, file in package.dist_files().items()}
