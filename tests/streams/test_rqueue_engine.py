"""rqueue sans-IO engines: client bytes, broker routing, fan-out, errors, slow consumers."""

from __future__ import annotations

import random

import pytest

from nbmq.errors import ProtocolError
from nbmq.streams.rqueue import (
    ClientConnected,
    ClientError,
    ClientGone,
    ConnectionClosed,
    Deregistered,
    Notification,
    Removed,
    RqueueBroker,
    RqueueClientConnection,
    SlowConsumer,
    Subscribed,
)

cc = RqueueClientConnection()


def events(engine) -> list:
    out = []
    while (event := engine.next_event()) is not None:
        out.append(event)
        assert len(out) < 100_000
    return out


def notifications(client: RqueueClientConnection, data: bytes) -> list[tuple[bytes, bytes]]:
    client.receive_data(data)
    return [(e.topic, bytes(e.content)) for e in events(client) if isinstance(e, Notification)]


def sent(broker: RqueueBroker) -> dict:
    out: dict = {}
    for conn, data in broker.data_to_send():
        assert conn not in out  # one entry per connection
        out[conn] = data
    return out


def make_broker(*conns, **kw) -> RqueueBroker:
    broker = RqueueBroker(**kw)
    for conn in conns:
        broker.connection_made(conn)
    return broker


# -- client engine -----------------------------------------------------------------------------


def test_client_message_bytes_follow_seed() -> None:
    assert cc.subscribe("news") == b"\x00\x04\x01news"
    assert cc.remove(b"news") == b"\x00\x04\x02news"
    assert cc.deregister() == b"\x00\x00\x05"
    assert cc.notify("ab", b"xyz") == b"\x00\x06\x07\x02abxyz"
    assert cc.notify(b"", b"") == b"\x00\x01\x07\x00"


def test_client_limits() -> None:
    with pytest.raises(ValueError):
        cc.subscribe(b"t" * 256)
    with pytest.raises(ValueError):
        cc.notify("t", b"x" * 2047)  # 1 + 1 + 2047 > 2048
    cc.notify("t", b"x" * 2046)
    RqueueClientConnection(max_payload=65535).notify("t", b"x" * 65000)


@pytest.mark.parametrize("mode", ["whole", "bytes", "random"])
def test_client_receives_in_any_slicing(mode: str) -> None:
    expected = [(f"t{i % 3}".encode(), bytes([i]) * (i * 31 % 2000)) for i in range(50)]
    wire = b"".join(cc.notify(t, c) for t, c in expected)
    client = RqueueClientConnection()
    if mode == "whole":
        chunks = [wire]
    elif mode == "bytes":
        chunks = [wire[i : i + 1] for i in range(len(wire))]
    else:
        cuts = [0, *sorted(random.Random(4).sample(range(1, len(wire)), 100)), len(wire)]
        chunks = [wire[a:b] for a, b in zip(cuts, cuts[1:])]
    got = []
    for chunk in chunks:
        got += notifications(client, chunk)
    assert got == expected
    client.receive_data(b"")
    assert isinstance(client.next_event(), ConnectionClosed)
    assert client.next_event() is None


def test_client_rejects_non_notification_and_cut_stream() -> None:
    client = RqueueClientConnection()
    client.receive_data(cc.notify("t", b"1") + cc.subscribe("t"))
    assert isinstance(client.next_event(), Notification)
    with pytest.raises(ProtocolError, match="unexpected message type 1"):
        client.next_event()
    with pytest.raises(ProtocolError):
        client.receive_data(b"x")
    client = RqueueClientConnection()
    client.receive_data(cc.notify("t", b"123")[:-1])
    client.receive_data(b"")
    with pytest.raises(ProtocolError, match="inside a message"):
        client.next_event()
    client = RqueueClientConnection()
    client.receive_data(b"\x00\x01\x09x")  # unknown type
    with pytest.raises(ProtocolError) as info:
        client.next_event()
    assert info.value.__cause__ is not None


# -- broker ------------------------------------------------------------------------------------


