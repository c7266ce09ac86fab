"""GPUs memfit knows by name, and what a process pays on them before PyTorch allocates.

``total`` is the memory CUDA gives a process (``torch.cuda.get_device_properties().total_memory``,
``cudaMemGetInfo``'s total): the driver keeps the rest of nvidia-smi's "Total" for itself, 480
MiB of an H100 80GB HBM3's and 615 MiB of an H200's (measured, driver 580.159.04; at the H100's
every sequence of a serving check one over nvidia-smi's total less a process's context ran out
of memory). Cards not measured are taken at nvidia-smi's total less the larger of the two, on
the side of too little. ``context`` is what a PyTorch process holds outside the caching
allocator once CUDA, cuBLAS and cuDNN are loaded: nvidia-smi's per-process figure minus
``torch.cuda.memory_reserved()``. It was measured on the H200 (benchmarks/results/); other
cards reuse it until measured, and say so.

What a GPU runs depends on its architecture (compute capability): :class:`Architecture` holds
every such fact the trace uses (which attention kernels it may pick, cuBLAS's workspace, the
measured cuDNN table), so a new architecture is described here and nowhere else.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from memfit._errors import InvalidInputError
from memfit._units import MiB, SizeText, split_size, unit_bytes

__all__ = [
    "DEFAULT_ARCHITECTURE",
    "GPU",
    "KNOWN_GPUS",
    "MAX_GPU_SIZE",
    "MIN_GPU_SIZE",
    "Architecture",
    "resolve_gpu",
]


@dataclass(frozen=True, slots=True)
class Architecture:
    """The facts memfit knows of a GPU architecture, by compute capability ``sm`` (90: Hopper).

    Measured on sm 90 only (an H200, torch 2.11, cuDNN 9.19; ``benchmarks/sdpa_probe.py`` and
    ``cudnn_probe.py``): cuDNN's fused attention and the cuDNN workspace table. Other
    architectures keep the flash and memory-efficient attention rules of PyTorch's
    ``sdp_utils.cpp``, and reuse the sm 90 table until one is measured on them.
    """

    sm: int

    @property
    def runs_cudnn_attention(self) -> bool:
        """Whether SDPA may pick cuDNN's fused attention, ahead of flash (Hopper only)."""
        return self.sm == 90

    @property
    def runs_flash_attention(self) -> bool:
        """Whether SDPA may pick flash attention (Ampere and later)."""
        return self.sm >= 80

    @property
    def runs_efficient_attention(self) -> bool:
        """Whether SDPA may pick the memory-efficient kernel (Maxwell and later)."""
        return self.sm >= 50

    @property
    def efficient_backward_max_head_dim(self) -> int | None:
        """The largest head dimension the memory-efficient kernel's backward takes before
        Ampere; ``None``: no limit."""
        return None if self.sm >= 80 else 128

    @property
    def cublas_workspace(self) -> int:
        """The workspace cuBLAS takes per handle (thread) at its first matmul."""
        return 32 * MiB if self.sm >= 90 else 4 * MiB + 8 * 16 * 1024 * 2

    @property
    def cudnn_table(self) -> str:
        """The file under ``memfit/trace/data`` with cuDNN's convolution and LSTM workspaces
        for this architecture: measured on sm 90, reused by every other one until measured."""
        return "cudnn_sm90.json"


# what the trace assumes where no GPU is named (the default compute capability of a GPU)
DEFAULT_ARCHITECTURE = Architecture(90)


@dataclass(frozen=True, slots=True)
class GPU:
    """A target GPU: its memory, architecture, and the non-PyTorch memory a process needs."""

    name: str
    total: int
    compute_capability: tuple[int, int] = (9, 0)
    context: int = 758 * MiB  # training process (H200, torch 2.11: 742-795 MiB measured)
    context_infer: int = 686 * MiB  # inference process, no autograd thread (686-719 MiB)
    context_measured: bool = False
    sm_count: int = 132  # streaming multiprocessors: sizes the split of CUDA reductions
    threads_per_sm: int = 2048

    @property
    def sm(self) -> int:
        return self.compute_capability[0] * 10 + self.compute_capability[1]

    @property
    def architecture(self) -> Architecture:
        """What its architecture runs (attention kernels, workspaces, measured tables)."""
        return Architecture(self.sm)

    def context_for(self, mode: str) -> int:
        """The non-PyTorch memory of a ``train`` or ``infer`` process."""
        return self.context if mode == "train" else self.context_infer


# what the driver keeps of nvidia-smi's total on a card not measured: the H200's, the larger
_DRIVER_KEEPS = 150_754_820_096 - 150_109_880_320


def _smi(mib: int) -> int:
    """A card not measured: nvidia-smi's total of ``mib`` MiB, less what a driver keeps."""
    return mib * MiB - _DRIVER_KEEPS


