"""``Monitor.samples``: the sampling loop of ``memfit watch`` as a library, on the recorded H200."""

from __future__ import annotations

import itertools
import types

import pytest
from monitor_data import H200, recorded, replay_monitor

import memfit.monitor._sampler as sampler_module
from memfit import InvalidInputError
from memfit.monitor import Monitor, Sample, samples


class FakeClock:
    """``time.monotonic`` and ``time.sleep`` that only count: no test waits."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(
        sampler_module, "time", types.SimpleNamespace(monotonic=fake.monotonic, sleep=fake.sleep)
    )
    return fake


def test_the_loop_gives_what_sample_gives_in_turn(recording, clock):
    n = len(recorded(recording, "infer-exits"))
    with replay_monitor(recording, "infer-exits") as one_by_one:
        expected = [one_by_one.sample() for _ in range(n)]
    with replay_monitor(recording, "infer-exits") as monitor:
        got = list(monitor.samples(interval=0.5, count=n))
    assert got == expected
    assert [s.time for s in got] == [raw["time"] for raw in recorded(recording, "infer-exits")]


def test_count_none_runs_until_the_caller_stops(recording, clock):
    with replay_monitor(recording, "train") as monitor:
        got = list(itertools.islice(monitor.samples(interval=1.0), 7))
    assert len(got) == 7 and all(isinstance(s, Sample) for s in got)
    assert len(clock.slept) == 6  # between samples, not after the last one taken


def test_samples_keep_to_a_fixed_schedule(recording, clock):
    """The n-th sample is due n intervals after the first: time the caller spends on a
    sample comes off the next wait, and a caller slower than the interval does not wait."""
    with replay_monitor(recording, "train") as monitor:
        loop = monitor.samples(interval=2.0, count=4)
        next(loop)  # at 100
        clock.now += 0.5  # the caller renders for half a second
        next(loop)  # due at 102: waits 1.5
        clock.now += 3.0  # a slow caller: now 105, past the sample due at 104
        next(loop)  # no wait
        next(loop)  # due at 106, now 105
        with pytest.raises(StopIteration):
            next(loop)
    assert clock.slept == [1.5, 0.0, 1.0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"interval": 0}, r"samples\(interval=0\) is not accepted"),
        ({"interval": -1.0}, r"samples\(interval=-1.0\) is not accepted"),
        ({"interval": 1.0, "count": 0}, r"samples\(count=0\) is not accepted"),
    ],
)
def test_a_bad_schedule_is_refused_at_the_call(recording, kwargs, message):
    with (
        replay_monitor(recording, "idle") as monitor,
        pytest.raises(InvalidInputError, match=message),
    ):
        monitor.samples(**kwargs)
    with pytest.raises(InvalidInputError, match=message):
        samples(**kwargs)  # before any driver is opened


def test_from_recording_reads_a_file_and_defaults_to_its_first_scenario(recording):
    with Monitor.from_recording(H200, start=0, loop=False) as from_file:
        first = from_file.sample()
    with replay_monitor(recording, recording["scenarios"][0]["name"]) as direct:
        assert first == direct.sample()


def test_from_recording_takes_a_loaded_document_a_scenario_and_gpus(recording):
    n = len(recorded(recording, "train"))
    with Monitor.from_recording(recording, "train", devices=[0]) as monitor:
        times = [s.time for s in itertools.islice(monitor.samples(0.01), n + 1)]
        assert monitor.devices == [0]
    # it loops by default, as memfit watch --replay does
    assert times[n] == times[0] == recorded(recording, "train")[0]["time"]
    with pytest.raises(InvalidInputError, match="no scenario 'nope'"):
        Monitor.from_recording(recording, "nope")


def test_the_module_loop_releases_the_driver_when_closed(recording, monkeypatch, clock):
    closed: list[bool] = []

    def recorded_monitor(devices=None):
        monitor = Monitor.from_recording(recording, "train", devices=devices)
        close = monitor.close
        monitor.close = lambda: (closed.append(True), close())[1]  # type: ignore[method-assign]
        return monitor

    monkeypatch.setattr(sampler_module, "Monitor", recorded_monitor)
    loop = samples(interval=1.0, devices=[0])
    first = next(loop)
    assert [d.index for d in first.devices] == [0] and closed == []
    loop.close()
    assert closed == [True]
