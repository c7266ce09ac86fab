"""Values and shapes that depend on data: from the batch where they depend on it alone, else
bounded from above and said in the notes.

Each model is tiny and built on the meta device; the batch is real CPU tensors. Expectations
are computed from the batch or the shapes, never written down as numbers of memfit's.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from memfit import TraceError, estimate
from memfit._gpus import resolve_gpu
from memfit.trace import trace_workload
from memfit.workload import make_workload

H200 = resolve_gpu("h200")
MIB = 1 << 20


class Proj(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def _in_inference_mode(body: Any) -> Any:
    def step(model: nn.Module, batch: Any) -> Any:
        with torch.inference_mode():
            return body(model, batch)

    return step


def _padded(last_column_ones: int) -> dict[str, torch.Tensor]:
    mask = torch.ones(8, 16, dtype=torch.long)
    mask[last_column_ones:, -1] = 0
    return {"x": torch.randn(8, 16, 64), "mask": mask}


def test_item_of_the_batch_under_inference_mode() -> None:
    """``mask[:, -1].sum().item()`` is the batch's own value, under inference mode too (where
    the trace sees ``item`` whole, not ``_local_scalar_dense``)."""

    def body(model: nn.Module, batch: Any) -> Any:
        rows = int(batch["mask"][:, -1].sum().item())
        return model(batch["x"]), torch.empty(rows, MIB, device=batch["x"].device)

    step = _in_inference_mode(body)
    few = estimate(Proj, _padded(2), mode="infer", step_fn=step)
    many = estimate(Proj, _padded(6), mode="infer", step_fn=step)
    assert many.peak_allocated - few.peak_allocated == 4 * MIB * 4
    assert not [n for n in few.notes + many.notes if "no known" in n]


def test_any_of_a_large_batch_mask_is_the_batch_own() -> None:
    """``if (mask == 0).any():`` on a batch of over a million elements takes the branch the
    batch takes; typical data would have answered False."""

    def body(model: nn.Module, batch: Any) -> Any:
        out = model(batch["x"])
        if (batch["mask"] == 0).any():  # the costly branch: padding to handle
            return out, torch.empty(64, MIB, device=out.device)
        return out

    mask = torch.ones(2, 1 << 20, dtype=torch.long)
    dense = {"x": torch.randn(2, 64), "mask": mask}
    padded = {"x": torch.randn(2, 64), "mask": mask.clone()}
    padded["mask"][1, -5:] = 0
    step = _in_inference_mode(body)
    cheap = estimate(Proj, dense, mode="infer", step_fn=step)
    costly = estimate(Proj, padded, mode="infer", step_fn=step)
    assert costly.peak_allocated > cheap.peak_allocated + 128 * MIB  # the 256 MiB branch
    assert not [n for n in cheap.notes + costly.notes if "no known" in n]


class MaskedByItself(nn.Module):
    """Selects its positive outputs: a mask no trace can know."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        return h[h > 0].sum()


def test_a_boolean_mask_of_model_values_is_bounded_with_a_note() -> None:
    """``h[h > 0]`` in training: ``nonzero`` of the mask sized at every element, the selection
    at all of ``h``, forward and backward, and the notes say so."""
    rows = 32
    workload = make_workload(MaskedByItself, torch.randn(rows, 64), loss_fn=lambda m, b: m(b))
    trace = trace_workload(workload, H200)
    n = rows * 64
    made = {(info.op, info.shape, info.phase.rpartition(".")[2]) for info in trace.infos}
    assert ("nonzero", (n, 2), "forward") in made  # the positions CUDA's index computes
    assert ("index", (n,), "forward") in made  # h[mask]: every element selected
    assert ("nonzero", (n, 2), "backward") in made  # the gradient scattered back by the mask
    assert any(
        "nonzero in MaskedByItself has no known input values" in note
        and "sized at its largest (every element nonzero), an upper bound" in note
        for note in trace.notes
    ), trace.notes


