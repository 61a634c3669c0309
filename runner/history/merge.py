"""Fold the outputs of parallel shards (``run --shard i/n``) into one run of a history.

Each shard runs on its own machine and writes its own ``--out`` folder holding one run. The
report compares whole runs, so the shard runs become a single run of the target history (the
one CI carries from one workflow run to the next). Shards must come from the same suites
(content digest) and the same selection less the shard; runs already merged are skipped, so
merging again changes nothing.
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.errors import InvalidInput
from runner.history.record import CaseResult, RunRecord, RunStatus, result_id
from runner.history.store import RunFolder, SqliteHistory

# When shards end differently, the merged run carries the worst status.
STATUS_ORDER = (
    RunStatus.ENVIRONMENT_UNUSABLE,
    RunStatus.INCOMPLETE,
    RunStatus.UNKNOWN,
    RunStatus.RUNNING,
    RunStatus.COMPLETE,
)


@dataclass(frozen=True)
class MergeSummary:
    run_id: str | None  # None when every shard run was merged before
    shard_runs: int
    results_added: int


def _comparable(run: RunRecord) -> tuple:
    selection = {k: v for k, v in run.selection.items() if k != "shard"}
    return run.suites_digest, repr(sorted(selection.items()))


def merged_run(run_id: str, shards: list[RunRecord]) -> RunRecord:
    """One run record standing for every shard run in `shards`."""
    backends: dict[str, Any] = {}
    for shard in shards:
        backends.update(shard.environment.get("backends") or {})
    ended = [shard.ended for shard in shards]
    return dataclasses.replace(
        shards[0],
        run_id=run_id,
        started=min(shard.started for shard in shards),
        ended=None if None in ended else max(ended),
        status=min((shard.status for shard in shards), key=STATUS_ORDER.index),
        cases=sum(shard.cases for shard in shards),
        suites=sorted({suite for shard in shards for suite in shard.suites}),
        selection={**shards[0].selection, "shard": None},
        environment={**shards[0].environment, "backends": backends},
        message="; ".join(dict.fromkeys(shard.message for shard in shards if shard.message)),
        references_computed=sum(shard.references_computed for shard in shards),
        shards=[shard.run_id for shard in shards],
    )


def _read(source: Path) -> tuple[list[RunRecord], list[CaseResult]]:
    path = source / "history.sqlite"
    if not path.is_file():
        raise InvalidInput(f"{source}: no history.sqlite; expected a run's --out folder")
    with SqliteHistory(path) as history:
        return history.runs(), history.results()


def merge_shards(sources: list[Path], out: Path, run_id: str | None = None) -> MergeSummary:
    runs: list[RunRecord] = []
    results: list[CaseResult] = []
    for source in sources:
        source_runs, source_results = _read(source)
        runs += source_runs
        results += source_results
    if len({_comparable(run) for run in runs}) > 1:
        detail = "; ".join(
            f"run {r.run_id}: suites {r.suites_digest}, selection {r.selection}" for r in runs
        )
        raise InvalidInput(
            f"shards come from different suites or selections ({detail}); "
            "expected shards of one suite set"
        )
    with SqliteHistory(out / "history.sqlite") as target:
        known = {i for run in target.runs() for i in [run.run_id, *run.shards]}
        runs = sorted((r for r in runs if r.run_id not in known), key=lambda r: r.started)
        if not runs:
            return MergeSummary(None, 0, 0)
        run = merged_run(run_id or runs[0].run_id, runs)
        shard_ids = {shard.run_id for shard in runs}
        folder = RunFolder(out / "runs" / run.run_id)
        stores = (target, folder)
        for store in stores:
            store.begin_run(run)
        added = 0
        for result in results:
            if result.run_id in shard_ids:
                merged = dataclasses.replace(
                    result, run_id=run.run_id, result_id=result_id(run.run_id, result.case_id)
                )
                for store in stores:
                    store.record(merged)
                added += 1
        for store in stores:
            store.end_run(run)
    for source in sources:  # keep each shard's own files beside the merged run
        for shard_id in shard_ids:
            if (source / "runs" / shard_id).is_dir() and source.resolve() != out.resolve():
                shutil.copytree(
                    source / "runs" / shard_id,
                    out / "runs" / "shards" / shard_id,
                    dirs_exist_ok=True,
                )
    return MergeSummary(run.run_id, len(runs), added)
