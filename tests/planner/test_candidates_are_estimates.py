"""Every candidate the planner traced is what memfit.estimate says of it on its own: the traces
of one plan do not leak into each other (they did once: a model name's builds shared one
transformers config, and a selectively checkpointed candidate's use_cache=False took the KV
cache out of the candidates traced after it; GPT-2's 24 GiB plan ran 2.1% above its estimate)."""

from __future__ import annotations

from pathlib import Path

import pytest

import memfit
from memfit.planner import plan

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def test_each_traced_candidate_of_a_model_name_is_its_own_estimate(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    transformers.GPT2Config(
        n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=256
    ).to_json_file(config)
    model = f"hf:{config}"
    planned = plan(
        model,
        budget="1GiB",
        global_batch=8,
        batch_size=8,
        seq_len=128,
        precisions=("bf16-mixed",),
        checkpointing=(False, True, "selective"),
        optimizers=("adamw-fused", "adamw-foreach"),
        offloads=(),
        workers=1,
    )
    traced = [e for e in planned.candidates if e.traced]
    # memfit's selective checkpointing switches the config's use_cache off (as transformers'
    # does); candidates without checkpointing are traced after such ones
    assert {e.candidate.checkpointing for e in traced} >= {False, "selective"}
    for e in traced:
        alone = memfit.estimate(
            model, gpu="1GiB", seq_len=128, batch_held=True, **e.candidate.settings()
        )
        assert (e.peak_allocated, e.peak_reserved) == (alone.peak_allocated, alone.peak_reserved)
