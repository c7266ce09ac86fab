"""Bad input on the command line: every case exits with a known code, prints no traceback
without ``--debug``, and names the offending value and the fix. Checks that must come before
the work (a trace or a search takes seconds) replace the work with a function that fails the
test if it is reached."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import memfit
from memfit.cli import main

HERE = Path(__file__).parent
NVML = HERE.parent / "monitor" / "fixtures" / "nvml-h200.json.gz"
SNAPSHOT = HERE.parent / "snapshot" / "data" / "python.pickle.gz"


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trace and the search fail the test if reached: the check must come first."""

    def reached(*args: object, **kwargs: object) -> None:
        raise AssertionError("the work started before the flags were checked")

    monkeypatch.setattr("memfit.cli._estimate_cmd.estimate", reached)
    monkeypatch.setattr("memfit.runtime.find_batch_size", reached)


def _fails(capsys: pytest.CaptureFixture[str], argv: list[str], code: int = 1) -> str:
    """Run ``argv``, check the exit code and that no traceback shows; return stderr."""
    assert main(argv) == code
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    return captured.err


def _refused_by_parser(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """A flag argparse refuses: exit code 2 and the usage line, no traceback."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "usage:" in err
    return err


# -b and -s: positive whole numbers, refused by the parser before anything is imported


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("-b", "0", "0 is not accepted; give a number >= 1"),
        ("-b", "-3", "-3 is not accepted; give a number >= 1"),
        ("--batch-size", "eight", "'eight' is not a whole number"),
        ("-b", "1.5", "'1.5' is not a whole number"),
        ("-s", "0", "0 is not accepted; give a number >= 1"),
        ("--seq-len", "-512", "-512 is not accepted"),
        ("-s", "1k", "'1k' is not a whole number"),
    ],
)
def test_batch_and_sequence_must_be_positive_whole_numbers(capsys, flag, value, message):
    err = _refused_by_parser(capsys, ["estimate", "gpt2", "-b", "1", flag, value])
    assert message in err and flag.lstrip("-")[:1] in err


@pytest.mark.parametrize(
    ("value", "message"),
    [("0", "0 is not accepted; give a number >= 1"), ("two", "'two' is not a whole number")],
)
def test_plan_workers_must_be_a_positive_whole_number(capsys, value, message):
    err = _refused_by_parser(capsys, ["plan", "gpt2", "--gpu", "24GiB", "--workers", value])
    assert message in err and "--workers" in err


# a negative size after an option is its value, refused by what checks the value: argparse took
# '--gpu -5GiB' for two options ("expected one argument")

_NEGATIVE_GPU = "GPU size '-5GiB' is negative: a GPU's memory is a positive size. Give e.g. '5GiB'"


@pytest.mark.parametrize("joined", [False, True], ids=["--gpu -5GiB", "--gpu=-5GiB"])
@pytest.mark.parametrize(
    ("command", "flag", "code"),
    [
        (["estimate", "gpt2", "-b", "1", "-s", "8"], "--gpu", 1),
        (["plan", "gpt2", "-b", "1", "-s", "8"], "--gpu", 2),
        (["plan", "gpt2", "-b", "1", "-s", "8"], "--budget", 2),
        (["snapshot", str(SNAPSHOT)], "--capacity", 1),
    ],
    ids=["estimate", "plan", "plan-budget", "snapshot"],
)
def test_a_negative_gpu_size_is_named_whichever_way_it_is_written(
    capsys, command, flag, code, joined
):
    argv = [*command, *([f"{flag}=-5GiB"] if joined else [flag, "-5GiB"])]
    err = _refused_by_parser(capsys, argv) if code == 2 else _fails(capsys, argv, code)
    assert _NEGATIVE_GPU in " ".join(err.split()) and "expected one argument" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["estimate", "gpt2", "-s", "8", "--gpu", "h100", "--max-batch-size"],
            "margin='-1GiB': Size '-1GiB' is negative; give a size of 0 or more, e.g. '1GiB'",
        ),
        (["run", "--", sys.executable, "-c", "pass"], "limit='-1GiB' is below zero"),
    ],
    ids=["estimate-margin", "run-limit"],
)
def test_every_option_taking_a_size_takes_a_negative_one_as_its_value(capsys, argv, message):
    flag = ["--margin", "-1GiB"] if argv[0] == "estimate" else ["--limit", "-1GiB"]
    err = _fails(capsys, [argv[0], *flag, *argv[1:]], 1)
    assert message in " ".join(err.split()) and "expected one argument" not in err


def test_plans_margin_takes_a_negative_value_as_its_value(capsys):
    argv = ["plan", "gpt2", "-b", "1", "-s", "8", "--gpu", "h100", "--margin", "-1GiB"]
    err = _refused_by_parser(capsys, argv)
    assert "argument --margin: '-1GiB' is not a number" in err


def test_a_commands_own_arguments_are_never_rewritten():
    from memfit.cli._argv import join_negative_values
    from memfit.cli._parser import make_parser

    parser = make_parser()
    child = ["python", "train.py", "--limit", "-1e-3"]
    assert join_negative_values(parser, ["run", "--limit", "-1GiB", *child]) == [
        "run",
        "--limit=-1GiB",
        *child,
    ]
    after = ["run", "--", "python", "x.py", "--gpu", "-5GiB"]
    assert join_negative_values(parser, after) == after
    assert join_negative_values(parser, ["estimate", "-b", "-3"]) == ["estimate", "-b", "-3"]


def test_unknown_mode_is_refused_with_the_choices(capsys):
    err = _refused_by_parser(capsys, ["estimate", "gpt2", "-b", "1", "--mode", "eval"])
    assert "'eval'" in err and "train" in err and "infer" in err


# flags that would be ignored are refused, before the trace


def test_checkpointing_with_inference_is_refused(capsys, no_work):
    err = _fails(capsys, ["estimate", "gpt2", "-b", "1", "--mode", "infer", "--checkpointing"])
    assert "--checkpointing with --mode infer" in err and "Drop --checkpointing" in err


def test_validate_refuses_checkpointing_with_inference_before_the_gpu(capsys):
    argv = ["validate", "gpt2", "-b", "1", "--mode", "infer", "--checkpointing"]
    err = _fails(capsys, argv)
    assert "--checkpointing with --mode infer" in err


def test_margin_without_max_batch_size_is_refused(capsys, no_work):
    err = _fails(capsys, ["estimate", "gpt2", "-b", "1", "--margin", "1GiB"])
    assert "--margin 1GiB goes with --max-batch-size" in err and "drop --margin" in err


def test_batch_size_with_max_batch_size_is_refused(capsys, no_work):
    argv = ["estimate", "gpt2", "-b", "8", "--gpu", "h100", "--max-batch-size"]
    err = _fails(capsys, argv)
    assert "--batch-size 8 and --max-batch-size" in err and "Drop --batch-size" in err


def test_confirm_alone_is_refused(capsys, no_work):
    err = _fails(capsys, ["estimate", "gpt2", "-b", "1", "--confirm"])
    assert "--confirm goes with --max-batch-size" in err and "memfit validate" in err


def test_no_model_says_how_to_give_one(capsys, no_work):
    err = _fails(capsys, ["estimate", "-b", "1"])
    assert "Give a model" in err and "--list-models" in err


def test_no_batch_size_says_how_to_give_one(capsys, no_work):
    err = _fails(capsys, ["estimate", "gpt2"])
    assert "Give --batch-size" in err and "-b 8" in err


# --plot is checked before the work, for an estimate and for the batch search alike


@pytest.mark.parametrize("search", [False, True], ids=["estimate", "max-batch-size"])
def test_plot_in_a_missing_folder_is_refused_first(capsys, no_work, tmp_path, search):
    path = tmp_path / "nope" / "m.svg"
    extra = ["--gpu", "h100", "--max-batch-size"] if search else ["-b", "1"]
    err = _fails(capsys, ["estimate", "gpt2", *extra, "--plot", str(path)])
    assert f"the folder '{path.parent}' does not exist" in err and "Create it" in err


@pytest.mark.parametrize("search", [False, True], ids=["estimate", "max-batch-size"])
def test_plot_with_an_unknown_suffix_names_the_accepted_ones(capsys, no_work, tmp_path, search):
    path = tmp_path / "m.pdf"
    extra = ["--gpu", "h100", "--max-batch-size"] if search else ["-b", "1"]
    err = _fails(capsys, ["estimate", "gpt2", *extra, "--plot", str(path)])
    assert "the suffix '.pdf'" in err
    assert ".png" in err and ".svg" in err and ".html" in err


def test_plot_that_is_a_folder_is_refused_first(capsys, no_work, tmp_path):
    err = _fails(capsys, ["estimate", "gpt2", "-b", "1", "--plot", str(tmp_path)])
    assert "it is a folder" in err and "Give a file path" in err


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes anywhere")
def test_plot_in_a_read_only_folder_is_refused_first(capsys, no_work, tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        err = _fails(capsys, ["estimate", "gpt2", "-b", "1", "--plot", str(folder / "m.svg")])
    finally:
        folder.chmod(0o700)
    assert "is not writable" in err


@pytest.mark.parametrize("search", [False, True], ids=["estimate", "max-batch-size"])
def test_png_plot_without_matplotlib_gives_the_install_line_first(
    capsys, monkeypatch, no_work, tmp_path, search
):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    extra = ["--gpu", "h100", "--max-batch-size"] if search else ["-b", "1"]
    err = _fails(capsys, ["estimate", "gpt2", *extra, "--plot", str(tmp_path / "m.png")])
    assert "matplotlib" in err and "pip install 'memfit[plot]'" in err


def test_a_plot_that_fails_to_write_keeps_the_estimate(capsys, monkeypatch, tiny, tmp_path):
    def disk_full(result: object, path: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("memfit.report.write_estimate_plot", disk_full)
    path = tmp_path / "m.html"
    assert main(["estimate", tiny, "-b", "2", "--plot", str(path)]) == 1
    captured = capsys.readouterr()
    assert "peak reserved" in captured.out  # the estimate is printed
    assert f"could not be written to '{path}'" in captured.err
    assert "No space left on device" in captured.err and "Traceback" not in captured.err


# watch and export: intervals and durations


@pytest.mark.skipif(not NVML.exists(), reason="the recorded NVML fixture is not there")
@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0"])
def test_watch_interval_must_be_finite_and_positive(capsys, value):
    argv = ["watch", "--interval", value, "--count", "1", "--replay", str(NVML)]
    err = _fails(capsys, argv)
    assert f"--interval {value} is not accepted" in err and "--interval 1" in err


@pytest.mark.skipif(not NVML.exists(), reason="the recorded NVML fixture is not there")
def test_export_interval_inf_is_refused(capsys):
    err = _fails(capsys, ["export", "--port", "0", "--interval", "inf", "--replay", str(NVML)])
    assert "--interval inf is not accepted" in err


@pytest.mark.skipif(not NVML.exists(), reason="the recorded NVML fixture is not there")
@pytest.mark.parametrize("value", ["-5", "0", "inf"])
def test_export_duration_must_be_finite_and_positive(capsys, value):
    err = _fails(capsys, ["export", "--port", "0", "--duration", value, "--replay", str(NVML)])
    assert f"--duration {value} is not accepted" in err and "leave it out" in err


def test_snapshot_top_zero_is_refused(capsys):
    err = _fails(capsys, ["snapshot", str(SNAPSHOT), "--top", "0"])
    assert "--top 0 is not accepted" in err and ">= 1" in err


# interrupted pipes, interrupts and unexpected errors


def test_a_closed_pipe_ends_quietly_with_exit_code_0(capsys, monkeypatch):
    def reader_gone(*args: object, **kwargs: object) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("memfit.cli._estimate_cmd.estimate", reader_gone)
    assert main(["estimate", "gpt2", "-b", "1", "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "Traceback" not in captured.out


def test_snapshot_json_into_a_closed_pipe_prints_nothing_on_stderr():
    # memfit snapshot FILE --json | head -1, with the reader gone before memfit writes
    cmd = [sys.executable, "-c", "from memfit.cli import main; raise SystemExit(main())"]
    proc = subprocess.Popen(
        [*cmd, "snapshot", str(SNAPSHOT), "--json", "--no-what-if"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader goes away at once
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0
    assert err == ""


_CLI = [sys.executable, "-c", "from memfit.cli import main; raise SystemExit(main())"]


def _into_closed_pipe(args: list[str]) -> tuple[int, str]:
    """Run the real command line with its output piped to a reader that is already gone (as
    ``| head -1`` is once it has its line); its exit code and stderr."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # closed before memfit writes a byte: every write finds no reader
    try:
        done = subprocess.run(
            [*_CLI, *args], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120
        )
    finally:
        os.close(write_end)
    return done.returncode, done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["estimate", "--list-models"],
        ["doctor"],
        ["snapshot", str(SNAPSHOT), "--no-what-if"],
        ["watch", "--replay", str(NVML), "--once"],
    ],
    ids=["estimate-list-models", "doctor", "snapshot", "watch"],
)
def test_tables_into_a_closed_pipe_end_quietly_with_exit_code_0(args):
    """rich met the closed pipe itself and ended the process with exit code 1."""
    code, err = _into_closed_pipe(args)
    assert (code, err) == (0, "")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
