"""Bad input to a workload, refused before any work with the value and the fix.

Each case asserts the exception type (Python) or the exit code and a traceback-free paragraph
(CLI), and that the message names the offending value and what to give instead. All are fast:
the checks run before a model is traced, or on a tiny model.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import memfit
from memfit import InvalidInputError, UserCodeError
from memfit.cli import main
from memfit.workload import _hub, _limits, make_workload


def tiny() -> nn.Module:
    return nn.Linear(16, 4)


BATCH = torch.randn(2, 16)


def _tiny_config(tmp_path, **overrides):
    config = {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "n_layer": 1,
        "n_head": 2,
        "n_embd": 32,
        "n_positions": 64,
        "vocab_size": 128,
        **overrides,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def _cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, " ".join(err.split())


# -- 1. sizes never misread ---------------------------------------------------------------------
@pytest.mark.parametrize("gpu", [24, "24", "80", 24.0])
def test_a_bare_number_for_a_gpu_is_refused_with_the_units(gpu):
    with pytest.raises(InvalidInputError, match=r"(no unit.*'24GiB'.*'24GB')|(no unit)|not a GPU"):
        make_workload(tiny, BATCH, gpu=gpu)


@pytest.mark.parametrize(
    ("gpu", "match"),
    [
        ("0GiB", r"'0GiB'.*smaller than the 758 MiB"),
        ("1B", r"'1B'.*smaller than"),
        ("100000GiB", r"'100000GiB' is more than 2 TiB, beyond any GPU.*'24GiB'"),
        ("1e30GiB", r"'1e30GiB' is more than 2 TiB, beyond any GPU.*number and the unit"),
        ("1e999999999GiB", r"'1e999999999GiB' is more than 2 TiB"),
        ("-5GiB", r"'-5GiB' is negative: a GPU's memory is a positive size.*'5GiB'"),
        ("-24", r"'-24' is negative.*'24GiB'"),
        (-24, r"'-24' is negative.*'24GiB'"),
        ("24gigs", r"'24gigs' has no unit memfit knows \('gigs'\).*'24GiB'"),
        ("4090ti", r"'4090ti' has no unit memfit knows.*or the GPU '4090'"),
    ],
)
def test_gpu_sizes_no_gpu_has_are_refused(gpu, match):
    with pytest.raises(InvalidInputError, match=match):
        make_workload(tiny, BATCH, gpu=gpu)


def test_gpu_accepts_a_name_a_size_with_a_unit_and_an_object():
    assert make_workload(tiny, BATCH, gpu="4090").gpu == memfit.resolve_gpu("4090")
    assert make_workload(tiny, BATCH, gpu="24GiB").gpu.total == 24 * 2**30
    assert make_workload(tiny, BATCH, gpu="2.4e1GiB").gpu.total == 24 * 2**30
    gpu = memfit.GPU("mine", 16 * 2**30)
    assert make_workload(tiny, BATCH, gpu=gpu).gpu is gpu


def test_margins_still_take_bytes():
    assert memfit.parse_size(1000) == 1000 and memfit.parse_size("64MiB") == 64 * 2**20


def test_cli_gpu_bare_number(capsys):
    code, err = _cli(capsys, "estimate", "gpt2", "-b", "1", "-s", "8", "--gpu", "24")
    assert code == 1 and "'24GiB'" in err and "'24GB'" in err


def test_cli_gpu_size_in_exponent_notation_is_a_size_not_a_name(capsys):
    """1e30GiB once met the GPU names, which offered 'a10g'."""
    code, err = _cli(capsys, "estimate", "gpt2", "-b", "1", "-s", "8", "--gpu", "1e30GiB")
    assert code == 1 and "'1e30GiB' is more than 2 TiB" in err
    assert "a10g" not in err and "not known" not in err


# -- 2. types and ranges -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"batch_size": "8"}, r"batch_size='8' is not a whole number.*batch_size=8"),
        ({"batch_size": 0}, r"batch_size=0 must be at least 1"),
        ({"batch_size": 2.5}, r"batch_size=2.5 is not a whole number"),
        ({"seq_len": -1}, r"seq_len=-1 must be at least 1"),
        ({"steps": "2"}, r"steps='2' is not a whole number"),
        ({"steps": 0}, r"steps=0 must be at least 1"),
        ({"precision": None}, r"precision=None is not a string.*bf16-mixed"),
        ({"optimizer": 3}, r"optimizer=3 is neither a name nor a factory.*adamw"),
        ({"activation_checkpointing": "yes"}, r"activation_checkpointing='yes' is not a bool"),
        ({"loss_fn": 42}, r"loss_fn=42 is not callable.*\(model, batch\)"),
        ({"mode": 1}, r"mode=1 is not a string.*train"),
    ],
)
def test_settings_of_the_wrong_type_or_range_are_named(options, match):
    with pytest.raises(InvalidInputError, match=match):
        make_workload(tiny, BATCH, **options)


_NONE_IS_NOT_GIVEN = sorted(
    set(memfit.workload.WorkloadOptions.__annotations__)
    - {"precision", "mode", "activation_checkpointing"}  # defaults that are values: refused
)


@pytest.mark.parametrize("mode", ["train", "infer"])
@pytest.mark.parametrize("setting", _NONE_IS_NOT_GIVEN)
def test_none_means_not_given(setting, mode):
    """``optimizer=None, mode="infer"`` is an inference step, as if optimizer were left out;
    so is None for every setting whose default is None."""
    given = make_workload(tiny, BATCH, mode=mode, **{setting: None})
    left_out = make_workload(tiny, BATCH, mode=mode)
    fields = ("optimizer", "accumulation", "world_size", "batch_held", "offload", "steps")
    assert [getattr(given, f) for f in fields] == [getattr(left_out, f) for f in fields]


def test_none_beside_a_workload_is_not_a_setting_given():
    workload = make_workload(tiny, BATCH, mode="infer")
    assert memfit.estimator.as_workload(workload, None, {"optimizer": None}) is workload


def test_a_model_name_checks_the_batch_size_type_first():
    with pytest.raises(InvalidInputError, match=r"batch_size='8'"):
        make_workload("gpt2", batch_size="8", seq_len=8)


def test_estimate_of_none_names_the_model():
    with pytest.raises(InvalidInputError, match=r"model=None: give a model name.*nn.Module"):
        memfit.estimate(None)


def test_batch_of_that_is_not_callable():
    with pytest.raises(InvalidInputError, match=r"batch_of=3 is not callable"):
        make_workload(tiny, batch_of=3, batch_size=2)


def test_a_batch_factory_returning_none_is_named():
    with pytest.raises(InvalidInputError, match=r"make_batch returned None.*return"):
        memfit.estimate(tiny, lambda: None)


# -- 3. sequence length ------------------------------------------------------------------------
def test_seq_len_on_an_image_model_is_refused():
    # a Hugging Face image model: the CPU-build suite has transformers but not torchvision
    with pytest.raises(
        InvalidInputError, match=r"vit-base-patch16-224 takes images.*does not apply"
    ):
        make_workload("vit-base-patch16-224", batch_size=2, seq_len=128)


def test_a_sequence_longer_than_the_position_table_is_refused():
    with pytest.raises(InvalidInputError, match=r"2048.*gpt2's position table \(1024.*<= 1024"):
        make_workload("gpt2", batch_size=1, seq_len=2048)


def test_cli_seq_len_beyond_the_position_table(capsys):
    code, err = _cli(capsys, "estimate", "bert-base-uncased", "-b", "1", "-s", "4096")
    assert code == 1 and "512 positions" in err and "seq_len <= 512" in err


def test_rotary_models_beyond_their_length_get_a_note_not_an_error():
    work = make_workload("meta-llama-3-8b", batch_size=1, seq_len=16384)
    assert any("longer than the 8192 positions" in note for note in work.notes)


def test_a_rotary_note_reaches_the_estimate(tmp_path):
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "vocab_size": 64,
        "max_position_embeddings": 16,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    est = memfit.estimate(f"hf:{path}", batch_size=1, seq_len=32, mode="infer")
    assert any("16 positions" in note for note in est.notes)


def test_a_text_model_without_a_length_says_so_before_tracing():
    from memfit.workload import resolve_model

    recipe = resolve_model("gpt2")
    import dataclasses

    no_default = dataclasses.replace(recipe, default_seq_len=None)
    with pytest.raises(InvalidInputError, match=r"gpt2 is a text model.*seq_len="):
        make_workload(no_default, batch_size=1)


# -- 4. the user's code, shown as theirs -------------------------------------------------------
def test_hf_config_with_invalid_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "gpt2",')
    with pytest.raises(InvalidInputError, match=r"config.json is not valid JSON.*line 1"):
        memfit.workload.resolve_model(f"hf:{path}")


def test_hf_folder_without_config(tmp_path):
    with pytest.raises(InvalidInputError, match=r"folder has no config.json.*hf:path/to/config"):
        memfit.workload.resolve_model(f"hf:{tmp_path}")


def test_hf_path_that_does_not_exist(tmp_path):
    with pytest.raises(InvalidInputError, match=r"no such file or folder"):
        memfit.workload.resolve_model(f"hf:{tmp_path}/nope/config.json")


def test_hf_unknown_model_type(tmp_path):
    path = _tiny_config(tmp_path, model_type="gpt99")
    with pytest.raises(InvalidInputError, match=r"config.json: transformers .*'gpt99'.*Fix"):
        memfit.workload.resolve_model(f"hf:{path}")


def test_hf_misspelled_model_type_is_one_short_paragraph(capsys, tmp_path):
    """transformers' own message lists every type it knows (12,000 characters and more)."""
    path = _tiny_config(tmp_path, model_type="llamaa")
    code, err = _cli(capsys, "estimate", f"hf:{path}", "-b", "1", "-s", "8")
    assert code == 1 and len(err) < 600, err
    assert "model_type 'llamaa'" in err and "Did you mean: llama," in err
    close = err.split("Did you mean: ")[1].split("?")[0].split(", ")
    assert 1 <= len(close) <= 5
    assert "pip install -U transformers" in err and "CONFIG_MAPPING" in err


