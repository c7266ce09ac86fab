"""Which part of a step fails under ``torch.cuda.memory._record_memory_history()`` (its default
stacks, Python and C++): GPT-2 bf16-mixed 8 x 1024 with every block checkpointed and the blocks'
inputs offloaded, through ``memfit.apply``, failed in its backward with ``SystemError: ...
returned NULL without setting an exception`` twice (H200, 2026-12-02); without recording, or with
``context=None`` (``memfit validate``'s recording), it ran. Each variant in a fresh process:

* ``as-failed``: as it failed;
* ``no-finalize``: the offload's count of host memory (a ``weakref.finalize`` a copy) off;
* ``no-offload``: the checkpointing alone (memfit's wrapping), nothing offloaded;
* ``python-stacks``: the offload, recorded with ``stacks="python"``.

    PYTHONPATH=src python benchmarks/history_probe.py OUT.json
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

CASE = "gpt2 bf16-mixed 8 x 1024, full checkpointing, inputs offloaded"
VARIANTS = ("as-failed", "no-finalize", "no-offload", "python-stacks")


def child(variant: str) -> dict[str, object]:
    import offload_apply
    import torch

    if variant == "no-finalize":
        import memfit.technique.offload._offload as offload

        class _Weakref:
            ref = offload.weakref.ref

            @staticmethod
            def finalize(*args: object) -> None:
                return None

        offload.weakref = _Weakref  # type: ignore[assignment]
    if variant == "no-offload":
        case = offload_apply.CASES[CASE]
        case["candidate"] = {**case["candidate"], "offload_checkpoints": False}
        case["candidate"]["checkpointing"] = 0.999  # memfit's wrapping of every block
    stacks = "python" if variant == "python-stacks" else "all"
    real = torch.cuda.memory._record_memory_history

    def recording(*args: object, **kwargs: object) -> None:
        real(max_entries=1_000_000, stacks=stacks)

    torch.cuda.memory._record_memory_history = recording  # type: ignore[assignment]
    try:
        row = offload_apply.run_case(CASE, 4, Path("/tmp"), capped=False)
        return {"variant": variant, "ok": True, "peak_reserved": row["peak_reserved"]}
    except BaseException:  # the failure is the finding
        return {"variant": variant, "ok": False, "error": traceback.format_exc()[-1200:]}


if __name__ == "__main__":
    from history_repro import variants_main

    raise SystemExit(variants_main(__file__, VARIANTS, child))
