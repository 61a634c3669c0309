"""``bisect``: the first published version, between a good and a bad one, whose verdict for one
case differs from the good version's.

Each probe is one ordinary run (``pipeline.execute``, stored in the history like any run) of just
what the case needs on one version: the cases of its layout-change sequence up to it, on its one
build. Candidates are the backend's published versions from good to bad in version order (dev
builds before their release, whatever the publish times). A binary search over them needs at most
ceil(log2 N) + 1 probes for N candidates (the good version's own probe included); a candidate
that cannot run the case (the build is missing, the install failed) is skipped and said, as
``git bisect skip`` does, and a neighbour is probed instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runner.backends import REGISTRY
from runner.backends.base import BackendOptions
from runner.errors import InvalidInput
from runner.listeners import Notes
from runner.matrix import Case
from runner.pipeline import RunSettings, execute
from runner.selection import RunPlan, sequence_until
from runner.suite.spec import Suite


@dataclass(frozen=True)
class Probe:
    version: str
    verdict: str | None  # the case's headline verdict; None when the version could not run it
    run_id: str
    message: str = ""  # the result's message, or why the version could not run the case


@dataclass(frozen=True)
class Bisection:
    case_id: str
    candidates: tuple[str, ...]  # good .. bad, in version order
    probes: tuple[Probe, ...]  # in the order they ran
    last_agreeing: Probe
    first_differing: Probe | None  # None: every version up to bad agrees with good
    skipped: tuple[Probe, ...]
    # Versions between the last agreeing and the first differing that could not run the case:
    # the change may be in any of them (nothing else is left to probe).
    untestable: tuple[str, ...]
    commit: str | None  # the first differing version's upstream commit, where it says
    compare_url: str | None  # upstream changes from the last agreeing to the first differing


def bisect_versions(
    suite: Suite,
    case: Case,
    good: str,
    bad: str,
    out: Path,
    options: BackendOptions,
    say: Callable[[str], None] = print,
) -> Bisection:
    """Raises InvalidInput for versions that name nothing, or a good version that cannot run
    the case."""
    descriptor = REGISTRY[case.backend.name]
    history = descriptor.history()
    good_target, bad_target = (
        descriptor.resolved(descriptor.with_versions([case.backend], [text])[0])
        for text in (good, bad)
    )
    candidates = history.between(good_target.version, bad_target.version)
    if len(candidates) < 2:
        raise InvalidInput(
            f"--good {good} ({good_target.version}) must be an older published version than "
            f"--bad {bad} ({bad_target.version})"
        )
    probes: list[Probe] = []

    def probe(index: int) -> Probe:
        version = candidates[index]
        target = dataclasses.replace(case.backend, version=version, label=None)
        say(f"probe {len(probes) + 1}: {descriptor.name} {version}")
        recorded = {"bisect": {"case": case.id, "version": version}}
        plan = RunPlan(sequence_until(suite, case, target).cases, selection=recorded)
        summary = execute(plan, out, options, RunSettings(localize=False), Notes(say))
        wanted = dataclasses.replace(case, backend=target).id
        result = next((r for r in summary.results if r.case_id == wanted), None)
        if result is None or result.verdict == "skipped":
            why = result.message if result else summary.message or summary.status
            found = Probe(version, None, summary.run_id, why)
        else:
            found = Probe(version, result.verdict, summary.run_id, result.message)
        say(
            f"  {version}: {found.verdict or 'skipped'}"
            + (f" ({found.message})" if found.verdict is None else "")
        )
        probes.append(found)
        return found

    first = probe(0)
    if first.verdict is None:
        raise InvalidInput(f"the good version {candidates[0]} cannot run the case: {first.message}")
    low, high = 0, len(candidates)  # candidates[low] agrees; the first to differ is <= high
    tried: dict[int, Probe] = {0: first}
    while True:
        untried = [i for i in range(low + 1, high) if i not in tried]
        if not untried:
            break
        middle = (low + high) // 2
        index = min(untried, key=lambda i: (abs(i - middle), i))
        tried[index] = probe(index)
        if tried[index].verdict is None:
            continue
        if tried[index].verdict == first.verdict:
            low = index
        else:
            high = index
    last = tried[low]
    differing = tried.get(high) if high < len(candidates) else None
    return Bisection(
        case_id=case.id,
        candidates=tuple(candidates),
        probes=tuple(probes),
        last_agreeing=last,
        first_differing=differing,
        skipped=tuple(p for p in probes if p.verdict is None),
        untestable=tuple(candidates[i] for i in range(low + 1, high) if i in tried),
        commit=history.commit(differing.version) if differing else None,
        compare_url=history.compare_url(last.version, differing.version) if differing else None,
    )
