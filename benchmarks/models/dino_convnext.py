"""DINO self-distillation with a ConvNeXt backbone and an EMA teacher, as user code:
``dino_convnext.py:make_model``.

The backbone is a ConvNeXt-T written out: 7x7 depthwise convolutions, the block's channels
moved last by ``permute`` for ``LayerNorm`` and two ``Linear`` layers with GELU, a learned
layer scale, a channels-first LayerNorm written by hand before each strided downsampling
convolution. The projection head is a three-layer MLP, an L2 ``normalize`` and a
weight-normalised (``nn.utils.parametrizations.weight_norm``, magnitude frozen at one)
linear layer to 65,536 prototypes. The teacher is a ``deepcopy`` of the student with its
gradients off. The loss multi-crops: the student sees two 224-pixel global crops and six
96-pixel local crops (one forward per resolution), the teacher only the global crops under
``torch.no_grad``; cross-entropy between the teacher's centred, sharpened softmax and the
student's log-softmax over every pair of different views. Inside the loss the centre buffer
is updated in place and the teacher moved toward the student by ``torch._foreach_mul_`` and
``torch._foreach_add_``, both without grad.
"""

from __future__ import annotations

import copy
import itertools

import torch
import torch.nn.functional as F
from torch import nn

GLOBAL_SIZE = 224
LOCAL_SIZE = 96
GLOBAL_CROPS = 2
LOCAL_CROPS = 6
PROTOTYPES = 65536
STUDENT_TEMP = 0.1
TEACHER_TEMP = 0.04
CENTER_MOMENTUM = 0.9
TEACHER_MOMENTUM = 0.996


class LayerNorm2d(nn.Module):
    """LayerNorm over the channels of an (N, C, H, W) tensor."""

    def __init__(self, channels: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.dwconv(x).permute(0, 2, 3, 1)
        h = self.gamma * self.pwconv2(F.gelu(self.pwconv1(self.norm(h))))
        return x + h.permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    def __init__(
        self, depths: tuple[int, ...] = (3, 3, 9, 3), dims: tuple[int, ...] = (96, 192, 384, 768)
    ) -> None:
        super().__init__()
        self.downsample = nn.ModuleList(
            [nn.Sequential(nn.Conv2d(3, dims[0], 4, stride=4), LayerNorm2d(dims[0]))]
        )
        for a, b in itertools.pairwise(dims):
            self.downsample.append(nn.Sequential(LayerNorm2d(a), nn.Conv2d(a, b, 2, stride=2)))
        self.stages = nn.ModuleList(
            nn.Sequential(*(ConvNeXtBlock(d) for _ in range(n)))
            for n, d in zip(depths, dims, strict=True)
        )
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for down, stage in zip(self.downsample, self.stages, strict=True):
            x = stage(down(x))
        return self.norm(x.mean((2, 3)))


class DINOHead(nn.Module):
    def __init__(self, dim: int, hidden: int = 2048, bottleneck: int = 256) -> None:
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(dim, hidden),
            nn.GELU(),
            nn.Linear(hidden, hidden),
            nn.GELU(),
            nn.Linear(hidden, bottleneck),
        )
        self.last = nn.utils.parametrizations.weight_norm(
            nn.Linear(bottleneck, PROTOTYPES, bias=False)
        )
        magnitude = self.last.parametrizations.weight.original0
        magnitude.data.fill_(1.0)
        magnitude.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.last(F.normalize(self.mlp(x), dim=-1))


class DINO(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.student = nn.Sequential(ConvNeXt(), DINOHead(768))
        self.teacher = copy.deepcopy(self.student).requires_grad_(False)
        self.register_buffer("center", torch.zeros(1, PROTOTYPES))

    def forward(self, crops: torch.Tensor) -> torch.Tensor:
        return self.student(crops)


def make_model() -> nn.Module:
    return DINO()


def make_batch(batch_size: int, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    global_crops = torch.randn(GLOBAL_CROPS, batch_size, 3, GLOBAL_SIZE, GLOBAL_SIZE)
    local_crops = torch.randn(LOCAL_CROPS, batch_size, 3, LOCAL_SIZE, LOCAL_SIZE)
    return global_crops, local_crops


def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    global_crops, local_crops = batch
    student_out = torch.cat([model(global_crops.flatten(0, 1)), model(local_crops.flatten(0, 1))])
    with torch.no_grad():
        teacher_out = model.teacher(global_crops.flatten(0, 1)).float()
        targets = F.softmax((teacher_out - model.center) / TEACHER_TEMP, dim=-1)
    log_probs = F.log_softmax(student_out.float() / STUDENT_TEMP, dim=-1)
    student_views = log_probs.chunk(GLOBAL_CROPS + LOCAL_CROPS)
    total, pairs = student_out.new_zeros((), dtype=torch.float32), 0
    for t, target in enumerate(targets.chunk(GLOBAL_CROPS)):
        for s, view in enumerate(student_views):
            if s != t:
                total = total + torch.sum(-target * view, dim=-1).mean()
                pairs += 1
    with torch.no_grad():
        batch_center = teacher_out.mean(0, keepdim=True)
        model.center.mul_(CENTER_MOMENTUM).add_(batch_center, alpha=1 - CENTER_MOMENTUM)
        teacher_params = list(model.teacher.parameters())
        student_params = [p.detach() for p in model.student.parameters()]
        torch._foreach_mul_(teacher_params, TEACHER_MOMENTUM)
        torch._foreach_add_(teacher_params, student_params, alpha=1 - TEACHER_MOMENTUM)
    return total / pairs
