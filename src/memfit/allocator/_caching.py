"""The public emulator of PyTorch's CUDA caching allocator: :class:`CachingAllocator`.

One device, one allocator, driven by named allocations: ``malloc(block, size, stream)`` and
``free(block)`` where ``block`` is any int naming the allocation while it is live (a storage id,
or the address in a real trace). Sizes are bytes as requested by the caller; the allocator
rounds, pools, splits, caches and merges exactly as c10/cuda/CUDACachingAllocator.cpp does in
torch 2.11-2.14, and reports the same statistics.
"""

from __future__ import annotations

from memfit._errors import InvalidInputError
from memfit.allocator._address import AddressSpace
from memfit.allocator._blocks import Block
from memfit.allocator._config import AllocatorConfig
from memfit.allocator._release import release_cached_blocks
from memfit.allocator._snapshot import SegmentEvent, SegmentInfo
from memfit.allocator._state import AllocatorState

__all__ = ["CachingAllocator", "as_config"]


def as_config(config: AllocatorConfig | str | None) -> AllocatorConfig:
    """Accept a config, a ``PYTORCH_CUDA_ALLOC_CONF`` string, or None for torch's defaults."""
    if config is None:
        return AllocatorConfig()
    if isinstance(config, str):
        return AllocatorConfig.parse(config)
    if isinstance(config, AllocatorConfig):
        return config
    raise InvalidInputError(
        f"config {config!r} is not an AllocatorConfig or a PYTORCH_CUDA_ALLOC_CONF string."
    )


class CachingAllocator:
    """An emulated CUDA caching allocator for one device.

    ``capacity`` is how many bytes the process may reserve (GPU memory minus what the CUDA
    context and other processes hold); a segment that would pass it fails like ``cudaMalloc``
    does, which starts torch's free-and-retry path and, failing that, raises
    :class:`~memfit.allocator.AllocatorOOM`. ``None`` means unlimited. ``device_total`` is the
    GPU's total memory, needed only for ``per_process_memory_fraction`` (defaults to
    ``capacity``). ``address_space`` decides where new segments land (see
    :class:`~memfit.allocator.TopDownAddressSpace`, the default).
    """

    def __init__(
        self,
        config: AllocatorConfig | str | None = None,
        capacity: int | None = None,
        *,
        device_total: int | None = None,
        address_space: AddressSpace | None = None,
    ) -> None:
        self._st = AllocatorState(as_config(config), capacity, device_total, address_space)
        self._live: dict[int, Block | None] = {}  # None: a zero-byte allocation (no block)
        self._calls = 0

    # -- operations -----------------------------------------------------------------------

    def malloc(self, block: int, size: int, stream: int = 0) -> int:
        """Allocate ``size`` bytes under the name ``block``; returns the block's address.

        A zero-byte request gets no memory (address 0), as in torch.
        """
        if block in self._live:
            raise InvalidInputError(f"block {block} is already allocated; free it first.")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InvalidInputError(f"size {size!r} is not a byte count >= 0.")
        if isinstance(stream, bool) or not isinstance(stream, int) or stream < 0:
            raise InvalidInputError(f"stream {stream!r} is not a stream number >= 0.")
        self._st.op = self._calls
        self._calls += 1
        if size == 0:
            self._live[block] = None
            return 0
        found = self._st.malloc(size, stream)
        self._live[block] = found
        return found.addr

    def free(self, block: int) -> None:
        """Free the allocation named ``block``; its memory stays cached for reuse."""
        if block not in self._live:
            raise InvalidInputError(f"block {block} is not allocated, so it cannot be freed.")
        self._st.op = self._calls
        self._calls += 1
        found = self._live.pop(block)
        if found is not None:
            self._st.free(found)

    def empty_cache(self) -> None:
        """Release every whole free segment (and unmap free expandable pages) to CUDA."""
        self._st.op = self._calls
        self._calls += 1
        release_cached_blocks(self._st)

    def reset_peak_stats(self) -> None:
        """Start the peaks again from the current values (``reset_peak_memory_stats``)."""
        self._st.reset_peaks()

    # -- statistics -----------------------------------------------------------------------

    @property
    def config(self) -> AllocatorConfig:
        return self._st.config

    @property
    def capacity(self) -> int | None:
        return self._st.capacity

    @property
    def allocated(self) -> int:
        """Bytes of handed-out blocks (``allocated_bytes.all.current``)."""
        return self._st.allocated

    @property
    def active(self) -> int:
        """Bytes of active blocks (``active_bytes.all.current``).

        Equals :attr:`allocated`: without cross-stream ``record_stream`` a freed block is
        inactive at once.
        """
        return self._st.allocated

    @property
    def requested(self) -> int:
        """Bytes the callers asked for, before rounding (``requested_bytes.all.current``)."""
        return self._st.requested

    @property
    def reserved(self) -> int:
        """Bytes held from CUDA: segments plus mapped pages (``reserved_bytes.all.current``)."""
        return self._st.reserved

    @property
    def peak_allocated(self) -> int:
        return self._st.peak_allocated

    @property
    def peak_reserved(self) -> int:
        return self._st.peak_reserved

    @property
    def num_alloc_retries(self) -> int:
        """Times every cached segment was freed to retry a failed allocation."""
        return self._st.num_alloc_retries

    @property
    def num_ooms(self) -> int:
        return self._st.num_ooms

    @property
    def num_device_alloc(self) -> int:
        """cudaMalloc and page-map calls (``num_device_alloc``)."""
        return self._st.num_device_alloc

    @property
    def num_device_free(self) -> int:
        """cudaFree and page-unmap calls (``num_device_free``)."""
        return self._st.num_device_free

    @property
    def segment_events(self) -> list[SegmentEvent]:
        """Every segment alloc/free/map/unmap so far, in order."""
        return list(self._st.events)

    def largest_free_block(self) -> int:
        """Size of the largest cached free block, 0 if none."""
        return self._st.largest_free_block()

    def address_of(self, block: int) -> int:
        """The address of a live allocation (0 for a zero-byte one)."""
        if block not in self._live:
            raise InvalidInputError(f"block {block} is not allocated.")
        found = self._live[block]
        return 0 if found is None else found.addr

    def segments(self) -> list[SegmentInfo]:
        """A snapshot of all segments and their blocks, by address (``_snapshot()['segments']``)."""
        return self._st.segments(self._live.values())
