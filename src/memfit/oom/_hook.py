"""``memfit.oom_report(directory)``: report this process's CUDA out-of-memory errors."""

from __future__ import annotations

import atexit
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType, TracebackType

from memfit._errors import InvalidInputError, MemfitError
from memfit.oom import _observer
from memfit.oom._diagnosis import OOMRenderer
from memfit.oom._finalize import ReportFiles, write_report

__all__ = ["OOMHook", "oom_report", "prepare_directory"]

DEFAULT_DIRECTORY = "memfit-oom"


def prepare_directory(directory: str | os.PathLike[str]) -> Path:
    """Create ``directory`` if missing and check that files can be created in it."""
    path = Path(directory).expanduser()
    hint = "Give a directory you can write to (memfit.oom_report(DIR), memfit run --oom-dir DIR)."
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidInputError(
            f"The out-of-memory report directory '{path}' cannot be created: "
            f"{exc.strerror or exc}. {hint}"
        ) from None
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise InvalidInputError(
            f"Files cannot be created in the out-of-memory report directory '{path}': "
            f"{exc.strerror or exc}. {hint}"
        ) from None
    return path.resolve()


def _observer_module() -> ModuleType:
    """The observer in use: ``memfit run``'s copy when this process has one, so that one
    observer serves every hook."""
    return sys.modules.get("_memfit_oom_observer") or _observer


class OOMHook:
    """An installed out-of-memory report; :func:`oom_report` returns it.

    Use it as a context manager (the reports are written when the block exits, the error
    surfaced) or keep it for the life of the process (they are written on :meth:`close` or at
    exit). ``reports`` lists the reports written so far.
    """

    def __init__(self, hook: _observer.Hook, observer: ModuleType, render: OOMRenderer) -> None:
        self._hook = hook
        self._observer = observer
        self._render = render
        self._done: set[str] = set()
        self.reports: list[ReportFiles] = []
        atexit.register(self._at_exit)

    @property
    def directory(self) -> Path:
        return Path(self._hook.directory)

    @property
    def closed(self) -> bool:
        return self._hook.closed

    @property
    def pending(self) -> list[Path]:
        """Facts files of errors caught whose report is not written yet."""
        return [Path(p) for p in self._hook.captured if p not in self._done]

    def write_reports(self, *, what_if: bool = True) -> list[ReportFiles]:
        """Write the reports of the errors caught so far; returns the new ones."""
        new = []
        for path in self.pending:
            try:
                files = write_report(path, render=self._render, what_if=what_if)
            except MemfitError as exc:
                self._done.add(str(path))
                sys.stderr.write(f"memfit: the out-of-memory report was not written: {exc}\n")
                continue
            self._done.add(str(path))
            sys.stderr.write(f"memfit: out-of-memory report written to {files.report}\n")
            new.append(files)
        self.reports += new
        return new

    def close(self) -> list[ReportFiles]:
        """Stop reporting, write the pending reports; returns every report written."""
        if not self._hook.closed:
            self._observer.uninstall(self._hook)
            atexit.unregister(self._at_exit)
        self.write_reports()
        return list(self.reports)

    def _at_exit(self) -> None:
        self._hook.closed = True
        try:
            self.write_reports()
        except RuntimeError:
            # the what-if replays of a long trace use worker processes, which cannot start
            # once the interpreter is shutting down: write the report without them
            self.write_reports(what_if=False)

    def __enter__(self) -> OOMHook:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<OOMHook {self.directory} {state}, {len(self.reports)} reports>"


def oom_report(
    directory: str | os.PathLike[str] = DEFAULT_DIRECTORY,
    *,
    render: OOMRenderer,
    record_history: bool = True,
    max_entries: int = _observer.DEFAULT_MAX_ENTRIES,
    max_reports: int = _observer.DEFAULT_MAX_REPORTS,
) -> OOMHook:
    """Write a report into ``directory`` when this process runs out of CUDA memory.

    ``with memfit.oom_report("oom"): train()`` or, for the whole process,
    ``memfit.oom_report("oom")``. On an out-of-memory error the allocator snapshot
    (``oom-<time>-pid<pid>.pickle``, for ``memfit snapshot`` or pytorch.org/memory_viz) and the
    facts are saved at once; the report (``.md``, and the ``.json`` completed) follows when the
    error has surfaced. Nothing touches CUDA until the program initialises it.

    ``record_history`` records the allocator's trace (``_record_memory_history``, the last
    ``max_entries`` events, Python stacks) so the report can show peaks and allocation sites
    and replay other allocator settings; it costs a little time per allocation. At most
    ``max_reports`` errors are saved (a loop that catches OOMs and retries makes many).
    ``render`` writes the report's Markdown; ``memfit.oom_report`` passes
    ``memfit.report.oom_markdown``.
    """
    if max_entries < 1:
        raise InvalidInputError(f"max_entries={max_entries} is not accepted; give 1 or more.")
    if max_reports < 1:
        raise InvalidInputError(f"max_reports={max_reports} is not accepted; give 1 or more.")
    path = prepare_directory(directory)
    observer = _observer_module()
    hook = observer.install(
        str(path),
        record_history=record_history,
        max_entries=max_entries,
        max_reports=max_reports,
    )
    return OOMHook(hook, observer, render)
