import itertools
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


@pytest.mark.parametrize(
    "command", ["", "estimate", "validate", "snapshot", "run", "watch", "export"]
)
def test_every_help_has_examples_and_fits_80_columns(capsys, monkeypatch, command):
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as info:
        main([command, "--help"] if command else ["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert "examples:" in text and "--debug" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_help_shows_defaults_and_every_flag_has_help(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit):
        main(["estimate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: fp32)" in text and "(default: adamw)" in text
    assert "(default: train)" in text and "(default: 0.02)" in text
    for command in make_parser()._subparsers._group_actions[0].choices.values():
        for action in command._actions:
            assert action.help, f"{command.prog} {action.option_strings} has no help"


def _option_helps() -> list[tuple[str, str, str]]:
    """(command, flag, help) of every option of every command."""
    found = []
    for command in make_parser()._subparsers._group_actions[0].choices.values():
        for action in command._actions:
            if action.option_strings and action.help:
                found.append((command.prog, action.option_strings[0], action.help))
    return found


def test_help_texts_read_as_sentences():
    helps = _option_helps()
    compiled = {flag: text for _, flag, text in helps}["--compiled"]
    assert "an usually" not in compiled
    assert "estimates its uncompiled step instead, which usually needs more memory" in compiled
    for prog, flag, text in helps:
        words = text.lower().split()
        doubled = [a for a, b in itertools.pairwise(words) if a == b and a.isalpha()]
        assert not doubled, f"{prog} {flag}: '{doubled[0]} {doubled[0]}' in its help"


def test_no_usage_line_spells_out_a_list_of_choices(capsys, monkeypatch):
    """Options with choices show a short metavar; their help lists the choices."""
    monkeypatch.setenv("COLUMNS", "80")
    for command in ("estimate", "plan", "validate"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = capsys.readouterr().out
        assert "{" not in text, f"memfit {command} --help shows a brace list of choices"
    helps = {flag: text for prog, flag, text in _option_helps() if prog == "memfit estimate"}
    assert "ddp" in helps["--strategy"] and "zero3" in helps["--strategy"]


def test_list_models_never_cuts_a_name_at_80_columns(capsys):
    from rich.console import Console

    from memfit.cli._estimate_cmd import _list_models
    from memfit.workload import catalog_entries

    _list_models(Console(width=80, color_system=None), as_json=False)
    text = capsys.readouterr().out
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    for entry in catalog_entries().values():
        assert entry["name"] in text


def test_infer_header_names_no_optimizer_and_the_assumed_gpu(capsys, tiny, tmp_path):
    page = tmp_path / "m.html"
    assert main(["estimate", tiny, "-b", "2", "--mode", "infer", "--plot", str(page)]) == 0
    header = " ".join(capsys.readouterr().out.split("At the peak")[0].split())
    assert "mode infer" in header and "optimizer" not in header
    assert "gpu none given, traced as for H100" in header
    workload = page.read_text().split('<dl class="workload">')[1].split("</dl>")[0]
    assert "optimizer" not in workload and "traced as for H100" in workload


def test_train_header_with_a_gpu_is_as_before(capsys, tiny):
    assert main(["estimate", tiny, "-b", "2", "--gpu", "24GiB"]) == 0
    header = " ".join(capsys.readouterr().out.split("At the peak")[0].split())
    assert "optimizer adamw" in header and "gpu none given" not in header


def test_estimate_records_the_gpu_it_traced_for(tiny):
    from memfit import estimate

    assert estimate(tiny, batch_size=2).traced_for.startswith("H100")
    assert estimate(tiny, batch_size=2, gpu="a100-40g").traced_for.startswith("A100")


@pytest.mark.parametrize("suffix", [".svg", ".html"])
def test_batch_search_plot_takes_the_estimate_plot_suffixes(capsys, tiny, tmp_path, suffix):
    path = tmp_path / f"batch{suffix}"
    argv = ["estimate", tiny, "--gpu", "4090", "--max-batch-size", "--plot", str(path)]
    assert main(argv) == 0
    assert "Largest batch size" in capsys.readouterr().out
    assert "<svg" in path.read_text()


def test_run_result_to_dict_names_every_file(tmp_path):
    from memfit.oom._finalize import ReportFiles
    from memfit.oom._run import RunResult

    files = ReportFiles(tmp_path / "oom-1.md", tmp_path / "oom-1.json", None)
    result = RunResult(-9, tmp_path, (files,), ("a facts file could not be read",))
    assert result.to_dict() == {
        "returncode": -9,
        "oom_dir": str(tmp_path),
        "reports": [{"report": str(files.report), "json": str(files.json), "snapshot": None}],
        "problems": ["a facts file could not be read"],
    }


def test_probing_convolutions_without_a_gpu_says_so(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert main(["estimate", "tv:resnet18", "-b", "2", "--probe-convolutions"]) != 0
    err = capsys.readouterr().err
    assert "no CUDA GPU is available" in err and "Traceback" not in err
