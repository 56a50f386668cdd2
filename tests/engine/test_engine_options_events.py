"""SocketOptions validation and the event classes."""

from __future__ import annotations

import dataclasses
import math

import pytest

from nbmq.errors import OptionError
from nbmq.events import (
    DisconnectReason,
    DropReason,
    Event,
    FrameRejected,
    MessageDropped,
    PeerConnected,
    PeerDisconnected,
    RejectReason,
)
from nbmq.options import OPTION_SPECS, SocketOptions

REFERENCE_DEFAULTS = {
    "send_hwm": 1000,
    "recv_hwm": 1000,
    "safe_resend_limit": 10,
    "max_tick_send": 1000,
    "max_tick_recv": 1000,
    "uncompleted_message_ttl": 10.0,
    "queue_maint_ivl": 1.0,
    "peer_keepalive": 10.0,
    "peer_heartbeat_ivl": 1.0,
    "reconnect_wait": 5.0,
    "safe_resend_ivl": 0.2,
    "safe_hash_dedup_ttl": 1.0,
}


def test_reference_defaults_and_types():
    opts = SocketOptions()
    for name, value in REFERENCE_DEFAULTS.items():
        assert getattr(opts, name) == value
        assert type(getattr(opts, name)) is type(value), name
    for name in ("max_message_size", "max_incomplete_bytes", "max_peers", "sndbuf", "rcvbuf"):
        assert isinstance(getattr(opts, name), int) and getattr(opts, name) > 0
    assert isinstance(opts.linger, float)
    assert opts.max_message_size <= opts.max_incomplete_bytes


def test_every_option_is_documented():
    for name, spec in OPTION_SPECS.items():
        assert spec.doc and spec.kind in ("count", "seconds", "bytes", "flag", "key", "keys"), name
        assert spec.layer in ("engine", "transport")
        assert name in SocketOptions.__doc__


def test_construction_validates():
    opts = SocketOptions(send_hwm=5, peer_keepalive=2, linger=math.inf)
    assert opts.send_hwm == 5
    assert opts.peer_keepalive == 2.0 and isinstance(opts.peer_keepalive, float)
    with pytest.raises(OptionError, match="send_hwm"):
        SocketOptions(send_hwm=0)
    with pytest.raises(OptionError, match="no_such_option"):
        SocketOptions(no_such_option=1)


@pytest.mark.parametrize(
    "name, value",
    [
        ("send_hwm", 0),
        ("send_hwm", -1),
        ("send_hwm", 1.5),
        ("send_hwm", True),
        ("send_hwm", "10"),
        ("recv_hwm", 0),
        ("safe_resend_limit", -1),
        ("max_tick_send", 0),
        ("max_tick_recv", 0),
        ("uncompleted_message_ttl", 0),
        ("queue_maint_ivl", -1.0),
        ("peer_keepalive", math.nan),
        ("peer_keepalive", math.inf),
        ("peer_heartbeat_ivl", 0.0),
        ("reconnect_wait", "5"),
        ("safe_resend_ivl", 0),
        ("safe_hash_dedup_ttl", -0.1),
        ("max_message_size", 2**32),
        ("max_message_size", -1),
        ("max_incomplete_bytes", -1),
        ("max_peers", 0),
        ("max_events", 0),
        ("sndbuf", -1),
        ("rcvbuf", 1.0),
        ("linger", -1.0),
        ("linger", math.nan),
        ("max_peer_incomplete_bytes", -1),
        ("reference_compat", 1),
        ("reference_compat", "yes"),
    ],
)
def test_assignment_validates_and_names_the_option(name, value):
    opts = SocketOptions()
    before = getattr(opts, name)
    with pytest.raises(OptionError) as info:
        setattr(opts, name, value)
    assert name in str(info.value)
    assert getattr(opts, name) == before
    with pytest.raises(OptionError, match=name):
        SocketOptions(**{name: value})


