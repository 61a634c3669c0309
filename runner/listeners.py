"""What a run tells while it runs: a listener object hears of each case started and finished,
each backend opened and each note (what a backend prepares), as pytest's terminal reporter is
one plugin among others.

``RunListener`` is the protocol: any object with its four methods is a listener, and a class
that subclasses it ignores every event it does not override. ``Listeners`` passes every event
on to several. The terminal's reporters are in
``runner/reporters.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from runner.history import CaseResult
    from runner.matrix import Case


@runtime_checkable
class RunListener(Protocol):
    """Hears a run's events; in a subclass, every method does nothing unless overridden."""

    def on_start(self, case: Case) -> None:
        """`case` is about to run."""

    def on_result(self, result: CaseResult) -> None:
        """`result` is stored."""

    def on_backend(self, name: str, seconds: float) -> None:
        """Backend `name` opened, in `seconds`."""

    def on_note(self, text: str) -> None:
        """A line worth telling (a backend installing what its cases need)."""


class Listeners(RunListener):
    """Several listeners as one, each told in turn."""

    def __init__(self, listeners: Iterable[RunListener]) -> None:
        self.listeners = tuple(listeners)

    def on_start(self, case: Case) -> None:
        for listener in self.listeners:
            listener.on_start(case)

    def on_result(self, result: CaseResult) -> None:
        for listener in self.listeners:
            listener.on_result(result)

    def on_backend(self, name: str, seconds: float) -> None:
        for listener in self.listeners:
            listener.on_backend(name, seconds)

    def on_note(self, text: str) -> None:
        for listener in self.listeners:
            listener.on_note(text)


def as_listener(listener: RunListener | Iterable[RunListener] | None) -> RunListener:
    """One listener for what `execute` was given: one, several, or none."""
    if listener is None:
        return Listeners(())
    if isinstance(listener, RunListener):
        return listener
    return Listeners(listener)


class Notes(RunListener):
    """Passes the run's notes to `write` (a command that says what it does in its own way)."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self.write = write

    def on_note(self, text: str) -> None:
        self.write(text)
