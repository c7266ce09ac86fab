"""Base weights by bitsandbytes: every linear layer but the output layer packed two values a byte
with its scales (or one byte with a scale a row: LLM.int8), frozen, QLoRA's adapters trained on
top (through memfit's loop or a user's step alike); other types refused, and a missing
bitsandbytes named with its install command."""

from __future__ import annotations

import sys

import pytest
from tiny_llama import llama_factory, token_batch

import memfit
from memfit import InvalidInputError, MissingExtraError
from memfit._events import Category

bnb = pytest.importorskip("bitsandbytes")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

llama = llama_factory(512, 1536, 8, 8)
tokens = token_batch(2, 32)


def estimate(**options: object) -> memfit.Estimate:
    settings: dict[str, object] = {"gpu": "h100", "precision": "bf16", "mode": "infer", **options}
    return memfit.estimate(llama, tokens, **settings)  # type: ignore[arg-type]


def test_the_linear_layers_weights_take_half_a_byte_a_value_and_their_scales() -> None:
    full = estimate()
    packed = estimate(techniques={"quantize": "nf4"})
    linear = 2 * (4 * 512 * 512 + 3 * 512 * 1536)  # q, k, v, o and the MLP's, two layers
    full_params = full.by_category[Category.PARAMETER]
    packed_params = packed.by_category[Category.PARAMETER]
    # bf16 (two bytes) down to half a byte, plus a byte per 64 values and the scales' scales
    saved = full_params - packed_params
    assert linear * 2 - linear // 2 - linear // 64 - 8192 <= saved <= linear * 2 - linear // 2
    assert any("nf4 by bitsandbytes" in n for n in packed.notes)


def test_qlora_trains_the_adapters_on_the_packed_weights() -> None:
    pytest.importorskip("peft")
    e = estimate(mode="train", techniques={"quantize": "nf4", "lora": 8})
    states = e.by_category.get(Category.OPTIMIZER_STATE, 0)
    assert 0 < states < 2 * 4 * 8 * (512 + 512) * 2 * 2 + 4096  # the adapters' alone
    assert e.to_dict()["workload"]["techniques"] == {"quantize": "nf4", "lora": 8}


def test_int8_takes_a_byte_a_value_and_a_scale_a_row() -> None:
    full = estimate()
    int8 = estimate(techniques={"quantize": "int8"})
    linear = 2 * (4 * 512 * 512 + 3 * 512 * 1536)  # q, k, v, o and the MLP's, two layers
    rows = 2 * (4 * 512 + 2 * 1536 + 512)  # a float32 scale per output row
    saved = full.by_category[Category.PARAMETER] - int8.by_category[Category.PARAMETER]
    assert saved == linear * 2 - linear - rows * 4
    assert any("int8 by bitsandbytes" in n for n in int8.notes)
    # the outlier split depends on the values: bounded, and said once
    bounded = [n for n in int8.notes if "outlier columns" in n]
    assert len(bounded) == 1 and "upper bound" in bounded[0]


def test_int8_keeps_every_outlier_column_for_the_backward_an_upper_bound() -> None:
    """LoRA on int8 weights: autograd keeps each base layer's input and its outlier columns
    (every column, the bound) for the backward, and the backward dequantizes each weight."""
    from memfit.trace import trace_workload

    pytest.importorskip("peft")
    w = memfit.make_workload(
        llama, tokens, precision="bf16", techniques={"quantize": "int8", "lora": 8}, gpu="h100"
    )
    trace = trace_workload(w, memfit.resolve_gpu("h100"))
    ops = [trace.infos[e.info].op for e in trace.events if e.kind == "alloc" and e.info is not None]
    assert "int8 product (int32)" in ops and "int8 outlier mask" in ops
    assert "outlier weight columns dequantized (float32)" in ops
    assert "int8 product before the outliers'" in ops  # the outliers' product adds into a new one
    e = estimate(mode="train", techniques={"quantize": "int8", "lora": 8})
    nf4 = estimate(mode="train", techniques={"quantize": "nf4", "lora": 8})
    assert e.peak_allocated > nf4.peak_allocated  # a byte a value, and the outliers kept


