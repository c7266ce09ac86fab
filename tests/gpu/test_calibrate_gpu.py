"""``memfit calibrate`` on the GPU: this machine's rates measured, close to memfit's own where
the GPU is the type memfit calibrated (an H200), saved where the planner finds them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from memfit._gpus import resolve_gpu
from memfit.planner import calibration_for
from memfit.planner.calibration import calibrate, headline, save_calibration, shipped

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def test_a_quick_calibration_is_this_gpus_and_the_planner_uses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMFIT_CALIBRATION_DIR", str(tmp_path))
    done: list[str] = []
    data = calibrate(("mm", "attn", "mem", "host"), quick=True, progress=done.append)
    assert {"mm", "attn", "mem", "host"} <= set(done)
    assert data["measured"]["kept"] == ["mm_align", "conv", "pinned"]
    factors = data["measured"]["host"]["factors"]
    assert 1 / 3 < factors["all"] < 3  # hosts differ up to 2x, not 3x
    if data["key"] == "h200":  # the type memfit's own calibration measured
        ours = {what: v for what, _, v in headline(shipped()["h200"])}
        for what, _, value in headline(data):
            if what.startswith(("matrix products", "attention", "memory bandwidth")):
                assert value is not None and 0.75 < value / ours[what] < 1.33, what
    where = save_calibration(data)
    target = resolve_gpu(data["key"]) if data["key"] == "h200" else resolve_gpu("24GiB")
    cal, note = calibration_for(target)
    assert note is not None and str(where) in note
    assert cal.host["forward"] == pytest.approx(data["host"]["forward"])
