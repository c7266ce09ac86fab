"""LoRA and QLoRA on a real GPU: memfit validate's estimate of a small Llama fine-tuned with
PEFT's adapters, on full-precision and on 4-bit weights, within 1% allocated and 2% reserved."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> str:
    config = transformers.LlamaConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=4,
        num_attention_heads=16,
        num_key_value_heads=4,
    )
    folder: Path = tmp_path_factory.mktemp("llama")
    config.save_pretrained(folder)
    return f"hf:{folder}/config.json"


# each in a process of its own, as a fine-tuning job runs: a process that has run another model
# reuses what that run left (an H100 measured QLoRA's reserved 14.5% under its estimate after
# LoRA's in the same process, and within 1.2% in a fresh one)
VALIDATE = """
import json, sys
import memfit
result = memfit.validate(
    sys.argv[1], batch_size=4, seq_len=512, precision="bf16", techniques=json.loads(sys.argv[2])
)
print("ERRORS", json.dumps([[label, result.error(e, m)] for label, e, m in result.rows()[:2]]))
"""


@pytest.mark.parametrize(
    "techniques", [{"lora": 16}, {"quantize": "nf4", "lora": 16}], ids=["lora", "qlora"]
)
def test_the_estimate_is_the_gpus(llama: str, techniques: dict[str, object]) -> None:
    if "quantize" in techniques:
        pytest.importorskip("bitsandbytes")
    run = subprocess.run(
        [sys.executable, "-c", VALIDATE, llama, json.dumps(techniques)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    line = next(x for x in run.stdout.splitlines() if x.startswith("ERRORS "))
    for label, error in json.loads(line.removeprefix("ERRORS ")):
        assert error is not None
        limit = 0.01 if label == "peak allocated" else 0.02
        assert abs(error) <= limit, (label, error)
