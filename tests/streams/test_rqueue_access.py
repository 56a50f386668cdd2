"""Access rules on the rqueue broker engine (sans-IO): identities, grants, denials, reserved topics."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from nbmq.events import Authenticated, ClientGone, Denied, DeniedByServer, Notification
from nbmq.streams.rqueue import AUTH_TOPIC, DENIED_TOPIC, AccessRules, RqueueBroker, RqueueClientConnection
from nbmq.wire import RqueueType

TOKEN = "dashboard-token"
RULES = {
    "anonymous": {"subscribe": ["public/"]},
    "clients": {
        "sensor-1": {"certificate": "sensor-1", "publish": ["sensors/sensor-1/", "public/"]},
        "dashboard": {"token_sha256": hashlib.sha256(TOKEN.encode()).hexdigest(), "subscribe": ["sensors/"]},
    },
}


class Client:
    """One client of a broker: its own sans-IO client engine, bytes passed by hand."""

    def __init__(self, broker: RqueueBroker, name: str, certificate: str | None = None) -> None:
        self.broker, self.name, self.engine = broker, name, RqueueClientConnection()
        broker.connection_made(name, certificate)

    def send(self, *messages: bytes) -> None:
        self.broker.receive_data(self.name, b"".join(messages))

    def events(self, out: list[tuple[object, bytes]]) -> list[object]:
        got = []
        for conn, data in out:
            if conn == self.name:
                self.engine.receive_data(data)
        while (event := self.engine.next_event()) is not None:
            got.append(event)
        return got


def _drain(broker: RqueueBroker) -> list[object]:
    events = []
    while (event := broker.next_event()) is not None:
        events.append(event)
    return events


def test_no_rules_lets_everyone_everywhere_but_never_forwards_tokens() -> None:
    broker = RqueueBroker()
    spy, pub = Client(broker, "spy"), Client(broker, "pub")
    spy.send(spy.engine.subscribe(AUTH_TOPIC), spy.engine.subscribe(DENIED_TOPIC), spy.engine.subscribe("any"))
    pub.send(pub.engine.authenticate("secret"), pub.engine.notify(DENIED_TOPIC, b"\x01forged"))
    pub.send(pub.engine.notify("any", b"x"))
    got = spy.events(broker.data_to_send())
    assert [(e.topic, bytes(e.content)) for e in got] == [(b"any", b"x")]  # no token, no forged denial
    stats = broker.stats()
    assert (stats["denied"], stats["authenticated"], stats["unrouted"], stats["delivered"]) == (0, 0, 2, 1)


def test_anonymous_grant_and_denials_the_client_sees() -> None:
    broker = RqueueBroker(access=AccessRules.from_mapping(RULES))
    anon = Client(broker, "anon")
    anon.send(anon.engine.subscribe("public/news"), anon.engine.subscribe("sensors/t1"))
    anon.send(anon.engine.notify("public/news", b"hi"))  # may read public/, not write there
    got = anon.events(broker.data_to_send())
    assert got == [
        DeniedByServer(int(RqueueType.SUBSCRIBE), b"sensors/t1"),
        DeniedByServer(int(RqueueType.NOTIFICATION), b"public/news"),
    ]
    assert anon.engine.denied_by_server == 2
    assert broker.subscriptions("anon") == {b"public/news"}
    assert broker.stats()["denied"] == 2
    denials = [e for e in _drain(broker) if isinstance(e, Denied)]
    assert [(d.message_type, d.topic, d.identity) for d in denials] == [
        (RqueueType.SUBSCRIBE, b"sensors/t1", None),
        (RqueueType.NOTIFICATION, b"public/news", None),
    ]


def test_denied_publish_never_reaches_a_subscriber() -> None:
    broker = RqueueBroker(access=AccessRules.from_mapping(RULES))
    dash, sensor, anon = Client(broker, "dash"), Client(broker, "sensor", "sensor-1"), Client(broker, "anon")
    dash.send(dash.engine.authenticate(TOKEN), dash.engine.subscribe("sensors/sensor-1/t"))
    dash.send(dash.engine.subscribe("sensors/sensor-2/t"))
    anon.send(anon.engine.notify("sensors/sensor-1/t", b"forged"))  # anonymous: no publish grant
    sensor.send(sensor.engine.notify("sensors/sensor-2/t", b"not mine"))  # outside its prefix
    sensor.send(sensor.engine.notify("sensors/sensor-1/t", b"21.5"))
    out = broker.data_to_send()
    got = dash.events(out)
    assert [(e.topic, bytes(e.content)) for e in got if isinstance(e, Notification)] == [
        (b"sensors/sensor-1/t", b"21.5")
    ]
    assert [type(e) for e in sensor.events(out)] == [DeniedByServer]
    assert [type(e) for e in anon.events(out)] == [DeniedByServer]
    events = _drain(broker)
    assert Authenticated("dash", "dashboard") in events and Authenticated("sensor", "sensor-1") in events
    assert broker.identity("dash") == "dashboard" and broker.identity("anon") is None
    assert broker.stats()["authenticated"] == 2 and broker.stats()["denied"] == 2


@pytest.mark.parametrize("second", [False, True])
def test_unknown_or_second_token_closes_the_client(second: bool) -> None:
    broker = RqueueBroker(access=AccessRules.from_mapping(RULES))
    client = Client(broker, "c")
    messages = [client.engine.authenticate(TOKEN)] if second else []
    client.send(*messages, client.engine.authenticate("wrong" if not second else TOKEN), client.engine.subscribe("x"))
    assert broker.connections_to_close() == ["c"]
    assert broker.stats()["auth_failures"] == 1
    gone = [e for e in _drain(broker) if isinstance(e, ClientGone)]
    assert gone == [ClientGone("c", "authentication failed")]
    assert broker.subscriptions("c") == frozenset()


def test_a_certificate_the_rules_do_not_know_is_anonymous() -> None:
    broker = RqueueBroker(access=AccessRules.from_mapping(RULES))
    Client(broker, "c", "someone-else")
    assert broker.identity("c") is None and broker.stats()["authenticated"] == 0


def test_rules_file_loads_and_errors_name_the_key(tmp_path: Path) -> None:
    good = tmp_path / "acl.toml"
    good.write_text(
        '[anonymous]\nsubscribe = ["public/"]\n\n[clients.dash]\n'
        f'token_sha256 = "{hashlib.sha256(b"t").hexdigest()}"\nsubscribe = ["s/"]\n'
    )
    rules = AccessRules.load(good)
    assert rules.identify_token(b"t") == "dash" and rules.identify_token(b"u") is None
    assert rules.grant("dash").may_subscribe(b"s/1") and not rules.grant("dash").may_publish(b"s/1")
    assert rules.grant(None).may_subscribe(b"public/x") and not rules.grant(None).may_subscribe(b"s/1")
    bad = {
        "[clients.a]\npublish = []\n": "clients.a: give certificate or token_sha256",
        '[clients.a]\ncertificate = "a"\npublsh = []\n': "clients.a: unknown key 'publsh'",
        '[clients.a]\ntoken_sha256 = "abc"\n': "clients.a.token_sha256 must be 64 hex digits",
        '[clients.a]\ncertificate = "a"\npublish = "x/"\n': "clients.a.publish must be a list",
        '[client.a]\ncertificate = "a"\n': "unknown table 'client'",
        '[clients.a]\ncertificate = "x"\n[clients.b]\ncertificate = "x"\n': "is given twice",
        "not = [toml": "not TOML",
    }
    for text, message in bad.items():
        good.write_text(text)
        with pytest.raises(ValueError, match=message) as info:
            AccessRules.load(good)
        assert str(good) in str(info.value)
