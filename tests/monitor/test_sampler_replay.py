"""The sampler on what a real H200's driver answered (recorded with benchmarks/nvml_record.py)."""

from __future__ import annotations

import json

import pytest
from monitor_data import recorded, replay_monitor, with_error

from memfit import InvalidInputError
from memfit.monitor import Monitor, Replay, RuntimeDir
from memfit.monitor._procs import command_line

SCENARIOS = ["idle", "train", "train+infer", "infer-exits"]


def _value(entry):
    return entry.get("value")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_sample_reads_what_the_driver_answered(recording, scenario):
    samples = recorded(recording, scenario)
    with replay_monitor(recording, scenario) as monitor:
        for raw in samples:
            sample = monitor.sample()
            assert sample.time == raw["time"]
            assert sample.driver_version == _value(recording["meta"]["driver"])
            assert len(sample.devices) == len(raw["devices"])
            for dev, rec in zip(sample.devices, raw["devices"], strict=True):
                assert dev.status == "ok"
                assert dev.uuid == _value(rec["uuid"]) and dev.name == _value(rec["name"])
                mem = _value(rec["memory_v2"]) or _value(rec["memory_v1"])
                assert (dev.memory_total, dev.memory_used) == (mem["total"], mem["used"])
                util = _value(rec["utilization"])
                assert dev.utilization_gpu == (None if util is None else util["gpu"])
                assert dev.temperature_c == _value(rec["temperature"])
                listed = {p["pid"]: p["usedGpuMemory"] for p in _value(rec["compute_processes"])}
                assert {p.pid: p.used_memory for p in dev.processes} == listed


def test_a_training_process_shows_torch_beside_nvml(recording):
    with replay_monitor(recording, "train") as monitor:
        sample = monitor.sample()
    (dev,) = sample.devices
    (proc,) = dev.processes
    raw = recorded(recording, "train")[0]
    stats = next(f for f in raw["framework"] if f["pid"] == proc.pid)
    assert proc.torch is not None and proc.cuda_initialised is True
    assert (proc.torch.allocated, proc.torch.reserved) == (stats["allocated"], stats["reserved"])
    assert proc.torch.step == stats["step"]
    assert proc.torch.age == pytest.approx(raw["time"] - stats["time"])
    # what nvidia-smi shows is more than PyTorch reserved: the CUDA context and libraries
    assert proc.torch.allocated <= proc.torch.reserved < proc.used_memory
    assert proc.non_torch == proc.used_memory - proc.torch.reserved
    rec_proc = next(p for p in raw["procs"] if p["pid"] == proc.pid)
    assert proc.user == rec_proc["user"] and proc.command == command_line(rec_proc["cmdline"])
    assert dev.other == dev.memory_used - proc.used_memory


def test_idle_gpu_has_no_processes_and_all_memory_is_other(recording):
    with replay_monitor(recording, "idle") as monitor:
        (dev,) = monitor.sample().devices
    assert dev.processes == () and dev.processes_error is None
    assert dev.other == dev.memory_used


def test_a_process_that_exits_mid_read_is_kept_without_identity(recording):
    """In infer-exits, the inference process ends while it is sampled: wherever NVML still
    listed it but /proc no longer had it, the sample shows N/A, and nothing raises."""
    samples = recorded(recording, "infer-exits")
    seen_pids = []
    with replay_monitor(recording, "infer-exits") as monitor:
        for raw in samples:
            (dev,) = monitor.sample().devices
            gone = {p["pid"] for p in raw["procs"] if "error" in p}
            for proc in dev.processes:
                seen_pids.append(proc.pid)
                if proc.pid in gone:
                    assert proc.user is None and proc.command is None
    counts = [len(raw["devices"][0]["compute_processes"]["value"]) for raw in samples]
    assert max(counts) == 2 and counts[-1] == 1  # two processes, then the trainer alone


def test_a_lost_gpu_says_lost_and_the_sample_goes_on(recording):
    doc = with_error(recording, "train", 0, ["memory_v2", "memory_v1"], "NVMLError_GpuIsLost")
    with replay_monitor(doc, "train") as monitor:
        (dev,) = monitor.sample().devices
    assert (dev.status, dev.error) == ("lost", "GpuIsLost")
    assert dev.memory_used is None and dev.processes == ()
    assert dev.name == recorded(recording, "train")[0]["devices"][0]["name"]["value"]


def test_a_driver_without_memory_v2_falls_back_to_v1(recording):
    doc = with_error(recording, "train", 0, ["memory_v2"], "NVMLError_FunctionNotFound")
    raw = recorded(recording, "train")[0]["devices"][0]
    with replay_monitor(doc, "train") as monitor:
        (dev,) = monitor.sample().devices
    assert dev.status == "ok"
    assert dev.memory_used == raw["memory_v1"]["value"]["used"]
    assert dev.memory_reserved is None


def test_fields_the_driver_lacks_are_none(recording):
    doc = with_error(recording, "train", 0, ["temperature", "power_mw"], "NVMLError_NotSupported")
    with replay_monitor(doc, "train") as monitor:
        (dev,) = monitor.sample().devices
    assert dev.status == "ok" and dev.temperature_c is None and dev.power_w is None
    assert dev.memory_used is not None


def test_a_process_list_we_may_not_read_is_said(recording):
    doc = with_error(recording, "train", 0, ["compute_processes"], "NVMLError_NoPermission")
    with replay_monitor(doc, "train") as monitor:
        (dev,) = monitor.sample().devices
    assert dev.processes_error == "NoPermission" and dev.other is None


def test_devices_out_of_range_and_unknown_scenarios(recording):
    with pytest.raises(InvalidInputError, match=r"GPU 5 does not exist: this machine has 1"):
        replay_monitor(recording, "idle", devices=[5])
    with pytest.raises(InvalidInputError, match="no scenario 'nope'; it has idle"):
        Replay(recording, "nope")


def test_the_json_form_has_the_derived_numbers(recording):
    with replay_monitor(recording, "train") as monitor:
        sample = monitor.sample()
    doc = sample.to_dict()
    proc = doc["devices"][0]["processes"][0]
    assert doc["schema"] == "memfit.sample/1"
    assert proc["non_torch"] == sample.devices[0].processes[0].non_torch
    assert doc["devices"][0]["other"] == sample.devices[0].other


def test_published_files_join_like_the_recorded_stats(recording, tmp_path):
    """The recorded framework stats written as publisher files in a runtime directory (the
    path real processes take) give the same sample as the in-memory replay."""
    replay = Replay(recording, "train+infer", loop=False)
    monitor = Monitor(replay, procs=replay.procs, published=RuntimeDir(tmp_path, replay.procs))
    for doc in replay.publisher_documents():  # of the first sample, which is sampled next
        (tmp_path / f"{doc['pid']}.json").write_text(json.dumps(doc))
    from_files = monitor.sample()
    with replay_monitor(recording, "train+infer") as direct:
        assert from_files == direct.sample()
    assert all(p.torch is not None for p in from_files.devices[0].processes)
