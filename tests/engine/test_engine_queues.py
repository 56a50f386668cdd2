"""The queueing layer on its own: RecvQueue and SendQueue, virtual time only."""

from __future__ import annotations

import pytest

from nbmq import codec
from nbmq.engine import Peer, PeerState, PushResult, RecvQueue, SendQueue
from nbmq.errors import DecodeError, WouldBlock
from nbmq.events import DropReason


def frames_of(parts, session_id=7, nonce=1):
    mid = codec.message_id(parts, nonce)
    return [codec.parse_frame(f) for f in codec.shard_message_bytes(parts, session_id, mid)], mid


def peer(sid=7, addr=("h", 1)):
    return Peer(sid, addr, PeerState.CONNECTED, 0.0, False)


# ---------------------------------------------------------------------------- RecvQueue


def test_recv_in_arrival_order_and_wouldblock():
    q = RecvQueue()
    with pytest.raises(WouldBlock):
        q.pull()
    for n in range(3):
        frames, _ = frames_of([bytes([n]) * (500 + n)], nonce=n)
        results = [q.push(f, 0.0) for f in reversed(frames)]
        assert results == [PushResult.INCOMPLETE] * (len(frames) - 1) + [PushResult.COMPLETE]
    assert len(q) == 3
    assert [bytes(q.pull()[0])[0] for _ in range(3)] == [0, 1, 2]
    assert q.completed == 3 and q.pulled == 3


def test_recv_parts_are_owned_uint8_arrays():
    q = RecvQueue()
    frames, _ = frames_of([b"a" * 1000, b"", b"bc"])
    buf = bytearray()
    for f in frames:
        q.push(f, 0.0)
    parts = q.pull()
    assert [p.dtype.name for p in parts] == ["uint8"] * 3
    assert [bytes(p) for p in parts] == [b"a" * 1000, b"", b"bc"]
    assert all(p.flags.owndata for p in parts)
    del buf


def test_recv_incomplete_expires_after_ttl_checked_every_maint_ivl():
    q = RecvQueue(uncompleted_message_ttl=10.0, queue_maint_ivl=1.0)
    frames, mid = frames_of([b"x" * 1000])
    q.push(frames[0], 0.0)
    assert q.incomplete == 1
    assert q.maintain(0.0) == []  # first run
    assert q.next_deadline() == 1.0
    assert q.maintain(0.5) == []  # early: nothing
    for t in range(1, 11):
        assert q.maintain(float(t)) == [], t  # first_seen 0 is not < t - 10 until t > 10
    assert q.maintain(10.5) == []  # not due (next run at 11)
    assert q.maintain(11.0) == [(7, mid)]
    assert q.incomplete == 0 and q.expired == 1
    assert q.next_deadline() is None
    # a late frame of the expired message starts a new incomplete message
    assert q.push(frames[1], 11.5) is PushResult.INCOMPLETE


def test_recv_hwm_drops_message_completed_while_full():
    """Divergence: the reference returns WouldBlock from push; UDP input never blocks, so the
    message is dropped and counted (the engine emits MessageDropped(RECV_HWM))."""
    q = RecvQueue(recv_hwm=1)
    a, _ = frames_of([b"a"], nonce=1)
    b, _ = frames_of([b"b" * 600], nonce=2)
    assert q.push(a[0], 0.0) is PushResult.COMPLETE
    assert q.push(b[0], 0.0) is PushResult.INCOMPLETE  # incomplete ones are not counted
    assert q.push(b[1], 0.0) is PushResult.DROPPED
    assert q.dropped_hwm == 1 and len(q) == 1
    assert bytes(q.pull()[0]) == b"a"


def test_recv_refuse_when_full_takes_nothing_until_pulled():
    q = RecvQueue(recv_hwm=1, refuse_when_full=True, dedup_ttl=1.0)
    a, _ = frames_of([b"a"], nonce=1)
    b, _ = frames_of([b"b" * 600], nonce=2)
    assert q.push(a[0], 0.0) is PushResult.COMPLETE
    assert q.push(b[0], 0.0) is PushResult.REFUSED
    assert q.incomplete == 0 and q.refused == 1
    q.pull()
    assert [q.push(f, 0.1) for f in b] == [PushResult.INCOMPLETE, PushResult.COMPLETE]


