"""Parsing PYTORCH_CUDA_ALLOC_CONF: values, defaults, ignored keys and errors."""

from __future__ import annotations

import pytest

from memfit._errors import InvalidInputError
from memfit.allocator import AllocatorConfig

MiB = 1024**2


def test_defaults_are_torchs() -> None:
    config = AllocatorConfig.parse("")
    assert config == AllocatorConfig()
    assert config.max_split_size is None
    assert config.large_segment_size == 20 * MiB
    assert config.non_split_rounding == 20 * MiB
    assert config.roundup_power2_divisions == (0,) * 16
    assert not config.expandable_segments


def test_the_usual_settings() -> None:
    config = AllocatorConfig.parse(
        "expandable_segments:True,max_split_size_mb:128,"
        "roundup_power2_divisions:4,garbage_collection_threshold:0.6"
    )
    assert config.expandable_segments
    assert config.max_split_size == 128 * MiB
    assert config.roundup_power2_divisions == (4,) * 16
    assert config.garbage_collection_threshold == 0.6


def test_whitespace_trailing_comma_and_repeated_keys() -> None:
    config = AllocatorConfig.parse(" max_split_size_mb : 200 , max_split_size_mb:300,")
    assert config.max_split_size == 300 * MiB


def test_roundup_list_form() -> None:
    table = AllocatorConfig.parse("roundup_power2_divisions:[2:8,256:1,512:2,>:4]")
    # recorded from torch 2.11 on an H200: 1 MB and 2 MB -> 8, 256 -> 1, 512 -> 2, >= 1 GB -> 4
    assert table.roundup_power2_divisions == (8, 8, 0, 0, 0, 0, 0, 0, 1, 2, 4, 4, 4, 4, 4, 4)


def test_large_segment_size_is_read_first() -> None:
    config = AllocatorConfig.parse("max_split_size_mb:64,large_segment_size_mb:64")
    assert config.large_segment_size == 64 * MiB
    assert config.non_split_rounding == 64 * MiB  # defaults to the segment size
    with pytest.raises(InvalidInputError, match="max_split_size_mb 32 is too small"):
        AllocatorConfig.parse("max_split_size_mb:32,large_segment_size_mb:64")


def test_memory_neutral_keys_are_ignored() -> None:
    config = AllocatorConfig.parse(
        "backend:native,pinned_use_cuda_host_register:True,pinned_num_register_threads:8,"
        "release_lock_on_cudamalloc:True,graph_capture_record_stream_reuse:False"
    )
    assert config == AllocatorConfig()


def test_fraction_and_non_split_rounding() -> None:
    config = AllocatorConfig.parse("per_process_memory_fraction:0.5,max_non_split_rounding_mb:40")
    assert config.per_process_memory_fraction == 0.5
    assert config.non_split_rounding == 40 * MiB


@pytest.mark.parametrize(
    "text",
    [
        "",
        "expandable_segments:True,max_split_size_mb:128",
        "roundup_power2_divisions:[256:1,512:2,>:4],garbage_collection_threshold:0.6",
        "large_segment_size_mb:64,max_non_split_rounding_mb:100,per_process_memory_fraction:0.25",
    ],
)
def test_to_string_round_trips(text: str) -> None:
    config = AllocatorConfig.parse(text)
    assert AllocatorConfig.parse(config.to_string()) == config


def test_from_env_prefers_the_cuda_variable() -> None:
    env = {"PYTORCH_ALLOC_CONF": "max_split_size_mb:300", "PYTORCH_CUDA_ALLOC_CONF": ""}
    assert AllocatorConfig.from_env(env) == AllocatorConfig()
    assert AllocatorConfig.from_env({"PYTORCH_ALLOC_CONF": "expandable_segments:True"}) == (
        AllocatorConfig(expandable_segments=True)
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("foo:1", r"unknown key 'foo'\. Accepted keys are: expandable_segments"),
        ("max_split_size_mb:10", r"max_split_size_mb 10 is too small; it must be >= 20"),
        ("max_split_size_mb:abc", r"whole non-negative number, got 'abc'"),
        ("max_split_size_mb:-5", r"whole non-negative number, got '-5'"),
        ("garbage_collection_threshold:1.5", r"1\.5 is not accepted.*between 0\.0 and 1\.0"),
        ("garbage_collection_threshold:0", r"0\.0 is not accepted"),
        ("roundup_power2_divisions:3", r"value 3 is not accepted; it must be a power of 2"),
        ("roundup_power2_divisions:[256:3]", r"power of 2 or 0 \(off\) inside a list"),
        ("roundup_power2_divisions:[1:2,3:4]", r"interval 3 is not a power of 2"),
        ("roundup_power2_divisions:[256:1", r"expected ']' at the end"),
        ("expandable_segments:true", r"True or False \(capitalised.*got 'true'"),
        ("expandable_segments", r"expected ':' at the end"),
        ("expandable_segments:True:False", r"expected ',' but found ':'"),
        (",expandable_segments:True", r"expected a key but found ','"),
        ("large_segment_size_mb:10", r"large_segment_size_mb 10 is too small; it must be > 10"),
        ("per_process_memory_fraction:1.5", r"1\.5 is not accepted; give a fraction in \[0\.0"),
        ("backend:cudaMallocAsync", r"does not emulate; only backend:native"),
        ("backend:other", r"backend 'other' is unknown"),
    ],
)
def test_bad_settings_are_named(text: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        AllocatorConfig.parse(text)


def test_direct_construction_is_validated() -> None:
    with pytest.raises(InvalidInputError, match="roundup_power2_divisions value 3"):
        AllocatorConfig(roundup_power2_divisions=(3,) * 16)
    with pytest.raises(InvalidInputError, match="has 2 entries; it needs 16"):
        AllocatorConfig(roundup_power2_divisions=(1, 2))
    with pytest.raises(InvalidInputError, match="max_split_size 1048576 bytes is too small"):
        AllocatorConfig(max_split_size=MiB)
