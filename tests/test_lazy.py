"""The one lazy loader of memfit's packages (``memfit._lazy``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from memfit._lazy import lazy_attributes


def test_an_attribute_is_imported_on_first_use_and_kept():
    namespace: dict[str, object] = {}
    getattr_, dir_ = lazy_attributes("memfit", {"parse_size": "memfit._units"}, namespace)
    assert "parse_size" in dir_()
    assert getattr_("parse_size")("1KiB") == 1024
    assert "parse_size" in namespace  # the next read does not come here
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        getattr_("nothing")


def test_importing_the_packages_imports_no_torch():
    code = (
        "import sys, memfit, memfit.estimator, memfit.planner, memfit.planner.calibration\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
