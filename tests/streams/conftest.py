"""Fixtures for the stream tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from streamutil import ServerProcess


@pytest.fixture(scope="module")
def rqueue_server() -> Iterator[ServerProcess]:
    """An rqueue server subprocess on 127.0.0.1 and an OS-chosen port; must exit 0 on SIGTERM."""
    server = ServerProcess()
    yield server
    code, err = server.stop()
    assert code == 0, err
