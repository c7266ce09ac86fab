"""``memfit plan``: the answer, the exit codes (0 fits, 1 nothing fits), --json, --plot, --all,
and the flags handed to ``memfit.planner.plan`` (replaced by a stand-in that returns a
hand-made plan: the search itself is tested with the planner)."""

from __future__ import annotations

import json

import pytest
from plan_cli_data import FakePlanner, nothing_fits_plan

from memfit._units import GiB
from memfit.cli import main


def test_a_plan_that_fits_prints_the_answer_and_the_table_and_exits_0(capsys, monkeypatch):
    FakePlanner(monkeypatch)
    assert main(["plan", "gpt2", "-b", "32", "-s", "1024", "--gpu", "24GiB"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("Chosen: micro-batch 8 x 4, bf16-mixed")
    assert "Plan for gpt2 in 24.00 GiB" in out and "▶ 1" in out
    assert "[3/3] candidate 3" in err  # progress, on stderr
    assert "Traceback" not in out + err


def test_nothing_fits_prints_the_answer_and_exits_1(capsys, monkeypatch):
    FakePlanner(monkeypatch, nothing_fits_plan())
    assert main(["plan", "gpt2", "-s", "1024", "--gpu", "4GiB"]) == 1
    out, err = capsys.readouterr()
    assert out.startswith("Nothing fits the budget of 4.00 GiB")
    assert "8.20 GiB over" in " ".join(out.split()) and "sequences of 256 tokens" in out
    assert "error" not in err


@pytest.mark.parametrize(("make", "code"), [(None, 0), (nothing_fits_plan, 1)])
def test_json_is_all_of_stdout(capsys, monkeypatch, make, code):
    FakePlanner(monkeypatch, make() if make else None)
    assert main(["plan", "gpt2", "--gpu", "24GiB", "--json"]) == code
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["fits"] is (code == 0)
    assert {"candidates", "chosen", "pareto", "would_fit", "budget"} <= set(data)
    assert "[1/3]" in err


def test_plot_writes_a_png_after_the_answer(capsys, monkeypatch, tmp_path):
    pytest.importorskip("matplotlib")
    FakePlanner(monkeypatch)
    target = tmp_path / "plan.png"
    assert main(["plan", "gpt2", "--gpu", "24GiB", "--plot", str(target)]) == 0
    assert target.read_bytes()[:4] == b"\x89PNG" and target.stat().st_size > 10_000
    assert f"Plot written to {target}" in capsys.readouterr().out


def test_plot_with_json_keeps_stdout_json(capsys, monkeypatch, tmp_path):
    pytest.importorskip("matplotlib")
    FakePlanner(monkeypatch, nothing_fits_plan())
    target = tmp_path / "plan.png"
    assert main(["plan", "gpt2", "--gpu", "4GiB", "--json", "--plot", str(target)]) == 1
    json.loads(capsys.readouterr().out)
    assert target.stat().st_size > 10_000


def test_all_shows_every_candidate(capsys, monkeypatch):
    from plan_data import many_plan

    FakePlanner(monkeypatch, many_plan())
    assert main(["plan", "bert-base-uncased", "--gpu", "80GiB"]) == 0
    assert "35 more candidates not shown" in capsys.readouterr().out
    assert main(["plan", "bert-base-uncased", "--gpu", "80GiB", "--all"]) == 0
    out = capsys.readouterr().out
    assert "not shown" not in out and out.count("✓") + out.count("✗") == 50


def test_flags_reach_the_planner(capsys, monkeypatch):
    planner = FakePlanner(monkeypatch)
    argv = ["plan", "gpt2", "-b", "32", "-s", "1024", "--budget", "h100", "--global-batch"]
    argv += ["256", "--margin", "0.1", "--precisions", "fp32,bf16-mixed,fp32"]
    argv += ["--selective-checkpointing", "--no-checkpointing-search", "-o", "adamw-fused"]
    assert main([*argv, "--workers", "3", "--no-cache-freeing", "--json"]) == 0
    (call,) = planner.calls
    assert call["model"] == "gpt2"
    assert call["budget"].name.startswith("H100")
    assert call["global_batch"] == 256 and call["margin"] == 0.1
    assert call["precisions"] == ("fp32", "bf16-mixed")
    assert call["checkpointing"] == ("selective",)
    assert call["activation_checkpointing"] == "selective"
    assert call["batch_size"] == 32 and call["seq_len"] == 1024
    assert call["optimizer"] == "adamw-fused"
    assert "mode" not in call and callable(call["progress"])
    assert call["workers"] == 3
    assert call["cache_freeing"] is False


def test_unset_search_settings_keep_the_planners_defaults(capsys, monkeypatch):
    planner = FakePlanner(monkeypatch)
    assert main(["plan", "gpt2", "--gpu", "24GiB", "--json"]) == 0
    (call,) = planner.calls
    assert call["budget"].total == 24 * GiB
    for name in ("global_batch", "margin", "precisions", "checkpointing", "batch_size", "workers"):
        assert name not in call
    assert "cache_freeing" not in call  # the planner's default: it may free the cache


def test_help_lists_plan_and_its_flags(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    assert "plan" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    out = capsys.readouterr().out
    for flag in ("--gpu", "--budget", "--global-batch", "--margin", "--precisions", "--plot"):
        assert flag in out
    assert "--no-checkpointing-search" in out and "--all" in out and "memfit plan gpt2" in out
