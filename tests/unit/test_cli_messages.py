"""CLI error lines print messages verbatim: they quote user input and log tails, whose brackets rich
would otherwise read as markup (a stray closing tag raised MarkupError; "[INFO]" vanished)."""

from __future__ import annotations

from services.cli import ui
from services.common.errors import ErrorCode, RampartError
from tests.conftest import flat

MESSAGE = "file [draft].pdf failed; log: 2026 [INFO] started [/foo] [pid 12]"


def test_fail_prints_the_message_verbatim() -> None:
    with ui.console.capture() as captured:
        exit_ = ui.fail(RampartError(ErrorCode.INVALID_ARGUMENT, MESSAGE))
    assert exit_.exit_code == 2
    assert MESSAGE in flat(captured.get())


def test_print_error_prints_the_message_verbatim() -> None:
    with ui.console.capture() as captured:
        ui.print_error(MESSAGE)
    assert f"error: {MESSAGE}" in flat(captured.get())
