"""The planner's step-time model: two queues (host and GPU) over a trace's ops, with rates from
a calibration."""

from __future__ import annotations

import dataclasses

import pytest
from step_time_data import US, calibration, costs

from memfit._gpus import resolve_gpu
from memfit.planner import calibration_for, step_time
from memfit.technique import optimizer_variant_of

IN_BACKWARD = optimizer_variant_of("adamw-in-backward")


def test_a_phase_of_small_ops_takes_the_hosts_time() -> None:
    got = step_time(costs(forward=[("mem", 0, 10**6)] * 100), calibration(), style="eager")
    # the host issues an op every 10 us; the GPU runs each in 2 us: the last ends 2 us later
    assert got.seconds == pytest.approx(100 * 10 * US + 2 * US)
    assert got.bound == "host"


def test_a_phase_of_large_products_takes_the_gpus_time() -> None:
    got = step_time(costs(forward=[("mm:bf16", int(1e12), 0)] * 3), calibration(), style="eager")
    # issued at 10, 20, 30 us; each runs 2 ms after the one before it
    assert got.seconds == pytest.approx(10 * US + 3 * 2000 * US)
    assert got.bound == "gpu"


def test_the_curve_is_read_log_log_between_points_and_at_a_constant_rate_beyond() -> None:
    cal = calibration()
    between = cal.gpu_seconds("mm:bf16", int(1e10), 0)
    assert 10 * US < between < 2000 * US
    assert cal.gpu_seconds("mm:bf16", int(2e12), 0) == pytest.approx(4000 * US)
    # traffic is a floor: a product that moves more bytes than it computes is memory-bound
    assert cal.gpu_seconds("mm:bf16", int(1e9), 10**8) == pytest.approx(1 * US + 100 * US)
    assert cal.gpu_seconds("view", 0, 0) == 0


def test_a_read_back_makes_the_host_wait_for_the_gpu() -> None:
    ops = [("mm:bf16", int(1e12), 0), ("sync", 0, 0), ("mem", 0, 0)]
    got = step_time(costs(forward=ops), calibration(), style="eager")
    # the host waits 2 ms for the product, then issues the last op (10 us) which runs 1 us
    assert got.seconds == pytest.approx(10 * US + 2000 * US + 10 * US + 1 * US)


def test_micro_batch_phases_scale_to_the_wanted_accumulation() -> None:
    ops = [("mem", 0, 0)] * 10
    one = step_time(costs(forward=ops, optimizer=ops), calibration(), style="eager")
    four = step_time(
        costs(forward=ops, optimizer=ops), calibration(), style="eager", micro_batches=(1, 4)
    )
    # a host-bound micro-batch: the host issues the next one while the GPU runs the last op
    # of this one (1 us), so only the last micro-batch's tail shows
    assert one.phases["forward"] == pytest.approx(100 * US + 1 * US)
    assert four.phases["forward"] == pytest.approx(4 * 100 * US + 1 * US)
    assert four.phases["optimizer"] == pytest.approx(one.phases["optimizer"])
    half = step_time(costs(forward=ops), calibration(), style="eager", micro_batches=(2, 3))
    assert half.phases["forward"] == pytest.approx(1.5 * 100 * US + 1 * US)  # 1.5 repeats


def test_the_host_issues_the_next_phase_while_the_gpu_runs_the_last() -> None:
    # a GPU-bound forward (one 2 ms product) then a host-bound backward (100 ops of 10 us):
    # loss.backward() starts issuing while the product runs, as eager PyTorch does
    got = step_time(
        costs(forward=[("mm:bf16", int(1e12), 0)], backward=[("mem", 0, 0)] * 100),
        calibration(),
        style="eager",
    )
    # the backward's kernels (1 us each) queue behind the product, which ends at 10 us + 2 ms
    # while the host has issued them all by 1,010 us
    assert got.seconds == pytest.approx(10 * US + 2000 * US + 100 * 1 * US)


def test_the_host_cost_follows_the_phase_and_the_style_of_step() -> None:
    cal = calibration(forward=20 * US, **{"forward:selective": 50 * US})
    ops = [("mem", 0, 0)] * 10
    last = 1 * US  # the GPU's run of the last op, after the host issued it
    got = step_time(costs(forward=ops), cal, style="eager")
    assert got.seconds == pytest.approx(200 * US + last)
    got = step_time(costs(forward=ops), cal, style="selective")
    assert got.seconds == pytest.approx(500 * US + last)
    got = step_time(costs(backward=ops), cal, style="eager")
    assert got.seconds == pytest.approx(100 * US + last)  # no backward cost: the default


def test_the_input_phase_copies_the_batch_on_the_host() -> None:
    got = step_time(costs(input=[("mem", 0, 2 * 10**6)]), calibration(), style="eager")
    assert got.seconds == pytest.approx(10 * US + 10**6 * 1e-9)


def test_the_h200_ships_a_calibration_and_other_gpus_borrow_it_with_a_note() -> None:
    cal, note = calibration_for(resolve_gpu("h200"))
    assert note is None and "mm:bf16" in cal.curves and cal.kernel_floor > 0
    _, note = calibration_for(resolve_gpu("4090"))
    assert note is not None and "H200" in note and "RTX 4090" in note


