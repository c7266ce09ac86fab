"""The GPU memfit names is the one the process gets: a known card's memory is what CUDA gives a
process (the allocator and the context share it), not nvidia-smi's larger total."""

from __future__ import annotations

import pytest
import torch

from memfit import resolve_gpu

pytestmark = pytest.mark.gpu


def test_a_known_cards_memory_is_cudas_total() -> None:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    name = next((n for n in ("h100", "h200") if n.upper() in props.name), None)
    if name is None:
        pytest.skip(f"{props.name} is not a card whose total memfit measured")
    assert resolve_gpu(name).total == props.total_memory
