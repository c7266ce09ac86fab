import pytest

from memfit import GPU, InvalidInputError, resolve_gpu
from memfit._gpus import DEFAULT_ARCHITECTURE, KNOWN_GPUS


def test_known_names_and_aliases():
    assert resolve_gpu("h200").total == 150_109_880_320  # CUDA's total, not nvidia-smi's
    assert resolve_gpu("H100").compute_capability == (9, 0)
    assert resolve_gpu("a100").name == "A100 80GB"
    assert resolve_gpu("4090").sm == 89


def test_sizes_make_a_gpu():
    assert resolve_gpu("24GiB").total == 24 * 2**30
    assert resolve_gpu("80GB").total == 80 * 10**9
    assert resolve_gpu("1GiB").total == 2**30
    assert resolve_gpu("2TiB").total == 2 * 2**40


@pytest.mark.parametrize("spec", [24, "24", " 24 ", "24.5", 1000])
def test_a_bare_number_is_refused_with_both_units(spec):
    with pytest.raises(InvalidInputError, match=r"no unit.*GiB.*GB"):
        resolve_gpu(spec)


def test_an_int_of_bytes_is_refused_with_its_size_in_gib():
    # torch.cuda.mem_get_info()'s bytes, given as they come
    with pytest.raises(InvalidInputError, match=r"gpu=25769803776 is a bare number.*'24GiB'"):
        resolve_gpu(24 * 2**30)


def test_a_known_name_that_is_a_number_is_a_gpu():
    assert resolve_gpu("4090").name == "RTX 4090 24GB"
    with pytest.raises(InvalidInputError, match="no unit"):
        resolve_gpu(4090)


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("0GiB", "smaller than"),
        ("1B", "smaller than"),
        ("700MiB", "smaller than"),
        ("100000GiB", "beyond any GPU"),
        ("3TiB", "beyond any GPU"),
        ("1e30GiB", "beyond any GPU"),
        ("-80GB", "negative"),
        ("-0.5TiB", "negative"),
        ("24gigs", "no unit memfit knows"),
    ],
)
def test_sizes_no_gpu_has_are_refused(spec, match):
    with pytest.raises(InvalidInputError, match=match):
        resolve_gpu(spec)


@pytest.mark.parametrize("spec", [None, 2.5, True, ["h100"]])
def test_other_types_are_refused(spec):
    with pytest.raises(InvalidInputError, match="is not a GPU"):
        resolve_gpu(spec)


def test_gpu_passes_through():
    gpu = GPU("x", 10)  # a GPU object is taken as given
    assert resolve_gpu(gpu) is gpu


def test_a_number_with_letters_is_never_matched_against_the_names():
    """Sizes whatever their letters: '1e30GiB' once offered the GPU 'a10g'."""
    for spec in ("1e30GiB", "10gg", "100GiBs", "-1e3GiB"):
        with pytest.raises(InvalidInputError) as info:
            resolve_gpu(spec)
        assert "not known" not in str(info.value) and "Did you mean" not in str(info.value)
    assert resolve_gpu("1.5e2GiB").total == 150 * 2**30


def test_unknown_gpu_suggests_close_names():
    with pytest.raises(InvalidInputError, match="Did you mean: h100"):
        resolve_gpu("h10")


def test_architecture_facts_are_on_the_gpu():
    h200, a100, v100, l4 = (resolve_gpu(n).architecture for n in ("h200", "a100", "v100", "l4"))
    assert h200.runs_cudnn_attention and not a100.runs_cudnn_attention
    assert not l4.runs_cudnn_attention and l4.runs_flash_attention  # sm 89: Ada, not Hopper
    assert a100.runs_flash_attention and not v100.runs_flash_attention
    assert v100.runs_efficient_attention and v100.efficient_backward_max_head_dim == 128
    assert a100.efficient_backward_max_head_dim is None
    assert h200.cublas_workspace == 32 * 2**20 and a100.cublas_workspace == 4 * 2**20 + 256 * 1024
    # one measured cuDNN table (sm 90), used by every architecture until others are measured
    assert {g.architecture.cudnn_table for g in KNOWN_GPUS.values()} == {"cudnn_sm90.json"}
    assert resolve_gpu("24GiB").architecture == DEFAULT_ARCHITECTURE == h200


def test_the_cudnn_table_of_every_architecture_ships():
    from importlib import resources

    data = resources.files("memfit.trace").joinpath("data")
    for gpu in KNOWN_GPUS.values():
        assert data.joinpath(gpu.architecture.cudnn_table).is_file()
