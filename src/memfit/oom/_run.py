"""``memfit run -- COMMAND``: run a program with the out-of-memory report, unchanged."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memfit._errors import InvalidInputError, MemfitError
from memfit.oom import _observer
from memfit.oom._bootstrap import write_bootstrap
from memfit.oom._diagnosis import OOMRenderer
from memfit.oom._finalize import ReportFiles, write_report
from memfit.oom._hook import DEFAULT_DIRECTORY, prepare_directory

__all__ = ["RunResult", "run_with_report"]


@dataclass(frozen=True, slots=True)
class RunResult:
    """How the command ended, and the reports of its out-of-memory errors.

    ``returncode`` is the child's (negative: killed by that signal, as in ``subprocess``);
    ``problems`` lists facts files that could not be turned into a report.
    """

    returncode: int
    directory: Path
    reports: tuple[ReportFiles, ...]
    problems: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """The child's return code, the report folder, each report's files and the problems,
        for ``--json``."""
        return {
            "returncode": self.returncode,
            "oom_dir": str(self.directory),
            "reports": [r.to_dict() for r in self.reports],
            "problems": list(self.problems),
        }


def _child_env(
    base: Mapping[str, str], boot: Path, directory: Path, history: bool, entries: int
) -> dict[str, str]:
    env = dict(base)
    rest = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(boot) + (os.pathsep + rest if rest else "")
    env[_observer.ENV_DIR] = str(directory)
    env[_observer.ENV_HISTORY] = "1" if history else "0"
    env[_observer.ENV_MAX_ENTRIES] = str(entries)
    return env


def _wait(proc: subprocess.Popen[bytes]) -> int:
    """Wait for the child; Ctrl-C reaches it too, so the parent waits for it to end."""
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            continue


def run_with_report(
    command: Sequence[str],
    directory: str | os.PathLike[str] = DEFAULT_DIRECTORY,
    *,
    render: OOMRenderer,
    record_history: bool = True,
    max_entries: int = _observer.DEFAULT_MAX_ENTRIES,
    env: Mapping[str, str] | None = None,
) -> RunResult:
    """Run ``command`` with the out-of-memory report installed in every Python process it
    starts (through a generated ``sitecustomize``, see ``_bootstrap``), wait for it, then write
    the reports of the errors it had into ``directory``, their Markdown written by ``render``
    (``memfit run`` passes ``memfit.report.oom_markdown``).
    """
    argv = [str(a) for a in command]
    if not argv:
        raise InvalidInputError(
            "No command to run: give it after '--', e.g. memfit run -- python train.py."
        )
    if max_entries < 1:
        raise InvalidInputError(f"--max-entries {max_entries} is not accepted; give 1 or more.")
    path = prepare_directory(directory)
    before = {p.name for p in path.glob("oom-*.json")}
    boot = Path(tempfile.mkdtemp(prefix="memfit-run-"))
    try:
        write_bootstrap(boot)
        child_env = _child_env(
            os.environ if env is None else env, boot, path, record_history, max_entries
        )
        try:
            proc = subprocess.Popen(argv, env=child_env)
        except FileNotFoundError:
            raise InvalidInputError(
                f"The command '{argv[0]}' was not found. Give a program on PATH or a path to "
                "one, e.g. memfit run -- python train.py."
            ) from None
        except PermissionError:
            raise InvalidInputError(
                f"The command '{argv[0]}' cannot be run: it is not executable. Run it through "
                f"its interpreter, e.g. memfit run -- python {argv[0]}."
            ) from None
        returncode = _wait(proc)
    finally:
        shutil.rmtree(boot, ignore_errors=True)
    reports = []
    problems = []
    for facts in sorted(p for p in path.glob("oom-*.json") if p.name not in before):
        try:
            reports.append(write_report(facts, render=render))
        except MemfitError as exc:
            problems.append(str(exc))
    return RunResult(returncode, path, tuple(reports), tuple(problems))
