"""rqueue topics (seed 004): the type accepted for a topic and the rule that encodes it.

Shared by the client (:mod:`nbmq.rqueue_client`) and the broker (:mod:`nbmq.rqueue_broker`).
"""

from __future__ import annotations

__all__ = ["Topic", "topic_bytes"]

Topic = bytes | bytearray | memoryview | str


def topic_bytes(topic: Topic) -> bytes:
    """A topic as bytes: ``str`` is UTF-8 encoded; at most 255 bytes (the u8 ``topic_len``).

    Raises:
        ValueError: the encoded topic is over 255 bytes.
    """
    raw = topic.encode("utf-8") if isinstance(topic, str) else bytes(topic)
    if len(raw) > 255:
        raise ValueError(f"a topic is at most 255 bytes, got {len(raw)}")
    return raw
