"""The commands of ``memfit``, in the order its help lists them: the one registry the parser
and the runner read (no command is found by building a module name)."""

from __future__ import annotations

from memfit.cli import (
    _calibrate_cmd,
    _doctor_cmd,
    _estimate_cmd,
    _export_cmd,
    _plan_cmd,
    _run_cmd,
    _serve_cmd,
    _snapshot_cmd,
    _validate_cmd,
    _watch_cmd,
)
from memfit.cli._command import Command

__all__ = ["COMMANDS", "command_named"]

COMMANDS: tuple[Command, ...] = (
    _estimate_cmd.COMMAND,
    _validate_cmd.COMMAND,
    _plan_cmd.COMMAND,
    _serve_cmd.COMMAND,
    _calibrate_cmd.COMMAND,
    _snapshot_cmd.COMMAND,
    _run_cmd.COMMAND,
    _watch_cmd.COMMAND,
    _doctor_cmd.COMMAND,
    _export_cmd.COMMAND,
)
_BY_NAME = {command.name: command for command in COMMANDS}


def command_named(name: str) -> Command:
    """The command ``name`` (one the parser accepted)."""
    return _BY_NAME[name]
