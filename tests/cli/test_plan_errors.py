"""Bad input to ``memfit plan``: every case exits 2 (1 means "nothing fits"), prints no
traceback without ``--debug``, and names the offending value and the fix. The planner is
replaced by a stand-in that fails the test if reached wherever the check must come first."""

from __future__ import annotations

import pytest
from plan_cli_data import FakePlanner

from memfit import InvalidInputError
from memfit.cli import main


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planner fails the test if reached: the check must come before the search."""

    def reached(*args: object, **kwargs: object) -> None:
        raise AssertionError("the search started before the flags were checked")

    monkeypatch.setattr("memfit.planner.plan", reached, raising=False)


def _refused_by_parser(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """A value the parser refuses: exit code 2 and the usage line, no traceback."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "usage:" in err
    return " ".join(err.split())


def _fails(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """An error raised while running: exit code 2, one paragraph, no traceback."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    assert "error:" in captured.err and "--debug" in captured.err
    return " ".join(captured.err.split())


@pytest.mark.parametrize(
    ("argv", "value", "fix"),
    [
        (["--gpu", "-3GiB"], "'-3GiB' is negative", "a positive size. Give e.g. '3GiB'"),
        (["--gpu=-3GiB"], "'-3GiB' is negative", "a positive size. Give e.g. '3GiB'"),
        (["--budget", "-1"], "'-1' is negative", "'1GiB', or a GPU name such as 'h100'"),
        (["--gpu", "100MiB"], "'100MiB'", "smaller than the 758 MiB a CUDA process holds"),
        (["--gpu", "abc"], "GPU 'abc' is not known", "a memory size such as '24GiB'"),
        (["--gpu", "24"], "'24' has no unit", "'24GiB'"),
        (["--gpu", "100000GiB"], "'100000GiB' is more than 2 TiB", "check the number and the unit"),
        (["--gpu", "24GiB", "--margin", "1.5"], "1.5 is not a fraction", "e.g. 0.05"),
        (["--gpu", "24GiB", "--margin", "-0.1"], "-0.1 is not a fraction", "e.g. 0.05"),
        (["--gpu", "24GiB", "--margin", "5%"], "'5%' is not a number", "e.g. 0.05"),
        (["--gpu", "24GiB", "--precisions", "fp64"], "'fp64' is not a precision", "bf16-mixed"),
        (["--gpu", "24GiB", "--precisions", ","], "',' is not a precision", "fp32,bf16-mixed"),
        (["--gpu", "24GiB", "--global-batch", "0"], "0 is not accepted", "a number >= 1"),
        (["--gpu", "24GiB", "--global-batch", "many"], "'many' is not a whole number", ">= 1"),
    ],
)
def test_bad_values_are_refused_by_the_parser(capsys, no_work, argv, value, fix):
    err = _refused_by_parser(capsys, ["plan", "gpt2", *argv])
    assert value in err and fix in err
    flag = argv[-2] if len(argv) > 1 else argv[0].split("=")[0]
    assert f"argument {flag}" in err or f"/{flag}:" in err  # the flag, named


def test_no_budget_is_refused_with_an_example(capsys, no_work):
    err = _fails(capsys, ["plan", "gpt2", "-s", "1024"])
    assert "Give the memory to plan for: --gpu" in err and "--gpu 24GiB" in err


def test_no_model_is_refused_with_an_example(capsys, no_work):
    err = _fails(capsys, ["plan", "--gpu", "24GiB"])
    assert "Give a model" in err and "memfit plan gpt2" in err and "--list-models" in err


def test_inference_is_refused(capsys, no_work):
    err = _fails(capsys, ["plan", "gpt2", "--gpu", "24GiB", "--mode", "infer"])
    assert "--mode infer" in err and "plans a training step" in err and "memfit estimate" in err


@pytest.mark.parametrize(
    ("name", "message"),
    [("plan.svg", "suffix '.svg'"), ("nowhere/plan.png", "does not exist")],
)
def test_a_plot_that_cannot_be_written_is_refused_before_the_search(
    capsys, no_work, tmp_path, name, message
):
    err = _fails(capsys, ["plan", "gpt2", "--gpu", "24GiB", "--plot", str(tmp_path / name)])
    assert message in err and "plan plot" in err


def test_the_planners_own_refusal_exits_2(capsys, monkeypatch):
    """A budget the parser lets through but the planner refuses (the margin leaves less than
    the CUDA context), or an unknown model: the planner's message, exit code 2."""

    def refuse(model: str, **kwargs: object) -> None:
        raise InvalidInputError(
            "budget='1GiB' with margin=0.5 leaves 512.00 MiB, less than the 758 MiB a CUDA "
            "process holds: give a larger budget or a smaller margin, e.g. margin=0.05."
        )

    monkeypatch.setattr("memfit.planner.plan", refuse, raising=False)
    err = _fails(capsys, ["plan", "gpt2", "--gpu", "1GiB", "--margin", "0.5"])
    assert "budget='1GiB'" in err and "smaller margin" in err


def test_debug_shows_the_traceback(capsys, monkeypatch):
    def refuse(model: str, **kwargs: object) -> None:
        raise InvalidInputError("Model 'nope' is not known: give a catalog name.")

    monkeypatch.setattr("memfit.planner.plan", refuse, raising=False)
    assert main(["plan", "nope", "--gpu", "24GiB", "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "Model 'nope' is not known" in err


def test_a_failure_of_the_search_exits_2_not_1(capsys, monkeypatch):
    """1 means "nothing fits": an error must never be read as that."""
    planner = FakePlanner(monkeypatch)

    def broken(model: str, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr("memfit.planner.plan", broken, raising=False)
    err = _fails(capsys, ["plan", "gpt2", "--gpu", "24GiB"])
    assert "unexpected error: RuntimeError: boom" in err
    assert planner.calls == []
