"""``model.generate`` estimated as real data runs it: every sequence to ``max_new_tokens``.

Small Llama-, Qwen2- and GPT-2-style configs (transformers' own classes, no downloads). The
logits have no values in a trace, so the tokens chosen from them (argmax, multinomial) are
given ordinary ids (never end-of-sequence): the stopping checks then find no end token and the
loop runs to its length limit, the upper bound, which the notes say in one sentence.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
import transformers
from torch import nn

from memfit import estimate
from memfit._gpus import resolve_gpu
from memfit.trace import trace_workload
from memfit.trace._generate import Generation, special_token_ids
from memfit.trace._kernels import KernelModel
from memfit.workload import make_workload

H200 = resolve_gpu("h200")
VOCAB = 2048  # above 1024: a top-k over the vocabulary is not taken for a mixture-of-experts router
LAYERS = 2
BATCH, PROMPT = 2, 8
KV_HEADS, HEAD_DIM = 2, 16


def llama(**extra: Any) -> nn.Module:
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=256,
        **extra,
    )
    return transformers.LlamaForCausalLM(cfg)


def qwen2() -> nn.Module:
    cfg = transformers.Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=256,
        eos_token_id=VOCAB - 1,
        bos_token_id=VOCAB - 1,
    )
    return transformers.Qwen2ForCausalLM(cfg)


def gpt2() -> nn.Module:
    cfg = transformers.GPT2Config(
        vocab_size=VOCAB,
        n_embd=64,
        n_inner=64,  # a narrow MLP: its prefill temporaries below a short KV cache
        n_layer=LAYERS,
        n_head=4,
        n_positions=256,
        eos_token_id=VOCAB - 1,
        bos_token_id=VOCAB - 1,
    )
    return transformers.GPT2LMHeadModel(cfg)


STYLES: dict[str, Callable[[], nn.Module]] = {"llama": llama, "qwen2": qwen2, "gpt2": gpt2}


def batch() -> dict[str, torch.Tensor]:
    return {"input_ids": torch.randint(3, VOCAB - 3, (BATCH, PROMPT))}


def generating(**kwargs: Any) -> Callable[[nn.Module, Any], Any]:
    options = {"do_sample": False, "pad_token_id": 0, **kwargs}
    return lambda model, b: model.generate(**b, **options)


def forwards(notes: list[str]) -> int:
    """Forward passes of the model, from the attention calls the notes count."""
    calls = sum(int(m.group(1)) for n in notes if (m := re.match(r"attention ran (\d+) x", n)))
    assert calls % LAYERS == 0
    return calls // LAYERS


@pytest.mark.parametrize("style", sorted(STYLES))
def test_greedy_runs_every_sequence_to_max_new_tokens(style: str) -> None:
    est = estimate(
        STYLES[style], batch(), mode="infer", gpu="h200", step_fn=generating(max_new_tokens=6)
    )
    assert forwards(est.notes) == 6  # the prefill, then one decoding forward per new token
    assert (
        "generate ran 6 new tokens for every sequence (greedy): each chosen token was answered "
        "with an ordinary id, so stopping at an end-of-sequence token was assumed never to "
        "happen (the upper bound)" in est.notes
    )
    assert not [n for n in est.notes if "has no known value" in n], est.notes


@pytest.mark.parametrize("style", sorted(STYLES))
def test_sampling_with_min_new_tokens_top_k_top_p(style: str) -> None:
    step = generating(
        max_new_tokens=5, min_new_tokens=3, do_sample=True, top_k=50, top_p=0.9, temperature=0.7
    )
    est = estimate(STYLES[style], batch(), mode="infer", gpu="h200", step_fn=step)
    assert forwards(est.notes) == 5
    assert any(
        n.startswith("generate ran 5 new tokens for every sequence (sampling)") for n in est.notes
    )
    assert not [n for n in est.notes if "has no known value" in n], est.notes


@pytest.mark.parametrize("style", sorted(STYLES))
def test_generate_with_a_padding_mask_under_inference_mode(style: str) -> None:
    """generate's padding checks read the batch (``.item()`` of the ids' last column); under
    ``torch.inference_mode`` the trace sees ``item`` whole and answers it from the batch, and
    the memory is what ``no_grad`` gives (the same kernels run)."""
    ids = batch()["input_ids"]
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding
    padded = {"input_ids": ids, "attention_mask": mask}
    peaks = []
    for region in (torch.inference_mode, torch.no_grad):

        def step(model: nn.Module, b: Any, region: Any = region) -> Any:
            with region():
                return generating(max_new_tokens=3)(model, b)

        est = estimate(STYLES[style], padded, mode="infer", gpu="h200", step_fn=step)
        assert forwards(est.notes) == 3
        assert not [n for n in est.notes if "has no known value" in n], est.notes
        peaks.append(est.peak_allocated)
    assert peaks[0] == peaks[1]


def test_an_end_of_sequence_id_where_the_ordinary_choice_would_be_is_never_chosen() -> None:
    """The chosen id avoids the model's special ids, whatever they are."""
    build = lambda: llama(eos_token_id=VOCAB // 2, bos_token_id=VOCAB // 2 + 1)  # noqa: E731
    est = estimate(build, batch(), mode="infer", gpu="h200", step_fn=generating(max_new_tokens=4))
    assert forwards(est.notes) == 4
    step = generating(max_new_tokens=4, eos_token_id=[VOCAB // 2 + 2, VOCAB // 2 + 3])
    est = estimate(llama, batch(), mode="infer", gpu="h200", step_fn=step)
    assert forwards(est.notes) == 4


def _cache_shapes(
    step: Callable[[nn.Module, Any], Any], build: Callable[[], nn.Module]
) -> list[tuple[int, ...]]:
    workload = make_workload(build, batch(), mode="infer", step_fn=step)
    trace = trace_workload(workload, H200)
    return [
        info.shape
        for info in trace.infos
        if len(info.shape) == 4
        and info.shape[:2] == (BATCH, KV_HEADS)
        and info.shape[3] == HEAD_DIM
    ]


def test_dynamic_cache_grows_by_one_token_a_step() -> None:
    shapes = _cache_shapes(generating(max_new_tokens=4), llama)
    lengths = sorted({s[2] for s in shapes if s[2] > 1})  # not one step's new keys
    # keys and values of each layer, concatenated each step (DynamicLayer.update: torch.cat)
    assert lengths == [PROMPT, PROMPT + 1, PROMPT + 2, PROMPT + 3]


def test_static_cache_allocates_its_full_length_up_front() -> None:
    step = generating(max_new_tokens=4, cache_implementation="static")
    shapes = _cache_shapes(step, llama)
    # max_length - 1 positions: the last token chosen is never fed back (both 5.17 and 5.24)
    full = (BATCH, KV_HEADS, PROMPT + 4 - 1, HEAD_DIM)
    assert shapes.count(full) == 2 * LAYERS  # keys and values of each layer, once
    assert all(s == full for s in shapes if s[2] > PROMPT)  # no cache grown by concatenation
    est = estimate(llama, batch(), mode="infer", gpu="h200", step_fn=step)
    assert forwards(est.notes) == 4
    assert any("static cache compiles its decoding step" in n for n in est.notes)


def test_logits_only_for_the_last_position() -> None:
    """generate asks for the last position's logits only (logits_to_keep=1)."""
    workload = make_workload(gpt2, batch(), mode="infer", step_fn=generating(max_new_tokens=3))
    trace = trace_workload(workload, H200)
    logits = [i.shape for i in trace.infos if i.shape and i.shape[-1] == VOCAB]
    assert logits and all(s[:-1] in ((BATCH, 1), (BATCH,)) for s in logits), logits


@pytest.mark.parametrize("style", sorted(STYLES))
def test_memory_grows_with_max_new_tokens(style: str) -> None:
    peaks = [
        estimate(
            STYLES[style], batch(), mode="infer", gpu="h200", step_fn=generating(max_new_tokens=n)
        ).peak_allocated
        for n in (2, 10)
    ]
    assert peaks[1] > peaks[0]


def test_sampling_takes_multinomials_buffer() -> None:
    """CUDA's multinomial draws through a buffer the size of the probabilities."""
    step = generating(max_new_tokens=2, do_sample=True)
    trace = trace_workload(make_workload(llama, batch(), mode="infer", step_fn=step), H200)
    noise = [
        e
        for e in trace.events
        if e.kind == "alloc" and trace.infos[e.info].op.startswith("multinomial sampling")
    ]
    assert len(noise) == 2 and all(e.size == BATCH * VOCAB * 4 for e in noise)


def test_a_users_own_decoding_loop_is_noted() -> None:
    def step(model: nn.Module, b: dict[str, torch.Tensor]) -> torch.Tensor:
        ids = b["input_ids"]
        for _ in range(3):
            logits = model(input_ids=ids).logits[:, -1]
            ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=-1)
            if bool((ids[:, -1] == 2).all()):  # an end-of-sequence check on real values
                break
        return ids

    est = estimate(llama, batch(), mode="infer", gpu="h200", step_fn=step)
    assert forwards(est.notes) == 3
    assert any(n.startswith(f"argmax over {VOCAB} values has no known value") for n in est.notes)


def test_sort_of_the_scores_takes_cubs_buffers() -> None:
    """Top-p sampling sorts the scores: H200 traces (torch 2.11) of a 32 x 151,936 float32 sort
    took two 38,895,616-byte pair buffers, a 19,447,808-byte keys output and 59,278,847 bytes
    of cub storage at once; rows of 4,096 or fewer sort in place, after an int64 arange of
    the dim."""
    scores = torch.empty(32, 151_936, device="meta")
    groups = KernelModel(90).scratch(torch.ops.aten.sort.default, (scores,), {})
    first = [item[0] for item in groups[0]]
    assert first[:3] == [38_895_616, 38_895_616, 19_447_808]
    assert first[3] == 59_278_847
    small = torch.empty(32, 4096, device="meta")
    assert KernelModel(90).scratch(torch.ops.aten.sort.default, (small,), {}) == [
        [(8 * 4096, "sort index range")]
    ]


def test_chosen_ids_avoid_the_special_ones() -> None:
    generation = Generation(avoid={5, 6}, inside=1)
    logits = torch.empty(3, 10, device="meta")
    top = torch.empty(3, 2, dtype=torch.long, device="meta")
    chosen = generation.choose(torch.ops.aten.topk.default, (logits, 2), {}, [logits, top])
    assert chosen is not None and chosen[1].tolist() == [[7, 8]] * 3  # distinct, not 5 or 6
    ids = torch.empty(3, dtype=torch.long, device="meta")
    chosen = generation.choose(torch.ops.aten.argmax.default, (logits, -1), {}, [ids])
    assert chosen is not None and chosen[1].tolist() == [7, 7, 7]
    outside = Generation()  # a max over activations outside generate keeps no value
    assert outside.choose(torch.ops.aten.max.dim, (logits, -1), {}, [logits, ids]) is None
    assert special_token_ids({"eos_token_id": [1, 2]}, None, {"pad_token_id": 0}) == {0, 1, 2}


def test_beam_search_that_stops_on_unknown_scores_is_refused_not_estimated_low():
    from memfit import UnsupportedWorkloadError

    def beams(model: nn.Module, b: dict[str, torch.Tensor]) -> Any:
        return model.generate(**b, max_new_tokens=8, num_beams=2, do_sample=False)

    with pytest.raises(
        UnsupportedWorkloadError,
        match=r"model\.generate stopped after \d of 8 new tokens \(beam search, 2 beams\).*"
        r"num_beams=1",
    ):
        estimate(llama, batch(), mode="infer", step_fn=beams)
