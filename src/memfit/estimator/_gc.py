"""CPython's cyclic garbage collector while an estimate imports libraries and traces a step.

An estimate imports torch and a model library (with transformers, over a million objects the
collector tracks), then makes tens of thousands of short-lived objects while it traces. The
collector's full passes visit every tracked object: in a Llama-2-7B estimate, six full passes
while the libraries import and one in the trace, about a tenth of the estimate's time.

* :func:`gc_paused`: no collection while memfit imports libraries (their garbage, if any,
  is collected later as usual).
* :func:`gc_frozen`: what exists when a trace starts (modules, the model library, the user's
  objects) is moved out of the collector's sight while the trace runs (``gc.freeze``), so that
  a pass visits only what the trace made; it comes back on exit (``gc.unfreeze``).

Neither changes what a trace records: a storage is recorded as freed when its last reference
goes, and the trace's own objects are collected as before. Both restore the collector's state,
and both leave it alone where the process manages it itself (collector disabled, or objects
frozen already: unfreezing would undo the process's own freeze).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_frozen", "gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic collection inside the block (imports); the collector's state is restored."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@contextmanager
def gc_frozen() -> Iterator[None]:
    """The objects that exist on entry are left out of collections until exit."""
    if not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
