"""One browser page per onnxruntime-web bundle, reused across cases.

A page is (re)opened only when it must be: first use, after a crash, a lost WebGPU device, a
wasm abort or a capture that threw inside onnxruntime-web (unless the next case runs on a new
instance of the bundle anyway: explore's scenarios), or a case that timed out. Each open costs
a page load, the bundle's wasm (compiled by the first page of a browser, taken from Chromium's
code cache by later ones) and its WebGPU programs; the per-case path is one protocol call that
runs the case in the page and returns its result.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from playwright.sync_api import BrowserContext, Error, Page

from runner.backends.ortweb import browser
from runner.backends.ortweb.context import ALLOCATOR_MODEL, CONTEXT_MODEL
from runner.backends.ortweb.server import AssetServer

# Instances of the bundle a page imports (``renews``) before it is loaded again: each keeps its
# wasm heap for the page's life (the page's module map holds it), and a new page compiles every
# WebGPU program again (about 2.5 s on SwiftShader); Chromium peaked at 2.9 GB with 25
INSTANCES_PER_PAGE = 25
LOAD_TIMEOUT_S = 120.0  # the whole load: page, importing the bundle and compiling its wasm
KILL_GRACE_S = 5.0  # beyond a case's timeout, before a stuck renderer is killed


class CaseTimedOut(Exception):
    """The page did not finish a case in time; the page has been closed, and the browser goes
    too (the backend's part): what hung may be beyond the page."""


class PageBroken(Exception):
    """The page crashed or failed to load the bundle; the message says what happened."""


def _timed_out(timeout_s: float, then: str) -> str:
    return f"no result after {timeout_s:g} s; {then}, the next case runs in a new browser"


class BundlePage:
    """A harness page that has imported one bundle; runs case specs (see harness.js)."""

    def __init__(
        self,
        context: BrowserContext,
        server: AssetServer,
        module: str,
        renews: bool = False,
        stuck_after_error: bool = False,
    ):
        """`module`: the server path of the bundle the page imports. `renews`: a fresh
        sequence or a scenario runs on a new instance of the bundle imported into the page
        (harness.js ``renew``; the device and what it compiled shared, devicepool.js) rather
        than in a page loaded for it. `stuck_after_error`: the bundle refuses every kernel
        after one threw (``Build.stuck_after_error``), so the sequence after a case that
        errored, or was refused as its kernel ran, gets a new instance too."""
        self._context = context
        self._server = server
        self._module = module
        self._renews = renews
        self._stuck_after_error = stuck_after_error
        self._instances = 0  # of the bundle in the loaded page
        self._pooled = False  # whether the loaded page's device pool is enabled
        self._page: Page | None = None
        self._crashed = False
        self._opened_after_kills = 0
        self.loads = 0  # how many times the page was (re)opened: the costly part
        self._ran = False  # whether a case or scenario ran since the page was loaded
        self.adapter: dict[str, Any] | None = None  # the WebGPU adapter the page saw at load
        self.lacks: list[str] = []  # what capture needs that the loaded module lacks (harness.js)
        self._errored = False  # a case errored in the instance (stuck_after_error)
        self._models: list[str] = []  # its own sessions' models' server paths while loaded

    @property
    def is_open(self) -> bool:
        return (
            self._page is not None
            and not self._crashed
            and self._opened_after_kills == browser.renderer_kills
            and not self._page.is_closed()
        )

    def run(
        self, spec: dict[str, Any], timeout_s: float, opens: bool, closes: bool, fresh: bool
    ) -> dict[str, Any]:
        """Run one case; returns harness.js's result, or raises CaseTimedOut or PageBroken.

        The case's session is released after it unless the spec's ``keepSession`` says a later
        revisit in its layout-change sequence runs it again. A case that `opens` a sequence
        releases any session an earlier one kept, and with `fresh` runs on an onnxruntime-web of
        its own (``_afresh``: nothing an earlier sequence left remains), as it does after a case
        that errored in a bundle stuck after an error; one that `closes` it releases them all.
        """
        if (fresh or self._errored) and self._ran and opens:
            self._afresh()
            self._errored = False
        spec = {**spec, "opensSequence": opens, "closesSequence": closes}
        result = self._evaluate("harness.run", spec, timeout_s, pooled=self._renews)
        threw = result["status"] in ("error", "unsupported-op")  # a kernel may refuse as it runs
        self._errored = self._stuck_after_error and (self._errored or threw)
        return result

    def scenario(self, spec: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Run one scenario (harness.js's ``runScenario``) on an onnxruntime-web of its own:
        what a scenario sees must not depend on what ran before it (ORT's wasm heap, where its
        tensors land, a trap or a half-made session), so that ``explore``'s examples are
        independent and each one it writes fails the same way under ``run``. A page that
        `renews` imports a new instance of the bundle for it (``_afresh``) on the device pool's
        devices, where a destroy during the steps ends the instance's lease of its device
        (devicepool.js); a scenario that used what a destroy of its ended (the device, or an
        object made on it) runs again on a new instance with real destroys, as in a page of its
        own, and one that traps ORT's wasm leaves the page to the next. Any other page loads a
        page for it without the pool, which costs about as much again as a small scenario on
        SwiftShader, and closes it after: cases after it do not inherit what it left.
        Returns its result, or raises CaseTimedOut or PageBroken."""
        if self._renews:
            for real_destroys in (False, True):
                if self._ran:
                    self._afresh()
                spec = {**spec, "realDestroys": real_destroys}
                result = self._evaluate(
                    "harness.scenario", spec, timeout_s, pooled=True, instance_ends=True
                )
                if not result.get("usedAfterDestroy"):
                    break
            return result
        if self._ran:
            self.close()
        try:
            return self._evaluate("harness.scenario", spec, timeout_s, pooled=False)
        finally:
            self.close()

    def _afresh(self) -> None:
        """Nothing an earlier sequence or scenario left in the page stays: a new instance of
        the bundle in it (a pooled page), or a new page."""
        if self._pooled and self.is_open and self._instances < INSTANCES_PER_PAGE:
            try:
                self._instances = self._page.evaluate("() => harness.renew()")
                self._ran = False
                return
            except Error:
                pass  # then a new page
        self.close()

    def _evaluate(
        self,
        function: str,
        spec: dict[str, Any],
        timeout_s: float,
        pooled: bool,
        instance_ends: bool = False,
    ) -> dict[str, Any]:
        """`function(spec, ms)` in the page (`pooled`: with its device pool enabled), killing
        its renderer if it outlives `timeout_s`. `instance_ends`: what runs next runs on a new
        instance of the bundle, so one this breaks is not a reason to load the page again."""
        page = self._load(pooled)
        self._ran = True
        killed = threading.Event()

        def kill_stuck_renderer() -> None:
            killed.set()
            browser.kill_renderers()

        watchdog = threading.Timer(timeout_s + KILL_GRACE_S, kill_stuck_renderer)
        watchdog.start()
        try:
            result = json.loads(
                page.evaluate(
                    f"([spec, ms]) => {function}(spec, ms)", [spec, round(timeout_s * 1000)]
                )
            )
        except Error as error:
            self.close()
            if killed.is_set():
                raise CaseTimedOut(_timed_out(timeout_s, "its renderer was killed")) from None
            raise PageBroken(f"the page failed: {error.message.splitlines()[0]}") from None
        finally:
            watchdog.cancel()
        if result["status"] == "timeout":
            self.close()
            raise CaseTimedOut(_timed_out(timeout_s, "the page was closed"))
        # The device or ORT's wasm is gone, or a capture threw inside ORT (later sessions of the
        # instance then fail too): a fresh page for the next case, but where only the instance
        # is broken and the next case runs on a new one (its leases retired, devicepool.js).
        broken = result.get("aborted") or result.get("captureThrew")
        if result.get("deviceLost") or (broken and not instance_ends):
            self.close()
        return result

    def open(self) -> dict[str, Any] | None:
        """Load the page unless it is loaded; the WebGPU adapter it sees (None if none).

        Raises PageBroken if the bundle does not load.
        """
        self._load(self._renews)
        return self.adapter

    def holdings(self) -> dict[str, Any]:
        """What the harness holds between cases (harness.js ``holdings``): ``sessions`` by
        ``<workload key>/<mode>``, the number of GPU ``outputs`` not disposed and of GPU
        ``buffers`` it made, and whether ORT's device is alive (``deviceAlive``); nothing while
        the page is closed."""
        if not self.is_open:
            return {"sessions": [], "outputs": 0, "buffers": 0, "deviceAlive": False}
        return self._page.evaluate("() => harness.holdings()")

    def close(self) -> None:
        if self._page is not None:
            try:
                self._page.close()
            except Error:
                pass  # already gone with its renderer
        self._page = None
        for path in self._models:
            self._server.unregister(path)
        self._models = []

    def _load(self, pooled: bool) -> Page:
        """The page, loaded within LOAD_TIMEOUT_S: past it Chromium is killed (a wedged GPU
        process or browser answers no call, and ``evaluate`` has no timeout of its own), the
        load fails with PageBroken, and the next case launches a new browser."""
        if self.is_open and self._pooled == pooled:
            return self._page
        self.close()
        self._crashed = False
        self._opened_after_kills = browser.renderer_kills
        self._ran = False
        self.loads += 1
        hung = threading.Event()
        # Playwright (1.65) never returns from a new_page whose browser dies after Chromium made
        # the target but before the page is set up: the kill waits for new_page, a while at most.
        creating = threading.Lock()

        def kill_hung_browser() -> None:
            took = creating.acquire(timeout=KILL_GRACE_S)
            hung.set()
            browser.kill_browsers()
            if took:
                creating.release()

        watchdog = threading.Timer(LOAD_TIMEOUT_S, kill_hung_browser)
        watchdog.start()
        self._models = [self._server.register(m) for m in (CONTEXT_MODEL, ALLOCATOR_MODEL)]
        failure = None
        try:
            with creating:
                self._page = page = self._context.new_page()
            page.on("crash", self._on_crash)
            page.set_default_timeout((LOAD_TIMEOUT_S + KILL_GRACE_S) * 1000)  # the watchdog first
            page.goto(self._server.url("/harness.html"), wait_until="load")
            page.wait_for_function("() => window.harness !== undefined")
            urls = [self._server.url(path) for path in (self._module, *self._models)]
            loaded = page.evaluate("(args) => harness.load(...args)", [*urls, pooled])
        except Error as error:
            failure = f"failed: {error.message.splitlines()[0]}"
        finally:
            watchdog.cancel()
        if hung.is_set():
            failure = (
                f"did not finish in {LOAD_TIMEOUT_S:g} s; Chromium was killed, the next case "
                "launches it again"
            )
        if failure is not None:
            self.close()
            raise PageBroken(
                f"loading onnxruntime-web ({self._module.rsplit('/', 1)[-1]}) {failure}"
            )
        self.adapter = loaded["adapter"]
        self.lacks = loaded["lacks"]
        self._instances, self._pooled = 1, pooled
        return page

    def _on_crash(self, _page: Page) -> None:
        self._crashed = True
