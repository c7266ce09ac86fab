"""The files ``memfit run`` puts first on the child's ``PYTHONPATH``.

Python imports ``sitecustomize`` at startup from the first ``sys.path`` entry that has one, so
a folder of ours first on ``PYTHONPATH`` reaches every Python process the command starts
(``torchrun`` workers and ``spawn`` data loader workers included), without any change to the
script. Ours loads a copy of the observer (``_memfit_oom_observer``, standard library only, so
the child's Python needs no memfit), arms it from the ``MEMFIT_OOM_*`` variables, and then
runs the ``sitecustomize`` that would have run without us (a distribution's, or one on the
user's own ``PYTHONPATH``), so that keeps working. The observer is installed only once the
program imports torch; a process that never does pays for one small import. It also starts a
copy of memfit.monitor's publisher (``_memfit_publisher``), which writes the allocator stats
for ``memfit watch``/``export`` once the program starts a GPU (``MEMFIT_PUBLISH=0``: off), and
copies of memfit.monitor's framework modules: the knobs (``_memfit_frameworks``), which apply
``memfit run --limit``'s runtime settings when torch or TensorFlow is imported, and the numbers
(``_memfit_framework_numbers``), which the publisher reads TensorFlow's and JAX's with.

``python -I``, ``-E`` and ``-S`` ignore ``PYTHONPATH`` or ``sitecustomize``: such a process
gets no report.
"""

from __future__ import annotations

from pathlib import Path

from memfit.monitor import frameworks_sources, publisher_source
from memfit.oom import _observer

__all__ = ["OBSERVER_MODULE", "PUBLISHER_MODULE", "write_bootstrap"]

OBSERVER_MODULE = "_memfit_oom_observer"
PUBLISHER_MODULE = "_memfit_publisher"  # memfit.monitor's publisher, for memfit watch/export

_SITECUSTOMIZE = '''\
"""Written by memfit run: report CUDA out-of-memory errors of this process, then run the
sitecustomize that would have run without memfit."""


def _memfit_oom_arm():
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    numbers = knobs = None
    try:
        import _memfit_framework_numbers as numbers
        import _memfit_frameworks as knobs
    except Exception as exc:
        sys.stderr.write(f"memfit: the framework modules did not load: {exc!r}\\n")
    try:
        import _memfit_oom_observer

        _memfit_oom_observer.arm_from_environment(knobs.after_import)
    except Exception as exc:
        sys.stderr.write(f"memfit: the out-of-memory report is off in this process: {exc!r}\\n")
    try:
        knobs.arm_from_environment(numbers.started)  # memfit run --limit: the runtime parts
    except Exception as exc:
        sys.stderr.write(f"memfit: the memory settings are not applied: {exc!r}\\n")
    try:
        import _memfit_publisher

        _memfit_publisher.arm_from_environment(numbers)  # stats for memfit watch / export
    except Exception as exc:
        sys.stderr.write(f"memfit: the allocator stats are not published: {exc!r}\\n")
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_memfit_oom_arm()
del _memfit_oom_arm
'''


def write_bootstrap(directory: Path) -> None:
    """Write ``sitecustomize.py`` and the copies of the observer and the publisher."""
    source = Path(_observer.__file__).read_text(encoding="utf-8")
    (directory / f"{OBSERVER_MODULE}.py").write_text(source, encoding="utf-8")
    publisher = publisher_source()
    (directory / f"{PUBLISHER_MODULE}.py").write_text(publisher, encoding="utf-8")
    for name, source in frameworks_sources().items():
        (directory / f"{name}.py").write_text(source, encoding="utf-8")
    (directory / "sitecustomize.py").write_text(_SITECUSTOMIZE, encoding="utf-8")
