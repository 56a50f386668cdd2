"""The ``busy_poll`` option: a blocking wait polls the socket for up to that many seconds before
it sleeps. The spin (both twins of ``spin_readable``) ends as soon as the socket is readable and
never outlasts its bound; a socket with the spin on delivers what one without it does."""

from __future__ import annotations

import socket
import time

import pytest

from nbmq.errors import OptionError, WouldBlock
from nbmq.options import BUSY_POLL_MAX, SocketOptions
from nbmq.transports import socket as socket_module
from nbmq.transports.socket import Dealer, SafeDealer

from .conftest import FAST, pump

TWINS = [pytest.param(socket_module._spin_readable_py, id="python")]
if socket_module.COMPILED:
    TWINS.append(pytest.param(socket_module._compiled.spin_readable, id="compiled"))


@pytest.mark.parametrize("spin", TWINS)
def test_spin_returns_true_at_once_when_readable(spin) -> None:
    a, b = socket.socketpair()
    with a, b:
        b.send(b"x")
        start = time.monotonic()
        assert spin(a.fileno(), 5.0) is True
        assert time.monotonic() - start < 1.0  # not the 5 s bound


@pytest.mark.parametrize("spin", TWINS)
def test_spin_gives_up_after_its_bound(spin) -> None:
    a, b = socket.socketpair()
    with a, b:
        start = time.monotonic()
        assert spin(a.fileno(), 0.02) is False
        took = time.monotonic() - start
        assert 0.02 <= took < 1.0


@pytest.mark.parametrize("spin", TWINS)
def test_spin_sees_data_that_arrives_while_it_spins(spin) -> None:
    import threading

    a, b = socket.socketpair()
    with a, b:
        timer = threading.Timer(0.01, b.send, args=(b"x",))
        timer.start()
        try:
            assert spin(a.fileno(), 2.0) is True  # the sender thread ran: the spin holds no GIL
        finally:
            timer.join()


@pytest.fixture
def asked(monkeypatch) -> list[float]:
    """The bounds (seconds) every busy_poll spin of the sockets was given; no spin really runs."""
    bounds: list[float] = []

    def spy(fd: int, seconds: float) -> bool:
        bounds.append(seconds)
        return False

    monkeypatch.setattr(socket_module, "spin_readable", spy)
    return bounds


@pytest.mark.parametrize("value", [-0.001, BUSY_POLL_MAX * 2, float("inf"), float("nan"), "1", True])
def test_busy_poll_rejects_bad_values(value) -> None:
    with pytest.raises(OptionError, match="busy_poll"):
        SocketOptions(busy_poll=value)


@pytest.mark.parametrize("kind", [Dealer, SafeDealer])
@pytest.mark.parametrize("busy_poll", [0.0, 0.0005])
def test_round_trips_with_and_without_spin(kind, busy_poll) -> None:
    with kind.bind("127.0.0.1:0", busy_poll=busy_poll, **FAST) as server:
        with kind.connect(server.local_address, busy_poll=busy_poll, **FAST) as client:
            assert pump(client, server, until=lambda: client.connected and server.connected)
            for i in range(50):
                client.send(b"ping %d" % i, flush=True)
                assert bytes(server.recv(timeout=2.0)[0]) == b"ping %d" % i
                server.send(b"pong %d" % i, flush=True)
                assert bytes(client.recv(timeout=2.0)[0]) == b"pong %d" % i
            assert server.busy_poll == busy_poll
            assert client.counters.dropped_total == 0


def test_one_spin_per_send_never_past_the_wait(asked: list[float]) -> None:
    with Dealer.bind("127.0.0.1:0", busy_poll=BUSY_POLL_MAX) as server:
        with pytest.raises(WouldBlock):
            server.recv(timeout=0.002)
        assert asked == []  # a socket that only receives never spins
        server.flush()  # (what a send flushes)
        with pytest.raises(WouldBlock):
            server.recv(timeout=0.002)
        assert len(asked) == 1 and asked[0] <= 0.002
        asked.clear()
        server.busy_poll = 0.0
        server.flush()
        with pytest.raises(WouldBlock):
            server.recv(timeout=0.002)
        assert asked == []  # 0: sleeps at once


def test_a_send_waiting_for_room_never_spins(asked: list[float]) -> None:
    with Dealer.bind("127.0.0.1:0") as server:
        with SafeDealer.connect(server.local_address, busy_poll=BUSY_POLL_MAX, send_hwm=1, **FAST) as client:
            assert pump(client, server, until=lambda: client.connected and server.connected)
            server.close(linger=0)  # nobody acks now: the window stays full
            client.send(b"first", flush=True)
            with pytest.raises(WouldBlock):
                for _ in range(100):  # bounded: send_hwm=1 fills within a few sends
                    client.send(b"more", timeout=0.005)
            assert asked == []  # a throughput sender keeps its core
            with pytest.raises(WouldBlock):
                client.recv(timeout=0.002)
            assert len(asked) == 1  # a wait for a message after a send spins
