import json

import pytest

from memfit.cli import main
from memfit.cli._parser import make_parser


def test_estimate_json(capsys):
    pytest.importorskip("transformers")
    assert main(["estimate", "gpt2", "-b", "1", "-s", "32", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["units"] == "bytes"
    assert data["peak_reserved"] >= data["peak_allocated"] > 0


def test_estimate_table_and_plot(capsys, tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "m.html"
    assert (
        main(["estimate", "gpt2", "-b", "1", "-s", "32", "--gpu", "4090", "--plot", str(out)]) == 0
    )
    text = capsys.readouterr().out
    assert "peak reserved" in text and "fits on" in text
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_unknown_model_is_one_paragraph_without_traceback(capsys):
    assert main(["estimate", "gtp2", "-b", "1"]) == 1
    err = capsys.readouterr().err
    assert "Did you mean" in err
    assert "Traceback" not in err


def test_debug_shows_traceback(capsys):
    assert main(["--debug", "estimate", "gtp2", "-b", "1"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_debug_after_the_command_shows_traceback_too(capsys):
    assert main(["estimate", "gtp2", "-b", "1", "--debug"]) == 1
    assert "Traceback" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "debug"),
    [
        (["estimate", "gpt2"], False),
        (["--debug", "estimate", "gpt2"], True),
        (["estimate", "gpt2", "--debug"], True),
        (["watch", "--once", "--debug"], True),
        (["snapshot", "--debug", "x.pickle"], True),
        (["run", "--debug", "python", "train.py"], True),
    ],
)
def test_debug_is_one_flag_before_or_after_the_command(argv, debug):
    assert make_parser().parse_args(argv).debug is debug


def test_debug_after_the_program_of_run_is_the_programs():
    args = make_parser().parse_args(["run", "python", "train.py", "--debug"])
    assert args.debug is False and args.cmd == ["python", "train.py", "--debug"]


def test_missing_batch_size(capsys):
    assert main(["estimate", "gpt2"]) == 1
    assert "--batch-size" in capsys.readouterr().err


def test_bad_gpu(capsys):
    assert main(["estimate", "gpt2", "-b", "1", "-s", "8", "--gpu", "h10"]) == 1
    assert "Did you mean" in capsys.readouterr().err


def test_bad_precision_is_rejected_by_the_parser(capsys):
    with pytest.raises(SystemExit) as info:
        main(["estimate", "gpt2", "-b", "1", "--precision", "fp8"])
    assert info.value.code == 2
    assert "fp32" in capsys.readouterr().err


def test_validate_without_gpu_exits_2(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert main(["validate", "gpt2", "-b", "1", "-s", "8"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err


def test_list_models(capsys):
    assert main(["estimate", "--list-models", "--json"]) == 0
    names = {m["name"] for m in json.loads(capsys.readouterr().out)}
    assert {"bert-base-uncased", "llama-2-7b-hf", "resnet50"} <= names
