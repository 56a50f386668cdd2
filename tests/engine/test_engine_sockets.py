"""The messaging layer: the reference's own scenarios on the simulator, plus our additions."""

from __future__ import annotations

import random

import numpy as np
import pytest

from nbmq import codec
from nbmq.engine import Dealer, Dish, Radio, SafeDealer
from nbmq.errors import NotSupported, WouldBlock
from nbmq.events import DropReason, MessageDropped
from nbmq.options import SocketOptions
from nbmq.testing import Link, Network, connected_pair

S = ("10.0.0.1", 8000)


def clients(net, cls, n, server_addr=S, opts=None):
    nodes = []
    for i in range(n):
        node = net.add(cls(opts), ("10.0.1.%d" % i, 40000 + i), f"client{i}")
        net.connect(node, server_addr)
        nodes.append(node)
    return nodes


def test_basic_send():
    net, server, client = connected_pair(Dealer(rng=random.Random(1)), Dealer())
    net.send(client, [b"hello", b"world"])
    assert net.run_until(lambda: server.engine.recv_ready(), 1.0)
    assert server.recv_all() == [[b"hello", b"world"]]
    with pytest.raises(WouldBlock):
        server.engine.recv()


def test_ping_pong():
    net, server, client = connected_pair(Dealer(rng=random.Random(1)), Dealer())
    for i in range(20):
        net.send(client, [b"ping", str(i).encode()])
        assert net.run_until(lambda: server.engine.recv_ready(), 1.0)
        [[ping, n]] = server.recv_all()
        net.send(server, [b"pong", n])
        assert net.run_until(lambda: client.engine.recv_ready(), 1.0)
        assert client.recv_all() == [[b"pong", str(i).encode()]]


def test_round_robin_across_three_clients():
    net = Network()
    server = net.add(Dealer.bound(S, rng=random.Random(1)), S, "server")
    nodes = clients(net, Dealer, 3)
    assert net.run_until(lambda: len(server.engine.connected_peers) == 3, 1.0)
    for i in range(30):
        server.engine.send([b"job %d" % i], net.now)
    net.step(0.1)
    got = [[m[0] for m in node.recv_all()] for node in nodes]
    assert [len(g) for g in got] == [10, 10, 10]
    # strictly in turn: message i goes to peer i % 3 (in connection order)
    order = [p.addr for p in server.engine.connected_peers]
    for i in range(30):
        owner = next(n for n in nodes if n.addr == order[i % 3])
        assert b"job %d" % i in [m for m in got[nodes.index(owner)]]
    # and clients' messages all reach the one server, fair-queued in arrival order
    for node in nodes:
        for i in range(5):
            node.engine.send([node.name.encode(), bytes([i])], net.now)
        net.flush(node)
    net.step(0.1)
    assert len(server.recv_all()) == 15


def test_messages_sent_before_any_peer_wait_in_the_queue():
    net = Network()
    server = net.add(Dealer.bound(S, rng=random.Random(1)), S)
    client = net.add(Dealer(), ("10.0.0.2", 4000))
    for i in range(5):
        client.engine.send([b"early %d" % i], net.now)
    assert client.engine.pending_messages == 5
    net.step(1.0)
    assert server.recv_all() == []
    net.connect(client, S)
    assert net.run_until(lambda: server.engine.recv_ready() == 5, 1.0)
    assert server.recv_all() == [[b"early %d" % i] for i in range(5)]
    assert client.engine.pending_messages == 0


def test_radio_to_two_dishes():
    """Every dish gets every message; each copy has its own message id (one nonce per copy)."""
    net = Network()
    radio = net.add(Radio.bound(S, rng=random.Random(1)), S, "radio")
    dishes = clients(net, Dish, 2)
    assert net.run_until(lambda: len(radio.engine.connected_peers) == 2, 1.0)
    for i in range(10):
        net.send(radio, [b"news", bytes([i]) * (i * 100)])
    net.step(0.1)
    for dish in dishes:
        assert dish.recv_all() == [[b"news", bytes([i]) * (i * 100)] for i in range(10)]
    assert radio.engine.counters.messages_out == 10
    assert radio.engine.counters.data_frames_out == 2 * sum(codec.frame_count([4, i * 100]) for i in range(10))
    radio.engine.send([b"id"], net.now)
    out = radio.engine.datagrams_to_send(net.now)
    assert len({codec.parse_frame(d).message_id for d, _ in out}) == 2
    assert {codec.parse_frame(d).message_id for d, _ in out} == {
        codec.message_id([], 20),
        codec.message_id([], 21),
    }
    with pytest.raises(NotSupported):
        radio.engine.recv()
    with pytest.raises(NotSupported):
        dishes[0].engine.send([b"x"], net.now)


