"""Meta kernels answered from a cache: the same answers as running them, never shared storage."""

from __future__ import annotations

import pytest
import torch

from memfit.trace._meta_cache import MetaCache

aten = torch.ops.aten


def meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="meta")


def test_a_cached_answer_matches_the_kernel_with_fresh_storage():
    cache = MetaCache()
    x, w = meta(8, 16), meta(32, 16)
    first = cache.call(aten.mm.default, (x, w.t()), {})
    second = cache.call(aten.mm.default, (x, w.t()), {})
    assert cache.hits == 1 and cache.misses == 1
    assert (second.shape, second.stride(), second.dtype) == (
        first.shape,
        first.stride(),
        first.dtype,
    )
    storages = {t.untyped_storage()._cdata for t in (x, w, first, second)}
    assert len(storages) == 4  # every output is a new allocation, as on the GPU
    out, mean, rstd = cache.call(aten.native_layer_norm.default, (x, [16], None, None, 1e-5), {})
    again = cache.call(aten.native_layer_norm.default, (x, [16], None, None, 1e-5), {})
    assert [t.shape for t in again] == [out.shape, mean.shape, rstd.shape]
    assert len({t.untyped_storage()._cdata for t in again}) == 3


def test_views_and_out_variants_always_run_their_kernel():
    cache = MetaCache()
    x = meta(4, 6)
    for _ in range(2):
        view = cache.call(aten.t.default, (x,), {})
        assert view.untyped_storage()._cdata == x.untyped_storage()._cdata  # a view of x
    out = meta(4, 6)
    for _ in range(2):
        cache.call(aten.add.out, (x, x), {"out": out})
    assert cache.hits == 0


def test_in_place_ops_return_their_first_argument():
    cache = MetaCache()
    x = meta(4, 6)
    assert cache.call(aten.add_.Tensor, (x, x), {}) is x
    assert cache.call(aten.add_.Tensor, (x, x), {}) is x and cache.hits == 1
    params = [meta(3), meta(5)]
    assert cache.call(aten._foreach_mul_.Scalar, (params, 0.5), {}) is None
    assert cache.call(aten._foreach_mul_.Scalar, (params, 0.25), {}) is None  # floats: any value
    assert cache.hits == 2


def test_foreach_ops_on_lists_that_do_not_match_still_run_their_checks():
    cache = MetaCache()
    with pytest.raises(RuntimeError):
        cache.call(aten._foreach_add_.List, ([meta(3), meta(5)], [meta(3), meta(4)]), {})
    with pytest.raises(RuntimeError):  # and again: a refusal is never remembered as an answer
        cache.call(aten._foreach_add_.List, ([meta(3), meta(5)], [meta(3), meta(4)]), {})
    assert cache.call(aten._foreach_add_.List, ([meta(3), meta(5)], [meta(3), meta(5)]), {}) is None


def test_the_cache_is_bounded():
    cache = MetaCache(max_entries=2)
    for n in range(1, 6):
        cache.call(aten.mm.default, (meta(n, 3), meta(3, 2)), {})
    assert len(cache._entries) <= 2


def test_a_trace_is_the_same_with_and_without_the_cache(monkeypatch):
    from memfit._gpus import resolve_gpu
    from memfit.trace import _recorder, trace_workload

    def events(work):
        t = trace_workload(work, resolve_gpu("h200"))
        return [(e.kind, e.size) for e in t.events], [i.op for i in t.infos]

    cached = events(_workload())
    events(_workload())  # the second trace runs from the cache
    monkeypatch.setattr(_recorder, "META_CACHE", _PassThrough())
    assert events(_workload()) == cached


class _PassThrough:
    def call(self, func, args, kwargs):
        return func(*args, **kwargs)


def _workload():
    from transformers import BertConfig, BertForMaskedLM

    from memfit.workload._step import Workload, default_loss

    config = BertConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        vocab_size=500,
        max_position_embeddings=64,
    )

    def batch():
        ids = torch.randint(0, 500, (4, 32), generator=torch.Generator().manual_seed(0))
        return {"input_ids": ids, "labels": ids}

    return Workload(lambda: BertForMaskedLM(config), batch, default_loss)
