"""The exceptions memfit raises. All derive from :class:`MemfitError`.

::

    MemfitError
    ├── InvalidInputError        a value the user gave is malformed or unknown
    │   └── UnknownModelError    a model name matched nothing (carries close matches)
    ├── MissingExtraError        an optional dependency is not installed
    ├── UserCodeError            the user's own code (factory, make_batch, module) raised
    ├── TraceError               the step could not run on fake tensors
    ├── UnsupportedWorkloadError a valid step memfit cannot estimate yet (torch.compile)
    ├── NoGPUError               a command that needs a GPU found none
    ├── DoesNotFitError          no batch size tried fits the GPU (find_batch_size)
    ├── UnrecoverableOOMError    AutoMicrobatch cannot avoid an out-of-memory error
    ├── HostMemoryError          activation offload would pin more host memory than is free
    ├── AllocatorOOM             the emulated caching allocator ran out (memfit.allocator)
    ├── NvmlCallError            one NVML call failed (memfit.monitor; samples show it as a
    │                            status or a missing value)
    └── ConfigurationTooLateError  memfit.configure(strict=True): a framework's runtime had
                                 started and read its memory settings (memfit.monitor)

    ConfigurationWarning         (a UserWarning, not an error) a memory setting memfit.configure
                                 could not put in effect (memfit.monitor)

The last three are defined beside the code that raises them and exported by their package.
Messages are plain sentences that name the offending value and the fix; the CLI prints them
without a traceback.
"""

from __future__ import annotations

__all__ = [
    "DoesNotFitError",
    "HostMemoryError",
    "InvalidInputError",
    "MemfitError",
    "MissingExtraError",
    "NoGPUError",
    "TraceError",
    "UnknownModelError",
    "UnrecoverableOOMError",
    "UnsupportedWorkloadError",
    "UserCodeError",
]


class MemfitError(Exception):
    """Base class of every error memfit raises on purpose."""


class InvalidInputError(MemfitError, ValueError):
    """A value given by the user is malformed or not one of the accepted ones."""


class UnknownModelError(InvalidInputError):
    """A model name matched no catalog entry, hub prefix or importable factory."""

    def __init__(self, message: str, close_matches: list[str] | None = None) -> None:
        super().__init__(message)
        self.close_matches = close_matches or []


class MissingExtraError(MemfitError, ImportError):
    """An optional dependency is needed for this feature and is not installed."""

    def __init__(self, package: str, feature: str, extra: str) -> None:
        super().__init__(
            f"{feature} needs the package '{package}', which is not installed. "
            f"Install it with: pip install 'memfit[{extra}]'"
        )
        self.package = package
        self.extra = extra


class UserCodeError(MemfitError):
    """The user's own code raised: a model factory, a ``make_batch``, a module at import.

    The message names the user's exception, its message and the line of the user's file it came
    from; the original exception is ``__cause__`` (``--debug`` shows its traceback).
    ``location`` is ``"file.py:line"`` where known.
    """

    def __init__(self, message: str, location: str | None = None) -> None:
        super().__init__(message)
        self.location = location


class TraceError(MemfitError):
    """The workload could not be run on fake tensors (data-dependent op, custom kernel...)."""

    def __init__(self, message: str, op: str | None = None, module: str | None = None) -> None:
        super().__init__(message)
        self.op = op
        self.module = module


class UnsupportedWorkloadError(MemfitError):
    """A valid workload that memfit cannot estimate yet, e.g. a step compiled with
    ``torch.compile`` (its memory is the compiler's, not the eager kernels'). The message says
    what is not supported and the way forward (for a compiled model: ``compiled="eager"``, an
    upper bound)."""


class NoGPUError(MemfitError):
    """A command that needs a CUDA GPU was run where none is available."""


class DoesNotFitError(MemfitError):
    """The workload does not fit the GPU at any batch size tried, down to the smallest."""


class UnrecoverableOOMError(MemfitError, MemoryError):
    """``AutoMicrobatch`` ran out of CUDA memory where splitting the batch cannot help.

    Either a micro-batch of the smallest allowed size still did not fit, or the optimizer step
    ran out of memory. ``incident`` (a ``memfit.MicrobatchIncident``) holds the step, the sizes
    and the memory at the failure; the message holds the report and what to change.
    """

    def __init__(self, message: str, incident: object) -> None:
        super().__init__(message)
        self.incident = incident


class HostMemoryError(MemfitError, MemoryError):
    """Activation offload stopped before pinning host memory the host does not have free.

    Pinned (page-locked) memory cannot be swapped out: pinning past what is free takes memory
    from every other process, or the kernel ends this one. Raised in a forward, where
    ``AutoMicrobatch``'s cleanup lets go of what the earlier blocks held.
    """
