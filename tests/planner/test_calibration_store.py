"""Where the step-time model's rates come from: memfit's own, this machine's (``memfit
calibrate`` saved them), or a file given; and the errors of a file that is not one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memfit._errors import InvalidInputError
from memfit._gpus import resolve_gpu
from memfit.planner import calibration_for
from memfit.planner.calibration import (
    calibration_dir,
    device_key,
    read_calibration,
    save_calibration,
    shipped,
)


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MEMFIT_CALIBRATION_DIR", str(tmp_path / "saved"))
    return tmp_path / "saved"


def _measured(key: str, gpu: str, host_factor: float) -> dict:
    data = dict(shipped()["h200"])
    return {
        **data,
        "key": key,
        "gpu": gpu,
        "source": f"measured here, host x{host_factor}",
        "host": {k: v * host_factor for k, v in data["host"].items()},
    }


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA H200", "h200"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA A100-SXM4-80GB", "a100-80g"),
        ("NVIDIA A100-PCIE-40GB", "a100-40g"),
        ("NVIDIA L40S", "l40s"),  # not l4
        ("NVIDIA L4", "l4"),
        ("NVIDIA GeForce RTX 4090", "4090"),
        ("Tesla V100-SXM2-32GB", "v100"),
        ("NVIDIA B200", "nvidia-b200"),  # a type memfit does not name: the name as a file name
    ],
)
def test_a_device_name_gives_the_key_of_its_gpu_type(name: str, key: str) -> None:
    assert device_key(name) == key


def test_the_folder_is_the_environments_or_the_users_data_dir(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("MEMFIT_CALIBRATION_DIR", str(tmp_path / "x"))
    assert calibration_dir() == tmp_path / "x"
    monkeypatch.delenv("MEMFIT_CALIBRATION_DIR")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert calibration_dir() == tmp_path / "data" / "memfit" / "calibrations"


def test_without_a_saved_one_memfits_own_are_used(folder: Path) -> None:
    cal, note = calibration_for(resolve_gpu("h200"))
    assert note is None and cal.source == shipped()["h200"]["source"]
    cal, note = calibration_for(resolve_gpu("24GiB"))  # a size: the H200's, and why
    assert note is not None and "memfit calibrate" in note


def test_this_machines_calibration_of_the_type_comes_first(folder: Path) -> None:
    where = save_calibration(_measured("h200", "NVIDIA H200", 2.0))
    assert where == folder / "h200.json"
    ours = calibration_for(resolve_gpu("h200"))[0].host["forward"]
    cal, note = calibration_for(resolve_gpu("h200"))
    assert cal.host["forward"] == pytest.approx(2 * shipped()["h200"]["host"]["forward"])
    assert note is not None and str(where) in note and "this machine's" in note
    assert ours == cal.host["forward"]
    # a size names no type: this machine's newest, said so
    cal, note = calibration_for(resolve_gpu("24GiB"))
    assert cal.source == "measured here, host x2.0" and note is not None and "24GiB" in note


def test_another_type_takes_its_own_and_not_this_machines(folder: Path) -> None:
    save_calibration(_measured("a100-80g", "NVIDIA A100-SXM4-80GB", 3.0))
    cal, note = calibration_for(resolve_gpu("a100-80g"))
    assert cal.source == "measured here, host x3.0" and note is not None
    cal, note = calibration_for(resolve_gpu("h200"))  # memfit's own of the H200 still
    assert note is None and cal.source == shipped()["h200"]["source"]
    cal, note = calibration_for(resolve_gpu("h100"))  # none of the H100: the H200's, said so
    assert cal.source == shipped()["h200"]["source"] and "H100" in (note or "")


def test_a_file_given_wins(folder: Path, tmp_path: Path) -> None:
    path = save_calibration(_measured("h200", "NVIDIA H200", 5.0), tmp_path / "mine.json")
    assert not folder.exists()  # written where asked only
    cal, note = calibration_for(resolve_gpu("h200"), str(path))
    assert cal.source == "measured here, host x5.0" and str(path) in (note or "")


def test_a_saved_file_that_is_not_a_calibration_is_passed_over(folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "notes.json").write_text('{"hello": 1}')
    (folder / "broken.json").write_text("{")
    assert calibration_for(resolve_gpu("h200"))[1] is None


@pytest.mark.parametrize(
    ("text", "said"),
    [(None, "does not exist"), ("{", "could not be read as JSON"), ("[1]", "is not a step-time")],
)
def test_a_bad_file_is_refused_naming_it(tmp_path: Path, text: str | None, said: str) -> None:
    path = tmp_path / "cal.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(InvalidInputError, match=said) as err:
        read_calibration(path)
    assert str(path) in str(err.value) and "memfit calibrate --out FILE" in str(err.value)


def test_a_saved_file_round_trips(folder: Path) -> None:
    data = _measured("h200", "NVIDIA H200", 1.5)
    where = save_calibration(data)
    assert json.loads(where.read_text()) == data
    assert not list(folder.glob("*.partial"))


def test_a_calibration_that_cannot_be_written_names_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(InvalidInputError, match="could not be written") as err:
        save_calibration(dict(shipped()["h200"]), blocker / "cal.json")
    assert str(blocker / "cal.json") in str(err.value)
