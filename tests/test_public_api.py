"""The public surface is exactly ``__all__``, and inner layers never import outer ones."""

import ast
import pathlib

import memfit

SRC = pathlib.Path(memfit.__file__).parent


def test_all_is_complete_and_importable():
    public = {n for n in dir(memfit) if not n.startswith("_")}
    exported = set(memfit.__all__) - {"__version__"}
    # every public attribute is exported; subpackages are reachable but not re-exported
    modules = {"allocator", "trace", "report", "cli", "snapshot", "oom", "monitor"}
    modules |= {"runtime", "integrations", "workload", "estimator"}
    assert public - exported - modules == set()
    for name in memfit.__all__:
        assert hasattr(memfit, name)


LAYERS = {
    "trace": {"report", "cli", "monitor", "runtime"},
    "allocator": {"trace", "report", "cli", "monitor", "runtime"},
    "report": {"cli", "trace", "runtime"},
    "monitor": {"cli", "report", "trace", "allocator"},
}


def test_inner_layers_do_not_import_outer_ones():
    for layer, banned in LAYERS.items():
        for path in (SRC / layer).glob("*.py"):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                names = []
                if isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                for name in names:
                    parts = name.split(".")
                    assert not (parts[0] == "memfit" and len(parts) > 1 and parts[1] in banned), (
                        f"{path.name} imports {name}"
                    )


def test_fits_needs_a_gpu_when_the_estimate_has_none():
    import pytest
    import torch

    est = memfit.estimate(lambda: torch.nn.Linear(8, 8), torch.randn(2, 8), mode="infer")
    with pytest.raises(memfit.InvalidInputError, match="no target GPU"):
        est.fits()
    verdict = est.fits("24GiB")
    assert verdict.fits and verdict.headroom == 24 * 2**30 - est.total
