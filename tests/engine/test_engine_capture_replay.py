"""Replay the reference's captured traffic into our engines.

Each test plays one peer of a capture: it feeds the engine what the reference sent that peer
(the handshake reply, then every datagram in capture order, on the capture's clock) and checks
that the engine yields exactly the messages the manifest says that peer received (sha256 per
part), and that what the engine sends for the same inputs is the reference's bytes: the same
Connect / Connected / Heartbeat frames, the same acks (SafeDealer), the same data frames for the
same messages (same nonces, so the same message ids) and, with the reference's xorshift rng, the
same session ids.
"""

from __future__ import annotations

import pytest
from engine_helpers import (
    CAPTURES,
    XorShift,
    is_data,
    kind_of,
    parse_addr,
    part_digests,
    pattern_parts,
    udp_datagrams,
)

from nbmq import FrameKind, codec
from nbmq.engine import Dealer, Dish, Radio, SafeDealer
from nbmq.errors import WouldBlock
from nbmq.events import PeerConnected
from nbmq.options import SocketOptions


def _capture(manifest: dict, name: str) -> dict:
    return next(c for c in manifest["captures"] if c["file"] == name)


def _peer(capture: dict, name: str) -> dict:
    return next(p for p in capture["peers"] if p["name"] == name)


def _replay_into_client(engine, capture_file, server_addr, client_addr, opts_check=True):
    """Connect ``engine`` to the capture's server and feed it every datagram the server sent
    to ``client_addr``, on the capture's clock. Returns (received messages, what the engine
    sent, the datagrams fed)."""
    datagrams = list(udp_datagrams(CAPTURES / capture_file))
    t0 = next(ts for ts, src, dst, d in datagrams if src == client_addr and kind_of(d) == 1)
    engine.connect(server_addr, 0.0)
    sent = list(engine.datagrams_to_send(0.0))
    received = []
    fed = []
    for ts, src, dst, data in datagrams:
        if src != server_addr or dst != client_addr:
            continue
        now = max(0.0, ts - t0)
        for _ in range(1000):  # tick at every deadline before this datagram (bounded)
            deadline = engine.next_deadline()
            if deadline is None or deadline > now:
                break
            engine.tick(deadline)
            sent.extend(engine.datagrams_to_send(deadline))
        else:
            raise AssertionError("engine deadline never advanced")
        buf = bytearray(data)
        engine.receive_datagram(memoryview(buf), server_addr, now)
        buf[:] = b"\xee" * len(buf)  # the transport reuses its buffer: the engine must have copied
        fed.append(data)
        sent.extend(engine.datagrams_to_send(now))
        while True:
            try:
                received.append(engine.recv())
            except WouldBlock:
                break
    return received, sent, fed


@pytest.mark.parametrize("client", ["client0", "client1", "client2"])
def test_dealer_client_receives_exactly_the_manifest(manifest, client):
    cap = _capture(manifest, "dealer.pcap")
    server_addr = parse_addr(_peer(cap, "server")["addr"])
    me = _peer(cap, client)
    client_addr = parse_addr(me["addr"])
    engine = Dealer()
    received, sent, fed = _replay_into_client(engine, "dealer.pcap", server_addr, client_addr)

    expected = [m for m in cap["messages_sent"]["server"] if m["to"] == client]
    assert len(expected) == cap["app_received_counts"][client]
    assert [part_digests(parts) for parts in received] == [m["part_sha256"] for m in expected]
    assert [[len(p) for p in parts] for parts in received] == [m["part_sizes"] for m in expected]
    # parts are owned uint8 numpy arrays
    assert all(p.dtype.name == "uint8" and p.flags.owndata for parts in received for p in parts)

    # the handshake: Connect (session 0), then Heartbeat(session) right after Connected
    session = me["session_ids"][0]
    assert bytes(sent[0][0]) == codec.encode_control_frame(FrameKind.CONNECT, 0)
    assert bytes(sent[1][0]) == codec.encode_control_frame(FrameKind.HEARTBEAT, session)
    assert list(engine.peers) == [session]
    counters = engine.counters
    assert counters.malformed == 0 and counters.unknown_session == 0
    assert counters.messages_in == len(expected)
    assert counters.data_frames_in == sum(1 for d in fed if is_data(d))


