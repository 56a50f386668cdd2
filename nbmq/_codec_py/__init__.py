"""The pure-Python codec: the readable reference for ``nbmq._codec`` (Cython) and its fallback.

Both modules expose exactly the names in ``__all__`` with the same signatures, results and
errors (checked by tests/codec/test_parity.py). Docstrings live here.
"""

from .batch import parse_frames, split_bundles
from .bqsp import BqspDecoder, decode_bqsp_header, encode_bqsp_header, encode_bqsp_packet
from .fnv import ack_hash, fnv1a64, message_id, session_id
from .frames import (
    bundle_layout,
    encode_control_frame,
    encode_control_frame_into,
    encode_data_frame,
    encode_data_frame_into,
    parse_frame,
)
from .reassembly import MESSAGE_OVERHEAD, MESSAGE_RESERVATION, Reassembler
from .rqueue import (
    RqueueDecoder,
    encode_deregister,
    encode_notification,
    encode_remove,
    encode_subscribe,
)
from .shard import ShardedMessage, frame_count, shard_message, shard_message_bytes

__all__ = [
    "parse_frames",
    "split_bundles",
    "bundle_layout",
    "BqspDecoder",
    "decode_bqsp_header",
    "encode_bqsp_header",
    "encode_bqsp_packet",
    "ack_hash",
    "fnv1a64",
    "message_id",
    "session_id",
    "encode_control_frame",
    "encode_control_frame_into",
    "encode_data_frame",
    "encode_data_frame_into",
    "parse_frame",
    "MESSAGE_OVERHEAD",
    "MESSAGE_RESERVATION",
    "Reassembler",
    "RqueueDecoder",
    "encode_deregister",
    "encode_notification",
    "encode_remove",
    "encode_subscribe",
    "ShardedMessage",
    "frame_count",
    "shard_message",
    "shard_message_bytes",
]
