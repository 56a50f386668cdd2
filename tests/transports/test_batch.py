"""Batch datagram I/O: the recvmmsg/sendmmsg extension (with GSO/GRO) and the portable
recvfrom/sendto fallback deliver the same datagrams, in order, with the same sources."""

from __future__ import annotations

import random
import socket
import sys

import pytest

from nbmq.transports import batch

pytestmark = pytest.mark.network

PATHS = [pytest.param(dict(native=False), id="portable")]
if batch._NativeBatchIO is not None:
    PATHS += [
        pytest.param(dict(native=True, gso=False, gro=False), id="mmsg"),
        pytest.param(dict(native=True), id="mmsg-gso-gro"),
    ]


def test_native_extension_built_on_linux():
    if sys.platform.startswith("linux") and batch.COMPILED is False and batch._NativeBatchIO is None:
        import os

        if os.environ.get("NBMQ_REQUIRE_EXTENSIONS", "") not in ("", "0"):
            pytest.fail("nbmq.transports._batch is not built")
        pytest.skip("nbmq.transports._batch is not built")


def _pair(family, tmp_path):
    a = socket.socket(family, socket.SOCK_DGRAM)
    b = socket.socket(family, socket.SOCK_DGRAM)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 21)
    if family == socket.AF_UNIX:
        a.bind(str(tmp_path / "a.sock"))
        b.bind(str(tmp_path / "b.sock"))
    else:
        host = "::1" if family == socket.AF_INET6 else "127.0.0.1"
        a.bind((host, 0))
        b.bind((host, 0))
    a.setblocking(False)
    b.setblocking(False)
    return a, b


def _datagrams(dest, seed=1):
    rng = random.Random(seed)
    out = []
    for i in range(300):  # runs of full 500-byte frames, short tails, empties, odd sizes
        size = rng.choice([500, 500, 500, 134, 0, 1, 466, rng.randrange(501)])
        out.append((bytes([i % 251]) * size, dest))
    return out


def _exchange(tx, rx, datagrams, start=0):
    got = []
    for _ in range(10_000):
        start = tx.send(datagrams, start)
        while True:
            n, offsets, lengths, addrs = rx.recv()
            if not n:
                break
            for off, length, addr in zip(offsets[:n].tolist(), lengths[:n].tolist(), addrs):
                got.append((bytes(rx.view[off : off + length]), addr))
        if start == len(datagrams) and len(got) >= len(datagrams):
            break
    return start, got


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6, socket.AF_UNIX], ids=["v4", "v6", "unix"])
@pytest.mark.parametrize("path", PATHS)
def test_paths_deliver_the_same_datagrams(family, path, tmp_path):
    a, b = _pair(family, tmp_path)
    with a, b:
        tx, rx = batch.batch_io(a, **path), batch.batch_io(b, **path)
        datagrams = _datagrams(b.getsockname())
        sent, got = _exchange(tx, rx, datagrams)
        assert sent == len(datagrams)
        assert [data for data, _ in got] == [data for data, _ in datagrams]
        assert {addr for _, addr in got} == {a.getsockname()}
        assert tx.send_errors == 0
        if family != socket.AF_UNIX and path["native"] and path.get("gso") is None:
            assert tx.gso_messages > 0  # the runs of 500-byte frames went out coalesced


def test_portable_and_native_agree_on_sources(tmp_path):
    if batch._NativeBatchIO is None:
        pytest.skip("nbmq.transports._batch is not built")
    a, b = _pair(socket.AF_INET, tmp_path)
    with a, b:
        datagrams = _datagrams(b.getsockname(), seed=2)
        results = []
        for native in (False, True):
            tx, rx = batch.batch_io(a, native=native), batch.batch_io(b, native=native)
            results.append(_exchange(tx, rx, datagrams)[1])
        assert results[0] == results[1]


@pytest.mark.parametrize("path", PATHS)
def test_full_peer_queue_keeps_the_rest_pending(path, tmp_path):
    """A Unix peer's queue fills (EAGAIN): send returns where it stopped; nothing is lost."""
    a, b = _pair(socket.AF_UNIX, tmp_path)
    with a, b:
        tx, rx = batch.batch_io(a, **path), batch.batch_io(b, **path)
        datagrams = [(i.to_bytes(4, "big"), b.getsockname()) for i in range(2000)]
        first = tx.send(datagrams)
        assert 0 < first < len(datagrams)  # the kernel queue took some, then said EAGAIN
        sent, got = _exchange(tx, rx, datagrams, first)  # drain, resume where it stopped
        assert sent == len(datagrams)
        assert [int.from_bytes(data, "big") for data, _ in got] == list(range(len(datagrams)))


@pytest.mark.parametrize("path", PATHS)
def test_unreachable_peer_is_counted_not_raised(path, tmp_path):
    a, b = _pair(socket.AF_UNIX, tmp_path)
    with a:
        gone = b.getsockname()
        b.close()
        tx = batch.batch_io(a, **path)
        assert tx.send([(b"x", gone), (b"y", gone)]) == 2
        assert tx.send_errors == 2 and isinstance(tx.last_send_error, OSError)


@pytest.mark.parametrize("path", PATHS)
def test_oversize_datagram_is_cut_not_fatal(path, tmp_path):
    a, b = _pair(socket.AF_INET, tmp_path)
    with a, b:
        tx, rx = batch.batch_io(a, **path), batch.batch_io(b, **path)
        sent, got = _exchange(tx, rx, [(b"z" * 3000, b.getsockname()), (b"ok", b.getsockname())])
        assert sent == 2 and len(got) == 2
        assert len(got[0][0]) > 500 and got[1][0] == b"ok"  # the codec rejects the first
