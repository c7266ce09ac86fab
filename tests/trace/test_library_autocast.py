"""transformers' ``maybe_autocast`` sees the traced meta device as CUDA, however late the
library is loaded."""

from __future__ import annotations

import sys
import types
from contextlib import nullcontext
from typing import Any

import pytest

from memfit.trace._library_autocast import meta_autocast_as_cuda


def _fake_transformers(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    generic = types.ModuleType("transformers.utils.generic")

    def maybe_autocast(device_type: str, enabled: bool = True) -> Any:
        return nullcontext(device_type)  # as transformers: nothing for "meta"

    generic.maybe_autocast = maybe_autocast  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "transformers.utils.generic", generic)
    return generic


def test_a_library_loaded_after_the_trace_began_is_patched_by_the_inner_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the tracer enters it for the trace and again once the model is built: a first build
    # imports transformers inside the trace (Canary's float32 positions were bf16 there)
    monkeypatch.delitem(sys.modules, "transformers.utils.generic", raising=False)
    with meta_autocast_as_cuda():
        generic = _fake_transformers(monkeypatch)  # the model's build imports it
        model_module = types.ModuleType("modeling_model")
        model_module.maybe_autocast = generic.maybe_autocast  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "modeling_model", model_module)
        with generic.maybe_autocast("meta") as seen:
            assert seen == "meta"  # not patched yet
        with meta_autocast_as_cuda(), model_module.maybe_autocast("meta", enabled=False) as seen:
            assert seen == "cuda"
        with model_module.maybe_autocast("meta") as seen:
            assert seen == "meta"  # restored
