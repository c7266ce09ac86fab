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


def test_a_level_a_library_sets_while_held_waits_until_the_hold_ends() -> None:
    """transformers sets its logger's default level when it is first imported, which happens
    inside the hold when a model name imports it: the hold stays, the level comes after."""
    from memfit.estimator import quiet_libraries

    library = logging.getLogger("timm")
    before = library.level
    try:
        library.setLevel(logging.NOTSET)
        with quiet_libraries():
            library.setLevel(logging.WARNING)  # the library configures itself on import
            assert library.getEffectiveLevel() == logging.ERROR
            assert not library.isEnabledFor(logging.WARNING)
        assert library.level == logging.WARNING
        assert "setLevel" not in vars(library)  # the logger's own method is back
    finally:
        library.setLevel(before)


def test_nested_holds_keep_the_hold_and_restore_the_first_level() -> None:
    from memfit.estimator import quiet_libraries

    library = logging.getLogger("timm")
    before = library.level
    try:
        library.setLevel(logging.INFO)
        with quiet_libraries():
            with quiet_libraries():
                library.setLevel(logging.DEBUG)
            assert library.level == logging.ERROR  # the outer hold still holds
        assert library.level == logging.DEBUG  # what was asked for inside, once released
        with quiet_libraries(), quiet_libraries():
            pass
        assert library.level == logging.DEBUG
        assert "setLevel" not in vars(library)
    finally:
        library.setLevel(before)


def test_a_bad_level_set_while_held_raises_as_logging_does() -> None:
    from memfit.estimator import quiet_libraries

    with quiet_libraries(), pytest.raises(ValueError, match="Unknown level"):
        logging.getLogger("timm").setLevel("LOUD")


def test_a_transformers_model_logs_nothing_and_the_users_verbosity_stays() -> None:
    transformers = pytest.importorskip("transformers")
    heard: list[logging.LogRecord] = []

    class Ear(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            heard.append(record)

    def gpt2() -> torch.nn.Module:
        config = transformers.GPT2Config(
            n_layer=1, n_embd=32, n_head=2, vocab_size=64, bos_token_id=0, eos_token_id=0
        )
        return transformers.GPT2LMHeadModel(config)

    ids = torch.randint(0, 64, (2, 16))
    library = logging.getLogger("transformers")
    ear = Ear(logging.DEBUG)
    library.addHandler(ear)
    before = transformers.logging.get_verbosity()
    try:
        transformers.logging.set_verbosity_info()
        memfit.estimate(
            gpt2, {"input_ids": ids, "labels": ids}, activation_checkpointing=True, gpu="1GiB"
        )
        assert transformers.logging.get_verbosity() == logging.INFO
    finally:
        library.removeHandler(ear)
        transformers.logging.set_verbosity(before)
    assert [r.getMessage() for r in heard if r.levelno >= logging.WARNING] == []


def test_the_libraries_loaded_for_a_step_are_kept_out_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """bitsandbytes (8-bit optimizer states) warns from its CPU backend when it loads."""
    from memfit.estimator import quiet_libraries

    with caplog.at_level(logging.INFO), quiet_libraries():
        for name in ("bitsandbytes.backends.cpu.ops", "peft.tuners", "huggingface_hub.utils"):
            logging.getLogger(name).warning("Failed to load CPU gemm_4bit_forward")
    assert not caplog.records