def test_a_library_message_quoted_in_an_error_is_cut_short():
    from memfit.workload._models import _first_line

    assert len(_first_line(ValueError("one of " + ", ".join(["x"] * 5000)))) <= 300
    assert _first_line(ValueError("short.\nsecond line")) == "short"


def test_hf_negative_hidden_size(tmp_path):
    path = _tiny_config(tmp_path, n_embd=-32)
    with pytest.raises(InvalidInputError, match=r"config.json: n_embd=-32 .*positive n_embd"):
        memfit.workload.resolve_model(f"hf:{path}")


def test_cli_hf_invalid_json(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{nope")
    code, err = _cli(capsys, "estimate", f"hf:{path}", "-b", "1", "-s", "8")
    assert code == 1 and "not valid JSON" in err


def _user_file(tmp_path, body: str, name: str = "net.py"):
    path = tmp_path / name
    path.write_text(body)
    return path


def test_a_user_file_that_raises_at_import(tmp_path):
    path = _user_file(tmp_path, "import torch\n\nraise RuntimeError('no config here')\n")
    with pytest.raises(UserCodeError, match=r"RuntimeError at .*net.py:3.*no config here") as err:
        memfit.workload.resolve_model(f"{path}:make")
    assert isinstance(err.value.__cause__, RuntimeError)
    assert err.value.location.endswith("net.py:3")


def test_a_user_file_with_a_syntax_error(tmp_path):
    path = _user_file(tmp_path, "def make(:\n    pass\n")
    with pytest.raises(UserCodeError, match=r"SyntaxError at .*net.py:1"):
        memfit.workload.resolve_model(f"{path}:make")


def test_a_factory_that_raises_is_theirs(tmp_path):
    body = "def make():\n    x = 1\n    raise ValueError('bad width')\n"
    path = _user_file(tmp_path, body)
    recipe = memfit.workload.resolve_model(f"{path}:make")
    with pytest.raises(UserCodeError, match=r"ValueError at .*net.py:3, in make\(\).*bad width"):
        recipe.build()


def test_a_factory_that_raises_in_an_estimate(capsys, tmp_path):
    body = (
        "import torch\n\ndef make():\n    raise KeyError('layers')\n\n"
        "def make_batch(b, s):\n    return torch.randn(b, 4)\n"
    )
    path = _user_file(tmp_path, body)
    code, err = _cli(capsys, "estimate", f"{path}:make", "-b", "2")
    assert code == 1 and "KeyError" in err and "net.py:4" in err and "not in memfit" in err


def test_a_factory_that_returns_42(tmp_path):
    path = _user_file(tmp_path, "def make():\n    return 42\n")
    recipe = memfit.workload.resolve_model(f"{path}:make")
    with pytest.raises(
        InvalidInputError, match=r"make\(\) of .*net.py returned 42 \(int\).*Module"
    ):
        recipe.build()


def test_a_python_factory_that_returns_42():
    with pytest.raises(InvalidInputError, match=r"returned 42 \(int\), not a torch.nn.Module"):
        memfit.estimate(lambda: 42, BATCH)


# a factory without make_batch: its own errors come first (they were hidden behind "does not
# know how to make a batch"), then what make_batch to write


def test_a_factory_without_make_batch_that_raises_is_theirs(tmp_path):
    path = _user_file(tmp_path, "def make():\n    x = 1\n    raise ValueError('bad width')\n")
    with pytest.raises(
        UserCodeError, match=r"ValueError at .*net.py:3, in make\(\).*bad width"
    ) as err:
        memfit.estimate(f"{path}:make", batch_size=2)
    assert isinstance(err.value.__cause__, ValueError)
    assert str(err.value.__cause__) == "bad width"


def test_a_factory_without_make_batch_that_returns_42(tmp_path):
    path = _user_file(tmp_path, "def make():\n    return 42\n")
    with pytest.raises(InvalidInputError, match=r"make\(\) of .*net.py returned 42 \(int\)"):
        memfit.estimate(f"{path}:make", batch_size=2)


def test_a_module_factory_without_make_batch_says_how_to_write_one(tmp_path):
    body = (
        "from torch import nn\n\ndef make():\n"
        "    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))\n"
    )
    path = _user_file(tmp_path, body)
    with pytest.raises(InvalidInputError) as err:
        memfit.estimate(f"{path}:make", batch_size=2)
    text = str(err.value)
    assert f"memfit cannot know what the model make() in {path} takes as input" in text
    assert "'def make_batch(batch_size, seq_len): return torch.randn(batch_size, 16)'" in text
    assert "Linear, takes 16 features" in text
    assert "hf:path/to/config.json, tv:NAME (torchvision) and timm:NAME" in text  # the kinds


def test_a_factory_without_make_batch_that_needs_cuda_is_not_blamed(tmp_path):
    """.cuda() in a factory is not the user's error where memfit builds it without a GPU:
    the trace answers it; the missing batch is what to fix."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    body = "import torch\n\ndef make():\n    return torch.nn.Linear(4, 2).cuda()\n"
    path = _user_file(tmp_path, body)
    with pytest.raises(InvalidInputError, match=r"cannot know what the model make\(\)"):
        memfit.estimate(f"{path}:make", batch_size=2)


def test_a_torchvision_factory_without_make_batch_is_told_its_name(tmp_path):
    pytest.importorskip("torchvision")
    body = "import torchvision\n\ndef make():\n    return torchvision.models.resnet18()\n"
    path = _user_file(tmp_path, body)
    with pytest.raises(InvalidInputError) as err:
        memfit.estimate(f"{path}:make", batch_size=2)
    text = str(err.value)
    assert "torch.randn(batch_size, 3, 224, 224)" in text
    assert "a torchvision ResNet: give it by name instead, e.g. tv:resnet50" in text


def test_cli_a_factory_without_make_batch_that_raises(capsys, tmp_path):
    path = _user_file(tmp_path, "def make_model():\n    raise KeyError('layers')\n")
    code, err = _cli(capsys, "estimate", f"{path}:make_model", "-b", "2")
    assert code == 1 and "KeyError" in err and "'layers'" in err and "net.py:2" in err
    assert "make a batch" not in err and "cannot know" not in err


def test_a_make_batch_that_raises(tmp_path):
    body = (
        "import torch\n\ndef make():\n    return torch.nn.Linear(4, 2)\n\n"
        "def make_batch(b, s):\n    return torch.randn(b, 4) + undefined_name\n"
    )
    path = _user_file(tmp_path, body)
    with pytest.raises(UserCodeError, match=r"NameError at .*net.py:7, in make_batch\(\)"):
        memfit.estimate(f"{path}:make", batch_size=2)


def test_a_batch_factory_that_raises_in_python():
    def make_batch():
        raise OSError("dataset not found")

    with pytest.raises(UserCodeError, match=r"OSError at .*test_bad_input_workload.py:\d+"):
        memfit.estimate(tiny, make_batch)


def test_a_factory_given_in_python_that_raises():
    def factory():
        raise ZeroDivisionError("division by zero")

    with pytest.raises(UserCodeError, match=r"ZeroDivisionError.*factory\(\).*division by zero"):
        memfit.estimate(factory, BATCH)


def test_user_code_error_is_a_memfit_error():
    assert issubclass(UserCodeError, memfit.MemfitError)
    assert "UserCodeError" in memfit.__all__


# -- 5. limits before the machine suffers ------------------------------------------------------
def test_an_absurd_batch_is_refused_before_tracing():
    with pytest.raises(InvalidInputError, match=r"1000000 x 1024 tokens is beyond any GPU.*-b"):
        make_workload("gpt2", batch_size=1_000_000, seq_len=1024)


def test_an_absurd_sequence_of_a_rotary_model_is_refused():
    with pytest.raises(InvalidInputError, match=r"1 x 1000000000 tokens is beyond any GPU"):
        make_workload("meta-llama-3-8b", batch_size=1, seq_len=1_000_000_000)


def test_the_host_check_in_the_workload(monkeypatch):
    monkeypatch.setattr(_limits, "host_memory", lambda: 4 * 2**20)
    with pytest.raises(
        InvalidInputError,
        match=r"128 x 1024 tokens would take 3.00 MiB of this host's 4.00 MiB.*smaller batch_size",
    ):
        make_workload("gpt2", batch_size=128, seq_len=1024)


def test_the_benchmark_sizes_pass():
    make_workload("meta-llama-3-8b", batch_size=8, seq_len=8192)
    make_workload("gpt2", batch_size=512, seq_len=1024)


# -- 6. offline hub ----------------------------------------------------------------------------
def test_offline_hub_id_fails_at_once(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InvalidInputError, match=r"no network \(HF_HUB_OFFLINE is set\).*hf:path"):
        memfit.workload.resolve_model("hf:some-org/not-a-cached-model-xyz")


def test_unreachable_hub_is_detected(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(_hub, "_connects", lambda host, port: False)
    with pytest.raises(InvalidInputError, match=r"huggingface.co cannot be reached.*catalog name"):
        memfit.workload.resolve_model("hf:some-org/not-a-cached-model-xyz")


# -- the loss ----------------------------------------------------------------------------------
def test_a_loss_fn_of_the_wrong_arity_is_named():
    with pytest.raises(InvalidInputError, match=r"cannot be called as loss_fn\(model, batch\)"):
        make_workload(tiny, BATCH, loss_fn=lambda out: out.sum())


def test_a_loss_fn_returning_a_float_is_named():
    def loss(model, batch):
        return float(model(batch).sum())

    # the trace names it (memfit.trace): what the loss was and what to return instead
    with pytest.raises(memfit.MemfitError, match=r"loss_fn returned .*float.*tensor"):
        memfit.estimate(tiny, BATCH, loss_fn=loss)