def test_radio_without_peers_drops_and_counts():
    radio = Radio.bound(S)
    radio.send([b"into the void"], 0.0)
    assert radio.counters.dropped[DropReason.NO_PEER] == 1
    assert radio.pending_messages == 0 and radio.datagrams_to_send(0.0) == []
    with pytest.raises(TypeError):
        radio.send(b"not a list of parts", 0.0)


def test_data_to_radio_is_counted_and_dropped():
    net = Network()
    radio = net.add(Radio.bound(S, rng=random.Random(1)), S)
    dealer = net.add(Dealer(), ("10.0.0.2", 1))
    net.connect(dealer, S)
    assert net.run_until(lambda: dealer.connected, 1.0)
    net.send(dealer, [b"hi radio"])
    net.step(0.1)
    assert radio.engine.counters.unexpected == 1


def test_send_hwm():
    opts = SocketOptions(send_hwm=3)
    engine = Dealer(opts)
    for i in range(3):
        engine.send([b"x"], 0.0)
    with pytest.raises(WouldBlock):
        engine.send([b"x"], 0.0)
    assert engine.counters.messages_out == 3
    # connected and flushed, the queue empties and sends work again
    net, server, client = connected_pair(Dealer(rng=random.Random(1)), Dealer(opts))
    for i in range(3):
        client.engine.send([b"y"], net.now)
    with pytest.raises(WouldBlock):
        client.engine.send([b"y"], net.now)
    net.flush(client)
    client.engine.send([b"y"], net.now)


def test_recv_hwm_drops_and_reports():
    opts = SocketOptions(recv_hwm=2)
    net, server, client = connected_pair(Dealer(opts, random.Random(1)), Dealer())
    for i in range(5):
        client.engine.send([b"m%d" % i], net.now)
    net.flush(client)
    net.step(0.1)
    assert server.recv_all() == [[b"m0"], [b"m1"]]
    drops = server.events_of(MessageDropped)
    assert [d.reason for d in drops] == [DropReason.RECV_HWM] * 3
    assert server.engine.counters.dropped[DropReason.RECV_HWM] == 3


def test_max_tick_send_caps_each_flush():
    opts = SocketOptions(max_tick_send=10)
    net, server, client = connected_pair(Dealer(rng=random.Random(1)), Dealer(opts))
    client.engine.send([bytes(466 * 25)], net.now)
    assert len(client.engine.datagrams_to_send(net.now)) == 10
    assert client.engine.next_deadline() == net.now  # more to flush: "now"
    assert len(client.engine.datagrams_to_send(net.now)) == 10
    assert len(client.engine.datagrams_to_send(net.now)) == 5
    assert client.engine.next_deadline() > net.now


def test_safe_dealer_basic_and_acks():
    net, server, client = connected_pair(SafeDealer(rng=random.Random(1)), SafeDealer())
    msgs = [[bytes([i]) * (i * 50), b"tail"] for i in range(20)]
    for m in msgs:
        net.send(client, m)
    assert net.run_until(lambda: server.engine.recv_ready() == 20, 2.0)
    assert server.recv_all() == msgs
    assert net.run_until(lambda: client.engine.pending_messages == 0, 1.0)
    c = client.engine.counters
    assert c.resends == 0 and c.acks_in == c.data_frames_out
    assert server.engine.counters.acks_out == c.data_frames_out


def test_safe_dealer_backpressure_when_receiver_full():
    """A full SafeDealer receiver refuses (does not ack) new frames; the sender resends them
    and nothing is lost once the application drains."""
    opts = SocketOptions(recv_hwm=2, safe_resend_limit=50)
    net, server, client = connected_pair(SafeDealer(opts, random.Random(1)), SafeDealer(opts))
    for i in range(6):
        net.send(client, [b"m%d" % i])
    net.step(0.5)
    assert server.engine.recv_ready() == 2
    assert server.engine.counters.refused_frames > 0
    got = []
    assert net.run_until(lambda: got.extend(server.recv_all()) or len(got) == 6, 5.0)
    # every one once; the order of resent messages is not promised (a timeout resends the
    # oldest frame first and backs the timer off for the rest: RFC 6298 5.5)
    assert sorted(got) == [[b"m%d" % i] for i in range(6)]
    assert server.engine.counters.dropped_total == 0


