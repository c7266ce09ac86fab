"""Data parallelism: DDP, FSDP2 and DeepSpeed ZeRO on one rank of a job, traced on fake
ranks, and the checks of their settings.

Its names need torch: they load on first use (``memfit._lazy``)."""

from __future__ import annotations

import typing as _typing

from memfit._lazy import lazy_attributes as _lazy_attributes

if _typing.TYPE_CHECKING:
    from memfit.technique.data_parallel._fsdp import (
        MetaStreams,
        check_wrapped,
        host_bytes,
        host_stepping,
        meta_fsdp,
        offloaded_shards,
        propagation_hidden,
        shard_model,
        shards_offloaded,
        storage_hooks,
    )
    from memfit.technique.data_parallel._parallel import (
        CASTS_ITSELF,
        FAKE_RANK_NOTE,
        STRATEGIES,
        check_offload_shards,
        check_parallel,
        check_parallelize,
        check_sharded_optimizer,
        parallel_group,
        parallel_note,
        parallelize,
    )
    from memfit.technique.data_parallel._zero import (
        ZERO,
        check_zero,
        engage_zero,
        meta_accelerator,
        zero_config,
    )

_LAZY = {
    "CASTS_ITSELF": "_parallel",
    "FAKE_RANK_NOTE": "_parallel",
    "STRATEGIES": "_parallel",
    "check_offload_shards": "_parallel",
    "check_parallel": "_parallel",
    "check_parallelize": "_parallel",
    "check_sharded_optimizer": "_parallel",
    "parallel_group": "_parallel",
    "parallel_note": "_parallel",
    "parallelize": "_parallel",
    "MetaStreams": "_fsdp",
    "check_wrapped": "_fsdp",
    "host_bytes": "_fsdp",
    "host_stepping": "_fsdp",
    "meta_fsdp": "_fsdp",
    "offloaded_shards": "_fsdp",
    "propagation_hidden": "_fsdp",
    "shard_model": "_fsdp",
    "shards_offloaded": "_fsdp",
    "storage_hooks": "_fsdp",
    "ZERO": "_zero",
    "check_zero": "_zero",
    "engage_zero": "_zero",
    "meta_accelerator": "_zero",
    "zero_config": "_zero",
}

__getattr__, __dir__ = _lazy_attributes(__name__, _LAZY, globals())

__all__ = [
    "CASTS_ITSELF",
    "FAKE_RANK_NOTE",
    "STRATEGIES",
    "ZERO",
    "MetaStreams",
    "check_offload_shards",
    "check_parallel",
    "check_parallelize",
    "check_sharded_optimizer",
    "check_wrapped",
    "check_zero",
    "engage_zero",
    "host_bytes",
    "host_stepping",
    "meta_accelerator",
    "meta_fsdp",
    "offloaded_shards",
    "parallel_group",
    "parallel_note",
    "parallelize",
    "propagation_hidden",
    "shard_model",
    "shards_offloaded",
    "storage_hooks",
    "zero_config",
]
