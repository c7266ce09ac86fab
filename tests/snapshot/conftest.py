"""Fixtures for the snapshot tests (data and helpers live in ``snapshot_data``)."""

from __future__ import annotations

from snapshot_data import write_snapshot  # noqa: F401 (a fixture)
