"""Model libraries' notes and warnings stay out of an estimate's output; their levels return."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch

import memfit


def noisy_model() -> torch.nn.Module:
    logging.getLogger("transformers.modeling_utils").warning("`loss_type=None` was set")
    warnings.warn("a library deprecation", FutureWarning, stacklevel=1)
    return torch.nn.Linear(8, 8)


def test_library_notes_are_kept_out(caplog: pytest.LogCaptureFixture) -> None:
    library = logging.getLogger("transformers")
    library.setLevel(logging.INFO)
    with caplog.at_level(logging.INFO), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        memfit.estimate(noisy_model, torch.randn(2, 8), optimizer="sgd", gpu="1GiB")
    assert not [r for r in caplog.records if r.name.startswith("transformers")]
    assert not [w for w in caught if "deprecation" in str(w.message)]
    assert library.level == logging.INFO  # restored


def test_errors_still_pass() -> None:
    def broken() -> torch.nn.Module:
        raise ValueError("the user's own bug")

    with pytest.raises(memfit.UserCodeError, match="the user's own bug"):
        memfit.estimate(broken, torch.randn(2, 8))
