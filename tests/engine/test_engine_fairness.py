"""One peer's claims of huge messages cannot block other peers.

A hostile peer holds 8 claims of 16 MiB (one 466-byte frame each, renewed before the TTL)
while an honest peer's messages keep arriving: on the simulator (virtual time) and over UDP.
"""

from __future__ import annotations

import random
import socket
import time

import pytest

from nbmq import FrameKind, codec
from nbmq.engine import Dealer
from nbmq.events import DropReason, MessageDropped
from nbmq.options import SocketOptions
from nbmq.testing import Network

S = ("10.0.0.1", 8000)
HONEST = ("10.0.0.2", 40000)
EVIL = ("10.0.0.66", 6666)
CLAIM = 16 << 20


def claim(sid: int, mid: int) -> bytes:
    """One frame of a 16 MiB one-part message: its last chunk (the priciest place to write)."""
    return codec.encode_data_frame(sid, mid, 1, 0, CLAIM, CLAIM, CLAIM - 466, bytes(466))


def hostile_network(opts: SocketOptions):
    net = Network(seed=3)
    server = net.add(Dealer.bound(S, opts, random.Random(1)), S, "server")
    honest = net.add(Dealer.connecting(S, 0.0), HONEST, "honest")
    evil = net.add(Dealer.connecting(S, 0.0), EVIL, "evil")
    assert net.run_until(lambda: len(server.engine.connected_peers) == 2, 5.0)
    evil_sid = next(iter(evil.engine.peers))
    honest_sid = next(iter(honest.engine.peers))
    return net, server, honest, evil_sid, honest_sid


def claim_all(net: Network, server, evil_sid: int, first_mid: int, count: int = 8) -> None:
    for mid in range(first_mid, first_mid + count):
        server.engine.receive_datagram(claim(evil_sid, mid), EVIL, net.now)
    net.flush(server)


@pytest.mark.parametrize(
    "opts",
    [
        SocketOptions(),  # the defaults: 64 MiB socket, 32 MiB per peer
        SocketOptions(max_incomplete_bytes=4 << 20, max_peer_incomplete_bytes=2 << 20),
    ],
    ids=["defaults", "tight"],
)
def test_claims_of_one_peer_do_not_block_another(opts):
    net, server, honest, evil_sid, honest_sid = hostile_network(opts)
    sizes = [2, 466, 70_000, 1_500_000]  # one frame ... a lazy (over 1 MiB) message
    sent = []
    mid = 0
    for round_ in range(7):  # 28 s: the claims are renewed every 4 s, past the 10 s TTL
        claim_all(net, server, evil_sid, mid)
        mid += 8
        for size in sizes:
            message = [bytes([round_]) * size, b"tail"]
            sent.append(message)
            net.send(honest, message)
        net.step(4.0)
    assert net.run_until(lambda: server.engine.recv_ready() == len(sent), 10.0)
    assert server.recv_all() == sent
    drops = server.events_of(MessageDropped)
    assert all(d.session_id == evil_sid for d in drops)  # nothing of the honest peer's
    counters = server.engine.counters
    assert counters.dropped[DropReason.TOO_LARGE] == 0
    if opts.max_peer_incomplete_bytes == 2 << 20:
        # 1 MiB charged per claim: the peer's budget holds one beside the next, each new claim
        # evicts its oldest, so the evil peer never holds more than its budget
        assert counters.dropped[DropReason.EVICTED] >= 7 * 8 - 2
        assert server.engine._recvq.reassembler.owner_bytes(evil_sid) <= 2 << 20
    else:
        assert server.engine.incomplete_messages >= 8  # held, but charged 8 MiB, not 128
        assert counters.dropped[DropReason.EVICTED] == 0


