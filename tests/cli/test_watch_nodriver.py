"""Where there is no NVIDIA driver (this CPU machine): exit code 2 and one paragraph."""

from __future__ import annotations

import pytest
import torch

from memfit.cli import main


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a driver")
@pytest.mark.parametrize("command", ["watch", "export"])
def test_no_driver_is_exit_code_2_without_traceback(capsys, command):
    pytest.importorskip("pynvml", reason="without nvidia-ml-py the error is the install hint")
    pytest.importorskip("prometheus_client")
    assert main([command, "--once"] if command == "watch" else [command]) == 2
    err = capsys.readouterr().err
    assert "No NVIDIA driver found (NVML could not be loaded" in err
    assert "Traceback" not in err


def test_without_nvidia_ml_py_the_error_says_how_to_install_it(capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)  # as if not installed
    assert main(["watch", "--once"]) == 1
    err = capsys.readouterr().err
    assert "pip install 'memfit[nvml]'" in err and "Traceback" not in err
