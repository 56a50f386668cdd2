"""Delivery over a bad link: 20% loss each way, 5% duplication, reordering and jitter.

SafeDealer must deliver every message exactly once; Dealer must deliver only complete, correct
messages (some are lost, single-frame ones may be duplicated by the link: fire and forget).
"""

from __future__ import annotations

import hashlib
import math
import random

import pytest

from nbmq.engine import Dealer, SafeDealer
from nbmq.errors import WouldBlock
from nbmq.events import DropReason
from nbmq.options import SocketOptions
from nbmq.testing import Link, connected_pair

BAD_LINK = Link(loss=0.2, duplicate=0.05, reorder=0.1, delay=0.002, jitter=0.002, reorder_delay=0.02)
COUNT = 2000


def messages(count: int, seed: int) -> list[list[bytes]]:
    """``count`` multipart messages, 1..3 parts, total sizes log-uniform in 1 B .. 64 KiB."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        total = int(math.exp(rng.uniform(0, math.log(64 * 1024))))
        nparts = rng.randint(1, 3)
        cuts = sorted(rng.randint(0, total) for _ in range(nparts - 1))
        bounds = [0, *cuts, total]
        blob = rng.randbytes(total)
        out.append([blob[a:b] for a, b in zip(bounds, bounds[1:])])
    return out


def digest(parts) -> tuple[str, ...]:
    return tuple(hashlib.sha256(bytes(p)).hexdigest() for p in parts) + (str(len(parts)),)


def run_transfer(net, sender, receiver, msgs, max_time):
    """Send everything (stepping the network whenever send_hwm pushes back), collecting what
    the receiver delivers. Bounded by ``max_time`` virtual seconds."""
    got = []
    start = net.now
    it = iter(msgs)
    pending = next(it, None)
    while pending is not None:
        try:
            sender.engine.send(pending, net.now)
            pending = next(it, None)
        except WouldBlock:
            net.flush(sender)
            net.step(0.01)
            got.extend(receiver.recv_all())
            assert net.now - start < max_time, "sending took too long"
    net.flush(sender)
    return got


def test_safe_dealer_exactly_once_under_loss_duplication_reordering():
    msgs = messages(COUNT, seed=7)
    opts = SocketOptions(send_hwm=200)
    net, server, client = connected_pair(SafeDealer(opts, random.Random(1)), SafeDealer(opts), seed=3, link=BAD_LINK)
    got = run_transfer(net, client, server, msgs, max_time=600)
    done = net.run_until(lambda: got.extend(server.recv_all()) or client.engine.pending_messages == 0, 60.0)
    got.extend(server.recv_all())
    assert done
    assert net.lost > 0 and net.duplicated > 0
    assert sorted(map(digest, got)) == sorted(map(digest, msgs))  # every one, exactly once
    assert len(got) == COUNT
    rc, sc = server.engine.counters, client.engine.counters
    assert sc.resends > 0 and rc.duplicate_frames > 0
    assert rc.dropped_total == 0 and rc.malformed == 0
    # the sender may give up on a frame whose acks were all lost (its data arrived): counted
    assert sc.dropped[DropReason.RESEND_LIMIT] == sc.dropped_total
    # nothing left behind at the receiver once the TTL has passed
    net.step(12.0)
    assert server.engine.incomplete_messages == 0


def test_dealer_delivers_only_complete_correct_messages():
    msgs = messages(COUNT // 2, seed=8)
    known = {digest(m) for m in msgs}
    opts = SocketOptions(send_hwm=200, uncompleted_message_ttl=2.0)
    net, server, client = connected_pair(Dealer(opts, random.Random(1)), Dealer(opts), seed=4, link=BAD_LINK)
    got = run_transfer(net, client, server, msgs, max_time=300)
    net.step(1.0)
    got.extend(server.recv_all())
    assert got, "some messages get through"
    assert all(digest(m) in known for m in got)  # complete and correct, never a mix
    assert len({digest(m) for m in got}) < len(msgs)  # 20% loss loses multi-frame messages
    net.step(5.0)  # incomplete leftovers expire and are reported
    counters = server.engine.counters
    assert server.engine.incomplete_messages == 0
    assert counters.dropped[DropReason.TTL_EXPIRED] > 0
    assert counters.malformed == 0


@pytest.mark.parametrize("seed", [1, 2])
def test_simulator_is_deterministic(seed):
    def run():
        msgs = messages(50, seed=seed)
        net, server, client = connected_pair(
            SafeDealer(rng=random.Random(seed)),
            SafeDealer(rng=random.Random(seed + 1)),
            seed=seed,
            link=BAD_LINK,
        )
        got = run_transfer(net, client, server, msgs, max_time=60)
        net.run_until(lambda: client.engine.pending_messages == 0, 10.0)
        got.extend(server.recv_all())
        return [digest(m) for m in got], net.sent, net.lost, client.engine.counters.as_dict()

    assert run() == run()