def test_a_boolean_mask_of_the_batch_selects_what_the_batch_selects() -> None:
    def body(model: nn.Module, batch: Any) -> Any:
        return model(batch["x"][batch["keep"]])

    keep = torch.zeros(1000, dtype=torch.bool)
    keep[::10] = True
    batch = {"x": torch.randn(1000, 64), "keep": keep}
    workload = make_workload(Proj, batch, mode="infer", step_fn=body)
    trace = trace_workload(workload, H200)
    assert ("index", (100, 64)) in {(info.op, info.shape) for info in trace.infos}
    assert not [n for n in trace.notes if "no known" in n]


def test_unique_of_labels_gathered_by_model_values() -> None:
    """A detector's labels (``arange`` of the classes, gathered at the boxes kept by their
    scores): ``unique`` holds at most the classes, not one per box, so a loop over it runs
    once per class; ``full_like`` labels have one value whatever their length."""
    classes = 7
    seen: list[int] = []

    def body(model: nn.Module, batch: Any) -> Any:
        scores = model(batch)[:, :classes]
        keep = scores > 0
        labels = torch.arange(classes, device=scores.device).expand_as(scores)[keep]
        seen.append(torch.unique(labels).shape[0])
        kept = scores[keep]
        seen.append(torch.unique(torch.full_like(kept, 3, dtype=torch.long)).shape[0])
        return kept

    est = estimate(Proj, torch.randn(500, 64), mode="infer", step_fn=body)
    assert seen == [classes, 1]
    assert any("nonzero in the model" in n for n in est.notes)


def test_unique_of_model_values_is_bounded_by_their_count() -> None:
    seen: list[tuple[int, ...]] = []

    def body(model: nn.Module, batch: Any) -> Any:
        values, counts = torch.unique(model(batch)[:, 0].long(), return_counts=True)
        seen.append((values.shape[0], counts.shape[0]))
        return values

    est = estimate(Proj, torch.randn(50, 64), mode="infer", step_fn=body)
    assert seen == [(50, 50)]
    assert any(
        "unique in the model has no known input values" in n
        and "(every element distinct), an upper bound" in n
        for n in est.notes
    ), est.notes


def test_unique_of_the_batch_is_the_batch_own() -> None:
    seen: list[int] = []

    def body(model: nn.Module, batch: Any) -> Any:
        values, counts = torch.unique(batch["ids"], return_counts=True)
        seen.append(int(counts.max()))
        return model(batch["x"][: values.shape[0]])

    ids = torch.tensor([4, 4, 4, 9, 1])
    est = estimate(Proj, {"x": torch.randn(8, 64), "ids": ids}, mode="infer", step_fn=body)
    assert seen == [3]
    assert not [n for n in est.notes if "no known" in n]


def test_bincount_and_repeat_interleave_of_the_batch() -> None:
    seen: list[int] = []

    def body(model: nn.Module, batch: Any) -> Any:
        out = model(batch["x"])
        seen.append(torch.bincount(batch["ids"]).shape[0])
        repeated = out.repeat_interleave(batch["ids"], dim=0)
        seen.append(repeated.shape[0])
        return repeated

    ids = torch.tensor([0, 3, 1, 5])
    est = estimate(Proj, {"x": torch.randn(4, 64), "ids": ids}, mode="infer", step_fn=body)
    assert seen == [6, 9]
    assert not [n for n in est.notes if "no known" in n]


def test_repeat_interleave_by_model_values_is_refused_with_the_way_out() -> None:
    def body(model: nn.Module, batch: Any) -> Any:
        out = model(batch)
        return out.repeat_interleave((out[:, 0] > 0).long(), dim=0)

    with pytest.raises(TraceError, match=r"repeat_interleave.*give output_size="):
        estimate(Proj, torch.randn(4, 64), mode="infer", step_fn=body)