def test_subscribe_notify_exact_match_and_publisher_included() -> None:
    broker = make_broker("a", "b", "c")
    broker.receive_data("a", cc.subscribe("news"))
    broker.receive_data("b", cc.subscribe("news") + cc.subscribe("sports"))
    broker.receive_data("c", cc.subscribe("new"))  # exact match only: no prefix matching
    assert sent(broker) == {}
    broker.receive_data("a", cc.notify("news", b"hello"))
    out = sent(broker)
    assert out == {"a": cc.notify("news", b"hello"), "b": cc.notify("news", b"hello")}
    assert out["a"] is out["b"]  # encoded once, shared
    assert broker.subscribers("news") == ["a", "b"]
    assert broker.subscriptions("b") == {b"news", b"sports"}
    evs = events(broker)
    assert evs[:3] == [ClientConnected("a"), ClientConnected("b"), ClientConnected("c")]
    assert Subscribed("b", b"sports") in evs


def test_batch_is_shared_and_order_kept_across_topics() -> None:
    broker = make_broker("pub", "x", "y")
    broker.receive_data("x", cc.subscribe("A"))
    broker.receive_data("y", cc.subscribe("A") + cc.subscribe("B"))
    msgs = [("A", b"1"), ("A", b"2"), ("B", b"3"), ("A", b"4"), ("C", b"5")]
    broker.receive_data("pub", b"".join(cc.notify(t, c) for t, c in msgs))
    out = sent(broker)
    assert set(out) == {"x", "y"}
    assert notifications(RqueueClientConnection(), out["x"]) == [(b"A", b"1"), (b"A", b"2"), (b"A", b"4")]
    assert notifications(RqueueClientConnection(), out["y"]) == [(t.encode(), c) for t, c in msgs[:4]]
    stats = broker.stats()
    assert stats["notifications_in"] == 5 and stats["unrouted"] == 1 and stats["delivered"] == 7


@pytest.mark.parametrize("mode", ["bytes", "random"])
def test_broker_fed_in_slices(mode: str) -> None:
    rng = random.Random(9)
    msgs = [(f"t{i % 4}", rng.randbytes(rng.randrange(0, 2000))) for i in range(40)]
    wire = cc.subscribe("t1") + cc.subscribe("t2") + b"".join(cc.notify(t, c) for t, c in msgs)
    broker = make_broker("p", "s")
    broker.receive_data("s", cc.subscribe("t1"))
    if mode == "bytes":
        chunks = [wire[i : i + 1] for i in range(len(wire))]
    else:
        cuts = [0, *sorted(rng.sample(range(1, len(wire)), 150)), len(wire)]
        chunks = [wire[a:b] for a, b in zip(cuts, cuts[1:])]
    got_p, got_s = b"", b""
    for chunk in chunks:
        broker.receive_data("p", chunk)
        out = sent(broker)
        got_p += out.get("p", b"")
        got_s += out.get("s", b"")
    want_p = [(t.encode(), c) for t, c in msgs if t in ("t1", "t2")]
    assert notifications(RqueueClientConnection(), got_p) == want_p
    assert notifications(RqueueClientConnection(), got_s) == [(t.encode(), c) for t, c in msgs if t == "t1"]


def test_remove_deregister_and_disconnect_purge() -> None:
    broker = make_broker("a", "b")
    broker.receive_data("a", cc.subscribe("x") + cc.subscribe("y") + cc.subscribe("z"))
    broker.receive_data("a", cc.remove("x") + cc.remove("nope"))
    assert broker.subscriptions("a") == {b"y", b"z"}
    evs = events(broker)
    assert Removed("a", b"x", True) in evs and Removed("a", b"nope", False) in evs
    broker.receive_data("b", cc.notify("x", b"1") + cc.notify("y", b"2"))
    assert notifications(RqueueClientConnection(), sent(broker)["a"]) == [(b"y", b"2")]
    broker.receive_data("a", cc.deregister())
    assert broker.subscriptions("a") == frozenset()
    assert Deregistered("a", 2) in events(broker)
    broker.receive_data("b", cc.notify("y", b"3"))
    assert sent(broker) == {}
    broker.receive_data("b", cc.subscribe("q"))
    broker.connection_lost("b")
    assert broker.subscribers("q") == [] and broker.stats()["topics"] == 0
    assert events(broker)[-1] == ClientGone("b", "lost")
    assert broker.stats()["clients"] == 1


def test_subscribe_then_notify_in_one_read() -> None:
    broker = make_broker("a")
    broker.receive_data("a", cc.notify("t", b"before") + cc.subscribe("t") + cc.notify("t", b"after"))
    assert notifications(RqueueClientConnection(), sent(broker)["a"]) == [(b"t", b"after")]


