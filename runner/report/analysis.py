"""What the history says: changes since the previous comparable run, flaky cases, error and
speedup trends. Pure functions of the ``History`` frames; the renderers only lay them out.
"""

from __future__ import annotations

import math

import pandas as pd

from runner.report.history import History
from runner.verdicts import FAILING_OUTCOMES as FAILING

# A case whose verdict changed this often within the window flaps; one change is a regression
# or a fix, and shows under "changes" instead.
FLAKY_MIN_FLIPS = 2

CHANGE_ORDER = ("new failure", "unexpected pass", "fixed", "verdict changed")

FACETS = ("backend", "bundle", "suite", "verdict", "outcome", "result_id")

# How a result reads at a glance: its outcome, with expected failures (known bugs) apart.
KIND_LABELS = {
    "pass": "pass",
    "known": "known bug",
    "unexpected": "unexpected",
    "xpass": "unexpected pass",
    "skipped": "skipped",
}


def outcome_kind(outcome: str, verdict: str) -> str:
    """pass | known | unexpected | xpass | skipped (keys of ``KIND_LABELS``)."""
    if outcome == "expected":
        return "pass" if verdict == "pass" else "known"
    return {"unexpected-pass": "xpass", "skipped": "skipped"}.get(outcome, "unexpected")


def latest_run(history: History) -> pd.Series | None:
    return None if history.empty else history.runs.iloc[-1]


def previous_comparable(history: History, run_id: str) -> str | None:
    """The newest earlier run sharing at least one case id with `run_id`."""
    position = history.runs.index[history.runs["run_id"] == run_id][0]
    cases = set(history.run_results(run_id)["case_id"])
    for earlier in reversed(history.runs["run_id"].iloc[:position].tolist()):
        if cases & set(history.run_results(earlier)["case_id"]):
            return earlier
    return None


def _change(before_outcome, before_verdict, outcome: str, verdict: str) -> str | None:
    if outcome == "unexpected-pass" and before_outcome != "unexpected-pass":
        return "unexpected pass"
    if outcome == "unexpected" and before_outcome != "unexpected":
        return "new failure"
    if before_outcome in FAILING and outcome not in FAILING | {"skipped"}:
        return "fixed"
    if before_verdict is not None and verdict != before_verdict:
        return "verdict changed"
    return None


def changes(history: History, run_id: str, previous_id: str | None) -> pd.DataFrame:
    """Per case of `run_id`: what changed against `previous_id` (new failure, fixed, ...).

    A case new in this run counts as a new failure when it fails; without a previous run
    nothing is a change.
    """
    columns = [
        "change",
        "case_id",
        "before_verdict",
        "before_outcome",
        "verdict",
        "outcome",
        "bug",
        "backend",
        "bundle",
        "suite",
        "result_id",
    ]
    if previous_id is None:
        return pd.DataFrame(columns=columns)
    now = history.run_results(run_id).drop_duplicates("case_id", keep="last")
    before = (
        history.run_results(previous_id)
        .drop_duplicates("case_id", keep="last")
        .set_index("case_id")[["verdict", "outcome"]]
        .add_prefix("before_")
    )
    joined = now.join(before, on="case_id").astype(object)
    joined = joined.where(joined.notna(), None)
    joined["change"] = [
        _change(row.before_outcome, row.before_verdict, row.outcome, row.verdict)
        for row in joined.itertuples()
    ]
    found = joined[joined["change"].notna()]
    order = found["change"].map(CHANGE_ORDER.index)
    return found.assign(_order=order).sort_values(["_order", "case_id"])[columns]


def recent_runs(history: History, last: int) -> list[str]:
    """Ids of the last `last` runs that recorded any result, oldest first."""
    with_results = history.runs[history.runs["run_id"].isin(history.results["run_id"])]
    return with_results["run_id"].tolist()[-last:]


def in_runs(history: History, run_ids: list[str]) -> pd.DataFrame:
    return history.results[history.results["run_id"].isin(run_ids)].sort_values(
        ["run_index", "case_id"], kind="stable"
    )