def test_recv_dedup_window_really_expires():
    q = RecvQueue(dedup_ttl=1.0, queue_maint_ivl=0.5)
    frames, mid = frames_of([b"x" * 600])
    assert [q.push(f, 0.0) for f in frames] == [PushResult.INCOMPLETE, PushResult.COMPLETE]
    q.pull()
    # a repeat inside the window is dropped frame by frame, before the reassembler
    assert [q.push(f, 0.5) for f in frames] == [PushResult.DUPLICATE] * 2
    assert q.incomplete == 0 and q.duplicates == 2
    assert q.remembered == 1
    assert q.next_deadline() is not None
    # the window passes: the same message is delivered again (the reference never forgets)
    assert [q.push(f, 1.0) for f in frames] == [PushResult.INCOMPLETE, PushResult.COMPLETE]
    q.pull()
    q.maintain(1.0)
    q.maintain(1.9)
    assert q.remembered == 1  # the second delivery's entry (until 2.0)
    q.maintain(2.5)
    assert q.remembered == 0
    assert q.next_deadline() is None


def test_recv_dedup_window_renewed_by_late_repeats():
    """Resends keep coming (a congestion-control resend timer can exceed safe_resend_ivl): a
    repeat in the window's second half renews it, so the message is never delivered twice;
    once the repeats stop, the window expires as before."""
    q = RecvQueue(dedup_ttl=1.0, queue_maint_ivl=0.5)
    frames, mid = frames_of([b"y" * 10])
    assert q.push(frames[0], 0.0) is PushResult.COMPLETE
    q.pull()
    for t in (0.7, 1.4, 2.1, 2.8):  # each repeat lands after the previous window's middle
        assert q.push(frames[0], t) is PushResult.DUPLICATE
    assert q.duplicates == 4
    q.maintain(3.0)
    assert q.remembered == 1
    assert q.push(frames[0], 3.9) is PushResult.COMPLETE  # 1.1 s after the last repeat: new


def test_recv_dedup_forgets_in_expiry_order_after_renewals_and_redelivery():
    """The dedup entries expire oldest first although renewals and a redelivery after the
    window change their order (the dict itself is the expiry order, so a renewed
    or re-added entry must move behind the others or it would hold them back)."""
    q = RecvQueue(dedup_ttl=1.0, queue_maint_ivl=0.0)
    (a,), _ = frames_of([b"a"], nonce=1)
    (b,), _ = frames_of([b"b"], nonce=2)
    (c,), _ = frames_of([b"c"], nonce=3)
    assert q.push(a, 0.0) is PushResult.COMPLETE  # until 1.0
    assert q.push(b, 0.1) is PushResult.COMPLETE  # until 1.1
    assert q.push(a, 0.6) is PushResult.DUPLICATE  # renewed: until 1.6
    q.maintain(1.2)
    assert q.remembered == 1  # b forgotten, a (renewed, older insertion) kept
    assert q.push(b, 1.2) is PushResult.COMPLETE  # b again, a new delivery: until 2.2
    assert q.push(c, 1.3) is PushResult.COMPLETE  # until 2.3
    q.maintain(1.7)
    assert q.remembered == 2  # a (1.6) forgotten; b and c kept
    assert q.push(a, 1.7) is PushResult.COMPLETE  # until 2.7 (a re-added at the end)
    q.maintain(2.25)
    assert q.remembered == 2  # b (2.2) gone; c (2.3) and a (2.7) kept
    q.maintain(2.5)
    assert q.remembered == 1
    q.maintain(2.7)
    assert q.remembered == 0 and q.next_deadline() is None
    assert len(q) == 5


def test_recv_dedup_expired_entry_not_yet_forgotten_moves_to_the_end():
    """A message delivered again after its window passed but before maintain() forgot it
    gets a fresh entry behind the younger ones, so maintain() still forgets those in time."""
    q = RecvQueue(dedup_ttl=1.0, queue_maint_ivl=0.0)
    (a,), _ = frames_of([b"a"], nonce=1)
    (b,), _ = frames_of([b"b"], nonce=2)
    assert q.push(a, 0.0) is PushResult.COMPLETE  # until 1.0
    assert q.push(b, 0.5) is PushResult.COMPLETE  # until 1.5
    assert q.push(a, 1.2) is PushResult.COMPLETE  # a's window passed: until 2.2
    q.maintain(1.6)
    assert q.remembered == 1  # b forgotten although a was inserted before it
    assert q.push(b, 1.6) is PushResult.COMPLETE and q.push(a, 1.6) is PushResult.DUPLICATE


def test_recv_without_dedup_delivers_whole_repeats_again():
    """Reference pull(): no de-duplication (vector recv_whole_message_repeated_pull)."""
    q = RecvQueue()
    frames, _ = frames_of([b"x" * 600])
    for _ in range(2):
        for f in frames:
            q.push(f, 0.0)
        q.pull()
    assert q.completed == 2


