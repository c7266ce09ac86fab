"""LoRA and QLoRA on a real GPU: memfit validate's estimate of a small Llama fine-tuned with
PEFT's adapters, on full-precision and on 4-bit weights, within 1% allocated and 2% reserved."""

from __future__ import annotations

from pathlib import Path

import pytest

import memfit

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


QLORA_IN_ONE_PROCESS = pytest.mark.xfail(
    strict=True,
    reason="estimated and measured in one process, QLoRA's peak reserved came 14.5% over the "
    "measurement on an H100 (benchmarks/results/2026-12-07-h100-serving-check-cuda-total/"
    "gpu-tests.log); in processes of their own, within 0.24%",
)


@pytest.mark.parametrize(
    "techniques",
    [
        pytest.param({"lora": 16}, id="lora"),
        pytest.param({"quantize": "nf4", "lora": 16}, id="qlora", marks=QLORA_IN_ONE_PROCESS),
    ],
)
def test_the_estimate_is_the_gpus(llama: str, techniques: dict[str, object]) -> None:
    if "quantize" in techniques:
        pytest.importorskip("bitsandbytes")
    result = memfit.validate(
        llama, batch_size=4, seq_len=512, precision="bf16", techniques=techniques
    )
    for label, estimated, measured in result.rows()[:2]:
        error = result.error(estimated, measured)
        assert error is not None
        limit = 0.01 if label == "peak allocated" else 0.02
        assert abs(error) <= limit, (label, error)