def case_facets(results: pd.DataFrame) -> pd.DataFrame:
    """Per case id, its latest backend, bundle, suite, verdict...: what the page filters on."""
    latest = results.sort_values("run_index", kind="stable").drop_duplicates("case_id", keep="last")
    return latest.set_index("case_id")[list(FACETS)].sort_index()


def status_grid(results: pd.DataFrame, run_ids: list[str]) -> pd.DataFrame:
    """Case by run: columns (verdict | outcome, run_id); missing where a case did not run."""
    grid = results.pivot_table(
        index="case_id", columns="run_id", values=["verdict", "outcome"], aggfunc="last"
    )
    full = pd.MultiIndex.from_product([["verdict", "outcome"], run_ids])
    return grid.reindex(columns=full).sort_index()


def flaky_cases(results: pd.DataFrame, min_flips: int = FLAKY_MIN_FLIPS) -> pd.DataFrame:
    """Cases whose verdict flipped at least `min_flips` times over the runs they ran in."""
    grouped = results.sort_values("run_index", kind="stable").groupby("case_id")
    verdicts = grouped["verdict"].agg(list)
    flips = verdicts.map(lambda seq: sum(a != b for a, b in zip(seq, seq[1:], strict=False)))
    table = pd.DataFrame(
        {
            "verdicts": verdicts,
            "outcomes": grouped["outcome"].agg(list),
            "flips": flips,
            "runs": verdicts.map(len),
        }
    )
    table = table[table["flips"] >= min_flips].join(case_facets(results))
    return table.sort_values(["flips", "case_id"], ascending=[False, True]).reset_index()


def error_trends(results: pd.DataFrame) -> pd.DataFrame:
    """Per case: its max abs error in each run (run_index -> error), latest, worst, tolerance.

    Cases that never produced a finite error are left out; the worst relative to tolerance
    come first.
    """
    measured = results.dropna(subset=["max_abs_error"]).sort_values("run_index", kind="stable")
    measured = measured.assign(
        point=list(zip(measured["run_index"], measured["max_abs_error"], strict=True))
    )
    grouped = measured.groupby("case_id")
    table = pd.DataFrame(
        {
            "points": grouped["point"].agg(list),
            "latest": grouped["max_abs_error"].last(),
            "worst": grouped["max_abs_error"].max(),
            "tolerance": grouped["tolerance_abs"].last(),
        }
    ).join(case_facets(results))
    table = table.assign(_ratio=table["worst"] / table["tolerance"].where(table["tolerance"] > 0))
    table = table.sort_values(["_ratio", "worst"], ascending=False, na_position="last")
    return table.drop(columns="_ratio").rename_axis("case_id").reset_index()


def speedups(results: pd.DataFrame) -> pd.DataFrame:
    """Per capture result with an eager twin in the same run: eager / replay median run time."""
    capture = results[results["capture"] == "capture"]
    eager = results[results["capture"] == "eager"][["run_id", "cell", "median_run_ms"]]
    paired = capture.merge(eager, on=["run_id", "cell"], suffixes=("", "_eager"))
    paired = paired.assign(speedup=paired["median_run_ms_eager"] / paired["median_run_ms"])
    finite = paired["speedup"].map(lambda v: math.isfinite(v) and v > 0)
    return paired[finite][["run_id", "run_index", "backend", "bundle", "case_id", "speedup"]]


def speedup_trend(pairs: pd.DataFrame) -> pd.DataFrame:
    """Median speedup per run (rows, by run index) and backend id (columns: backend and build)."""
    return pairs.pivot_table(
        index="run_index", columns="backend", values="speedup", aggfunc="median"
    ).sort_index()


def report_failures(results: pd.DataFrame) -> pd.DataFrame:
    """Results worth a detail block: a failing verdict (known bug or not) or an unexpected pass;
    what fails the run first."""
    shown = results[
        ~results["verdict"].isin(["pass", "skipped"]) | (results["outcome"] == "unexpected-pass")
    ]
    rank = shown["outcome"].map({"unexpected": 0, "unexpected-pass": 1}).fillna(2)
    return shown.assign(_rank=rank).sort_values(["_rank", "case_id"]).drop(columns="_rank")
