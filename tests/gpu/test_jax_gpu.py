"""On a real GPU with JAX's CUDA backend (skipped where JAX or its GPU plugin is missing): what
``memfit.configure`` and ``memfit run`` set is what JAX's GPU backend does, and its numbers
reach ``memfit.stats()`` and ``memfit watch``.

Each case runs in a fresh Python: JAX reads its settings when its backend starts.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed"),
]

ROOT = Path(__file__).resolve().parents[2]
GIB = 2**30


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLA_")}
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _python(argv: list[str]) -> dict[str, Any]:
    done = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


_PROBE = """
import json, jax, memfit
gpus = [d for d in jax.devices() if d.platform in ("gpu", "cuda")]
if not gpus:
    print(json.dumps({"gpu": False})); raise SystemExit
x = jax.numpy.ones((256, 2**20), dtype=jax.numpy.float32).block_until_ready()  # 1 GiB
rows = [r.to_dict() for r in memfit.stats("jax") if r.kind == "gpu"]
print(json.dumps({"gpu": True, "stats": gpus[0].memory_stats(), "rows": rows}))
"""


def _probe(prefix: str = "", run: list[str] | None = None) -> dict[str, Any]:
    code = textwrap.dedent(prefix) + _PROBE
    out = _python([*(run or []), sys.executable, "-c", code])
    if not out["gpu"]:
        pytest.skip("JAX has no GPU backend here")
    return out


def test_by_default_jax_preallocates_and_with_growth_it_does_not():
    default = _probe()
    grown = _probe("import memfit; memfit.configure(growth=True, framework='jax')\n")
    total = default["stats"]["bytes_limit"]
    # preallocated: the pool is most of the GPU; grown: about what the 1 GiB array takes
    assert default["stats"].get("pool_bytes", default["stats"].get("bytes_reserved", 0)) > total / 2
    assert grown["stats"]["bytes_in_use"] >= GIB
    pool = grown["stats"].get("pool_bytes", grown["stats"].get("bytes_reserved"))
    assert pool is None or pool < 4 * GIB
    (row,) = grown["rows"]
    assert (row["framework"], row["kind"], row["in_use"]) == (
        "jax",
        "gpu",
        grown["stats"]["bytes_in_use"],
    )


def test_memfit_run_limit_in_bytes_becomes_jax_s_fraction(tmp_path):
    run = [sys.executable, "-m", "memfit", "run", "--no-history", "--oom-dir", str(tmp_path)]
    out = _probe(run=[*run, "--limit", "8GiB", "--growth", "--framework", "jax", "--"])
    limit = out["stats"]["bytes_limit"]
    assert abs(limit - 8 * GIB) <= 0.02 * 8 * GIB, limit
    (row,) = out["rows"]
    assert row["limit"] == limit


_SERVE = """
import os, sys, time, json, jax, memfit
stop = sys.argv[1]
pub = memfit.publish(interval=0.2)
x = jax.numpy.ones((256, 2**20), dtype=jax.numpy.float32).block_until_ready()  # 1 GiB
print(json.dumps({"gpu": any(d.platform in ("gpu", "cuda") for d in jax.devices())}), flush=True)
end = time.time() + 300
while not os.path.exists(stop) and time.time() < end:
    time.sleep(0.1)
"""


def test_a_preallocating_jax_process_is_seen_by_watch_and_named_by_doctor(
    tmp_path, monkeypatch, capsys
):
    """The case nvidia-smi cannot explain: a JAX process holding most of the GPU, using 1 GiB."""
    from memfit.cli import main

    script = tmp_path / "serve_jax.py"
    script.write_text(_SERVE)
    stop = tmp_path / "stop"
    runtime = tmp_path / "rt"
    env = dict(_env(), MEMFIT_RUNTIME_DIR=str(runtime))
    proc = subprocess.Popen(
        [sys.executable, str(script), str(stop)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        if not json.loads(proc.stdout.readline())["gpu"]:
            pytest.skip("JAX has no GPU backend here")
        import time

        time.sleep(1.0)
        monkeypatch.setenv("MEMFIT_RUNTIME_DIR", str(runtime))
        capsys.readouterr()
        assert main(["watch", "--once", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        (ours,) = [p for d in doc["devices"] for p in d["processes"] if p["pid"] == proc.pid]
        (row,) = ours["frameworks"]
        assert (row["framework"], row["kind"]) == ("jax", "gpu")
        assert GIB <= row["in_use"] < 2 * GIB
        assert row["pool"] > 0.5 * doc["devices"][0]["memory_total"]  # preallocated
        assert ours["outside_pool"] == ours["used_memory"] - row["pool"] > 0
        assert main(["doctor", "--json"]) in (0, 1)
        found = json.loads(capsys.readouterr().out)
        named = [a for a in found["advice"] if a["setting"].startswith(f"pid {proc.pid} (jax")]
        assert len(named) == 1 and "XLA_PYTHON_CLIENT_PREALLOCATE=false" in named[0]["change"]
        (listed,) = [p for p in found["processes"] if p["pid"] == proc.pid]
        assert listed["source"] == "published" and listed["started"] == ["jax"]
    finally:
        stop.touch()
        assert proc.wait(timeout=120) == 0
