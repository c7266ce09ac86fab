"""On a real GPU: ``memfit.configure`` and ``memfit run --limit`` change what torch does, and
what memfit calls too late is truly ignored by torch.

Each case runs in a fresh Python: torch reads its allocator settings at import, once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
GIB = 2**30


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTORCH_")}
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run(*parts: str) -> dict[str, Any]:
    """Run the code ``parts`` (each indented as it likes) in a fresh Python."""
    code = "\n".join(textwrap.dedent(part) for part in parts)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


_OOM = """
def fits(nbytes):
    try:
        x = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError:
        return False
    del x
    return True
"""


def test_a_size_limit_set_before_import_caps_torch_at_cuda_start():
    out = _run(
        """
        import json, memfit
        found = memfit.configure(limit="4GiB", framework="torch")
        import torch
        """,
        _OOM,
        """
        small = fits(3 * 2**30)
        large = fits(5 * 2**30)
        total = torch.cuda.get_device_properties(0).total_memory
        keep = torch.empty(3 * 2**30, dtype=torch.uint8, device="cuda")
        rows = [r.to_dict() for r in memfit.stats("torch")]
        print(json.dumps({"status": [a.status for a in found.actions], "small": small,
                          "large": large, "total": total, "rows": rows,
                          "fraction": torch.cuda.get_per_process_memory_fraction(0)}))
        """,
    )
    assert (out["status"], out["small"], out["large"]) == (["pending"], True, False), out
    assert out["fraction"] == pytest.approx(4 * GIB / out["total"])
    (row,) = out["rows"]
    assert (row["framework"], row["device"], row["kind"], row["in_use"]) == (
        "torch",
        "gpu:0",
        "gpu",
        3 * GIB,
    ), row
    assert row["pool"] >= row["in_use"] and row["peak"] >= row["in_use"], row
    assert abs(row["limit"] - 4 * GIB) <= 1024, row  # the fraction times the total, rounded


def test_a_limit_after_cuda_started_is_applied_at_once():
    out = _run(
        """
        import json, torch, memfit
        torch.zeros(1, device="cuda")
        found = memfit.configure(limit=0.02, framework="torch")
        """,
        _OOM,
        """
        total = torch.cuda.get_device_properties(0).total_memory
        print(json.dumps({"status": [a.status for a in found.actions],
                          "under": fits(int(0.01 * total)), "over": fits(int(0.03 * total))}))
        """,
    )
    assert out == {"status": ["applied"], "under": True, "over": False}


def test_the_async_backend_is_taken_before_import_and_truly_too_late_after():
    before = _run(
        """
        import json, memfit
        found = memfit.configure(allocator="async", framework="torch")
        import torch
        torch.zeros(1, device="cuda")
        print(json.dumps({"status": [a.status for a in found.actions],
                          "backend": torch.cuda.get_allocator_backend()}))
        """
    )
    assert before == {"status": ["set"], "backend": "cudaMallocAsync"}
    after = _run(
        """
        import json, warnings, torch, memfit
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found = memfit.configure(allocator="async", framework="torch")
        torch.zeros(1, device="cuda")
        print(json.dumps({"status": [a.status for a in found.actions],
                          "backend": torch.cuda.get_allocator_backend()}))
        """
    )
    # memfit said too late, and torch indeed kept its own allocator
    assert after == {"status": ["too late"], "backend": "native"}


def test_expandable_segments_turned_on_after_import_are_used():
    out = _run(
        """
        import json, torch, memfit
        found = memfit.configure(allocator="expandable", framework="torch")
        x = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda")
        segments = torch.cuda.memory._snapshot()["segments"]
        print(json.dumps({"status": [a.status for a in found.actions],
                          "expandable": [s.get("is_expandable") for s in segments]}))
        """
    )
    assert out["status"] == ["applied"]
    assert out["expandable"] and all(out["expandable"])


def test_memfit_run_limit_reaches_the_command_and_its_oom_is_reported(tmp_path):
    script = tmp_path / "grab.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, torch
            keep = torch.empty(3 * 2**30, dtype=torch.uint8, device="cuda")
            print("fraction", torch.cuda.get_per_process_memory_fraction(0), flush=True)
            more = torch.empty(2 * 2**30, dtype=torch.uint8, device="cuda")
            """
        )
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "memfit",
            "run",
            "--limit",
            "4GiB",
            "--growth",
            "--oom-dir",
            str(tmp_path / "oom"),
            "--json",
            "--",
            sys.executable,
            str(script),
        ],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert "fraction 0.0" in done.stdout  # 4 GiB of an H200's 140
    doc = json.loads(done.stdout[done.stdout.index("{") :])
    status = {(a["framework"], a["setting"]): a["status"] for a in doc["memory"]["actions"]}
    assert status[("torch", "limit")] == "pending"
    assert status[("jax", "growth")] == "set" and status[("tensorflow", "growth")] == "set"
    (report,) = doc["reports"]
    assert Path(report["report"]).exists()
