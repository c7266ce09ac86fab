"""What CUDA refuses and meta kernels let through is refused in the trace, in the GPU's words;
and the memory-efficient attention forward's float32 accumulator at head dims beyond 128."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import memfit
from memfit import TraceError
from memfit.trace._attention_kernels import efficient_forward_scratch


class MixedProduct(nn.Module):
    """A float32 layer's output multiplied by a bfloat16 matrix, outside autocast."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x) @ torch.ones(8, 8, dtype=torch.bfloat16, device=x.device)


def test_a_product_of_two_dtypes_is_refused_as_the_gpu_refuses_it() -> None:
    with pytest.raises(TraceError, match=r"aten::mm.*float != c10::BFloat16"):
        memfit.estimate(MixedProduct, lambda: torch.randn(4, 8), gpu="h100", mode="infer")


class MixedPut(nn.Module):
    """bfloat16 values put into a float32 tensor at a mask's positions (SmolVLM's image
    features into its text embeddings, under bf16 autocast)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layer(x)
        mask = torch.arange(x.shape[0], device=x.device) % 2 == 0
        out[mask] = out[mask].to(torch.bfloat16)
        return out


@pytest.mark.parametrize("by_index", [False, True])
def test_an_index_put_of_another_dtype_is_refused_as_the_gpu_refuses_it(by_index: bool) -> None:
    from memfit.trace._cuda_checks import refuse_as_cuda

    if by_index:
        f32 = torch.empty(4, 3, device="meta")
        values = torch.empty(2, 3, dtype=torch.bfloat16, device="meta")
        index = torch.tensor([0, 2], device="meta")
        with pytest.raises(RuntimeError, match="got Float for the destination and BFloat16"):
            refuse_as_cuda(torch.ops.aten.index_put_.default, (f32, (index,), values))
        return
    with pytest.raises(TraceError, match="Index put requires the source and destination dtypes"):
        memfit.estimate(MixedPut, lambda: torch.randn(4, 8), gpu="h100", mode="infer")


def test_under_autocast_the_same_product_runs() -> None:
    e = memfit.estimate(
        MixedProduct, lambda: torch.randn(4, 8), gpu="h100", mode="infer", precision="bf16-mixed"
    )
    assert e.peak_allocated > 0


@pytest.mark.parametrize(
    ("head_dim", "dtype", "expected"),
    [
        (512, torch.bfloat16, 93 * 4 * 512 * 512 * 4),  # Gemma-4's global layers (H100)
        (128, torch.bfloat16, 0),  # one pass over the value's columns: none
        (512, torch.float32, 0),  # float32 output: accumulated in place
    ],
)
def test_the_efficient_forward_accumulates_wide_heads_in_float32(
    head_dim: int, dtype: torch.dtype, expected: int
) -> None:
    q = torch.empty(93, 4, 512, head_dim, dtype=dtype, device="meta")
    taken = sum(n for n, _ in efficient_forward_scratch((q, q, q)))
    assert taken == expected


def test_each_product_says_it_in_its_kernels_words() -> None:
    from memfit.trace._cuda_checks import refuse_as_cuda

    aten = torch.ops.aten
    f32 = torch.empty(2, 3, 4, device="meta")
    b16 = torch.empty(2, 4, 3, dtype=torch.bfloat16, device="meta")
    with pytest.raises(RuntimeError, match="expected scalar type Float but found BFloat16"):
        refuse_as_cuda(aten.bmm.default, (f32, b16))
    with pytest.raises(RuntimeError, match="must have the same dtype, but got Float and BFloat16"):
        refuse_as_cuda(aten.addmm.default, (f32[0, 0], f32[0], b16[0]))
    refuse_as_cuda(aten.bmm.default, (f32, f32.transpose(1, 2)))  # one dtype: nothing raised
