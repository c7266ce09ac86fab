"""The public surface is exactly ``__all__`` (the layer rules are in test_layers.py)."""

import memfit


def test_all_is_complete_and_importable():
    public = {n for n in dir(memfit) if not n.startswith("_")}
    exported = set(memfit.__all__) - {"__version__"}
    # every public attribute is exported; subpackages are reachable but not re-exported
    modules = {"allocator", "trace", "report", "cli", "snapshot", "oom", "monitor"}
    modules |= {"runtime", "integrations", "workload", "estimator", "planner", "advice"}
    modules |= {"technique"}
    assert public - exported - modules == set()
    for name in memfit.__all__:
        assert hasattr(memfit, name)


def test_fits_needs_a_gpu_when_the_estimate_has_none():
    import pytest
    import torch

    est = memfit.estimate(lambda: torch.nn.Linear(8, 8), torch.randn(2, 8), mode="infer")
    with pytest.raises(memfit.InvalidInputError, match="no target GPU"):
        est.fits()
    verdict = est.fits("24GiB")
    assert verdict.fits and verdict.headroom == 24 * 2**30 - est.total
