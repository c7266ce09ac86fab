"""Serving capacity: the largest concurrency at a context fits and one more does not, the longest
context at a concurrency likewise, the KV cache worked out from a config (sliding windows
kept to their window), and every bad request refused in a paragraph."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from memfit import InvalidInputError
from memfit.estimator import kv_cache_bytes, serving_capacity

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

GPU = "1GiB"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    config = transformers.LlamaConfig(
        vocab_size=1000,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    folder = tmp_path_factory.mktemp("tiny-llama")
    config.save_pretrained(folder)
    return f"hf:{folder}/config.json"


def test_the_largest_concurrency_fits_and_one_more_does_not(model: str) -> None:
    r = serving_capacity(model, gpu=GPU, context=256, new_tokens=4)
    assert r.best is not None and r.best.fits and r.concurrency == r.best.concurrency > 1
    more = {(p.context, p.concurrency): p for p in r.points}[(256, r.concurrency + 1)]
    assert not more.fits and more.needed > r.best.needed
    # the config's cache: 2 layers x keys and values x 2 heads x 64 x 256 tokens x 2 bytes
    assert r.kv_cache_per_sequence == 2 * 2 * 2 * 64 * 256 * 2
    assert r.weights > 0
    data = r.to_dict()
    assert data["concurrency"] == r.concurrency and data["units"] == "bytes"
    assert any("not modelled" in n for n in r.notes)


def test_the_longest_context_at_a_concurrency(model: str) -> None:
    r = serving_capacity(model, gpu=GPU, concurrency=64, new_tokens=4)
    assert r.best is not None and r.best.fits and r.context == r.best.context
    points = {(p.context, p.concurrency): p for p in r.points}
    longer = points.get((r.context + 1, 64))
    assert r.context == 512 or (longer is not None and not longer.fits)


def test_a_static_cache_is_traced_too(model: str) -> None:
    r = serving_capacity(model, gpu="2GiB", context=128, new_tokens=2, cache="static")
    assert r.best is not None and "static cache" in r.notes[1]


def test_the_kv_cache_of_a_config_keeps_sliding_layers_to_their_window() -> None:
    config = SimpleNamespace(
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=128,
        sliding_window=1024,
        layer_types=["sliding_attention", "full_attention"] * 2,
    )
    per_token = 2 * 2 * 128 * 2
    assert kv_cache_bytes(config, 8192, 2) == 2 * 1024 * per_token + 2 * 8192 * per_token


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"context": 1024}, "longer than"),
        ({"context": 4}, "leaves no prompt"),
        ({"context": 64, "concurrency": 2}, "one of them"),
        ({}, "one of them"),
        ({"context": 64, "cache": "paged"}, "is not one of transformers' caches"),
        ({"context": 64, "new_tokens": 0}, "new_tokens=0"),
    ],
)
def test_bad_requests_are_refused(model: str, settings: dict[str, object], said: str) -> None:
    with pytest.raises(InvalidInputError, match=said):
        serving_capacity(model, gpu=GPU, **{"new_tokens": 4, **settings})  # type: ignore[arg-type]


def test_a_model_object_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="is not a model name"):
        serving_capacity(object(), gpu=GPU, context=64)  # type: ignore[arg-type]


def test_the_command_line_answers_in_json_and_refuses_in_a_paragraph(model: str) -> None:
    run = [sys.executable, "-m", "memfit", "serve", model, "--gpu", GPU, "--new-tokens", "4"]
    ok = subprocess.run([*run, "--context", "128", "--json"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["concurrency"] >= 1
    bad = subprocess.run([*run, "--context", "2048"], capture_output=True, text=True)
    assert bad.returncode == 1 and "longer than" in bad.stderr and "Traceback" not in bad.stderr
    assert Path(model.removeprefix("hf:")).exists()


def test_a_table_around_the_answer_and_its_plot(model: str, tmp_path: Path) -> None:
    r = serving_capacity(model, gpu=GPU, context=128, new_tokens=4, table="around")
    # powers of two from a quarter of 128 to four times it, within the 512 positions
    assert [p.context for p in r.table] == [32, 64, 256, 512]
    by_context = {p.context: p.concurrency for p in r.table}
    assert by_context[32] >= by_context[64] >= r.concurrency >= by_context[256]
    assert sorted(r.kv_cache_by_context) == [32, 64, 128, 256, 512]
    assert r.kv_cache_by_context[128] == r.kv_cache_per_sequence
    room = r.gpu.total - r.weights - r.outside_pytorch
    assert r.outside_pytorch > 0 and room // r.kv_cache_per_sequence >= r.concurrency
    pytest.importorskip("matplotlib")
    from memfit.report import write_serving_png

    written = write_serving_png(r, tmp_path / "serve.png")
    assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_table_that_is_neither_contexts_nor_around_is_refused(model: str) -> None:
    with pytest.raises(InvalidInputError, match="neither contexts nor 'around'"):
        serving_capacity(model, gpu=GPU, context=64, table="all")  # type: ignore[arg-type]


def test_the_command_line_plots_around_the_answer(model: str, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    run = [sys.executable, "-m", "memfit", "serve", model, "--gpu", GPU, "--new-tokens", "4"]
    plot = tmp_path / "serve.png"
    ok = subprocess.run(
        [*run, "--context", "128", "--plot", str(plot), "--json"], capture_output=True, text=True
    )
    assert ok.returncode == 0, ok.stderr
    assert len(json.loads(ok.stdout)["table"]) == 4 and plot.exists()
    bad = subprocess.run(
        [*run, "--context", "128", "--plot", str(tmp_path / "serve.pdf")],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1 and "serve.pdf" in bad.stderr and "Traceback" not in bad.stderr
    assert "traced" not in bad.stdout  # refused before any trace


@pytest.mark.parametrize("kind", ["nf4", "int8"])
def test_quantized_weights_take_less(model: str, kind: str) -> None:
    pytest.importorskip("bitsandbytes")
    plain = serving_capacity(model, gpu=GPU, context=128, new_tokens=2)
    packed = serving_capacity(model, gpu=GPU, context=128, new_tokens=2, quantize=kind)
    assert packed.weights < plain.weights
    if kind == "nf4":  # at these sizes the weights are little beside the activations
        assert packed.concurrency >= plain.concurrency
    else:  # LLM.int8's products take int32 and fp16 copies and its outlier search, bounded
        assert any("outlier columns" in n for n in packed.notes)
    assert packed.to_dict()["quantize"] == kind and plain.to_dict()["quantize"] is None
    assert packed.weights_words == f"bf16 with {kind} weights"


def test_a_quantization_it_does_not_make_is_refused(model: str) -> None:
    with pytest.raises(InvalidInputError, match="is not a data type memfit quantizes to"):
        serving_capacity(model, gpu=GPU, context=64, new_tokens=2, quantize="int4")


def test_the_command_line_refuses_a_quantization_it_does_not_make(model: str) -> None:
    run = [sys.executable, "-m", "memfit", "serve", model, "--gpu", GPU, "--context", "64"]
    bad = subprocess.run([*run, "--quantize", "int4"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice: 'int4'" in bad.stderr
    assert "Traceback" not in bad.stderr
