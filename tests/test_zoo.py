"""The zoo sweep (``benchmarks/zoo.py``): shrinking configs, choosing batches, the worker pool,
the GPU loop on the CPU (``measure --dry-run``) and the comparison of estimates with
measurements."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import zoo_batch  # noqa: E402
import zoo_compare  # noqa: E402
import zoo_shrink  # noqa: E402

GB = 10**9


# -- shrinking ---------------------------------------------------------------------------------


def test_shrink_cuts_depth_width_heads_and_keeps_each_kind_of_layer():
    layer_types = ["linear_attention"] * 3 + ["full_attention"]
    config = {
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 11008,
        "num_experts": 256,
        "num_experts_per_tok": 8,
        "vocab_size": 32000,
        "layer_types": layer_types * 8,
        "vision_config": {"model_type": "siglip", "num_hidden_layers": 27, "hidden_size": 1152},
    }
    small = zoo_shrink.shrink(config, zoo_shrink.VARIANTS[0])
    assert small["num_hidden_layers"] == 2
    assert small["layer_types"] == ["linear_attention", "full_attention"]
    assert (small["hidden_size"], small["num_attention_heads"], small["head_dim"]) == (256, 4, 64)
    assert small["num_key_value_heads"] == 2  # grouped before, grouped after
    assert small["intermediate_size"] == 1024
    assert (small["num_experts"], small["num_experts_per_tok"]) == (64, 8)
    assert small["vocab_size"] == 32000
    assert small["vision_config"] == {
        "model_type": "siglip",
        "num_hidden_layers": 2,
        "hidden_size": 256,
    }


def test_state_space_heads_span_the_expanded_width():
    config = {
        "num_hidden_layers": 64,
        "hidden_size": 4096,
        "expand": 2,
        "num_heads": 128,
        "head_dim": 64,
    }
    small = zoo_shrink.shrink(config, zoo_shrink.VARIANTS[0])
    assert small["num_heads"] * small["head_dim"] == small["expand"] * small["hidden_size"]


def test_a_hybrids_attention_layers_stay_inside_the_new_depth():
    config = {
        "num_hidden_layers": 32,
        "attn_layer_indices": [9, 18, 27],  # the others are state-space layers
        "attn_layer_offset": 4,
        "attn_layer_period": 8,
        "block_types": ["recurrent", "recurrent", "attention"],  # a cycle over the layers
        "max_window_layers": 32,
        "num_kv_shared_layers": 15,
    }
    small = zoo_shrink.shrink(config, zoo_shrink.VARIANTS[0])
    assert small["num_hidden_layers"] == 2
    assert small["attn_layer_indices"] == [1]
    assert (small["attn_layer_offset"], small["attn_layer_period"]) == (1, 2)
    assert small["block_types"] == ["recurrent", "attention", "recurrent"]
    assert (small["max_window_layers"], small["num_kv_shared_layers"]) == (2, 0)


def test_config_diff_keeps_what_changed_and_the_sub_configs_type():
    default = {"a": 1, "b": 2, "text_config": {"model_type": "llama", "x": 1, "y": 2}}
    values = {"a": 1, "b": 3, "text_config": {"model_type": "llama", "x": 1, "y": 5}}
    assert zoo_shrink.config_diff(default, values) == {
        "b": 3,
        "text_config": {"y": 5, "model_type": "llama"},
    }


@pytest.mark.parametrize("model_type", ["llama", "bert", "whisper"])
def test_a_shrunk_transformers_config_builds_small_on_meta(model_type):
    import torch
    import zoo_hf

    name, diff = next(zoo_hf.candidates(model_type))
    head = zoo_hf.head_of(model_type)
    assert name == "256-wide" and head is not None
    with torch.device("meta"):
        model = zoo_hf.build_hf_model(model_type, head.task, diff)
    config = zoo_hf.build_config(model_type, diff)
    layers = getattr(config, "num_hidden_layers", None) or config.encoder_layers
    assert layers <= 2
    assert sum(p.numel() for p in model.parameters()) < 60_000_000


def test_heads_whose_models_compute_no_loss_get_the_users_and_a_listed_head_keeps_its_types():
    import torch
    import zoo_hf
    from torch import nn

    assert zoo_hf.head_of("clap").task == "contrastive"  # listed by type on AutoModel's mapping
    assert zoo_hf.head_of("glpn").task == "depth-estimation"
    assert zoo_hf.head_of("bert").task == "masked-lm"  # the types filter takes nothing else
    assert zoo_hf.head_loss("class") is None

    class Half(nn.Module):  # a depth map at half the image's size, as many decoders give
        def forward(self, pixel_values):
            return type("Out", (), {"predicted_depth": pixel_values[:, 0, ::2, ::2]})()

    spec = {"main": "pixel_values", "labels": "depth", "shape": [3, 8, 8], "target": [8, 8]}
    spec |= {"vocab": 2, "num_labels": 2}
    batch = zoo_hf.make_inputs(spec, 2, True, torch.Generator().manual_seed(0))
    assert batch[zoo_hf.TARGET].shape == (2, 8, 8)
    loss = zoo_hf.head_loss("depth")(Half(), batch)
    assert loss.dim() == 0 and loss.item() > 0


def test_a_vision_language_batch_has_a_placeholder_per_image_feature_and_learns_the_text():
    import torch
    import zoo_hf

    head = zoo_hf.head_of("llava")  # named by the head's types, ahead of pretraining's mapping
    assert head.task == "image-text-to-text" and zoo_hf.head_of("vit_mae").task == "pretraining"
    import zoo_vlm

    assert set(head.types) == set(zoo_vlm.IMAGE_TEXT)  # a rule for each type the head takes
    diff = zoo_hf.fitted("llava", head, next(zoo_hf.candidates("llava"))[1])
    config = zoo_hf.build_config("llava", diff)
    assert config.text_config.vocab_size > config.image_token_id  # the placeholder is a token
    spec = zoo_hf.input_spec("llava", head, config, "input_ids")[0]
    batch = zoo_hf.make_inputs(spec, 2, True, torch.Generator().manual_seed(0))
    image = batch["input_ids"] == config.image_token_id
    side = config.vision_config.image_size // config.vision_config.patch_size
    assert image.sum(dim=1).tolist() == [side * side] * 2  # the class token is dropped
    assert (batch["labels"] == -100).equal(image)
    assert batch["pixel_values"].shape[0] == 2
    torch.manual_seed(0)
    model = zoo_hf.build_hf_model("llava", head.task, diff)
    loss = model(**batch).loss
    assert loss.dim() == 0 and torch.isfinite(loss)


def test_image_tensors_follow_the_batch_and_random_text_leaves_special_tokens_out():
    import torch
    import zoo_hf

    spec = {
        "main": "input_ids",
        "labels": "image-text",
        "vocab": 8,
        "seq_len": 64,
        "prompt": [[9, 1], [8, 4], [10, 1]],  # start, four placeholders, end
        "special": [0, 1, 8, 9, 10],
        "tensors": {
            "pixel_values": {"shape": [16, 12], "flat": True},  # a list of patches
            "image_grid_thw": {"value": [[1, 4, 4]], "flat": True},
            "mm_token_type_ids": {"runs": [0, 1, 0], "text": 0},
        },
    }
    batch = zoo_hf.make_inputs(spec, 3, False, torch.Generator().manual_seed(0))
    assert batch["input_ids"].shape == (3, 64) and "labels" not in batch
    assert batch["input_ids"][:, :6].tolist() == [[9, 8, 8, 8, 8, 10]] * 3
    assert not torch.isin(batch["input_ids"][:, 6:], torch.tensor(spec["special"])).any()
    assert batch["pixel_values"].shape == (48, 12)
    assert batch["image_grid_thw"].tolist() == [[1, 4, 4]] * 3
    assert batch["mm_token_type_ids"].sum(dim=1).tolist() == [4] * 3


# -- the batch ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reserved", "cap", "why"),
    [
        (lambda b: 2 * GB + b * 10**8, 1024, "in band"),
        (lambda b: GB + 2 * 10**7 * b + 10**5 * b * b, 1024, "in band"),  # grows faster than a line
        (lambda b: 5 * GB + (b > 64) * b * 10**8, 1024, "in band"),  # flat at small batches
        (lambda b: GB + 10**6 * b, 1024, "cap"),
        (lambda b: 50 * GB + b * GB, 1024, "one"),
    ],
)
def test_the_search_lands_in_the_band_or_says_why_not(reserved, cap, why):
    capacity = 80 * GB
    asked = []

    def reserved_at(batch):
        asked.append(batch)
        return reserved(batch)

    batch, found = zoo_batch.search(reserved_at, capacity, cap)
    assert found == why
    value = reserved(batch) / capacity
    if why == "in band":
        assert zoo_batch.BAND[0] <= value <= zoo_batch.BAND[1]
    assert batch == {"cap": cap, "one": 1}.get(why, batch)
    assert len(asked) <= 2 + zoo_batch.MAX_ASKS and len(set(asked)) == len(asked)


# -- the worker pool ---------------------------------------------------------------------------

FAKE_WORKER = textwrap.dedent(
    """
    import json, os, sys, time
    out = os.fdopen(int(sys.argv[sys.argv.index("--answer-fd") + 1]), "w")
    print("a library's print goes to the log")
    for line in sys.stdin:
        job = json.loads(line)
        if job["kind"] == "sleep":
            time.sleep(60)
        if job["kind"] == "die":
            os._exit(3)
        out.write(json.dumps({"echo": job["n"], "pid": os.getpid()}) + "\\n")
        out.flush()
    """
)


def test_the_pool_answers_every_job_through_a_hang_and_a_crash(tmp_path):
    import zoo_pool

    script = tmp_path / "worker.py"
    script.write_text(FAKE_WORKER)
    pool = zoo_pool.Pool(1, timeout=3, log=tmp_path / "log", command=[sys.executable, str(script)])
    kinds = ["echo", "sleep", "echo", "die", "echo"]
    answers = {}
    pool.run(
        [{"kind": k, "n": i} for i, k in enumerate(kinds)], lambda j, a: answers.update({j["n"]: a})
    )
    assert sorted(answers) == [0, 1, 2, 3, 4]
    assert answers[1]["error"]["type"] == "Timeout"
    assert answers[3]["error"]["type"] == "WorkerDied"
    assert [answers[n]["echo"] for n in (0, 2, 4)] == [0, 2, 4]
    assert len({answers[n]["pid"] for n in (0, 2, 4)}) == 3  # a fresh worker after each
    assert "a library's print" in (tmp_path / "log").read_text()


# -- the GPU loop, on the CPU ------------------------------------------------------------------


def _workloads(entry_id, seq_len=None):
    return {
        mode: {
            "id": f"{entry_id}/{mode}",
            "mode": mode,
            "precision": "bf16-mixed" if mode == "train" else "bf16",
            "batch_size": 64,
            "seq_len": seq_len,
        }
        for mode in ("train", "infer")
    }


def _tiny_models(path):
    text_spec = {
        "main": "input_ids",
        "labels": "tokens",
        "vocab": 1000,
        "num_labels": 2,
        "seq_len": 32,
    }
    small = {"num_attention_heads": 2, "vocab_size": 1000}
    entries = [
        {
            "id": "tv:mobilenet_v3_small",
            "source": "torchvision",
            "params": 2_542_856,
            "build": {"kind": "memfit", "model": "tv:mobilenet_v3_small"},
            "input": {"kind": "memfit"},
            "workloads": _workloads("tv:mobilenet_v3_small"),
        },
        {
            "id": "hf:gpt2",
            "source": "transformers",
            "params": 100_000,
            "head_class": "GPT2LMHeadModel",
            "build": {
                "kind": "transformers",
                "model_type": "gpt2",
                "task": "causal-lm",
                "via": "sweep",
                "config": {"n_layer": 1, "n_embd": 64, "n_head": 2, "vocab_size": 1000},
            },
            "input": text_spec,
            "workloads": _workloads("hf:gpt2", 32),
        },
        {
            "id": "hf:bert",
            "source": "transformers",
            "params": 100_000,
            "head_class": "BertForMaskedLM",
            "build": {
                "kind": "transformers",
                "model_type": "bert",
                "task": "masked-lm",
                "via": "memfit",
                "config": {
                    "num_hidden_layers": 1,
                    "hidden_size": 64,
                    "intermediate_size": 128,
                    **small,
                },
            },
            "input": text_spec,
            "workloads": _workloads("hf:bert", 32),
        },
        {"id": "hf:broken", "source": "transformers", "error": {"phase": "build"}},
    ]
    path.write_text(json.dumps({"meta": {}, "entries": entries}))
    return path


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_dry_run_runs_memfits_loop_resumes_and_records_an_interrupted_one(tmp_path):
    pytest.importorskip("timm")  # the tiny models come from each zoo
    pytest.importorskip("torchvision")
    import zoo_measure

    models, out = _tiny_models(tmp_path / "models.json"), tmp_path / "measured.jsonl"
    assert zoo_measure.run_measure(models, out, (1, 1), 600, 120, dry_run=True) == 0
    rows = _rows(out)
    results = {r["id"]: r for r in rows if "step_seconds" in r or "error" in r}
    assert set(results) == {
        f"{m}/{mode}"
        for m in ("tv:mobilenet_v3_small", "hf:gpt2", "hf:bert")
        for mode in ("train", "infer")
    }
    assert all(
        "error" not in r and r["batch_size"] == zoo_measure.DRY_BATCH for r in results.values()
    ), results
    assert rows[0]["meta"]["device"].startswith("cpu")
    # again: nothing left to run
    assert zoo_measure.run_measure(models, out, (1, 1), 600, 120, dry_run=True) == 0
    assert sum(1 for r in _rows(out) if r.get("start")) == 6
    # a workload started by a process that never finished it is recorded, not run again
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"id": "hf:gpt2/train", "start": True}) + "\n")
    zoo_measure.run_measure(models, other, (1, 1), zoo_measure.STOP_MARGIN, 120, dry_run=True)
    rows = _rows(other)
    assert [r["error"]["type"] for r in rows if "error" in r] == ["Interrupted"]
    assert sum(1 for r in rows if r.get("start")) == 1  # no time left: nothing else started


def test_shards_split_the_workloads_between_them():
    import zoo_measure

    items = list(range(10))
    shards = [zoo_measure.shard_of(items, (k, 3)) for k in (1, 2, 3)]
    assert sorted(i for shard in shards for i in shard) == items
    assert shards[0] == [0, 3, 6, 9]


def test_the_dry_run_takes_the_smallest_model_of_each_way_of_building(tmp_path):
    import zoo_measure

    entries = json.loads(_tiny_models(tmp_path / "m.json").read_text())["entries"]
    bigger = {**entries[0], "id": "tv:resnet50", "params": 25_000_000}
    picked = zoo_measure.dry_run_entries([bigger, *entries])
    assert [e["id"] for e in picked] == ["tv:mobilenet_v3_small", "hf:bert", "hf:gpt2"]


# -- the comparison ----------------------------------------------------------------------------


def test_compare_counts_coverage_accuracy_and_estimates_below_the_truth():
    models = {
        "entries": [
            {
                "id": f"m{i}",
                "source": "timm" if i < 3 else "transformers",
                "workloads": {"train": {"id": f"m{i}/train", "mode": "train", "batch_size": 8}},
            }
            for i in range(5)
        ]
        + [{"id": "gone", "source": "transformers", "error": {"phase": "build", "message": "x"}}]
    }
    error = {
        "type": "TraceError",
        "op": "aten::nonzero",
        "message": "op failed during step1.forward. RuntimeError: shape [3, 4] is invalid",
    }
    estimates = [
        {"id": "m0/train", "peak_allocated": 100, "peak_reserved": 200, "seconds": 1.0},
        {"id": "m1/train", "peak_allocated": 100, "peak_reserved": 200, "seconds": 3.0},
        {"id": "m2/train", "error": error},
        {"id": "m3/train", "error": {**error, "message": error["message"].replace("3", "7")}},
        {"id": "m4/train", "error": error},
        {"id": "m4/train", "peak_allocated": 100, "peak_reserved": 190, "seconds": 2.0},
    ]
    measured = [
        {"id": "m0/train", "peak_allocated": 100, "peak_reserved": 202},
        {"id": "m1/train", "peak_allocated": 103, "peak_reserved": 200},
        {"id": "m4/train", "peak_allocated": 100, "peak_reserved": 200},
        {"id": "m2/train", "error": {"type": "OutOfMemoryError"}},
    ]
    result = zoo_compare.compare(models, estimates, measured)
    summary = result["summary"]
    assert (summary["workloads"], summary["estimated_without_error"]) == (5, 3)
    assert summary["coverage"] == pytest.approx(0.6)
    assert (summary["compared"], summary["within_tolerance"]) == (3, 1)  # m0 only
    assert summary["below_truth_reserved"] == 1  # m4: 5% under
    assert (summary["median_estimate_seconds"], summary["worst_estimate_seconds"]) == (2.0, 3.0)
    assert result["by_source"]["timm"]["estimated_without_error"] == 2
    assert result["errors_by_cause"] == [
        {"cause": zoo_compare.cause_of(error), "count": 2, "example": "m2/train"}
    ]
    assert result["not_listed"][0]["id"] == "gone"
