"""``send_many`` and ``recv_many``, the same on the blocking and the asyncio sockets:

- ``send_many(messages)`` queues until ``send_hwm`` and returns how many it took, pulling a
  message from the iterable only when it can queue it (a generator loses none); WouldBlock
  (NoPeer without a peer) only when it took none;
- ``recv_many(n, timeout)`` waits for the first message, adds those already read, at most
  ``n``; WouldBlock when none came; ValueError for a bad ``n``;
- ``recv_packed(n, timeout)`` is ``recv_many`` of one-part messages packed into one uint8
  buffer with int64 offsets and lengths; a multipart message stops it (ValueError when first);
- ``send_packed(data, offsets, lengths)`` is ``send_many`` of the messages packed that way:
  takes the first ones up to ``send_hwm``, checks every range before queueing any.
"""

from __future__ import annotations

import asyncio
import itertools
import time

import numpy as np
import pytest

import nbmq
from nbmq import aio
from nbmq.errors import NoPeer, WouldBlock

from .conftest import FAST

pytestmark = pytest.mark.network


def _pump(server, client, until, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < end, "timed out"
        server.tick()
        client.tick()
        time.sleep(0.001)


def test_blocking_send_many_and_recv_many():
    with (
        nbmq.Dealer.bind("127.0.0.1:0", **FAST) as server,
        nbmq.Dealer.connect(server.local_address, send_hwm=50, **FAST) as client,
    ):
        _pump(server, client, lambda: server.connected and client.connected)
        source = (b"m%d" % i for i in range(80))  # a generator: what is not taken stays in it
        assert client.send_many(source) == 50  # up to send_hwm (50 datagrams: no auto-flush yet)
        client.flush()
        got = []
        end = time.monotonic() + 5.0
        while len(got) < 50 and time.monotonic() < end:
            got += server.recv_many(16, timeout=1.0)
        assert [bytes(m[0]) for m in got] == [b"m%d" % i for i in range(50)]
        assert client.send_many(source) == 30  # the rest, none lost to the full queue
        client.flush()
        rest = []
        while len(rest) < 30 and time.monotonic() < end:
            batch = server.recv_many(7, timeout=1.0)
            assert 1 <= len(batch) <= 7
            rest += batch
        assert [bytes(m[0]) for m in rest] == [b"m%d" % i for i in range(50, 80)]
        with pytest.raises(WouldBlock):
            server.recv_many(10, timeout=0.05)
        for bad in (0, -1, 1.5, True):
            with pytest.raises(ValueError, match="max_messages"):
                server.recv_many(bad)
        assert client.send_many([]) == 0


def test_blocking_send_many_without_a_peer_says_so():
    with nbmq.Dealer.connect("127.0.0.1:9", send_hwm=2, **FAST) as lonely:  # nobody answers
        assert lonely.send_many([[b"x"]] * 5) == 2  # queued up to send_hwm, the rest left
        with pytest.raises(NoPeer):
            lonely.send_many(itertools.repeat([b"x"]), timeout=0.05)


def test_asyncio_send_many_and_recv_many():
    async def main() -> None:
        server = await aio.Dealer.bind("127.0.0.1:0", **FAST)
        client = await aio.Dealer.connect(server.local_address, send_hwm=40, **FAST)
        async with server, client:
            assert await asyncio.wait_for(client.wait_connected(), 5.0)
            source = iter([[b"a%d" % i, b"part"] for i in range(300)])  # 2 datagrams each
            got: list = []
            sent = 0
            end = time.monotonic() + 10.0
            while len(got) < 300 and time.monotonic() < end:
                if sent < 300:
                    taken = await client.send_many(source)
                    assert taken >= 1
                    sent += taken
                batch = await server.recv_many(64, timeout=2.0)
                assert 1 <= len(batch) <= 64
                got += batch
            assert [bytes(m[0]) for m in got] == [b"a%d" % i for i in range(300)]  # none lost
            assert all(bytes(m[1]) == b"part" for m in got)
            with pytest.raises(WouldBlock):
                await server.recv_many(5, timeout=0.05)
            with pytest.raises(ValueError, match="max_messages"):
                await server.recv_many(0)

    asyncio.run(asyncio.wait_for(main(), 20.0))


def test_asyncio_send_many_waits_only_while_it_can_take_none():
    async def main() -> None:
        lonely = await aio.Dealer.connect("127.0.0.1:9", send_hwm=2, **FAST)  # nobody answers
        async with lonely:
            assert await lonely.send_many([[b"x"]] * 5) == 2
            started = time.monotonic()
            with pytest.raises(NoPeer):
                await lonely.send_many(itertools.repeat([b"x"]), timeout=0.1)
            assert time.monotonic() - started >= 0.09  # it waited for room, then gave up

    asyncio.run(asyncio.wait_for(main(), 10.0))


def _unpack(packed) -> list[bytes]:
    data, offsets, lengths = packed
    assert data.dtype == np.uint8 and offsets.dtype == np.int64 and lengths.dtype == np.int64
    assert offsets.shape == lengths.shape and data.size == int(lengths.sum())
    return [bytes(data[o : o + n]) for o, n in zip(offsets.tolist(), lengths.tolist())]


@pytest.mark.parametrize("kind", ["Dealer", "SafeDealer"])
def test_blocking_recv_packed(kind):
    cls = getattr(nbmq, kind)
    with cls.bind("127.0.0.1:0", **FAST) as server, cls.connect(server.local_address, **FAST) as client:
        _pump(server, client, lambda: server.connected and client.connected)
        sent = [b"p%d" % i * (i % 7) for i in range(200)] + [b"x" * 1000]  # empty ones, a 3-chunk one
        client.send_many(sent)
        client.send([b"two", b"parts"])
        client.send(b"after")
        client.flush()
        got: list[bytes] = []
        end = time.monotonic() + 5.0
        while len(got) < len(sent) and time.monotonic() < end:
            packed = server.recv_packed(64, timeout=1.0)
            assert 1 <= packed[1].size <= 64
            got += _unpack(packed)
        assert got == sent
        with pytest.raises(ValueError, match="2 parts"):  # stays queued for recv()
            server.recv_packed(10, timeout=1.0)
        assert [bytes(p) for p in server.recv(timeout=1.0)] == [b"two", b"parts"]
        assert _unpack(server.recv_packed(10, timeout=1.0)) == [b"after"]
        with pytest.raises(WouldBlock):
            server.recv_packed(10, timeout=0.05)
        for bad in (0, -1, 1.5, True):
            with pytest.raises(ValueError, match="max_messages"):
                server.recv_packed(bad)


def test_asyncio_recv_packed():
    async def main() -> None:
        server = await aio.Dealer.bind("127.0.0.1:0", **FAST)
        client = await aio.Dealer.connect(server.local_address, **FAST)
        async with server, client:
            assert await asyncio.wait_for(client.wait_connected(), 5.0)
            sent = [b"a%d" % i for i in range(100)]
            assert await client.send_many(sent) == 100
            got: list[bytes] = []
            while len(got) < 100:
                got += _unpack(await server.recv_packed(30, timeout=2.0))
            assert got == sent
            with pytest.raises(WouldBlock):
                await server.recv_packed(5, timeout=0.05)

    asyncio.run(main())


def test_compiled_ready_queue_matches_the_deque():
    """ReadyQueue (arena messages pushed as bytes, part lists appended) against the deque of
    part lists the Python engine keeps: the same messages, in order, through popleft, pack,
    indexing and clear, across ring and arena growth and the slide to the arena's front."""
    import random
    from collections import deque

    from nbmq.engine import queues, sockets

    if queues.ReadyQueue is deque:
        pytest.skip("the compiled queue state is not loaded")
    rng = random.Random(7)
    fast, twin = queues.ReadyQueue(), deque()
    for step in range(3000):
        op = rng.random()
        if op < 0.45:
            data = rng.randbytes(rng.choice((0, 1, 100, 466, 2000)))
            fast.push(data)
            twin.append([np.frombuffer(data, np.uint8).copy()])
        elif op < 0.55:
            message = [
                np.frombuffer(rng.randbytes(rng.randrange(50)), np.uint8).copy()
                for _ in range(rng.choice((1, 1, 2, 3)))
            ]
            fast.append(message)
            twin.append(message)
        elif op < 0.75 and twin:
            _same(fast.popleft(), twin.popleft())
        elif op < 0.95:
            limit = rng.choice((1, 5, 64, 4096))
            got, want = fast.pack(limit), sockets._pack_ready(twin, limit)
            assert (got is None) == (want is None)
            for x, y in zip(got or (), want or ()):
                assert x.dtype == y.dtype and np.array_equal(x, y)
        elif op < 0.99 and twin:
            index = rng.randrange(-len(twin), len(twin))
            _same(fast[index], twin[index])
        else:
            fast.clear()
            twin.clear()
        assert len(fast) == len(twin) and bool(fast) == bool(twin)
    assert [[bytes(p) for p in m] for m in fast] == [[bytes(p) for p in m] for m in twin]
    with pytest.raises(IndexError):
        fast[len(twin)]
    fast.clear()
    with pytest.raises(IndexError):
        fast.popleft()
    assert fast.pack(5) is None


def test_compiled_ready_queue_takes_any_message_object_as_the_deque_does():
    """A message appended as a tuple of parts (a deque takes any object) comes back from
    popleft and pack unchanged, and the queue stays in order: no type check that fails after
    the message was taken."""
    from collections import deque

    from nbmq.engine import queues

    if queues.ReadyQueue is deque:
        pytest.skip("the compiled queue state is not loaded")
    ready = queues.ReadyQueue()
    ready.append((np.frombuffer(b"first", np.uint8),))
    ready.push(b"second")
    ready.append((np.frombuffer(b"third", np.uint8),))
    assert bytes(ready.popleft()[0]) == b"first"
    data, offsets, lengths = ready.pack(5)
    assert [bytes(data[o : o + n]) for o, n in zip(offsets, lengths)] == [b"second", b"third"]
    assert not ready


def test_compiled_ready_queue_shrinks_after_a_burst():
    """An arena grown by a burst shrinks once the queue empties and later use is small; one
    in steady use keeps its size."""
    import sys
    from collections import deque

    from nbmq.engine import queues

    if queues.ReadyQueue is deque:
        pytest.skip("the compiled queue state is not loaded")
    q = queues.ReadyQueue()
    small = sys.getsizeof(q)
    for _ in range(20_000):  # the arena grows past 9 MB
        q.push(b"x" * 466)
    for _ in range(150_000):  # the ring past 1 MiB
        q.push(b"z")
    burst = sys.getsizeof(q)
    assert burst > 9_000_000 + 150_000 * 8
    data, offsets, lengths = q.pack(200_000)
    assert len(q) == 0 and data.size == 20_000 * 466 + 150_000
    assert lengths.tolist() == [466] * 20_000 + [1] * 150_000
    assert sys.getsizeof(q) == burst  # (the burst's own use: kept)
    for _ in range(100):
        q.push(b"y" * 100)
    assert len(q.pack(4096)[1]) == 100
    assert small <= sys.getsizeof(q) < small + 100_000


def _same(got: list, want: list) -> None:
    assert type(got) is list and len(got) == len(want)
    for x, y in zip(got, want):
        assert x.dtype == np.uint8 and bytes(x) == bytes(y)


def _pack(messages: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lengths = np.array([len(m) for m in messages], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return np.frombuffer(b"".join(messages), dtype=np.uint8), offsets, lengths


@pytest.mark.parametrize("kind", ["Dealer", "SafeDealer"])
def test_blocking_send_packed_to_recv_packed(kind):
    cls = getattr(nbmq, kind)
    with (
        cls.bind("127.0.0.1:0", **FAST) as server,
        cls.connect(server.local_address, send_hwm=150, **FAST) as client,
    ):
        _pump(server, client, lambda: server.connected and client.connected)
        sent = [b"s%d" % i * (i % 5) for i in range(199)] + [b"y" * 1500]  # empty ones, a 4-chunk one
        data, offsets, lengths = _pack(sent)
        taken = client.send_packed(data, offsets, lengths)
        assert taken == 150  # up to send_hwm: the first ones
        got: list[bytes] = []
        end = time.monotonic() + 5.0
        while len(got) < 150 and time.monotonic() < end:
            got += _unpack(server.recv_packed(64, timeout=1.0))
        assert got == sent[:150]
        while taken < len(sent) and time.monotonic() < end:  # the rest, as a caller resumes
            taken += client.send_packed(data, offsets[taken:], lengths[taken:], timeout=1.0)
        client.flush()  # under ~64 datagrams wait for the next step or flush, as send_many's
        while len(got) < len(sent) and time.monotonic() < end:
            got += _unpack(server.recv_packed(64, timeout=1.0))
        assert got == sent
        assert client.send_packed(b"", [], []) == 0
        for bad, words in (
            (([0, 5], [3]), "differ in length"),
            (([0], [4]), "outside data"),
            (([0, 1, 99], [1, 1, 1]), "message 2 .* outside data"),  # the first two stay unqueued
            (([-1], [1]), "outside data"),
            ((["x"], [1]), "must be integers"),
            (([[0]], [[1]]), "1-D"),
        ):
            before = client.engine.counters.messages_out, client.engine.pending_messages
            with pytest.raises(ValueError, match=words):
                client.send_packed(b"abc", *bad)
            assert (client.engine.counters.messages_out, client.engine.pending_messages) == before


def test_send_packed_on_a_dish_is_not_supported():
    with nbmq.Dish.bind("127.0.0.1:0", **FAST) as dish:
        with pytest.raises(nbmq.errors.NotSupported):
            dish.send_packed(b"ab", [0], [2])


def test_asyncio_send_packed():
    async def main() -> None:
        server = await aio.SafeDealer.bind("127.0.0.1:0", **FAST)
        client = await aio.SafeDealer.connect(server.local_address, **FAST)
        async with server, client:
            assert await asyncio.wait_for(client.wait_connected(), 5.0)
            sent = [b"b%d" % i for i in range(100)]
            assert await client.send_packed(*_pack(sent)) == 100
            got: list[bytes] = []
            while len(got) < 100:
                got += _unpack(await server.recv_packed(30, timeout=2.0))
            assert got == sent

    asyncio.run(main())


def test_send_packed_queues_what_send_queues_in_both_twins():
    """The compiled ``send_packed`` and the Python one queue the messages ``send`` would, with
    the same message ids (nonces in order), and stop at the same ``send_hwm``; larger messages
    among small ones (each goes through ``send``) leave the queue's counts, the nonce and the
    engine's time as ``send`` leaves them."""
    from nbmq.engine import Dealer as DealerEngine
    from nbmq.engine import sockets
    from nbmq.options import SocketOptions

    messages = [b"z" * 900 if i % 7 == 3 else b"q%d" % i * (i % 6) for i in range(40)] + [b"z" * 900]
    data, offsets, lengths = _pack(messages)

    def queued(fill, hwm: int = 30) -> tuple:
        engine = DealerEngine.connecting(("127.0.0.1", 9), 0.0, SocketOptions(send_hwm=hwm))
        taken = fill(engine)
        sendq = engine._sendq
        ids = [m.message_id for m in sendq._queue]
        return taken, ids, sendq.held, sendq.pushed, engine._nonce, engine._now

    def one_by_one(engine) -> int:
        for i, m in enumerate(messages):
            if not engine.send_ready:
                return i
            engine.send([m], 2.5)
        return len(messages)

    for hwm in (30, 100):
        want = queued(one_by_one, hwm)
        assert want[0] == min(hwm, len(messages)) and want[4] == 1 + want[0] and want[5] == 2.5
        python = queued(lambda e: sockets.Socket.send_packed(e, data, offsets, lengths, 2.5), hwm)
        assert python == want
        assert queued(lambda e: e.send_packed(data, offsets, lengths, 2.5), hwm) == want  # compiled when built