@pytest.mark.parametrize(
    "args",
    [["estimate", "--list-models"], ["estimate", "--list-models", "--json"], ["doctor"]],
    ids=["table", "json", "doctor"],
)
def test_output_to_a_full_disk_is_one_paragraph_not_a_bug(args):
    with open("/dev/full", "w") as full:
        done = subprocess.run([*_CLI, *args], stdout=full, stderr=subprocess.PIPE, text=True)
    err = " ".join(done.stderr.split())
    assert done.returncode == 1
    assert err.startswith(
        "error: could not write the output to /dev/full: No space left on device. Send it "
        "where it can be written"
    )
    assert "a bug in memfit" not in err and "Traceback" not in err
    assert "Exception ignored" not in err


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
def test_an_estimate_to_a_full_disk_names_the_reason(tiny):
    with open("/dev/full", "w") as full:
        args = ["estimate", tiny, "-b", "2"]
        done = subprocess.run([*_CLI, *args], stdout=full, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 1
    assert "could not write the output to /dev/full: No space left on device" in done.stderr


def _full_file(tmp_path: Path, name: str) -> Path:
    """A path whose writes fail as on a full disk."""
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    path = tmp_path / name
    path.symlink_to("/dev/full")
    return path


def test_a_plot_to_a_full_disk_names_the_path_and_the_reason(capsys, tiny, tmp_path):
    path = _full_file(tmp_path, "memory.svg")
    err = " ".join(_fails(capsys, ["estimate", tiny, "-b", "2", "--plot", str(path)]).split())
    assert f"the plot could not be written to '{path}': No space left on device" in err


def test_an_html_report_to_a_full_disk_names_the_path_and_the_reason(capsys, tmp_path):
    path = _full_file(tmp_path, "report.html")
    assert main(["snapshot", str(SNAPSHOT), "--no-what-if", "--html", str(path)]) == 1
    captured = capsys.readouterr()
    err = " ".join(captured.err.split())
    assert f"the HTML report could not be written to '{path}': No space left on device" in err
    assert "Peak" in captured.out or "peak" in captured.out  # the report came first


def test_a_watch_log_on_a_full_disk_names_the_path_and_the_reason(capsys, tmp_path):
    path = _full_file(tmp_path, "gpu.csv")
    err = _fails(capsys, ["watch", "--replay", str(NVML), "--once", "--log", str(path)])
    assert f"--log {path}: a sample could not be written (No space left on device)" in " ".join(
        err.split()
    )


def test_ctrl_c_exits_130_without_a_traceback(capsys, monkeypatch):
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("memfit.cli._estimate_cmd.estimate", interrupted)
    err = _fails(capsys, ["estimate", "gpt2", "-b", "1"], code=130)
    assert "Interrupted" in err


def _bug(*args: object, **kwargs: object) -> None:
    raise ZeroDivisionError("division by zero")


def test_an_unexpected_error_is_one_paragraph(capsys, monkeypatch):
    monkeypatch.setattr("memfit.cli._estimate_cmd.estimate", _bug)
    err = _fails(capsys, ["estimate", "gpt2", "-b", "1"])
    assert "memfit hit an unexpected error: ZeroDivisionError: division by zero" in err
    assert "report the traceback" in err


def test_an_unexpected_error_shows_its_traceback_with_debug(capsys, monkeypatch):
    monkeypatch.setattr("memfit.cli._estimate_cmd.estimate", _bug)
    assert main(["estimate", "gpt2", "-b", "1", "--debug"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "ZeroDivisionError" in err


def test_the_debug_hint_gives_the_command_line_to_run(capsys, no_work):
    err = _fails(capsys, ["estimate", "gpt2", "--margin", "0.1", "-b", "1"])
    assert "run again with --debug: memfit --debug estimate gpt2 --margin 0.1 -b 1" in err


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"memfit {memfit.__version__}"


def test_snapshot_html_in_a_missing_folder_is_refused_before_the_replays(
    capsys, monkeypatch, tmp_path
):
    def reached(*args: object, **kwargs: object) -> None:
        raise AssertionError("the snapshot was read before --html was checked")

    monkeypatch.setattr("memfit.snapshot.report", reached)
    path = tmp_path / "nope" / "r.html"
    err = _fails(capsys, ["snapshot", str(SNAPSHOT), "--html", str(path)])
    assert f"the folder '{path.parent}' does not exist" in err


def test_snapshot_html_with_another_suffix_is_refused(capsys, tmp_path):
    err = _fails(capsys, ["snapshot", str(SNAPSHOT), "--html", str(tmp_path / "r.pdf")])
    assert "the suffix '.pdf'" in err and ".html" in err


@pytest.mark.parametrize(
    ("extra", "named"),
    [(["gpt2"], "gpt2"), (["-b", "8"], "--batch-size"), (["--plot", "m.svg"], "--plot")],
)
def test_list_models_refuses_a_workload(capsys, extra, named):
    err = _fails(capsys, ["estimate", "--list-models", *extra])
    assert f"but {named} was given" in err and "--list-models" in err


@pytest.mark.parametrize("value", ["inf", "-1"])
def test_export_interval_is_refused_without_a_driver_too(capsys, value):
    err = _fails(capsys, ["export", "--interval", value])
    assert f"--interval {value} is not accepted" in err


def test_optimizer_with_inference_is_refused(capsys, no_work):
    err = _fails(capsys, ["estimate", "gpt2", "-b", "1", "--mode", "infer", "-o", "sgd"])
    assert "--optimizer sgd with --mode infer" in err and "Drop --optimizer" in err
