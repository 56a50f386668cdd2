"""Fixtures for the stream tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nbmq import testing
from nbmq.testing import ServerProcess


@pytest.fixture(scope="module")
def rqueue_server() -> Iterator[ServerProcess]:
    """An rqueue server subprocess on 127.0.0.1 and an OS-chosen port; must exit 0 on SIGTERM."""
    server = testing.rqueue_server()
    yield server
    code, _, err = server.stop()
    assert code == 0, err