def test_safe_dealer_resend_limit_drops_with_event():
    opts = SocketOptions(safe_resend_limit=2, safe_resend_ivl=0.2, peer_keepalive=100.0)
    net, server, client = connected_pair(SafeDealer(opts, random.Random(1)), SafeDealer(opts))
    net.set_link(client.addr, S, Link(loss=1.0))
    net.send(client, [b"lost"])
    net.step(1.0)
    assert client.engine.counters.resends == 2
    [drop] = client.events_of(MessageDropped)
    assert drop.reason is DropReason.RESEND_LIMIT
    assert drop.message_id == codec.message_id([], 0)
    assert client.engine.pending_messages == 0


def test_empty_parts_and_empty_message_are_carried():
    net, server, client = connected_pair(Dealer(rng=random.Random(1)), Dealer())
    for m in ([b""], [b"", b"x", b""], [b"a" * 1000, b""]):
        net.send(client, m)
    net.step(0.1)
    assert server.recv_all() == [[b""], [b"", b"x", b""], [b"a" * 1000, b""]]


def test_send_accepts_any_buffer_and_copies_it():
    net, server, client = connected_pair(Dealer(rng=random.Random(1)), Dealer())
    buf = bytearray(b"abc" * 300)
    arr = np.arange(600, dtype=np.uint8)
    client.engine.send([buf, memoryview(b"mv"), arr], net.now)
    buf[:] = bytes(len(buf))  # reusing the buffer after send must not change the message
    arr[:] = 0
    net.flush(client)
    net.step(0.1)
    [[a, b, c]] = server.recv_all()
    assert a == b"abc" * 300 and b == b"mv" and c == bytes(np.arange(600, dtype=np.uint8))


def test_send_argument_errors():
    engine = Dealer()
    with pytest.raises(TypeError):
        engine.send(b"one buffer", 0.0)
    with pytest.raises(ValueError):
        engine.send([], 0.0)
    with pytest.raises(ValueError):
        engine.send([b"x"] * 256, 0.0)
    assert engine.pending_messages == 0


@pytest.mark.parametrize("reference_compat", [False, True])
def test_nonces_follow_the_reference(reference_compat):
    """Dealer counts from 1, SafeDealer from 0: the first message's id, over the nonce alone, or
    with reference_compat over the message's bytes then the nonce, as the reference's."""
    for cls, nonce in ((Dealer, 1), (SafeDealer, 0)):
        opts = SocketOptions(reference_compat=reference_compat)
        net, server, client = connected_pair(cls(opts, random.Random(1)), cls(opts))
        client.engine.send([b"x"], net.now)
        client.engine.send([b"x"], net.now)
        frames = [codec.parse_frame(frame) for frame, _ in client.engine.datagrams_to_send(net.now)]
        hashed = [b"x"] if reference_compat else []
        assert [f.message_id for f in frames] == [codec.message_id(hashed, nonce), codec.message_id(hashed, nonce + 1)]


def test_safe_dealer_dedup_window_acks_repeats_then_expires():
    """Repeats of a delivered message are acked and dropped within the window, which is
    max(safe_hash_dedup_ttl, safe_resend_ivl * (safe_resend_limit + 1)) = 2.2 s here (a repeat
    in its first half does not renew it), and delivered again after it (the reference's window
    never expires)."""
    from engine_helpers import kind_of, pump

    C = ("10.0.0.2", 4000)
    server = SafeDealer.bound(S, rng=random.Random(1))
    client = SafeDealer.connecting(S, 0.0)
    pump(client, C, server, S, 0.0)
    client.send([b"once" * 200], 0.0)
    frames = [bytes(d) for d, _ in client.datagrams_to_send(0.0)]
    for t, delivered in ((0.0, 1), (0.9, 0), (2.3, 1)):
        for f in frames:
            server.receive_datagram(f, C, t)
        acks = [d for d, _ in server.datagrams_to_send(t) if kind_of(d) == 5]
        assert len(acks) == len(frames)  # every data frame is acked, repeats too
        got = []
        while server.recv_ready():
            got.append(server.recv())
        assert len(got) == delivered, t
        server.tick(t)
    assert server.counters.duplicate_frames == len(frames)