def test_a_model_without_linear_layers_to_quantize_is_refused() -> None:
    from torch import nn

    with pytest.raises(InvalidInputError, match="found no layer to quantize in Sequential"):
        memfit.estimate(
            lambda: nn.Sequential(nn.Conv1d(8, 8, 3)),
            lambda: __import__("torch").randn(2, 8, 16),
            gpu="h100",
            mode="infer",
            techniques={"quantize": "int8"},
        )


@pytest.mark.parametrize("kind", ["nf8", 4, None])
def test_a_type_it_does_not_quantize_to_is_refused(kind: object) -> None:
    with pytest.raises(InvalidInputError, match="is not a data type memfit quantizes to"):
        estimate(techniques={"quantize": kind})


def test_without_bitsandbytes_the_install_command_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)
    with pytest.raises(MissingExtraError, match="pip install 'memfit"):
        estimate(techniques={"quantize": "nf4"})


def test_an_estimate_leaves_no_fake_tensor_in_bitsandbytes_caches() -> None:
    import torch

    estimate(techniques={"quantize": "nf4"})
    cached = bnb.functional.name2qmap.values()
    assert not any(isinstance(v, torch.Tensor) and v.device.type == "meta" for v in cached)
    # a real quantization after it in the same process (memfit.fit in a training script)
    packed, state = bnb.functional.quantize_4bit(torch.randn(64, 64), quant_type="nf4")
    assert packed.device.type == "cpu" and state.absmax.device.type == "cpu"


def test_past_the_fused_kernels_rows_the_weight_is_dequantized_before_the_product() -> None:
    from memfit.trace import trace_workload

    pytest.importorskip("peft")
    rows = token_batch(4, 512)  # 2,048 rows: past bitsandbytes' fused kernel's 1,536
    w = memfit.make_workload(
        llama, rows, precision="bf16", techniques={"quantize": "nf4", "lora": 8}, gpu="h100"
    )
    trace = trace_workload(w, memfit.resolve_gpu("h100"))
    sizes = {
        e.size
        for e in trace.events
        if e.info is not None and trace.infos[e.info].op == "4-bit weight dequantized"
    }
    # the projections' weights in bf16: q and o (512 x 512), k and v (512 x 512 with 8 key/value
    # heads), gate, up (1536 x 512) and down (512 x 1536)
    assert sizes == {512 * 512 * 2, 1536 * 512 * 2}


def test_a_few_rows_run_the_fused_kernel_and_take_nothing_more() -> None:
    import torch

    from memfit.trace._bnb_kernels import gemm_4bit_temporaries

    a = torch.empty(2, 512, dtype=torch.bfloat16, device="meta")
    args = (a, None, [1536, 512], None, 64, "nf4")
    assert gemm_4bit_temporaries(args, {}, (132, 9, 0)) == []
    wide = torch.empty(2048, 512, dtype=torch.bfloat16, device="meta")
    assert gemm_4bit_temporaries((wide, *args[1:]), {}, (132, 9, 0)) == [
        (1536 * 512 * 2, "4-bit weight dequantized")
    ]


def _users_step(model: object, batch: dict[str, object], optimizer: object) -> None:
    model(**batch).loss.backward()  # type: ignore[operator]
    optimizer.step()  # type: ignore[attr-defined]
    optimizer.zero_grad(set_to_none=True)  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", ["nf4", "int8"])
def test_a_users_own_step_estimates_as_memfits_loop(kind: str) -> None:
    techniques = {"quantize": kind, "lora": 8}
    ours = estimate(mode="train", techniques=techniques)
    theirs = estimate(mode="train", techniques=techniques, step_fn=_users_step)
    assert (theirs.peak_allocated, theirs.peak_reserved) == (
        ours.peak_allocated,
        ours.peak_reserved,
    )