def test_a_torchvision_detector_matches_its_anchors_to_the_batch_boxes() -> None:
    """RetinaNet's training loss indexes its anchors by their match to the targets' boxes:
    computed from the batch (anchors come from the image sizes), so nothing is bounded."""
    torchvision = pytest.importorskip("torchvision")

    def build() -> nn.Module:
        return torchvision.models.detection.retinanet_resnet50_fpn(
            weights=None, weights_backbone=None, num_classes=3, min_size=128, max_size=128
        )

    boxes = torch.tensor([[10.0, 10.0, 60.0, 70.0], [30.0, 20.0, 100.0, 110.0]])
    targets = [{"boxes": boxes, "labels": torch.tensor([1, 2])} for _ in range(2)]
    images = [torch.rand(3, 128, 128) for _ in range(2)]

    def loss(model: nn.Module, batch: Any) -> torch.Tensor:
        return sum(model(*batch).values())  # type: ignore[no-any-return]

    est = estimate(build, (images, targets), loss_fn=loss)
    assert est.peak_allocated > 0
    assert not [n for n in est.notes if "no known" in n], est.notes


class _MaskInside(nn.Module):
    """A mask made inside the forward, too large to compute on the host, whose pooled value
    sizes the output (ViLT's pixel mask: the patches each image covers)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = torch.ones(x.shape[0], 1024, 1280, device=x.device)  # 1.3M elements a sample
        patches = nn.functional.interpolate(mask[:, None].float(), size=(4, 5)).long()
        count = int((2 * patches).sum((1, 2, 3)).max())  # 2 x 20 patches
        return self.proj(x).sum() + torch.zeros(count, MIB, device=x.device).sum()


def test_a_large_mask_made_inside_keeps_its_one_value() -> None:
    est = estimate(_MaskInside, {"x": torch.randn(2, 4)}, mode="infer", gpu="h200")
    big = [n for n in est.notes if "no known" in n or "typical" in n]
    assert not big
    trace = trace_workload(
        make_workload(_MaskInside, {"x": torch.randn(2, 4)}, mode="infer"),
        H200,
    )
    sizes = [ev.size for ev in trace.events if ev.kind == "alloc"]
    assert 40 * MIB * 4 in sizes  # torch.zeros(40, MIB) in float32


def test_a_distributions_support_check_passes_and_is_said() -> None:
    """``torch.distributions`` validates a value against the support (``_is_all_true`` of a
    check computed from the model's output, which has no values here): the check is taken to
    pass, as it does for any valid step, and the notes say so."""

    def loss_fn(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        z = model(batch["x"])
        # validated explicitly: the default can be switched off by whatever ran before
        prior = torch.distributions.Normal(0.0, 1.0, validate_args=True)
        return -prior.log_prob(z).mean()

    work = make_workload(
        Proj, batch_of=lambda n: {"x": torch.randn(n, 16, 64)}, batch_size=8, gpu=H200,
        loss_fn=loss_fn,
    )  # fmt: skip
    result = estimate(work)
    assert result.peak_allocated > 0
    assert any("_is_all_true" in note and "True" in note for note in result.notes)


class Boxes(nn.Module):
    """Writes the model's boxes into slices of a buffer made from known values, then checks
    them as transformers' box losses do: the check must not read the buffer's old values."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(64, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        boxes = torch.zeros(x.shape[0], 4, device=x.device)
        boxes[:, 0] = 1.0  # known: x0 > x1, the check would fail on these values
        out = self.proj(x).sigmoid()
        boxes[:, :2] = out[:, :2]  # written through views, from values the trace lacks
        boxes[:, 2:] = out[:, :2] + out[:, 2:]
        if not (boxes[:, 2:] >= boxes[:, :2]).all():
            raise ValueError("boxes must be in corner format")
        return boxes.sum()


def test_a_view_written_without_values_drops_its_base_and_sibling_views() -> None:
    est = estimate(Boxes, torch.randn(8, 64))
    assert any("all" in n and "no known value" in n for n in est.notes)
