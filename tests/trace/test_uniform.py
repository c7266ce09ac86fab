"""Large tensors of one value kept as that value expanded: fills, their views, casts and
elementwise results; never random or in-place ops, nor reductions."""

from __future__ import annotations

from typing import Any

import torch

from memfit.trace._uniform import is_uniform, uniform_values

aten = torch.ops.aten


def _shadows(values: dict[int, torch.Tensor]) -> Any:
    def swap(args: Any, kwargs: dict[str, Any]) -> tuple[Any, Any] | None:
        out = []
        for a in args:
            if isinstance(a, torch.Tensor) and a.device.type == "meta":
                if id(a) not in values:
                    return None
                out.append(values[id(a)])
            else:
                out.append(a)
        return tuple(out), dict(kwargs)

    return swap


def test_a_fill_and_what_is_computed_from_it_elementwise() -> None:
    shape = (64, 512, 512)
    ones = torch.empty(shape, device="meta")
    value = uniform_values(aten.ones.default, (list(shape),), {}, ones, _shadows({}))
    assert value is not None and is_uniform(value) and value.shape == shape
    assert value.untyped_storage().nbytes() == 4  # one float, expanded
    known = {id(ones): value}
    view = torch.empty(64, 1, 512, 512, device="meta")
    viewed = uniform_values(aten.unsqueeze.default, (ones, 1), {}, view, _shadows(known))
    assert viewed is not None and viewed.shape == view.shape and is_uniform(viewed)
    doubled = uniform_values(aten.mul.Tensor, (ones, 3.0), {}, ones, _shadows(known))
    assert doubled is not None and float(doubled[5, 6, 7]) == 3.0
    full = uniform_values(aten.full.default, (list(shape), 7), {}, ones, _shadows({}))
    assert full is not None and float(full[0, 0, 0]) == 7.0


def test_random_in_place_and_reducing_ops_get_no_value() -> None:
    shape = (64, 512, 512)
    ones = torch.empty(shape, device="meta")
    known = {id(ones): torch.ones(()).expand(shape)}
    swap = _shadows(known)
    assert uniform_values(aten.bernoulli.default, (ones,), {}, ones, swap) is None
    assert uniform_values(aten.mul_.Tensor, (ones, 2.0), {}, ones, swap) is None
    row = torch.empty(64, 512, device="meta")
    assert uniform_values(aten.sum.dim_IntList, (ones, [2]), {}, row, swap) is None
    other = torch.empty(shape, device="meta")  # no value known
    assert uniform_values(aten.add.Tensor, (ones, other), {}, ones, swap) is None
    assert not is_uniform(torch.arange(4.0))
