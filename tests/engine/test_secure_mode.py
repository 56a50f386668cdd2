"""Secure mode end to end on the sans-IO engines: a Noise IK handshake in Connect/Connected, every
later frame sealed, and what a peer without the right key can do (nothing, and it is counted).

Runs on whichever engine path this process loaded (compiled, or the Python twin under
NBMQ_NO_EXTENSIONS=1): secure sockets open each datagram, then hand the plain frame to the socket
type's own receive path, so both paths must give the same results here."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pytest

pytest.importorskip("cryptography")

import nbmq  # noqa: E402
from nbmq import codec  # noqa: E402
from nbmq.engine import Dealer, SafeDealer  # noqa: E402
from nbmq.engine import secure as secure_mod  # noqa: E402
from nbmq.engine.secure import BUNDLE_VERSION, SECURE_VERSION  # noqa: E402
from nbmq.errors import OptionError  # noqa: E402
from nbmq.events import FrameRejected, RejectReason  # noqa: E402
from nbmq.options import SocketOptions  # noqa: E402
from nbmq.wire import FrameKind  # noqa: E402

SERVER = ("10.0.0.1", 8000)
CLIENT = ("10.0.0.2", 40000)
MALLORY = ("10.0.0.66", 40000)

SERVER_PUB, SERVER_SEC = nbmq.generate_keypair()
CLIENT_PUB, CLIENT_SEC = nbmq.generate_keypair()
OTHER_PUB, OTHER_SEC = nbmq.generate_keypair()


class Wire:
    """Engines by address, delivering everything each flush gives, in order, with a record of
    every datagram ``(src, dst, bytes)`` (a capture)."""

    def __init__(self, engines: dict[Hashable, Any]) -> None:
        self.engines = engines
        self.captured: list[tuple[Hashable, Hashable, bytes]] = []
        self.now = 0.0

    def run(self, rounds: int = 20, dt: float = 0.01) -> None:
        for _ in range(rounds):  # bounded: a quiet round ends it
            moved = False
            for src, engine in list(self.engines.items()):
                engine.tick(self.now)
                for data, dst in engine.datagrams_to_send(self.now):
                    data = bytes(data)
                    self.captured.append((src, dst, data))
                    moved = True
                    target = self.engines.get(dst)
                    if target is not None:
                        target.receive_datagram(data, src, self.now)
            self.now += dt
            if not moved:
                return

    def inject(self, data: bytes, src: Hashable, dst: Hashable) -> None:
        self.engines[dst].receive_datagram(data, src, self.now)
        self.run()


def secure_pair(
    cls: type = Dealer,
    client_key: bytes = CLIENT_SEC,
    server_key: bytes = SERVER_PUB,
    max_datagram_size: int | None = 1472,
    **server_opts: Any,
):
    size = {"max_datagram_size": max_datagram_size}
    server = cls.bound(SERVER, SocketOptions(secret_key=SERVER_SEC, **size, **server_opts))
    client = cls.connecting(SERVER, 0.0, SocketOptions(secret_key=client_key, server_public_key=server_key, **size))
    wire = Wire({SERVER: server, CLIENT: client})
    wire.run()
    return wire, server, client


def recv_all(engine: Any) -> list[list[bytes]]:
    out = []
    for _ in range(10_000):
        try:
            out.append([bytes(p) for p in engine.recv()])
        except nbmq.WouldBlock:
            return out
    raise AssertionError("unbounded recv")


def rejections(engine: Any) -> list[FrameRejected]:
    out = []
    for _ in range(100_000):
        event = engine.next_event()
        if event is None:
            return out
        if isinstance(event, FrameRejected):
            out.append(event)
    raise AssertionError("unbounded events")


@pytest.mark.parametrize("cls", [Dealer, SafeDealer])
def test_secure_pair_connects_and_carries_messages_sealed(cls):
    wire, server, client = secure_pair(cls)
    assert client.connected_peers and server.connected_peers
    assert client.counters.secure_handshakes == server.counters.secure_handshakes == 1
    secret = b"attack at dawn " * 300  # 4.5 KB: ten frames
    client.send([b"hello", secret], wire.now)
    server.send([b"back"], wire.now)
    wire.run()
    assert recv_all(server) == [[b"hello", secret]]
    assert recv_all(client) == [[b"back"]]
    versions = [data[0] for _, _, data in wire.captured]
    assert set(versions) == {SECURE_VERSION, BUNDLE_VERSION}  # ten frames in one flush: bundled
    assert max(len(data) for _, _, data in wire.captured) <= 1472
    assert not any(b"attack at dawn" in data or b"hello" in data for _, _, data in wire.captured)
    for engine in (server, client):
        c = engine.counters
        assert (c.secure_auth_failed, c.secure_replays, c.secure_downgrades, c.malformed) == (0, 0, 0, 0)


def test_a_reference_peer_rejects_secure_frames_as_a_wrong_version():
    wire, server, client = secure_pair()
    plain = Dealer.bound(("10.0.0.9", 1))
    for _, _, data in wire.captured:
        plain.receive_datagram(data, CLIENT, wire.now)
    assert plain.counters.malformed == len(wire.captured)
    assert {e.detail for e in rejections(plain)} == {"wrong version"}
    with pytest.raises(nbmq.DecodeError):
        codec.parse_frame(wire.captured[0][2])


def test_a_plain_connect_to_a_secure_socket_is_a_counted_downgrade():
    server = Dealer.bound(SERVER, SocketOptions(secret_key=SERVER_SEC))
    plain = Dealer.connecting(SERVER, 0.0)
    wire = Wire({SERVER: server, CLIENT: plain})
    wire.run()
    assert not server.peers and not plain.connected_peers
    assert server.counters.secure_downgrades == 1
    assert server.counters.datagrams_out == 0  # no reply at all
    assert [e.reason for e in rejections(server)] == [RejectReason.UNAUTHENTICATED]


def test_a_secure_client_refuses_a_plain_server():
    plain = Dealer.bound(SERVER)
    client = Dealer.connecting(SERVER, 0.0, SocketOptions(secret_key=CLIENT_SEC, server_public_key=SERVER_PUB))
    wire = Wire({SERVER: plain, CLIENT: client})
    wire.run()
    assert not client.connected_peers and plain.counters.malformed == 1  # the secure Connect
    forged = codec.encode_control_frame(FrameKind.CONNECTED, 1234)  # a plain answer, as a downgrade
    wire.inject(forged, SERVER, CLIENT)
    assert not client.connected_peers and client.counters.secure_downgrades == 1


def test_a_wrong_server_key_is_refused():
    wire, server, client = secure_pair(server_key=OTHER_PUB)
    assert not client.connected_peers and not server.peers
    assert server.counters.secure_handshakes_failed == 1
    assert client.counters.secure_handshakes == 0
    # a server that does hold the pinned key's secret, answering from the server's address, is
    # what a client would accept; one holding another key cannot make a reply that verifies
    impostor = Dealer.bound(SERVER, SocketOptions(secret_key=OTHER_SEC))
    connect = next(data for src, _, data in wire.captured if src == CLIENT)
    impostor.receive_datagram(connect, CLIENT, wire.now)
    assert impostor.counters.secure_handshakes == 1  # it can read a Connect sealed to its key...
    client2 = Dealer.connecting(SERVER, 0.0, SocketOptions(secret_key=CLIENT_SEC, server_public_key=SERVER_PUB))
    mitm = Dealer.bound(SERVER, SocketOptions(secret_key=OTHER_SEC))
    wire2 = Wire({SERVER: mitm, CLIENT: client2})
    wire2.run()
    assert not client2.connected_peers and mitm.counters.secure_handshakes_failed == 1


def test_allowed_public_keys_refuse_other_clients():
    wire, server, client = secure_pair(client_key=OTHER_SEC, allowed_public_keys=[CLIENT_PUB])
    assert not client.connected_peers and not server.peers
    assert server.counters.secure_handshakes_failed == 1
    wire, server, client = secure_pair(allowed_public_keys=[CLIENT_PUB])
    assert client.connected_peers and server.connected_peers


def _data_frames(wire: Wire, src: Hashable) -> list[bytes]:
    return [d for s, _, d in wire.captured if s == src and d[1] == FrameKind.DATA]


def test_replayed_captured_frames_are_refused_and_counted():
    wire, server, client = secure_pair()
    client.send([b"pay 100"], wire.now)
    wire.run()
    assert recv_all(server) == [[b"pay 100"]]
    for data in _data_frames(wire, CLIENT) * 3:
        wire.inject(data, CLIENT, SERVER)
    assert recv_all(server) == []
    assert server.counters.secure_replays == 3
    connect = next(d for s, _, d in wire.captured if s == CLIENT and d[1] == FrameKind.CONNECT)
    wire.inject(connect, MALLORY, SERVER)  # a replayed handshake, from anywhere
    assert server.counters.secure_replays == 4 and set(server.peers) == {client.connected_peers[0].session_id}


def test_bit_flipped_frames_are_refused_and_counted():
    server = Dealer.bound(SERVER, SocketOptions(secret_key=SERVER_SEC))
    client = Dealer.connecting(SERVER, 0.0, SocketOptions(secret_key=CLIENT_SEC, server_public_key=SERVER_PUB))
    wire = Wire({SERVER: server, CLIENT: client})
    wire.run()
    client.send([b"transfer"], wire.now)
    frames = [(d, dst) for d, dst in client.datagrams_to_send(wire.now)]
    ((frame, _),) = frames
    frame = bytes(frame)
    for offset in (1, 9, 12, 30, 40, len(frame) - 20, len(frame) - 1):
        flipped = bytearray(frame)
        flipped[offset] ^= 0x01
        wire.inject(bytes(flipped), CLIENT, SERVER)
    c = server.counters
    # the kind byte flipped to Connect makes it a handshake that fails; a flipped session id
    # names no session; every other flip fails the tag
    assert (c.secure_handshakes_failed, c.unknown_session, c.secure_auth_failed) == (1, 1, 5)
    assert recv_all(server) == []
    wire.inject(frame, CLIENT, SERVER)  # the genuine frame still goes through: nothing moved
    assert recv_all(server) == [[b"transfer"]]


def test_a_peer_without_the_keys_cannot_inject():
    wire, server, client = secure_pair()
    sid = client.connected_peers[0].session_id
    plain = codec.encode_data_frame(sid, 99, 1, 0, 4, 4, 0, b"evil")
    wire.inject(plain, CLIENT, SERVER)  # the right session, from the client's own address
    assert server.counters.secure_downgrades == 1
    sealed_looking = bytes((SECURE_VERSION,)) + plain[1:] + (7).to_bytes(8, "big") + bytes(16)
    wire.inject(sealed_looking, CLIENT, SERVER)  # a made-up counter and tag
    assert server.counters.secure_auth_failed == 1
    wire.inject(sealed_looking, MALLORY, SERVER)  # from elsewhere: no path challenge either
    assert server.counters.secure_auth_failed == 2 and server.counters.path_challenges == 0
    assert recv_all(server) == []
    assert [e.reason for e in rejections(server)][-3:] == [RejectReason.UNAUTHENTICATED] * 3


def test_keys_change_every_rekey_frames_on_both_sides(monkeypatch):
    monkeypatch.setattr(secure_mod, "REKEY_FRAMES", 8)
    wire, server, client = secure_pair()
    for i in range(40):
        client.send([b"m%d" % i], wire.now)
        wire.run()
    assert len(recv_all(server)) == 40
    assert client.counters.secure_rekeys >= 4 and server.counters.secure_rekeys >= 4


def test_a_restarted_client_handshakes_again_and_the_old_keys_stop_working():
    wire, server, client = secure_pair()
    old_frames = [d for s, _, d in wire.captured if s == CLIENT and d[1] != FrameKind.CONNECT]
    client2 = Dealer.connecting(SERVER, wire.now, SocketOptions(secret_key=CLIENT_SEC, server_public_key=SERVER_PUB))
    wire.engines[CLIENT] = client2
    wire.run()
    assert client2.connected_peers and server.counters.secure_handshakes == 2
    client2.send([b"again"], wire.now)
    wire.run()
    assert recv_all(server) == [[b"again"]]
    for data in old_frames:
        wire.inject(data, CLIENT, SERVER)
    assert server.counters.secure_auth_failed + server.counters.secure_replays == len(old_frames)


def test_secure_options_are_checked_and_fixed():
    with pytest.raises(OptionError, match="secret_key"):
        SocketOptions(secret_key=b"short")
    with pytest.raises(OptionError, match="allowed_public_keys"):
        SocketOptions(allowed_public_keys=b"x" * 32)
    with pytest.raises(OptionError, match="secret_key"):
        Dealer(SocketOptions(server_public_key=SERVER_PUB))  # never silently plain
    with pytest.raises(OptionError, match="server_public_key"):
        Dealer.connecting(SERVER, 0.0, SocketOptions(secret_key=CLIENT_SEC))
    opts = SocketOptions(secret_key=CLIENT_SEC, allowed_public_keys=[SERVER_PUB])
    assert opts.allowed_public_keys == frozenset({SERVER_PUB})
    assert CLIENT_SEC.hex() not in repr(opts) and str(CLIENT_SEC) not in repr(opts)
    engine = Dealer.bound(SERVER, opts)
    with pytest.raises(OptionError, match="secret_key"):
        engine.set_option("secret_key", OTHER_SEC)


def test_a_batch_is_taken_as_its_datagrams_one_by_one():
    wire, server, client = secure_pair(max_datagram_size=0)  # every frame alone
    for i in range(3):
        client.send([b"m%d" % i], wire.now)
    frames = [bytes(d) for d, _ in client.datagrams_to_send(wire.now)]
    assert len(frames) == 3
    flipped = bytearray(frames[1])
    flipped[-3] ^= 4
    sid = client.connected_peers[0].session_id
    plain = codec.encode_control_frame(FrameKind.HEARTBEAT, sid)
    heartbeat = client._secure.sessions[sid].seal(plain)  # a sealed control frame: the batch's slow path
    heartbeats = server.counters.heartbeats_in
    batch = [frames[0], bytes(flipped), heartbeat, frames[1], frames[1], plain, b"", frames[2]]
    lengths = [len(d) for d in batch]
    offsets = [sum(lengths[:i]) for i in range(len(batch))]
    server.receive_datagrams(
        memoryview(b"".join(batch)), offsets + [-5], lengths + [3], [CLIENT] * (len(batch) + 1), wire.now
    )
    assert recv_all(server) == [[b"m0"], [b"m1"], [b"m2"]]
    c = server.counters
    assert (c.secure_auth_failed, c.secure_replays, c.secure_downgrades, c.malformed) == (1, 1, 1, 2)
    assert c.messages_in == 3 and c.data_frames_in == 3 and c.heartbeats_in == heartbeats + 1
    reasons = [e.reason for e in rejections(server)]
    assert reasons == [RejectReason.UNAUTHENTICATED] * 3 + [RejectReason.MALFORMED] * 2


def test_a_restarted_server_is_found_again_after_the_keepalive():
    from nbmq.testing import connected_pair

    timers = dict(peer_keepalive=1.0, peer_heartbeat_ivl=0.2, reconnect_wait=0.5)
    server_opts = SocketOptions(secret_key=SERVER_SEC, **timers)
    client_opts = SocketOptions(secret_key=CLIENT_SEC, server_public_key=SERVER_PUB, **timers)
    net, server, client = connected_pair(Dealer(server_opts), Dealer(client_opts), server_addr=SERVER)
    old = client.engine.connected_peers[0].session_id
    fresh = Dealer(server_opts)  # the same key, no session: the old session's frames mean nothing
    fresh.bind(SERVER)
    restarted = net.replace(server, fresh)

    def again() -> bool:
        peers = client.engine.connected_peers
        return restarted.connected and bool(peers) and peers[0].session_id != old

    assert net.run_until(again, 10.0)
    assert fresh.counters.unknown_session > 0  # heartbeats of the old session, never answered
    assert client.engine.counters.secure_handshakes == 2 and fresh.counters.secure_handshakes == 1
    net.send(client, [b"after the restart"])
    net.step(0.01)
    assert restarted.recv_all() == [[b"after the restart"]]


def test_safe_dealer_over_a_lossy_reordering_link_delivers_everything_once():
    from nbmq.engine import SafeDealer as Safe
    from nbmq.testing import Link, connected_pair

    link = Link(delay=0.002, loss=0.2, duplicate=0.1, reorder=0.3, reorder_delay=0.01)
    net, server, client = connected_pair(
        Safe(SocketOptions(secret_key=SERVER_SEC)),
        Safe(SocketOptions(secret_key=CLIENT_SEC, server_public_key=SERVER_PUB)),
        seed=3,
        link=link,
    )
    messages = [[b"%d" % i, bytes([i]) * (i * 37)] for i in range(40)]
    for parts in messages:
        net.send(client, parts)
    got: list[list[bytes]] = []
    assert net.run_until(lambda: got.extend(server.recv_all()) or len(got) >= len(messages), 30.0)
    assert sorted(got) == sorted(messages)
    c = server.engine.counters
    assert c.secure_replays > 0  # the link's duplicates, refused before the dedup saw them
    assert c.secure_auth_failed == c.secure_downgrades == 0


def test_radio_to_dishes_sealed_per_peer():
    from nbmq.engine import Dish, Radio

    radio = Radio.bound(SERVER, SocketOptions(secret_key=SERVER_SEC))
    dishes = {
        ("10.0.0.%d" % i, 4000): Dish.connecting(
            SERVER, 0.0, SocketOptions(secret_key=nbmq.generate_keypair()[1], server_public_key=SERVER_PUB)
        )
        for i in (2, 3)
    }
    wire = Wire({SERVER: radio, **dishes})
    wire.run()
    assert len(radio.connected_peers) == 2
    radio.send([b"news"], wire.now)
    wire.run()
    assert [recv_all(d) for d in dishes.values()] == [[[b"news"]], [[b"news"]]]
    data = [d for s, _, d in wire.captured if s == SERVER and d[1] == FrameKind.DATA]
    assert len(data) == 2 and data[0][34:] != data[1][34:]  # each peer's copy under its own keys
