"""What the history says: changes since the previous comparable run, flaky cases, error and
speedup trends. Pure functions of the ``History`` frames; the renderers only lay them out.
"""

from __future__ import annotations

import math

import pandas as pd

from runner.matrix import unversioned_id
from runner.report.history import History
from runner.verdicts import FAILING_OUTCOMES

FAILING_KINDS = ("unexpected", "xpass")  # the failing outcomes, as kinds (``outcome_kind``)

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


# Failures first everywhere: a row's rank is its most urgent kind; pass and skip fold away.
KIND_RANK = {"unexpected": 0, "xpass": 1, "known": 2, "skipped": 3, "pass": 4}
QUIET = frozenset({"pass", "skipped"})

# Pivot columns: a backend's modes in the order a sequence runs them.
MODES = ("eager", "capture", "capture-revisit")


def outcome_kind(outcome: str, verdict: str) -> str:
    """pass | known | unexpected | xpass | skipped (keys of ``KIND_LABELS``)."""
    if outcome == "expected":
        return "pass" if verdict == "pass" else "known"
    return {"unexpected-pass": "xpass", "skipped": "skipped"}.get(outcome, "unexpected")


def with_kind(results: pd.DataFrame) -> pd.DataFrame:
    """`results` with a ``kind`` column (``outcome_kind`` of each result)."""
    kinds = map(outcome_kind, results["outcome"], results["verdict"])
    return results.assign(kind=pd.Series(list(kinds), index=results.index, dtype=object))


def quiet(kinds: pd.DataFrame) -> pd.Series:
    """Per row of a frame of kinds: nothing but passes, skips and cases that did not run."""
    return (kinds.isin(QUIET) | kinds.isna()).all(axis=1)


def kind_counts(history: History) -> pd.DataFrame:
    """Results per run (rows: every run, oldest first) and kind (columns, ``KIND_LABELS``
    order): what the run-by-run chart stacks."""
    results = with_kind(history.results)
    counts = pd.crosstab(results["run_id"], results["kind"])
    return counts.reindex(index=history.runs["run_id"], columns=list(KIND_LABELS), fill_value=0)


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
    if before_outcome in FAILING_OUTCOMES and outcome not in FAILING_OUTCOMES | {"skipped"}:
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


def _rank(kinds: pd.DataFrame, latest: pd.Series) -> pd.Series:
    """Failures first: by the latest result's kind when it fails, then rows that failed in
    another column, then quiet rows."""
    failing_now = latest.map(KIND_RANK).where(~latest.isin(QUIET))
    return failing_now.fillna(quiet(kinds).map({False: 3, True: 4}))


def status_grid(results: pd.DataFrame, run_ids: list[str]) -> pd.DataFrame:
    """Case by run: columns (verdict | outcome | kind, run_id), missing where a case did not
    run; cases failing in their latest run first, then those that failed earlier, then by id."""
    results = with_kind(results)
    fields = ["verdict", "outcome", "kind"]
    grid = results.pivot_table(index="case_id", columns="run_id", values=fields, aggfunc="last")
    grid = grid.reindex(columns=pd.MultiIndex.from_product([fields, run_ids]))
    rank = _rank(grid["kind"], with_kind(case_facets(results))["kind"])
    return grid.loc[sorted(grid.index, key=lambda case: (rank[case], case))]