def test_an_optimizer_stepped_in_backward_pays_its_own_host_cost_per_parameter() -> None:
    update = [("mem", 0, 0)] * 10
    light = costs(backward=[("mem", 0, 0)] * 10, optimizer=update)
    light.parameter_tensors = 100
    cal = calibration(optimizer_param=2 * US, **{"optimizer_param:in-backward": 30 * US})
    after = step_time(light, cal, style="eager")
    during = step_time(light, cal, style="eager", variant=IN_BACKWARD)
    # host-bound: the 100 update calls (30 us each, against 2 us per tensor after backward)
    assert during.seconds - after.seconds == pytest.approx(100 * 28 * US, abs=5 * US)
    assert "optimizer" not in during.phases  # issued inside backward
    # a calibration measured before the key existed: the loop's cost
    old = step_time(light, calibration(optimizer_param=2 * US), style="eager", variant=IN_BACKWARD)
    assert old.seconds == pytest.approx(after.seconds, abs=5 * US)


def test_the_updates_host_cost_hides_under_a_gpu_bound_backward() -> None:
    heavy = costs(backward=[("mm:bf16", int(1e12), 0)] * 2, optimizer=[("mem", 0, 10**6)] * 10)
    heavy.parameter_tensors = 100
    cal = calibration(optimizer_param=2 * US, **{"optimizer_param:in-backward": 30 * US})
    during = step_time(heavy, cal, style="eager", variant=IN_BACKWARD)
    # 4 ms of products on the GPU; the host's 3 ms of update calls run beside them
    assert during.seconds == pytest.approx(2 * 2000 * US + 10 * 2 * US, rel=0.01)
    assert during.bound == "gpu"


def test_memory_bound_families_take_their_factor_of_the_bandwidths_time() -> None:
    cal = dataclasses.replace(
        calibration(), mem_factors={"norm": 3.0, "bn:bf16": 9.0, "bn": 4.0, "elementwise": 1.5}
    )
    mb = 10**6  # 1 us at the made-up bandwidth, on top of the 1 us floor
    assert cal.gpu_seconds("mem:norm:fp32", 0, mb) == pytest.approx(4 * US)  # the family's
    assert cal.gpu_seconds("mem:bn:bf16", 0, mb) == pytest.approx(10 * US)  # its dtype's
    assert cal.gpu_seconds("mem:bn:fp32", 0, mb) == pytest.approx(5 * US)  # else the family's
    assert cal.gpu_seconds("mem", 0, mb) == pytest.approx(2.5 * US)  # elementwise
    assert calibration().gpu_seconds("mem:softmax:bf16", 0, mb) == pytest.approx(2 * US)


def test_an_unaligned_product_reads_its_own_curve_or_the_aligned_one() -> None:
    slow = ((1e9, 80 * US), (1e12, 16000 * US))
    cal = dataclasses.replace(calibration(), curves={**calibration().curves, "mm_a1:bf16": slow})
    assert cal.gpu_seconds("mm_a1:bf16", int(1e12), 0) == pytest.approx(16000 * US)
    # a calibration that measured only aligned products times it as one
    assert calibration().gpu_seconds("mm_a1:bf16", int(1e12), 0) == pytest.approx(2000 * US)


def test_the_shipped_h200_calibration_times_unaligned_heads_and_batch_norm_slower() -> None:
    cal, _ = calibration_for(resolve_gpu("h200"))
    work = int(1e12)
    assert cal.gpu_seconds("mm_a1:bf16", work, 0) > 3 * cal.gpu_seconds("mm:bf16", work, 0)
    assert cal.mem_factor("mem:bn:bf16") > cal.mem_factor("mem:bn:fp32") > 1


def test_a_step_given_its_batch_on_the_gpu_leaves_the_input_phase_out() -> None:
    ops = costs(input=[("mem", 0, 2 * 10**8)], forward=[("mem", 0, 10**6)] * 10)
    made_here = step_time(ops, calibration(), style="eager")
    given = step_time(ops, calibration(), style="eager", batch_on_gpu=True)
    assert "input" in made_here.phases and "input" not in given.phases
    assert given.seconds == pytest.approx(made_here.seconds - made_here.phases["input"])


def test_strided_concatenations_take_their_factor_or_a_concatenations() -> None:
    mb = 10**6  # 1 us at the made-up bandwidth, on top of the 1 us floor
    split = dataclasses.replace(calibration(), mem_factors={"cat": 1.0, "cat_strided:bf16": 4.0})
    assert split.gpu_seconds("mem:cat_strided:bf16", 0, mb) == pytest.approx(5 * US)
    assert split.gpu_seconds("mem:cat:bf16", 0, mb) == pytest.approx(2 * US)
    # fitted before the split: timed as any concatenation was then, not as elementwise
    older = dataclasses.replace(calibration(), mem_factors={"cat": 3.0, "elementwise": 1.5})
    assert older.gpu_seconds("mem:cat_strided:bf16", 0, mb) == pytest.approx(4 * US)


def test_a_backward_family_takes_its_own_factor_or_its_forwards() -> None:
    mb = 10**6
    split = dataclasses.replace(calibration(), mem_factors={"norm": 2.0, "norm_bwd": 3.0})
    assert split.gpu_seconds("mem:norm_bwd:fp32", 0, mb) == pytest.approx(4 * US)
    assert split.gpu_seconds("mem:norm:fp32", 0, mb) == pytest.approx(3 * US)
    older = dataclasses.replace(calibration(), mem_factors={"norm": 2.0, "elementwise": 1.5})
    assert older.gpu_seconds("mem:norm_bwd:fp32", 0, mb) == pytest.approx(3 * US)
