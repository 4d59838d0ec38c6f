"""The CLI's progress callback: one bar per name, its total following the set being worked on."""

from __future__ import annotations

from rich.progress import Progress

from services.cli.ui import task_updater


def test_a_name_reused_for_a_second_set_takes_its_total() -> None:
    bar = Progress(disable=True)
    update = task_updater(bar)
    update("index", 2600, 2600)  # first corpus done
    update("index", 4858, 4858)  # second, larger corpus: not "4858/2600"
    (task,) = bar.tasks
    assert (task.completed, task.total) == (4858, 4858)