def test_assignment_accepts_valid_values():
    opts = SocketOptions()
    opts.send_hwm = 5
    opts.safe_resend_limit = 0
    opts.safe_hash_dedup_ttl = 0
    opts.reconnect_wait = 1
    assert (opts.send_hwm, opts.safe_resend_limit, opts.reconnect_wait) == (5, 0, 1.0)


def test_unknown_attribute_rejected():
    opts = SocketOptions()
    with pytest.raises(OptionError, match="sendhwm"):
        opts.sendhwm = 3
    with pytest.raises(OptionError):
        del opts.send_hwm


def test_copy_is_independent_and_equal():
    a = SocketOptions(send_hwm=7)
    b = a.copy()
    assert a == b and a is not b
    b.send_hwm = 8
    assert a.send_hwm == 7
    assert a.copy(recv_hwm=3).recv_hwm == 3
    assert "send_hwm=7" in repr(a)
    assert a.as_dict()["send_hwm"] == 7


def test_engine_copies_options():
    from nbmq.engine import Dealer

    opts = SocketOptions(send_hwm=2)
    engine = Dealer(opts)
    opts.send_hwm = 100
    assert engine.options.send_hwm == 2


def test_events_shape():
    assert not dataclasses.is_dataclass(Event)
    assert Event.__slots__ == ()
    events = [
        PeerConnected(1, ("h", 1)),
        PeerDisconnected(1, ("h", 1), DisconnectReason.KEEPALIVE_EXPIRED),
        MessageDropped(1, 2, DropReason.TTL_EXPIRED),
        FrameRejected(("h", 1), RejectReason.MALFORMED, "truncated header"),
    ]
    for event in events:
        assert isinstance(event, Event)
        assert dataclasses.is_dataclass(event)
        assert not hasattr(event, "__dict__")
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(event, dataclasses.fields(event)[0].name, 5)
    assert FrameRejected(("h", 1), RejectReason.UNEXPECTED).detail == ""
    assert {r.value for r in DisconnectReason} >= {"keepalive expired", "disconnected by peer", "evicted", "closed"}
    assert {r.value for r in DropReason} >= {"ttl expired", "resend limit", "recv hwm", "rejected", "too large"}
    assert PeerConnected(1, "a") == PeerConnected(1, "a")


def test_set_option_on_a_running_engine():
    import random

    from nbmq.engine import Dealer, SafeDealer
    from nbmq.errors import WouldBlock

    engine = Dealer(SocketOptions(send_hwm=1))
    engine.send([b"a"], 0.0)
    with pytest.raises(WouldBlock):
        engine.send([b"b"], 0.0)
    engine.set_option("send_hwm", 2)
    engine.send([b"b"], 0.0)
    assert engine.options.send_hwm == 2
    with pytest.raises(OptionError, match="send_hwm"):
        engine.set_option("send_hwm", 0)
    assert engine.options.send_hwm == 2
    with pytest.raises(OptionError, match="nope"):
        engine.set_option("nope", 1)
    # a shorter heartbeat interval takes effect at once
    server = Dealer.bound(("s", 1), rng=random.Random(1))
    server.receive_datagram(bytes.fromhex("01010000000000000000"), ("c", 1), 0.0)
    sid = next(iter(server.peers))
    server.receive_datagram(bytes.fromhex("0104") + sid.to_bytes(8, "big"), ("c", 1), 0.0)
    server.datagrams_to_send(0.0)
    assert server.next_deadline() == pytest.approx(1.0)
    server.set_option("peer_heartbeat_ivl", 0.25)
    assert server.next_deadline() == pytest.approx(0.25)
    safe = SafeDealer()
    safe.set_option("safe_hash_dedup_ttl", 5.0)
    assert safe._recvq.dedup_ttl == 5.0
    safe.set_option("linger", 0.0)  # recorded only
    assert safe.options.linger == 0.0
