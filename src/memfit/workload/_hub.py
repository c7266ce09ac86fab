"""Whether the Hugging Face hub can be reached, told in about a second.

Without a network, ``AutoConfig.from_pretrained`` retries for half a minute before failing;
memfit asks first and then reads the local cache only (``local_files_only``), so an offline
``hf:org/name`` fails at once with what to give instead.
"""

from __future__ import annotations

import os
import socket
import threading
from urllib.parse import urlparse

__all__ = ["hub_offline"]

_TRUE = ("1", "true", "yes", "on")
_TIMEOUT = 1.0  # seconds to connect to the hub, name lookup included


def hub_offline() -> str | None:
    """Why the hub cannot be reached (``None``: it can): offline mode set in the environment,
    or no connection to the hub's host within a second."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in _TRUE:
            return f"{var} is set"
    host = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname
    if not host:
        return None
    return None if _connects(host, 443) else f"{host} cannot be reached"


def _connects(host: str, port: int) -> bool:
    """Whether a TCP connection opens within the timeout (the name lookup is bounded too: it
    runs in a thread that is not waited for past the timeout)."""
    result: list[bool] = []

    def attempt() -> None:
        try:
            with socket.create_connection((host, port), timeout=_TIMEOUT):
                result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(_TIMEOUT + 0.5)
    return bool(result and result[0])
