"""Helpers for the stream tests."""

from __future__ import annotations

import asyncio
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(coro, timeout: float = 15.0):
    """Run a coroutine on a fresh loop, bounded in time."""
    return asyncio.run(asyncio.wait_for(coro, timeout))
