"""Bad input for the mixture-of-experts routing setting: refused early, naming the value and the
choices (no model is built or traced for any of these)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from memfit import estimate
from memfit._errors import InvalidInputError
from memfit.cli import main
from memfit.workload import make_workload


def never_built() -> nn.Module:
    raise AssertionError("the model must not be built for a bad setting")


@pytest.mark.parametrize("value", ["foo", "Balanced", "", True, 1])
def test_estimate_refuses_an_unknown_routing(value: object):
    with pytest.raises(InvalidInputError, match=r"moe_routing=.*'balanced'.*'skewed'") as info:
        estimate(never_built, torch.zeros(2, 2), moe_routing=value)  # type: ignore[arg-type]
    assert f"moe_routing={value!r}" in str(info.value)


def test_workload_refuses_an_unknown_routing():
    workload = make_workload(lambda: nn.Linear(2, 2), torch.zeros(2, 2))
    with pytest.raises(InvalidInputError, match=r"moe_routing='worst' is not a routing policy"):
        dataclasses.replace(workload, moe_routing="worst")


def test_cli_refuses_an_unknown_routing(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as info:
        main(["estimate", "gpt2", "--moe-routing", "foo"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--moe-routing" in err and "'foo'" in err
    assert "balanced" in err and "skewed" in err
    assert "Traceback" not in err
