import pytest

from memfit import GPU, InvalidInputError, resolve_gpu


def test_known_names_and_aliases():
    assert resolve_gpu("h200").total == 143771 * 2**20
    assert resolve_gpu("H100").compute_capability == (9, 0)
    assert resolve_gpu("a100").name == "A100 80GB"
    assert resolve_gpu("4090").sm == 89


def test_sizes_make_a_gpu():
    assert resolve_gpu("24GiB").total == 24 * 2**30
    assert resolve_gpu("80GB").total == 80 * 10**9
    assert resolve_gpu(1000).total == 1000


def test_gpu_passes_through():
    gpu = GPU("x", 10)
    assert resolve_gpu(gpu) is gpu


def test_unknown_gpu_suggests_close_names():
    with pytest.raises(InvalidInputError, match="Did you mean: h100"):
        resolve_gpu("h10")
