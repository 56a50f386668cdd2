"""Live options: the blocking and the asyncio socket apply
a changed option through one function (``engine_binding.apply_link_option``), so their links end up
alike: GSO, pacing, socket buffers, and GRO turned off when ``recv_hwm`` drops below 64."""

from __future__ import annotations

import asyncio
import socket

import pytest

from nbmq.transports import Dealer, aio, batch


def _change(sock) -> tuple:
    sock.options.gso = False
    sock.options.pace_rate = 300_000
    sock.options.rcvbuf = 256 * 1024
    sock.options.recv_hwm = 32  # a GRO read may hold 64 datagrams: GRO goes off
    link = sock._link
    pacer = link.pacer
    rcvbuf = link.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    return (
        bool(link.io.gso),
        None if pacer is None else pacer.rate,
        bool(link.io.gro),
        rcvbuf,
        sock.engine._recvq.recv_hwm,
    )


@pytest.mark.network
def test_blocking_and_asyncio_sockets_apply_changed_options_alike():
    blocking = Dealer.bind("127.0.0.1:0", gro=True, gso=True)
    try:
        got_blocking = _change(blocking)
    finally:
        blocking.close(linger=0)

    async def main() -> tuple:
        sock = await aio.Dealer.bind("127.0.0.1:0", gro=True, gso=True)
        try:
            return _change(sock)
        finally:
            await sock.close(linger=0)

    got_aio = asyncio.run(main())
    assert got_blocking == got_aio
    gso, rate, gro, rcvbuf, recv_hwm = got_aio
    assert gso is False and rate == 300_000 and gro is False and recv_hwm == 32
    assert rcvbuf >= 256 * 1024 or not batch.COMPILED  # (Linux reports twice what was asked)


@pytest.mark.network
def test_an_option_is_validated_once_on_the_engines_copy(monkeypatch):
    """``sock.send_hwm = 10`` is checked once, by the engine's own options (the socket keeps no
    second copy), and a bad value changes nothing."""
    from nbmq import options
    from nbmq.errors import OptionError

    sock = Dealer.bind("127.0.0.1:0")
    try:
        calls = []
        check = options._check
        monkeypatch.setattr(options, "_check", lambda name, raw: calls.append(name) or check(name, raw))
        sock.send_hwm = 10
        assert calls == ["send_hwm"]
        assert sock.options.send_hwm == sock.engine.option("send_hwm") == sock.engine._sendq.send_hwm == 10
        with pytest.raises(OptionError, match="send_hwm"):
            sock.send_hwm = 0
        assert sock.engine.option("send_hwm") == 10
    finally:
        sock.close(linger=0)
