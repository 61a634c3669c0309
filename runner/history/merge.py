"""Merge the outputs of ``--shard i/n`` runs into one history, without duplicates.

Shards must come from the same suites (content digest) and the same selection less the shard;
a result already present is not inserted twice, so merging again changes nothing.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from runner.errors import InvalidInput
from runner.history.store import SqliteHistory


@dataclass(frozen=True)
class MergeSummary:
    runs: int
    results_added: int


def _comparable(run: dict) -> tuple:
    selection = {k: v for k, v in run.get("selection", {}).items() if k != "shard"}
    return run.get("suites_digest"), repr(sorted(selection.items()))


def merge_shards(sources: list[Path], out: Path) -> MergeSummary:
    histories = []
    for source in sources:
        path = source / "history.sqlite"
        if not path.is_file():
            raise InvalidInput(f"{source}: no history.sqlite; expected a run's --out folder")
        histories.append((source, SqliteHistory(path)))
    try:
        runs = [(source, run) for source, history in histories for run in history.runs()]
        kinds = {_comparable(run) for _, run in runs}
        if len(kinds) > 1:
            detail = "; ".join(f"{source}: run {run['run_id']} suites {run.get('suites_digest')}"
                               for source, run in runs)
            raise InvalidInput(f"shards come from different suites or selections ({detail}); "
                               "expected shards of one suite set")
        target = SqliteHistory(out / "history.sqlite")
        before = len(target.results())
        for source, history in histories:
            for run in history.runs():
                target.begin_run(run)
                for result in history.results(run["run_id"]):
                    target.record(result)
                run_folder = source / "runs" / run["run_id"]
                if run_folder.is_dir() and source.resolve() != out.resolve():
                    shutil.copytree(run_folder, out / "runs" / run["run_id"], dirs_exist_ok=True)
        added = len(target.results()) - before
        target.close()
    finally:
        for _, history in histories:
            history.close()
    return MergeSummary(len(runs), added)