def test_recv_counts_rejects_and_too_large():
    q = RecvQueue(max_message_size=1000, max_incomplete_bytes=5000)
    big, _ = frames_of([b"x" * 1001])
    assert q.push(big[0], 0.0) is PushResult.TOO_LARGE
    frames, _ = frames_of([b"y" * 900])
    assert q.push(frames[0], 0.0) is PushResult.INCOMPLETE
    liar = frames[1]._replace(part_count=2)
    assert q.push(liar, 0.0) is PushResult.REJECTED
    assert q.too_large == 1 and q.rejected == 1 and q.incomplete == 0


def test_reference_recv_vectors_never_crash(vectors):
    """Every recv_queue vector (the reference panics on four of them): parse errors are
    DecodeError at the codec, everything else is a PushResult; nothing else escapes."""
    for case in (c for c in vectors["cases"] if c["kind"] == "recv_queue"):
        safe = any(step["op"] == "pull_safe" for step in case["expected"]["steps"])
        q = RecvQueue(recv_hwm=case["fields"]["recv_hwm"], dedup_ttl=1.0 if safe else None)
        delivered = []
        for step in case["expected"]["steps"]:
            if step["op"] == "push":
                try:
                    frame = codec.parse_frame(bytes.fromhex(step["frame_hex"]))
                except DecodeError:
                    continue  # the codec refuses what the reference panics on
                assert isinstance(q.push(frame, 0.0), PushResult)
            else:
                try:
                    delivered.append(q.pull())
                except WouldBlock:
                    pass
        if not case["expected"]["panicked"] and case["name"] not in (
            "recv_overlapping_chunks_complete_with_holes",  # we reject the conflicting overlap
            "recv_empty_middle_part_never_completes",  # we complete it; the reference never does
            "recv_hwm_incoming_full",  # divergence: incomplete messages do not count
            "recv_whole_message_repeated_before_pull",  # no dedup: delivered twice
        ):
            assert len(delivered) == len(case["expected"]["delivered_message_ids"]), case["name"]


# ---------------------------------------------------------------------------- SendQueue


def _take(q, now=0.0, limit=1000, route_peer=None):
    out = []
    q.take(now, limit, out, [] if route_peer is None else [route_peer])
    return out


def test_send_hwm_would_block():
    q = SendQueue(send_hwm=2)
    sh = codec.shard_message([b"a"], 0, 1)
    q.push(sh, 1)
    q.push(sh, 2)
    with pytest.raises(WouldBlock):
        q.push(sh, 3)
    assert len(q) == 2 and q.full()


def test_send_queue_hwm_and_marker_accounting_vector(vectors):
    """Vector send_queue_hwm_and_marker_accounting (hwm 2, 500-byte messages, pull one frame at
    a time). Same pushes, same frame lengths; divergence: our count drops when a message's last
    frame is handed out, the reference's only on the pull after it."""
    case = next(c for c in vectors["cases"] if c["name"] == "send_queue_hwm_and_marker_accounting")
    q = SendQueue(send_hwm=case["fields"]["send_hwm"])
    p = peer()
    reference_lag = 0
    for step in case["expected"]["steps"]:
        if step["op"] == "push":
            parts = [bytes(case["fields"]["message_size"])]
            mid = codec.message_id(parts, step["nonce"])
            if step["result"] == "ok":
                q.push(codec.shard_message(parts, 0, mid), mid)
            else:
                with pytest.raises(WouldBlock):
                    q.push(codec.shard_message(parts, 0, mid), mid)
            assert len(q) == step["message_count_after"]
        else:
            out = _take(q, limit=1, route_peer=p)
            length = len(out[0][0]) if out else None
            assert length == step["frame_length"]
            # the reference still counts a message whose last frame went out until the next pull
            reference_lag = step["message_count_after"] - len(q)
            assert reference_lag in (0, 1)
    assert len(q) == 0


def test_send_frames_in_order_with_cap_and_session_patched():
    q = SendQueue()
    parts = [b"x" * 2000]
    mid = codec.message_id(parts, 1)
    q.push(codec.shard_message(parts, 0, mid), mid)
    q.push(codec.shard_message([b"y"], 0, 9), 9)
    p = peer(sid=0xABCDEF)
    out = _take(q, limit=3, route_peer=p)
    assert len(out) == 3 and len(q) == 2
    out += _take(q, limit=3, route_peer=p)
    assert len(out) == 6 and len(q) == 0
    expected = codec.shard_message_bytes(parts, 0xABCDEF, mid) + codec.shard_message_bytes([b"y"], 0xABCDEF, 9)
    assert [bytes(d) for d, _ in out] == expected
    assert {a for _, a in out} == {("h", 1)}


def test_send_waits_without_route():
    q = SendQueue()
    q.push(codec.shard_message([b"a"], 0, 1), 1)
    assert _take(q, route_peer=None) == []
    assert not q.ready(False) and q.ready(True)
    assert len(_take(q, route_peer=peer())) == 1