def test_dealer_client_sends_the_reference_frames(manifest):
    """Our Dealer, given client0's messages, emits the capture's client0 data frames byte for
    byte (nonces from 1, the same sharding, the adopted session)."""
    cap = _capture(manifest, "dealer.pcap")
    server_addr = parse_addr(_peer(cap, "server")["addr"])
    me = _peer(cap, "client0")
    client_addr = parse_addr(me["addr"])
    datagrams = list(udp_datagrams(CAPTURES / "dealer.pcap"))
    wire = [d for _, src, dst, d in datagrams if src == client_addr and is_data(d)]
    connected = next(d for _, src, dst, d in datagrams if dst == client_addr and kind_of(d) == 2)

    engine = Dealer(SocketOptions(send_hwm=1000, reference_compat=True))
    engine.connect(server_addr, 0.0)
    assert [bytes(d) for d, _ in engine.datagrams_to_send(0.0)] == [
        next(d for _, src, dst, d in datagrams if src == client_addr and kind_of(d) == 1)
    ]
    engine.receive_datagram(connected, server_addr, 0.0)
    out = engine.datagrams_to_send(0.0)
    first_heartbeat = next(d for _, src, dst, d in datagrams if src == client_addr and kind_of(d) == 4)
    assert [bytes(d) for d, _ in out] == [first_heartbeat]
    for m in cap["messages_sent"]["client0"]:
        engine.send(pattern_parts(0, m["seq"], m["part_sizes"]), 0.0)
    ours = []
    for _ in range(100):
        batch = engine.datagrams_to_send(0.0)
        if not batch:
            break
        assert all(addr == server_addr for _, addr in batch)
        ours.extend(bytes(d) for d, _ in batch if is_data(d))
    assert len(ours) == len(wire)
    assert ours == wire


def test_safe_dealer_client_receives_and_acks_like_the_reference(manifest):
    cap = _capture(manifest, "safe_dealer.pcap")
    server_addr = parse_addr(_peer(cap, "server")["addr"])
    me = _peer(cap, "client0")
    client_addr = parse_addr(me["addr"])
    # a long resend interval: the replay feeds the server's acks on the capture's clock but
    # the engine sends nothing of its own here, so there is nothing to resend anyway
    engine = SafeDealer()
    received, sent, fed = _replay_into_client(engine, "safe_dealer.pcap", server_addr, client_addr)

    expected = [m for m in cap["messages_sent"]["server"] if m["to"] == "client0"]
    assert [part_digests(parts) for parts in received] == [m["part_sha256"] for m in expected]
    # one ack per data frame fed, equal to the reference client's acks, in the same order
    datagrams = list(udp_datagrams(CAPTURES / "safe_dealer.pcap"))
    reference_acks = [d for _, src, dst, d in datagrams if src == client_addr and kind_of(d) == 5]
    our_acks = [bytes(d) for d, _ in sent if kind_of(d) == 5]
    assert len(our_acks) == sum(1 for d in fed if is_data(d))
    assert our_acks == reference_acks
    # the server's acks of the reference client's frames name frames we never sent: counted
    assert engine.counters.acks_unknown == sum(1 for d in fed if kind_of(d) == 5)


