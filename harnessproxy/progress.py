"""Live progress for `harnessproxy run`: rollouts by state, passed so far, ETA."""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from harnessproxy.controller.run import Progress as Counts


class LiveProgress:
    def __init__(self, console: Console) -> None:
        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self._task = self._bar.add_task("starting", total=None)
        self._last = 0.0

    def __enter__(self) -> LiveProgress:
        self._bar.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._bar.stop()

    def update(self, p: Counts) -> None:
        now = time.monotonic()
        if now - self._last < 0.1 and p.states["done"] < p.total:
            return
        self._last = now
        s = p.states
        text = (
            f"queued {s['queued']} · running {s['running']} · evaluating {s['evaluating']} · done {s['done']}"
            f" · [green]passed {p.passed}[/]" + (f" · [red]errors {p.errors}[/]" if p.errors else "")
        )
        self._bar.update(self._task, description=text, total=p.total, completed=s["done"])
