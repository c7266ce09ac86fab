"""Is the failure of a checkpointed backward under ``_record_memory_history()`` PyTorch's? Without
memfit: GPT-2 bf16-mixed 8 x 1024 (as ``history_probe.py``), its blocks checkpointed by
``torch.utils.checkpoint`` (non-reentrant) wrapped around each block's forward by hand, or by
transformers' own switch; recording with the default stacks. Each in a fresh process.

    python benchmarks/history_repro.py OUT.json
"""

from __future__ import annotations

import json
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

VARIANTS = ("by-hand", "transformers", "by-hand-unrecorded")


def child(variant: str) -> dict[str, object]:
    import functools

    import torch
    import transformers
    from torch.utils.checkpoint import checkpoint

    with torch.device("cuda"):
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config())
    model.train()
    if variant == "transformers":
        model.gradient_checkpointing_enable({"use_reentrant": False})
    else:
        model.config.use_cache = False
        for block in model.transformer.h:
            block.forward = functools.partial(checkpoint, block.forward, use_reentrant=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(0, 50257, (8, 1024), device="cuda")
    if variant != "by-hand-unrecorded":
        torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    try:
        for _ in range(3):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        return {"variant": variant, "ok": True, "torch": torch.__version__}
    except BaseException:
        return {"variant": variant, "ok": False, "error": traceback.format_exc()[-600:]}


def variants_main(script: str, variants: tuple[str, ...], child: Any) -> int:
    """``script OUT.json``: each variant in a fresh process (``script child VARIANT`` prints
    ``RESULT`` and ``child(VARIANT)``'s row), the rows written to ``OUT.json``."""
    if sys.argv[1] == "child":
        print("RESULT " + json.dumps(child(sys.argv[2])), flush=True)
        return 0
    rows = []
    for variant in variants:
        proc = subprocess.run(
            [sys.executable, script, "child", variant], capture_output=True, text=True
        )
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        rows.append(
            json.loads(line[7:]) if line else {"variant": variant, "crash": proc.stderr[-800:]}
        )
        print(json.dumps(rows[-1])[:300], flush=True)
    Path(sys.argv[1]).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(variants_main(__file__, VARIANTS, child))