def test_a_peer_sending_real_bytes_is_evicted_not_its_neighbour():
    # The evil peer writes 1.5 MiB into each of two 16 MiB claims: they grow past the peer's
    # 2 MiB budget, so its own oldest claim goes; the honest peer's big message is untouched.
    opts = SocketOptions(max_incomplete_bytes=4 << 20, max_peer_incomplete_bytes=2 << 20)
    net, server, honest, evil_sid, honest_sid = hostile_network(opts)
    big = [bytes(range(256)) * 6000]  # 1.5 MiB
    net.send(honest, big)
    engine = server.engine
    for mid in (1, 2):
        for off in range(0, 1_500_000, 466):
            engine.receive_datagram(
                codec.encode_data_frame(evil_sid, mid, 1, 0, CLAIM, CLAIM, off, bytes(466)),
                EVIL,
                net.now,
            )
    net.flush(server)
    assert net.run_until(lambda: engine.recv_ready() == 1, 5.0)
    assert server.recv_all() == [[big[0]]]
    drops = server.events_of(MessageDropped)
    assert drops and {(d.session_id, d.reason) for d in drops} <= {
        (evil_sid, DropReason.EVICTED),
        (evil_sid, DropReason.TOO_LARGE),
    }
    assert engine._recvq.reassembler.owner_bytes(evil_sid) <= 2 << 20


@pytest.mark.network
def test_claims_over_udp_do_not_block_another_peer():
    from nbmq.transports import Dealer as UdpDealer

    fast = dict(peer_heartbeat_ivl=0.05, peer_keepalive=2.0, reconnect_wait=0.1, linger=0.5)
    server = UdpDealer.bind("127.0.0.1:0", **fast)
    client = UdpDealer.connect(server.local_address, **fast)
    evil = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    evil.settimeout(2.0)
    host, port = (
        server.local_address.rsplit(":", 1) if isinstance(server.local_address, str) else server.local_address[:2]
    )
    target = (host, int(port))
    with server, client, evil:
        # the evil peer's handshake, by hand: Connect, Connected(sid), Heartbeat(sid)
        evil.sendto(codec.encode_control_frame(FrameKind.CONNECT, 0), target)
        end = time.monotonic() + 5.0
        sid = None
        while sid is None and time.monotonic() < end:
            server.tick()
            client.tick()
            try:
                frame = codec.parse_frame(evil.recv(600))
            except (TimeoutError, BlockingIOError):
                continue
            if frame.kind == FrameKind.CONNECTED:
                sid = frame.session_id
        assert sid is not None
        evil.sendto(codec.encode_control_frame(FrameKind.HEARTBEAT, sid), target)
        for mid in range(8):
            evil.sendto(claim(sid, mid), target)
        for _ in range(20):
            server.tick()
            client.tick()
            time.sleep(0.005)
        assert server.engine.incomplete_messages == 8
        sent = [[b"hi"], [b"x" * 70_000], [b"y" * 1_200_000, b""]]
        for message in sent:
            client.send(message)
        got = []
        end = time.monotonic() + 10.0
        while len(got) < len(sent) and time.monotonic() < end:
            client.tick()
            try:
                got.append([bytes(p) for p in server.recv(timeout=0.01)])
            except BlockingIOError:
                pass
        assert got == sent
        assert server.counters.dropped[DropReason.TOO_LARGE] == 0


@pytest.mark.parametrize(
    "opts",
    [
        SocketOptions(),
        SocketOptions(max_incomplete_bytes=4 << 20, max_peer_incomplete_bytes=2 << 20),
    ],
    ids=["defaults", "tight"],
)
def test_a_removed_peer_releases_its_incomplete_messages_at_once(opts):
    # A removed peer's incomplete messages can never complete (a reconnect is a new session):
    # they are dropped and counted (PEER_GONE) when it goes, not held until their TTL.
    net, server, honest, evil_sid, honest_sid = hostile_network(opts)
    engine = server.engine
    claim_all(net, server, evil_sid, 0, count=2)
    net.send(honest, [b"kept"])  # the honest peer's messages are untouched
    assert engine._recvq.reassembler.owner_bytes(evil_sid) > 0
    held = engine.incomplete_messages  # 2, or 1 when the tight budget evicted the first
    assert held >= 1
    engine.receive_datagram(codec.encode_control_frame(FrameKind.DISCONNECTED, evil_sid), EVIL, net.now)
    net.flush(server)
    assert evil_sid not in engine.peers
    assert engine.incomplete_messages == 0
    assert engine._recvq.reassembler.owner_bytes(evil_sid) == 0
    assert engine.counters.dropped[DropReason.PEER_GONE] == held
    gone = [d for d in server.events_of(MessageDropped) if d.reason is DropReason.PEER_GONE]
    assert sorted(d.message_id for d in gone) == [0, 1][-held:]
    assert {d.session_id for d in gone} == {evil_sid}
    assert net.run_until(lambda: engine.recv_ready() == 1, 5.0)
    assert server.recv_all() == [[b"kept"]]
