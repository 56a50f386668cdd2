"""The Rust reference's empty parts.

The reference (nbmq 0.2.0) emits no frame for an empty part, so its messages with an empty part
arrive as frames of the other parts only: they complete here once the received parts add up to
``message_size``. The other way round, ``reference_compat=True`` refuses to send what the
reference would lose.
"""

from __future__ import annotations

import random

import pytest

from nbmq import codec
from nbmq.engine import Dealer, Dish, Radio, SafeDealer
from nbmq.errors import InteropError
from nbmq.events import MessageDropped
from nbmq.options import SocketOptions
from nbmq.testing import connected_pair

C = ("10.0.0.2", 40000)


def reference_frames(parts: list[bytes], session_id: int, message_id: int) -> list[bytes]:
    """The frames the reference sends: ours minus the zero-length chunk of each empty part."""
    frames = codec.shard_message_bytes(parts, session_id, message_id)
    return [f for f in frames if not (codec.parse_frame(f).part_size == 0)]


@pytest.mark.parametrize("cls", [Dealer, SafeDealer])
@pytest.mark.parametrize(
    "parts",
    [
        [b"abc", b"", b"xyz"],
        [b"", b"only"],
        [b"x" * 1000, b"", b"", b"y" * 500, b""],
    ],
)
def test_reference_message_with_empty_parts_completes(cls, parts):
    net, server, client = connected_pair(cls(rng=random.Random(1)), cls())
    sid = next(iter(server.engine.peers))
    frames = reference_frames(parts, sid, 77)
    assert len(frames) < len(codec.shard_message_bytes(parts, sid, 77))
    for i in (1, 0):  # out of order too
        for f in frames[i::2]:
            server.engine.receive_datagram(f, C, net.now)
    net.flush(server)
    assert server.recv_all() == [parts]
    if cls is SafeDealer:
        assert server.engine.counters.acks_out == len(frames)
    net.step(25.0)  # past uncompleted_message_ttl: nothing was left behind to expire
    assert server.engine.incomplete_messages == 0
    assert not server.events_of(MessageDropped)


def test_our_empty_parts_leave_no_ghost_message():
    # Our senders do emit a zero-length chunk per empty part; arriving after its message
    # completed (here: reordered), it must not start a message that could only expire.
    net, server, client = connected_pair(Dealer(rng=random.Random(1)), Dealer())
    sid = next(iter(server.engine.peers))
    frames = codec.shard_message_bytes([b"a", b"", b"b"], sid, 5)
    for f in (frames[0], frames[2], frames[1]):
        server.engine.receive_datagram(f, C, net.now)
    net.flush(server)
    assert server.recv_all() == [[b"a", b"", b"b"]]
    assert server.engine.incomplete_messages == 0
    net.step(25.0)
    assert not server.events_of(MessageDropped)


@pytest.mark.parametrize("cls", [Dealer, SafeDealer, Radio])
def test_reference_compat_refuses_empty_parts(cls):
    net, server, client = connected_pair(
        Dish() if cls is Radio else cls(rng=random.Random(1)), cls(SocketOptions(reference_compat=True))
    )
    engine = client.engine
    for parts in ([b""], [b"a", b""], [b"", b"b"]):
        with pytest.raises(InteropError, match="empty"):
            engine.send(parts, net.now)
    assert engine.pending_messages == 0 and engine.counters.messages_out == 0
    net.send(client, [b"fine", b"too"])
    net.step(0.5)
    assert server.recv_all() == [[b"fine", b"too"]]
    # without the option the same messages go (and arrive here, where empty parts are carried)
    engine.set_option("reference_compat", False)
    net.send(client, [b"a", b""])
    net.step(0.5)
    assert server.recv_all() == [[b"a", b""]]
