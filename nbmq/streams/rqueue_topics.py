"""rqueue topics (seed 004): the type accepted for a topic and the rule that encodes it, and the
one topic our drop-notice extension reserves.

Shared by the client (:mod:`nbmq.streams.rqueue_client`) and the broker (:mod:`nbmq.streams.rqueue_broker`).
"""

from __future__ import annotations

import struct

__all__ = ["Topic", "topic_bytes", "DROP_NOTICE_TOPIC", "encode_drop_count", "decode_drop_count"]

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


# -- our extension: drop notices -----------------------------------------------------------------

#: The topic of drop notices, an nbmq extension to seed 004 (off unless the server enables it):
#: a client that subscribes to it is told, once its outgoing buffer drains, how many of its
#: notifications the server dropped while it was slow. Publishing on it is never forwarded.
DROP_NOTICE_TOPIC = b"$nbmq/dropped"
_COUNT = struct.Struct(">Q")


def encode_drop_count(count: int) -> bytes:
    """A drop notice's content: the dropped count as an unsigned 64-bit big-endian integer (the
    byte order of rqueue's preamble), 8 bytes."""
    return _COUNT.pack(min(count, 0xFFFFFFFFFFFFFFFF))


def decode_drop_count(content: bytes | bytearray | memoryview) -> int | None:
    """The count in a drop notice's content, or None when it is not 8 bytes (not a notice)."""
    return _COUNT.unpack(content)[0] if memoryview(content).nbytes == 8 else None