def test_safe_dealer_client_frames_and_the_reference_acks_match(manifest):
    """Our SafeDealer sends client0's messages as the capture's frames (nonces from 0), and the
    reference server's acks of those frames ack every one of ours: nothing left in flight."""
    cap = _capture(manifest, "safe_dealer.pcap")
    server_addr = parse_addr(_peer(cap, "server")["addr"])
    client_addr = parse_addr(_peer(cap, "client0")["addr"])
    datagrams = list(udp_datagrams(CAPTURES / "safe_dealer.pcap"))
    wire = [d for _, src, dst, d in datagrams if src == client_addr and is_data(d)]
    server_acks = [d for _, src, dst, d in datagrams if dst == client_addr and kind_of(d) == 5]
    connected = next(d for _, src, dst, d in datagrams if dst == client_addr and kind_of(d) == 2)

    engine = SafeDealer(
        SocketOptions(send_hwm=1000, safe_congestion=False, reference_compat=True)
    )  # the reference has no window
    engine.connect(server_addr, 0.0)
    engine.datagrams_to_send(0.0)
    engine.receive_datagram(connected, server_addr, 0.0)
    engine.datagrams_to_send(0.0)
    for m in cap["messages_sent"]["client0"]:
        engine.send(pattern_parts(0, m["seq"], m["part_sizes"]), 0.0)
    ours = []
    for _ in range(100):
        batch = engine.datagrams_to_send(0.0)
        if not batch:
            break
        ours.extend(bytes(d) for d, _ in batch if is_data(d))
    assert ours == wire
    assert engine.pending_messages == 200
    for ack in server_acks:
        engine.receive_datagram(ack, server_addr, 0.1)
    assert engine.counters.acks_unknown == 0
    assert engine.frames_in_flight == 0
    assert engine.pending_messages == 0
    engine.tick(5.0)  # nothing left to resend
    assert engine.counters.resends == 0


def test_radio_replays_the_capture_byte_for_byte(manifest):
    """A Radio with the reference's rng answers the dishes' Connects with the capture's
    sessions, and sends the capture's frames to each dish (one nonce per copy)."""
    cap = _capture(manifest, "radio_dish.pcap")
    radio_addr = parse_addr(_peer(cap, "radio")["addr"])
    dishes = [parse_addr(_peer(cap, n)["addr"]) for n in ("dish0", "dish1")]
    datagrams = list(udp_datagrams(CAPTURES / "radio_dish.pcap"))
    engine = Radio.bound(
        radio_addr,
        SocketOptions(send_hwm=1000, reference_compat=True),
        XorShift(cap["session_id_derivation"]["rng_seed"]),
    )
    # feed the dishes' handshake datagrams (Connect, then their first Heartbeat), in order
    handshake = [(src, d) for _, src, dst, d in datagrams if dst == radio_addr and kind_of(d) in (1,)]
    for src, d in handshake:
        engine.receive_datagram(d, src, 0.0)
    replies = engine.datagrams_to_send(0.0)
    reference_connected = [(d, dst) for _, src, dst, d in datagrams if kind_of(d) == 2]
    assert [(bytes(d), a) for d, a in replies] == reference_connected
    for dish in sorted(dishes, key=lambda a: [s for s, _ in handshake].index(a)):
        hb = next(d for _, src, dst, d in datagrams if src == dish and kind_of(d) == 4)
        engine.receive_datagram(hb, dish, 0.0)
    assert len(engine.connected_peers) == 2
    for m in cap["messages_sent"]["radio"]:
        engine.send(pattern_parts(100, m["seq"], m["part_sizes"]), 0.0)
    ours: dict = {d: [] for d in dishes}
    for _ in range(100):
        batch = engine.datagrams_to_send(0.0)
        if not batch:
            break
        for d, addr in batch:
            if is_data(d):
                ours[addr].append(bytes(d))
    for dish in dishes:
        wire = [d for _, src, dst, d in datagrams if dst == dish and is_data(d)]
        assert ours[dish] == wire


@pytest.mark.parametrize("dish", ["dish0", "dish1"])
def test_dish_receives_exactly_the_manifest(manifest, dish):
    cap = _capture(manifest, "radio_dish.pcap")
    radio_addr = parse_addr(_peer(cap, "radio")["addr"])
    me = parse_addr(_peer(cap, dish)["addr"])
    engine = Dish()
    received, sent, fed = _replay_into_client(engine, "radio_dish.pcap", radio_addr, me)
    expected = [m["part_sha256"] for m in cap["messages_sent"]["radio"] for d in m["deliveries"] if d["to"] == dish]
    assert [part_digests(parts) for parts in received] == expected
    assert any(isinstance(e, PeerConnected) for e in iter(engine.next_event, None))
