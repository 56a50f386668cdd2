"""Pacing: at most ``rate`` bytes per second to each peer, in bursts of at most ``burst`` bytes.

A token bucket per destination address (the classic shaper: tokens accrue at ``rate`` up to
``burst``; a datagram goes when its size in tokens is there). Datagrams to one peer keep their
order; peers do not wait for each other. The Dealer stays fire-and-forget: pacing only spreads
a burst out so a receiver with a small buffer (the Rust reference keeps 208 KB) can keep up.
Options ``pace_rate`` and ``pace_burst`` (bytes/s, bytes); no clock is read here.
"""

from __future__ import annotations

from collections import deque
from typing import Any

__all__ = ["Pacer"]


class _Bucket:
    __slots__ = ("queue", "tokens", "stamp")

    def __init__(self, tokens: float, stamp: float) -> None:
        self.queue: deque[tuple[Any, Any]] = deque()
        self.tokens = tokens
        self.stamp = stamp


class Pacer:
    """Per-peer token buckets in front of a datagram link.

    Args:
        rate: bytes per second per peer (int > 0).
        burst: bucket size, bytes (int >= 500, the largest nbmq datagram); a peer idle long
            enough may be sent this much at once.

    Attributes:
        waiting: datagrams held back (int).

    Raises:
        ValueError: ``rate`` <= 0 or ``burst`` < 500.
    """

    __slots__ = ("rate", "burst", "waiting", "_buckets")

    def __init__(self, rate: int, burst: int) -> None:
        if rate <= 0:
            raise ValueError(f"pace rate must be > 0 bytes/s, got {rate}")
        if burst < 500:
            raise ValueError(f"pace burst must be >= 500 bytes, got {burst}")
        self.rate = float(rate)
        self.burst = float(burst)
        self.waiting = 0
        self._buckets: dict[Any, _Bucket] = {}

    def push(self, datagrams: list[tuple[Any, Any]], now: float) -> None:
        """Hold ``(data, addr)`` pairs until :meth:`release` lets them go (order kept per addr)."""
        buckets = self._buckets
        for item in datagrams:
            bucket = buckets.get(item[1])
            if bucket is None:
                bucket = buckets[item[1]] = _Bucket(self.burst, now)
            bucket.queue.append(item)
        self.waiting += len(datagrams)

    def release(self, now: float) -> list[tuple[Any, Any]]:
        """The held datagrams whose peers have the tokens now, in push order per peer.

        Args:
            now: seconds, monotonic (the same clock as every other call).
        """
        out: list[tuple[Any, Any]] = []
        rate, burst = self.rate, self.burst
        idle = []
        for addr, bucket in self._buckets.items():
            tokens = min(burst, bucket.tokens + (now - bucket.stamp) * rate)
            bucket.stamp = now
            queue = bucket.queue
            while queue and tokens >= len(queue[0][0]):
                item = queue.popleft()
                tokens -= len(item[0])
                out.append(item)
            bucket.tokens = tokens
            if not queue and tokens >= burst:
                idle.append(addr)  # a full bucket holds no state worth keeping
        for addr in idle:
            del self._buckets[addr]
        self.waiting -= len(out)
        return out

    def next_release(self) -> float | None:
        """When (monotonic seconds) the first held datagram will have its tokens; None when
        nothing is held."""
        best = None
        for bucket in self._buckets.values():
            if bucket.queue:
                need = len(bucket.queue[0][0]) - bucket.tokens
                at = bucket.stamp + max(0.0, need) / self.rate
                if best is None or at < best:
                    best = at
        return best

    def take_all(self) -> list[tuple[Any, Any]]:
        """Every held datagram (pacing turned off), in push order per peer."""
        out = [item for bucket in self._buckets.values() for item in bucket.queue]
        self._buckets.clear()
        self.waiting = 0
        return out
