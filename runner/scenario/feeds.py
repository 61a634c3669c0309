"""Which graph and inputs each run of a scenario gets: pure values (``runner.schedule``)."""

from __future__ import annotations

from runner.scenario.values import RELEASE, RUN
from runner.schedule import Feed
from runner.suite.scenarios import Scenario


def scenario_feeds(scenario: Scenario) -> tuple[Feed | None, ...]:
    """Per step, a run's feed (None for other steps). Every run with new inputs (`rewrite`,
    `fresh`) gets a draw of its own, so no two runs share inputs by accident; `same` repeats
    its session's previous run of that graph (the loader checked there is one)."""
    draws = 0
    last: dict[tuple[str, int], Feed] = {}
    feeds: list[Feed | None] = []
    for step in scenario.steps:
        if step.action == RELEASE:
            last = {k: v for k, v in last.items() if k[0] != step.session}
        if step.action != RUN:
            feeds.append(None)
            continue
        if step.inputs == "same":
            feed = last[step.session, step.graph]
        else:
            feed = Feed(step.graph, (step.graph, draws))
            draws += 1
        last[step.session, step.graph] = feed
        feeds.append(feed)
    return tuple(feeds)