def test_send_peer_gone_drops():
    drops = []
    q = SendQueue(on_drop=lambda s, m, r: drops.append((s, m, r)))
    p = peer()
    q.push(codec.shard_message([b"x" * 2000], 0, 5), 5)
    _take(q, limit=1, route_peer=p)
    p._state = PeerState.CLOSED
    assert _take(q, route_peer=peer(8)) == []
    assert drops == [(7, 5, DropReason.PEER_GONE)]
    assert len(q) == 0


def _safe_queue(**kw):
    drops = []
    q = SendQueue(safe=True, resend_ivl=0.2, resend_limit=3, on_drop=lambda s, m, r: drops.append((s, m, r)), **kw)
    return q, drops


def test_safe_resend_timing_and_ack():
    q, drops = _safe_queue()
    p = peer()
    q.push(codec.shard_message([b"x" * 600], 0, 5), 5)
    out = _take(q, now=0.0, route_peer=p)
    assert len(out) == 2 and q.in_flight == 2 and len(q) == 1
    assert q.next_resend() == pytest.approx(0.2)
    resent = []
    assert q.resend_due(0.1, resent) == 0  # early: nothing
    assert q.ack(7, codec.ack_hash(out[0][0]))
    assert q.resend_due(0.2, resent) == 1
    assert [bytes(d) for d, _ in resent] == [bytes(out[1][0])]
    assert q.next_resend() == pytest.approx(0.4)
    assert q.ack(7, codec.ack_hash(out[1][0]))
    assert len(q) == 0 and q.in_flight == 0 and not drops
    assert q.next_resend() is None
    assert not q.ack(7, codec.ack_hash(out[1][0]))  # acked twice: unknown
    assert q.acks_unknown == 1


def test_safe_resend_limit_then_drop():
    q, drops = _safe_queue()
    p = peer()
    q.push(codec.shard_message([b"x" * 600], 0, 5), 5)
    _take(q, now=0.0, route_peer=p)
    resent = []
    t = 0.0
    for _ in range(10):
        t = q.next_resend() or t
        q.resend_due(t, resent)
        if drops:
            break
    # 2 frames x 3 resends, then dropped on the 4th deadline (0.8 s)
    assert len(resent) == 6
    assert t == pytest.approx(0.8)
    assert drops == [(7, 5, DropReason.RESEND_LIMIT)]
    assert len(q) == 0 and q.in_flight == 0 and q.next_resend() is None


def test_safe_late_resend_catches_up_once():
    q, drops = _safe_queue()
    q.push(codec.shard_message([b"x"], 0, 5), 5)
    _take(q, now=0.0, route_peer=peer())
    resent = []
    assert q.resend_due(0.5, resent) == 1  # two intervals late: resent once
    assert q.next_resend() == pytest.approx(0.7)


def test_safe_unknown_and_foreign_acks_ignored():
    q, drops = _safe_queue()
    out = []
    q.push(codec.shard_message([b"x"], 0, 5), 5)
    q.take(0.0, 10, out, [peer()])
    assert not q.ack(7, 12345)
    assert not q.ack(8, codec.ack_hash(out[0][0]))  # right hash, wrong session
    assert q.acks_unknown == 2 and q.in_flight == 1
    assert q.ack(7, codec.ack_hash(out[0][0]))


def test_safe_message_held_until_every_frame_acked():
    q, drops = _safe_queue(send_hwm=1)
    q.push(codec.shard_message([b"x" * 1000], 0, 5), 5)
    out = _take(q, route_peer=peer())
    with pytest.raises(WouldBlock):
        q.push(codec.shard_message([b"y"], 0, 6), 6)
    for d, _ in out:
        q.ack(7, codec.ack_hash(d))
    q.push(codec.shard_message([b"y"], 0, 6), 6)


def test_group_counts_once():
    q = SendQueue(send_hwm=1)
    a, b = peer(1), peer(2)
    q.push_group([(codec.shard_message([b"x"], 1, 10), 10, a), (codec.shard_message([b"x"], 2, 11), 11, b)])
    assert len(q) == 1 and q.queued == 2
    with pytest.raises(WouldBlock):
        q.push_group([(codec.shard_message([b"x"], 1, 12), 12, a)])
    out = _take(q, limit=1)
    assert len(out) == 1 and len(q) == 1
    _take(q)
    assert len(q) == 0


def test_clear_drops_everything():
    q, drops = _safe_queue()
    q.push(codec.shard_message([b"x"], 0, 5), 5)
    q.push(codec.shard_message([b"y"], 0, 6), 6)
    _take(q, limit=1, route_peer=peer())
    assert q.clear(DropReason.CLOSED) == 2
    assert len(q) == 0 and q.in_flight == 0
    assert [d[2] for d in drops] == [DropReason.CLOSED, DropReason.CLOSED]
