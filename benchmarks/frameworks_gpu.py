"""What memfit.configure / memfit run change on a real GPU, measured per framework.

Each case runs in a fresh Python (the settings are read when a framework starts), holds an
array of 1 GiB, and reports the framework's own numbers (``memfit.stats()``) and what NVML says
the process holds. JAX cases run only where JAX has a GPU backend; TensorFlow is not installed
on the GPU host.

    python benchmarks/frameworks_gpu.py --out results.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

_HOLD = {
    "jax": "import jax\n"
    "x = jax.numpy.ones((256, 2**20), dtype=jax.numpy.float32).block_until_ready()\n",
    "torch": "import torch\nx = torch.ones(256, 2**20, device='cuda')\n",
}

_REPORT = """
import json, os, memfit, pynvml
pynvml.nvmlInit()
handle = pynvml.nvmlDeviceGetHandleByIndex(0)
used = [p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        if p.pid == os.getpid()]
rows = [r.to_dict() for r in memfit.stats() if r.kind == "gpu"]
print("RESULT " + json.dumps({"nvml_process_used": used[0] if used else None, "rows": rows,
                              "gpu_total": pynvml.nvmlDeviceGetMemoryInfo(handle).total}))
"""

# (name, framework, code before the framework is imported, memfit run flags)
CASES: list[tuple[str, str, str, list[str]]] = [
    ("jax default", "jax", "", []),
    ("jax configure(growth=True)", "jax", "import memfit; memfit.configure(growth=True)\n", []),
    ("jax run --growth", "jax", "", ["--growth"]),
    ("jax run --limit 8GiB", "jax", "", ["--limit", "8GiB"]),
    ("jax run --limit 8GiB --growth", "jax", "", ["--limit", "8GiB", "--growth"]),
    ("torch default", "torch", "", []),
    (
        "torch configure(limit='4GiB')",
        "torch",
        "import memfit; memfit.configure(limit='4GiB')\n",
        [],
    ),
]


def _case(framework: str, before: str, flags: list[str], tmp: str) -> dict[str, Any]:
    code = before + _HOLD[framework] + _REPORT
    argv = [sys.executable, "-c", code]
    if flags:
        argv = [sys.executable, "-m", "memfit", "run", "--no-history", "--oom-dir", tmp]
        argv += [*flags, "--", sys.executable, "-c", code]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "PYTORCH_"))}
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        return {"error": done.stderr[-2000:]}
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    import importlib.metadata as md
    import tempfile

    versions = {}
    for package in ("torch", "jax", "jaxlib", "jax-cuda13-plugin", "tensorflow"):
        try:
            versions[package] = md.version(package)
        except md.PackageNotFoundError:
            versions[package] = None
    import torch

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, framework, before, flags in CASES:
            if framework == "jax" and versions["jax"] is None:
                continue
            results.append({"case": name, **_case(framework, before, flags, tmp)})
            print(json.dumps(results[-1])[:400], flush=True)
    doc = {
        "what": "memfit.configure / memfit run on a real GPU: each case holds a 1 GiB array",
        "gpu": torch.cuda.get_device_name(0),
        "versions": versions,
        "date": datetime.date.today().isoformat(),
        "command": " ".join(sys.argv),
        "results": results,
    }
    Path(args.out).write_text(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