def test_bad_client_closed_others_carry_on() -> None:
    broker = make_broker("good", "bad")
    broker.receive_data("good", cc.subscribe("t"))
    broker.receive_data("bad", cc.subscribe("t") + cc.notify("t", b"ok") + b"\x00\x01\x63garbage")
    out = sent(broker)
    assert notifications(RqueueClientConnection(), out["good"]) == [(b"t", b"ok")]
    assert "bad" not in out  # purged before its share was sent
    assert broker.connections_to_close() == ["bad"]
    assert broker.connections_to_close() == []
    evs = events(broker)
    error = [e for e in evs if isinstance(e, ClientError)]
    assert len(error) == 1 and error[0].conn == "bad" and isinstance(error[0].error, ProtocolError)
    assert evs[-1] == ClientGone("bad", "protocol error")
    assert broker.subscribers("t") == ["good"]
    broker.receive_data("bad", cc.notify("t", b"ignored"))  # after the fault: ignored
    broker.connection_lost("bad")
    assert events(broker) == []  # ClientGone is reported once
    broker.receive_data("good", cc.notify("t", b"still"))
    assert notifications(RqueueClientConnection(), sent(broker)["good"]) == [(b"t", b"still")]
    assert broker.stats()["protocol_errors"] == 1


def test_payload_cap_default_and_configurable() -> None:
    big = RqueueClientConnection(max_payload=65535).notify("t", b"x" * 2047)  # payload 2049
    broker = make_broker("a")
    broker.receive_data("a", big)
    assert broker.connections_to_close() == ["a"]
    broker = make_broker("a", max_payload=4096)
    broker.receive_data("a", cc.subscribe("t") + big)
    assert len(sent(broker)["a"]) == len(big)
    with pytest.raises(ValueError):
        RqueueBroker(max_payload=70000)
    with pytest.raises(ValueError):
        RqueueBroker(slow_consumer="block")


def test_eof_from_client() -> None:
    broker = make_broker("a", "b")
    broker.receive_data("a", cc.subscribe("t"))
    broker.receive_data("a", b"")
    assert broker.connections_to_close() == ["a"]
    assert broker.subscribers("t") == []
    broker.receive_data("b", cc.notify("t", b"x")[:2])
    broker.receive_data("b", b"")  # cut inside a message
    assert broker.connections_to_close() == ["b"]
    assert any(isinstance(e, ClientError) for e in events(broker))


def test_slow_consumer_drop_policy() -> None:
    broker = make_broker("pub", "fast", "slow")
    for conn in ("fast", "slow"):
        broker.receive_data(conn, cc.subscribe("t"))
    broker.pause_writing("slow")
    broker.receive_data("pub", cc.notify("t", b"1") + cc.notify("t", b"2"))
    assert set(sent(broker)) == {"fast"}
    assert broker.dropped_for("slow") == 2 and broker.stats()["dropped"] == 2
    assert SlowConsumer("slow", "drop") in events(broker)
    broker.resume_writing("slow")
    broker.receive_data("pub", cc.notify("t", b"3"))
    assert set(sent(broker)) == {"fast", "slow"}
    assert broker.connections_to_close() == []


def test_slow_consumer_disconnect_policy() -> None:
    broker = make_broker("pub", "slow", slow_consumer="disconnect")
    broker.receive_data("slow", cc.subscribe("t"))
    broker.pause_writing("slow")
    assert broker.connections_to_close() == ["slow"]
    assert broker.subscribers("t") == []
    evs = events(broker)
    assert SlowConsumer("slow", "disconnect") in evs and evs[-1] == ClientGone("slow", "slow consumer")


def test_unknown_connections_are_ignored_and_duplicates_refused() -> None:
    broker = make_broker("a")
    broker.receive_data("zzz", b"junk")
    broker.connection_lost("zzz")
    broker.pause_writing("zzz")
    with pytest.raises(ValueError):
        broker.connection_made("a")
    assert sent(broker) == {} and broker.connections_to_close() == []


def test_fan_out_to_many() -> None:
    subs = [f"s{i}" for i in range(50)]
    broker = make_broker("pub", *subs)
    for s in subs:
        broker.receive_data(s, cc.subscribe("t"))
    payload = b"".join(cc.notify("t", bytes([i]) * 2000) for i in range(20))
    broker.receive_data("pub", payload)
    out = sent(broker)
    assert set(out) == set(subs)
    assert len({id(v) for v in out.values()}) == 1  # one shared bytes object
    assert out["s0"] == payload
    assert broker.stats()["delivered"] == 50 * 20