def latest_pivot(results: pd.DataFrame) -> pd.DataFrame:
    """One run's results as one row per case without backend and mode (its ``cell`` less the
    backend: ``model/shape/layout``, or an op test's ``model/file/test/case``) by one column
    per backend id (backend and build) and mode: columns (verdict | outcome | kind | result_id
    | suite | bundle, backend, mode). Rows failing first (``KIND_RANK`` of their most urgent
    cell), then by key."""
    results = with_kind(results)
    rows = [
        cell.removesuffix(f"/{backend}")
        for cell, backend in zip(results["cell"], results["backend"], strict=True)
    ]
    modes = [
        f"{capture}-revisit" if record.revisit else capture
        for capture, record in zip(results["capture"], results["record"], strict=True)
    ]
    results = results.assign(row=rows, mode=pd.Categorical(modes, categories=MODES))
    fields = ["verdict", "outcome", "kind", "result_id", "suite", "bundle"]
    pivot = results.pivot_table(
        index="row", columns=["backend", "mode"], values=fields, aggfunc="last", observed=True
    )
    # Every field over the same columns: a field with no value in a column (bundle, for
    # backends without builds) lost it.
    columns = pivot["kind"].columns
    pivot = pivot.reindex(
        columns=pd.MultiIndex.from_tuples([(f, *c) for f in fields for c in columns])
    )
    rank = pivot["kind"].apply(lambda column: column.map(KIND_RANK)).min(axis=1)
    return pivot.loc[sorted(pivot.index, key=lambda row: (rank[row], row))]


def version_grid(results: pd.DataFrame) -> pd.DataFrame:
    """One run over several versions of a backend: one row per case without its version
    (``unversioned_id``), one column per version in the order the run ran them; columns
    (verdict | outcome | kind | result_id | label, version). Empty when the run had one
    version."""
    ran = with_kind(results.dropna(subset=["version"]))
    if ran["version"].nunique() < 2:
        return pd.DataFrame()
    labels = [backend.partition("@")[2].partition(":")[0] for backend in ran["backend"]]
    ran = ran.assign(row=[unversioned_id(c) for c in ran["case_id"]], label=labels)
    grid = ran.pivot_table(
        index="row",
        columns="version",
        values=["verdict", "outcome", "kind", "result_id", "label"],
        aggfunc="last",
    )
    order = list(dict.fromkeys(ran["version"]))
    return grid.reindex(
        columns=pd.MultiIndex.from_product([grid.columns.levels[0], order])
    ).sort_index()


def version_changes(grid: pd.DataFrame) -> pd.DataFrame:
    """Where a case's verdict differs between consecutive versions of `version_grid` (both
    ran it): case, from version, to version, old and new verdict."""
    changes = []
    versions = list(grid["verdict"].columns) if not grid.empty else []
    for row, verdicts in grid["verdict"].iterrows() if versions else ():
        ran = [(v, verdicts[v]) for v in versions if isinstance(verdicts[v], str)]
        for (before, old), (after, new) in zip(ran, ran[1:], strict=False):
            if old != new:
                changes.append((row, before, after, old, new))
    return pd.DataFrame(changes, columns=["case", "from", "to", "before", "after"])


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
    """Per case: its max abs error in each run (run_index -> error), latest, worst, tolerance,
    and whether the worst exceeds the tolerance (``over``).

    Cases that never produced a finite error are left out. Those over tolerance come first,
    failing in their latest run first (``KIND_RANK``), each group the worst relative to
    tolerance first.
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
    ratio = table["worst"] / table["tolerance"].where(table["tolerance"] > 0)
    table = table.assign(
        over=ratio > 1, _ratio=ratio, _rank=with_kind(table)["kind"].map(KIND_RANK)
    )
    table = (
        table.rename_axis("case_id")
        .reset_index()
        .sort_values(
            ["over", "_rank", "_ratio", "worst", "case_id"],
            ascending=[False, True, False, False, True],
            na_position="last",
        )
    )
    return table.drop(columns=["_ratio", "_rank"]).reset_index(drop=True)


def speedups(results: pd.DataFrame) -> pd.DataFrame:
    """Per capture result with an eager twin in the same run: eager / replay median run time."""
    capture = results[results["capture"] == "capture"]
    eager = results[results["capture"] == "eager"][["run_id", "cell", "median_run_ms"]]
    paired = capture.merge(eager, on=["run_id", "cell"], suffixes=("", "_eager"))
    paired = paired.assign(speedup=paired["median_run_ms_eager"] / paired["median_run_ms"])
    speedup = pd.to_numeric(paired["speedup"])
    finite = speedup.gt(0) & speedup.lt(math.inf)  # a boolean mask even when empty
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
