"""Find Chromium and launch it headless, through Playwright, with WebGPU on.

Which executable: ``--chromium`` (BackendOptions.chromium), else ``$REGRESS_CHROMIUM``, else the
first of ``chromium``, ``chromium-browser``, ``google-chrome`` on PATH, else the browser
Playwright installed itself (``playwright install chromium``), if any.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from runner.errors import EnvironmentUnusable

CHROMIUM_ENV = "REGRESS_CHROMIUM"
PATH_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
INSTALL_HINT = (
    "install Chromium (Debian/Ubuntu: apt-get install chromium), or point "
    f"${CHROMIUM_ENV} or --chromium at a Chromium or Chrome executable"
)

# WebGPU in headless Chromium. --enable-unsafe-webgpu exposes it on Linux (where it is not yet
# on by default) and on software adapters (SwiftShader, used when there is no GPU); Vulkan is
# Chromium's WebGPU backend on Linux GPUs and harmless without one. Without a GPU no flag names
# SwiftShader: Chromium falls back to it (adapter vendor "google", architecture "swiftshader");
# forcing it (--use-webgpu-adapter=swiftshader, --use-vulkan=swiftshader) would hide a real GPU.
# The rest keep a machine without network quiet and the startup short.
WEBGPU_FLAGS = ("--enable-unsafe-webgpu", "--enable-features=Vulkan")
QUIET_FLAGS = (
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
)


def chromium_flags() -> tuple[str, ...]:
    """Command-line flags for the browser; Chromium refuses its sandbox as root."""
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    return WEBGPU_FLAGS + QUIET_FLAGS + (("--no-sandbox",) if root else ())


@dataclass(frozen=True)
class ChromiumExecutable:
    path: Path
    found_by: str  # "--chromium", "$REGRESS_CHROMIUM", "PATH" or "playwright"


def find_chromium(override: str | None = None) -> ChromiumExecutable:
    """The executable to launch; raises EnvironmentUnusable saying how to get one."""
    for value, source in (
        (override, "--chromium"),
        (os.environ.get(CHROMIUM_ENV), f"${CHROMIUM_ENV}"),
    ):
        if value:
            path = Path(value).expanduser()
            resolved = path if path.is_file() else shutil.which(value)
            if not resolved or not os.access(resolved, os.X_OK):
                raise EnvironmentUnusable(f"{source} {value!r} is not an executable file")
            return ChromiumExecutable(Path(resolved), source)
    for name in PATH_NAMES:
        found = shutil.which(name)
        if found:
            return ChromiumExecutable(Path(found), "PATH")
    bundled = _playwright_chromium()
    if bundled:
        return ChromiumExecutable(bundled, "playwright")
    raise EnvironmentUnusable(f"no Chromium found: {INSTALL_HINT}")


def _playwright_chromium() -> Path | None:
    """Playwright's own Chromium, where `playwright install chromium` put one."""
    try:
        playwright = acquire_playwright()
    except EnvironmentUnusable:
        return None
    try:
        path = Path(playwright.chromium.executable_path)
    finally:
        release_playwright()
    return path if path.is_file() else None


def chromium_version(executable: Path) -> str:
    """``Chromium 156.0.8078.108 ...`` as the executable reports it, or "" if it will not say."""
    try:
        done = subprocess.run(
            [str(executable), "--version"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip()


_playwright = None  # the one started Playwright: its sync API allows one per thread
_playwright_users = 0


def acquire_playwright():
    """Playwright's sync API, started once and shared (two backends, or a backend and
    ``doctor``, may be open at once); pair with ``release_playwright``. Raises
    EnvironmentUnusable if playwright is not installed."""
    global _playwright, _playwright_users
    if _playwright is None:
        try:
            from playwright.sync_api import sync_playwright
        except ImportError as error:
            raise EnvironmentUnusable(
                f"the Python package playwright is missing ({error}): pip install playwright"
            ) from None
        _playwright = sync_playwright().start()
    _playwright_users += 1
    return _playwright


def release_playwright() -> None:
    """Stop Playwright (its driver process) when its last user is done."""
    global _playwright, _playwright_users
    _playwright_users -= 1
    if _playwright_users == 0:
        _playwright.stop()
        _playwright = None


def launch(playwright, executable: ChromiumExecutable, profile: Path):
    """A headless Chromium with WebGPU on, its one context on the profile folder `profile`;
    raises EnvironmentUnusable if it will not start.

    A profile on disk, unlike Playwright's default in-memory context, has Chromium keep the
    code it compiled for onnxruntime-web's wasm (its code cache): every page after the first
    loads the compiled module instead of compiling and tiering up about 20 MB of wasm again,
    which took 12-16 s of a renderer's CPU on 2 cores and held up the page's network loads
    meanwhile (docs/throughput.md, "The wasm compile every page paid")."""
    from playwright.sync_api import Error

    try:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=str(executable.path),
            args=list(chromium_flags()),
            headless=True,
        )
    except Error as error:
        raise EnvironmentUnusable(
            f"Chromium at {executable.path} (found by {executable.found_by}) did not start: "
            f"{error.message.splitlines()[0]}"
        ) from None
    for page in context.pages:  # the blank page a persistent context opens with
        page.close()
    return context


renderer_kills = 0  # bumped by kill_renderers: every page opened before then is gone


def kill_renderers() -> None:
    """Kill this process's Chromium renderers: the last resort for a page stuck in a loop.

    A renderer running JavaScript or wasm without end answers no protocol call, so Playwright's
    timeout never returns; killing it makes the pending call fail. Pages then reopen on their
    next case. Linux only (walks /proc); elsewhere a stuck page blocks the run.
    """
    global renderer_kills
    renderer_kills += 1
    for pid in descendant_pids(os.getpid()):
        try:
            if b"--type=renderer" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


browser_kills = 0  # bumped by kill_browsers: every browser launched before then is gone


def kill_browsers() -> None:
    """Kill this process's Chromium browsers (their main processes): every pending Playwright
    call on them fails, even one a wedged browser would never answer. Linux only, as
    ``kill_renderers``. Playwright learns of the death only as it reads the browser's pipe: a
    browser may still say it is connected just after."""
    global browser_kills
    browser_kills += 1
    for pid in descendant_pids(os.getpid()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"chrom" in cmdline and b"--type=" not in cmdline:
                os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def descendant_pids(root: int) -> list[int]:
    """Processes descending from ``root`` (Linux /proc; elsewhere none are found)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir() if Path("/proc/self").exists() else ():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            found.append(child)
            stack.append(child)
    return found
