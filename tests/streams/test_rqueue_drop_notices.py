"""rqueue drop notices, our opt-in extension, and the engines' small additions:
str content in notify, the broker's buffered() and disconnect()."""

from __future__ import annotations

import pytest

import nbmq.streams.rqueue_broker
import nbmq.streams.rqueue_client
from nbmq.streams.rqueue import (
    DROP_NOTICE_TOPIC,
    ClientGone,
    Notification,
    NotificationsDropped,
    RqueueBroker,
    RqueueClientConnection,
)


@pytest.fixture(autouse=True)
def both_twins(codec, monkeypatch):
    monkeypatch.setattr(nbmq.streams.rqueue_broker, "codec", codec)
    monkeypatch.setattr(nbmq.streams.rqueue_client, "codec", codec)


def drain(engine) -> list:
    out = []
    while (event := engine.next_event()) is not None:
        out.append(event)
        assert len(out) < 10_000
    return out


def broker_with(*conns, **kw) -> RqueueBroker:
    broker = RqueueBroker(**kw)
    for conn in conns:
        broker.connection_made(conn)
    return broker


def slow_subscriber_run(broker: RqueueBroker, sub: RqueueClientConnection) -> list:
    """pub publishes 1, 2 (delivered), 3..7 while "slow" is paused, 8 after it resumes; returns
    the events the slow subscriber's client engine sees."""
    pub = RqueueClientConnection()
    broker.receive_data("slow", sub.subscribe("t"))
    received = b""
    broker.receive_data("pub", pub.notify("t", b"1") + pub.notify("t", b"2"))
    received += b"".join(d for c, d in broker.data_to_send() if c == "slow")
    broker.pause_writing("slow")
    for i in range(3, 8):
        broker.receive_data("pub", pub.notify("t", str(i)))
    assert [c for c, _ in broker.data_to_send()] == []
    broker.resume_writing("slow")
    broker.receive_data("pub", pub.notify("t", "8"))
    received += b"".join(d for c, d in broker.data_to_send() if c == "slow")
    sub.receive_data(received)
    return drain(sub)


def test_drop_notice_marks_the_gap_in_the_stream() -> None:
    broker = broker_with("pub", "slow", drop_notices=True)
    sub = RqueueClientConnection()
    broker.receive_data("slow", sub.subscribe_drop_notices())
    got = slow_subscriber_run(broker, sub)
    assert got == [
        Notification(b"t", memoryview(b"1")),
        Notification(b"t", memoryview(b"2")),
        NotificationsDropped(5),
        Notification(b"t", memoryview(b"8")),
    ]
    assert sub.dropped_by_server == 5 and sub.notifications_received == 3
    assert broker.stats()["notices_sent"] == 1 and broker.dropped_for("slow") == 5
    # a second pause without drops sends no notice
    broker.pause_writing("slow")
    broker.resume_writing("slow")
    assert broker.data_to_send() == [] and broker.stats()["notices_sent"] == 1


def test_no_notice_unless_both_sides_opt_in() -> None:
    # the server has it off (the default): a seed-style stream, nothing new
    broker = broker_with("pub", "slow")
    sub = RqueueClientConnection()
    broker.receive_data("slow", sub.subscribe_drop_notices())
    assert [e for e in slow_subscriber_run(broker, sub) if not isinstance(e, Notification)] == []
    assert broker.stats()["notices_sent"] == 0 and broker.dropped_for("slow") == 5
    # the server has it on, the client never subscribed to the notice topic
    broker = broker_with("pub", "slow", drop_notices=True)
    sub = RqueueClientConnection()
    got = slow_subscriber_run(broker, sub)
    assert all(isinstance(e, Notification) for e in got) and len(got) == 3
    assert broker.stats()["notices_sent"] == 0


def test_notice_topic_cannot_be_forged_or_kept_after_remove() -> None:
    broker = broker_with("pub", "slow", drop_notices=True)
    sub, pub = RqueueClientConnection(), RqueueClientConnection()
    broker.receive_data("slow", sub.subscribe_drop_notices())
    broker.receive_data("pub", pub.notify(DROP_NOTICE_TOPIC, (10**6).to_bytes(8, "big")))
    assert broker.data_to_send() == [] and broker.stats()["unrouted"] == 1
    assert broker.subscribers(DROP_NOTICE_TOPIC) == []
    broker.receive_data("slow", sub.remove(DROP_NOTICE_TOPIC) + sub.subscribe("t"))
    assert [e for e in slow_subscriber_run(broker, sub) if not isinstance(e, Notification)] == []
    assert broker.stats()["notices_sent"] == 0


def test_client_reports_only_well_formed_notices() -> None:
    client = RqueueClientConnection()
    server_side = RqueueClientConnection()  # its notify() builds the bytes a server would send
    notice = server_side.notify(DROP_NOTICE_TOPIC, (7).to_bytes(8, "big"))
    client.receive_data(notice)  # not opted in: an ordinary notification
    assert drain(client) == [Notification(DROP_NOTICE_TOPIC, memoryview((7).to_bytes(8, "big")))]
    client.subscribe_drop_notices()
    client.receive_data(notice + server_side.notify(DROP_NOTICE_TOPIC, b"short"))
    got = drain(client)
    assert got[0] == NotificationsDropped(7) and isinstance(got[1], Notification)


def test_notify_accepts_str_content_and_rejects_others_clearly() -> None:
    client = RqueueClientConnection()
    assert client.notify("t", "h\u00e9") == client.notify("t", "h\u00e9".encode())
    with pytest.raises(TypeError, match="bytes-like or str"):
        client.notify("t", 12)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        client.notify("t", "x" * 3000)


def test_broker_buffered_and_disconnect() -> None:
    broker = broker_with("a", "b")
    client = RqueueClientConnection()
    broker.receive_data("a", client.subscribe("t"))
    message = client.notify("t", b"payload")
    broker.receive_data("b", message[:5])
    assert broker.buffered("a") == 0 and broker.buffered("b") == 5 and broker.buffered("?") == 0
    drain(broker)
    broker.disconnect("b", "read timeout")
    assert drain(broker) == [ClientGone("b", "read timeout")]
    assert broker.connections_to_close() == ["b"] and broker.stats()["timeouts"] == 1
    broker.disconnect("b", "again")  # already gone: ignored
    broker.connection_lost("b")
    assert drain(broker) == [] and broker.stats()["timeouts"] == 1
    assert broker.subscribers("t") == ["a"]
