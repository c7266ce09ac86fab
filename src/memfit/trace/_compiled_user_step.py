"""A user's own step function (``step_fn``) run in a compiled model's capture.

memfit's own loop calls the compiled model, the loss and backward itself; a user's step does
it in its own code, with its own device moves, autocast regions, scaler and optimizer. The
capture (:mod:`memfit.trace._compiled_capture`) needs only the graphs dynamo and inductor make
of the model: the forward, at the model's first call, and, in training, the backward, which
AOTAutograd compiles at the first backward through it. So the user's step runs on the fake
CPU twin until both are made and is then stopped (:class:`StepCaptured`): what it does after
(the optimizer's step, reading the loss with ``.item()``, more micro-batches, which would call
the same graphs again) is not run, and needs no values. The trace then runs the whole step,
the model replayed from the captured plan as in memfit's own loop.

While the user's step runs here, what it says for the GPU acts on the CPU twin: ``cuda`` in a
device argument, ``.to("cuda")`` and ``.cuda()`` stay on the CPU, and ``torch.autocast("cuda",
dtype)`` is CPU autocast of that dtype (whose casts are CUDA's for the models checked); its
dtype is also the one attention's inputs take (:func:`autocast_dtype`). Inside the compiled
model nothing is changed: dynamo traces the model's own code as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch._subclasses.fake_tensor import DataDependentOutputException
from torch.overrides import TorchFunctionMode

from memfit._errors import UnsupportedWorkloadError
from memfit.workload import Workload, optimizer_for

__all__ = ["StepCaptured", "autocast_dtype", "run_user_step", "step_on_fake_cpu"]

_AUTOCAST = torch.amp.autocast_mode.autocast
_CPU = torch.device("cpu")
_REGIONS: list[torch.dtype | None] = []  # the user's CUDA autocast regions now entered


class StepCaptured(BaseException):
    """The compiled model's graphs are captured: the rest of the user's step is not run. A
    ``BaseException``, so that a step's ``except Exception`` does not take it for its own."""


def autocast_dtype(default: torch.dtype | None) -> torch.dtype | None:
    """The dtype of the user's innermost enabled CUDA autocast region, else ``default``."""
    return _REGIONS[-1] if _REGIONS and _REGIONS[-1] is not None else default


def _is_cuda(obj: Any) -> bool:
    if isinstance(obj, torch.device):
        return obj.type == "cuda"
    return isinstance(obj, str) and (obj == "cuda" or obj.startswith("cuda:"))


class _CudaAsCpu(TorchFunctionMode):
    """The user's device moves to the GPU stay on the (fake) CPU."""

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = dict(kwargs or {})
        if _is_cuda(kwargs.get("device")):
            kwargs["device"] = _CPU
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.Tensor.to or func is torch.Tensor.new_empty:
            args = tuple(_CPU if _is_cuda(a) else a for a in args)
        return func(*args, **kwargs)


@contextmanager
def _autocast_on_cpu() -> Iterator[None]:
    """``torch.autocast("cuda", dtype)`` (and ``torch.cuda.amp.autocast``) as CPU autocast of
    that dtype while the user's step is captured; its dtype noted while the region lasts."""
    saved = {name: _AUTOCAST.__dict__[name] for name in ("__init__", "__enter__", "__exit__")}
    init, enter, leave = saved["__init__"], saved["__enter__"], saved["__exit__"]

    def __init__(self: Any, device_type: str = "cuda", *args: Any, **kwargs: Any) -> None:
        self._memfit_cuda = device_type == "cuda"
        init(self, "cpu" if self._memfit_cuda else device_type, *args, **kwargs)

    def __enter__(self: Any) -> Any:
        if getattr(self, "_memfit_cuda", False):
            _REGIONS.append(self.fast_dtype if self._enabled else None)
        return enter(self)

    def __exit__(self: Any, *exc: Any) -> Any:
        if getattr(self, "_memfit_cuda", False) and _REGIONS:
            _REGIONS.pop()
        return leave(self, *exc)

    patched: dict[str, Any] = {"__init__": __init__, "__enter__": __enter__, "__exit__": __exit__}
    for name, value in patched.items():
        setattr(_AUTOCAST, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(_AUTOCAST, name, value)
        _REGIONS.clear()


@contextmanager
def step_on_fake_cpu() -> Iterator[Callable[[], Any]]:
    """The user's step's GPU moves and autocast regions on the CPU twin (see the module doc);
    yields a context manager factory that lifts the device mode while the compiled model runs
    (dynamo traces the model's code as it is)."""
    mode = _CudaAsCpu()

    @contextmanager
    def lifted() -> Iterator[None]:
        with torch.overrides._pop_mode_temporarily():
            yield

    with _autocast_on_cpu(), mode:
        yield lifted


def run_user_step(workload: Workload, shim: Any, batch: Any) -> None:
    """The user's step on the compiled twin (``shim``), until the graphs are captured: an
    optimizer of the twin's parameters is made as the trace makes one (the step may zero its
    gradients before the forward), and backward stops the step once it is through."""
    assert workload.step_fn is not None
    original = torch.autograd.backward

    def backward(*args: Any, **kwargs: Any) -> Any:
        original(*args, **kwargs)
        raise StepCaptured

    torch.autograd.backward = backward  # type: ignore[assignment]
    try:
        if workload.mode == "infer":
            workload.step_fn(shim, batch)
        else:
            workload.step_fn(shim, batch, optimizer_for(workload, shim))
    except StepCaptured:
        return
    except DataDependentOutputException as exc:
        raise UnsupportedWorkloadError(
            f"the step function reads a value ({exc.func}: .item(), .tolist() or a branch on "
            f"a tensor) before its first backward through the compiled model {workload.name}; "
            "memfit captures the compiled graphs on tensors that have no values, up to that "
            "backward. Read values after loss.backward() (logging the loss there is fine), or "
            "pass compiled='eager' (--compiled eager)."
        ) from exc
    finally:
        torch.autograd.backward = original
    if not shim.outputs:
        raise UnsupportedWorkloadError(
            f"the step function never called the compiled model {workload.name}; a compiled "
            "estimate replays the model's compiled graph where the step calls it. Call the "
            "model in the step, or pass compiled='eager' (--compiled eager)."
        )
    raise UnsupportedWorkloadError(
        f"the step function calls the compiled model {workload.name} with gradients enabled "
        "but never runs backward through it, so the graph of what its forward saves is not "
        "known; run an inference step under torch.no_grad() (or torch.inference_mode()), or "
        "pass compiled='eager' (--compiled eager)."
    )