KNOWN_GPUS: dict[str, GPU] = {
    "4090": GPU("RTX 4090 24GB", _smi(24564), (8, 9), sm_count=128, threads_per_sm=1536),
    "3090": GPU("RTX 3090 24GB", _smi(24576), (8, 6), sm_count=82, threads_per_sm=1536),
    "l4": GPU("L4 24GB", _smi(23034), (8, 9), sm_count=58, threads_per_sm=1536),
    "a10g": GPU("A10G 24GB", _smi(23028), (8, 6), sm_count=80, threads_per_sm=1536),
    "v100": GPU("V100 32GB", _smi(32768), (7, 0), sm_count=80),
    "a100-40g": GPU("A100 40GB", _smi(40960), (8, 0), sm_count=108),
    "a100-80g": GPU("A100 80GB", _smi(81920), (8, 0), sm_count=108),
    "l40s": GPU("L40S 48GB", _smi(46068), (8, 9), sm_count=142, threads_per_sm=1536),
    # measured: CUDA's total of an H100 80GB HBM3 (nvidia-smi: 81559 MiB) and of an H200
    # (nvidia-smi: 143771 MiB), torch 2.11, driver 580.159.04
    "h100": GPU("H100 80GB", 85_017_493_504, (9, 0)),
    "h200": GPU("H200 141GB", 150_109_880_320, (9, 0), context_measured=True),
}
_ALIASES = {"a100": "a100-80g", "h100-80g": "h100", "h200-141g": "h200", "rtx4090": "4090"}


# No GPU is larger: the largest known (H200, 141 GB) times 14, the largest shipping (B300,
# 288 GB) times 7. A size beyond it is a typo (``100000GiB``) or a unit mistake, not a GPU.
MAX_GPU_SIZE = 2 * 1024**4
# No GPU is smaller than what a process needs before PyTorch allocates (GPU.context).
MIN_GPU_SIZE = GPU("", 0).context


def resolve_gpu(spec: str | GPU | int) -> GPU:
    """A GPU by name (``h100``, ``a100-40g``, ``4090``) or by memory size with a unit
    (``24GiB``, ``80GB``, ``1.5e2GiB``).

    A bare number (``24``, or an ``int`` from Python) is refused rather than read as bytes: it is
    almost always ``24GiB`` or ``24GB`` with the unit left off. Anything that starts with a
    number is read as a size, never matched against the names: a negative size, an unknown unit
    (``24gigs``), and sizes below the CUDA context (:data:`MIN_GPU_SIZE`) or above
    :data:`MAX_GPU_SIZE` (2 TiB) are refused, naming the value.
    """
    if isinstance(spec, GPU):
        return spec
    if isinstance(spec, bool) or not isinstance(spec, (str, int)):
        raise InvalidInputError(
            f"gpu={spec!r} is not a GPU: give a name such as 'h100' or 'a100-40g', a memory "
            "size with a unit such as '24GiB' or '80GB', or a memfit.GPU."
        )
    if isinstance(spec, int) and spec >= 2**20:  # bytes, most likely (mem_get_info's)
        raise InvalidInputError(
            f"gpu={spec!r} is a bare number, and memfit does not guess its unit: give a size "
            f"with one, e.g. '{spec / 2**30:.6g}GiB' if {spec} is bytes, or a GPU name such as "
            "'h100'."
        )
    text = str(spec).strip()
    key = text.lower().replace("_", "-").replace(" ", "")
    key = _ALIASES.get(key, key)
    if isinstance(spec, str) and key in KNOWN_GPUS:  # '4090' is a name
        return KNOWN_GPUS[key]
    size = split_size(text)
    if size is not None:  # a number first: a size, right or wrong, never a name
        return GPU(f"{text} GPU", _gpu_size(text, size))
    close = difflib.get_close_matches(key, list(KNOWN_GPUS), n=3, cutoff=0.5)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise InvalidInputError(
        f"GPU {spec!r} is not known.{hint} Give one of {', '.join(KNOWN_GPUS)} "
        "or a memory size such as '24GiB' or '80GB'."
    )


def _gpu_size(text: str, size: SizeText) -> int:
    """The bytes of the GPU size ``text`` (its sign, number and unit as typed: ``size``), or
    the error that names what is wrong with it."""
    negative, number, unit = size
    if negative:
        bare = text.lstrip("-").strip()
        raise InvalidInputError(
            f"GPU size {text!r} is negative: a GPU's memory is a positive size. Give e.g. "
            f"'{bare if unit else bare + 'GiB'}', or a GPU name such as 'h100'."
        )
    if not unit:
        raise InvalidInputError(
            f"GPU size {text!r} has no unit, and memfit does not guess one: give "
            f"'{text}GiB' (binary) or '{text}GB' (decimal), or a GPU name such as 'h100'."
        )
    per_unit = unit_bytes(unit)
    if per_unit is None:
        digits = text[: len(text) - len(unit)].strip()
        names = [name for name in KNOWN_GPUS if name.startswith(digits)]
        hint = f" or the GPU {names[0]!r}" if names else ""
        raise InvalidInputError(
            f"GPU size {text!r} has no unit memfit knows ({unit!r}): give a size such as "
            f"'{digits}GiB' (binary) or '{digits}GB' (decimal){hint}; sizes take B, KiB, MiB, "
            "GiB, TiB or KB, MB, GB, TB."
        )
    # compared before an int is made of it, the number first (1e999999999GiB)
    if number > MAX_GPU_SIZE or number * per_unit > MAX_GPU_SIZE:
        raise InvalidInputError(
            f"GPU size {text!r} is more than 2 TiB, beyond any GPU: check the number and the "
            "unit, e.g. '24GiB' or '80GB' (a GPU's memory, not the host's)."
        )
    total = int(number * per_unit)
    if total < MIN_GPU_SIZE:
        raise InvalidInputError(
            f"GPU size {text!r} ({total} bytes) is smaller than the {MIN_GPU_SIZE // MiB} MiB a "
            "CUDA process holds before PyTorch allocates, so nothing could run on it: give the "
            "GPU's whole memory, e.g. '24GiB' or '80GB'."
        )
    return total
