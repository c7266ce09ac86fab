"""Splitting batches into micro-batches: every sample once, containers kept, bad input refused."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest
import torch

import memfit
from memfit.runtime import split_batch
from memfit.runtime._split import batch_size, parts_needed


def test_tensor_splits_into_near_equal_views():
    x = torch.arange(10)
    parts = split_batch(x, 4)
    assert [p.tolist() for p in parts] == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
    assert all(p.untyped_storage().data_ptr() == x.untyped_storage().data_ptr() for p in parts)


def test_dict_splits_tensors_and_shares_constants():
    batch = {"x": torch.zeros(5, 3), "y": torch.arange(5), "scale": torch.tensor(2.0), "tag": "a"}
    parts = split_batch(batch, 2)
    assert [p["x"].shape[0] for p in parts] == [3, 2]
    assert [p["y"].tolist() for p in parts] == [[0, 1, 2], [3, 4]]
    assert all(p["tag"] == "a" and p["scale"].item() == 2.0 for p in parts)


def test_nested_containers_keep_their_types():
    Pair = namedtuple("Pair", "inputs targets")
    batch = Pair([torch.zeros(4, 2), (torch.ones(4),)], torch.arange(4))
    parts = split_batch(batch, 2)
    assert isinstance(parts[0], Pair)
    assert isinstance(parts[0].inputs, list) and isinstance(parts[0].inputs[1], tuple)
    assert parts[1].targets.tolist() == [2, 3]


def test_batch_encoding_stays_a_batch_encoding():
    from transformers import BatchEncoding

    batch = BatchEncoding({"input_ids": torch.ones(6, 4, dtype=torch.long)})
    parts = split_batch(batch, 3)
    assert all(type(p) is BatchEncoding and p["input_ids"].shape == (2, 4) for p in parts)


def test_more_parts_than_samples_gives_one_sample_each():
    assert len(split_batch(torch.zeros(3, 2), 8)) == 3


def test_tensors_that_disagree_on_dim0_are_named():
    with pytest.raises(memfit.InvalidInputError, match=r"\['x'\]: 4, \['mask'\]: 3"):
        batch_size({"x": torch.zeros(4, 2), "mask": torch.zeros(3)})


def test_a_batch_without_tensors_is_refused():
    with pytest.raises(memfit.InvalidInputError, match=r"str cannot be split.*split_fn"):
        batch_size("some text")


def test_numpy_arrays_are_refused_not_copied():
    with pytest.raises(memfit.InvalidInputError, match=r"NumPy array at \['y'\]"):
        batch_size({"x": torch.zeros(2), "y": np.zeros(2)})


def test_n_must_be_positive():
    with pytest.raises(memfit.InvalidInputError, match="0 micro-batches"):
        split_batch(torch.zeros(2), 0)


def test_parts_needed():
    assert parts_needed(10, None) == 1
    assert parts_needed(10, 10) == 1
    assert parts_needed(10, 3) == 4
    assert parts_needed(1, 1) == 1
