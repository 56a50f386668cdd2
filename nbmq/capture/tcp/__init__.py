"""TCP streams out of captures: segments, reassembly per direction, BQSP / rqueue decoding.

Entry: ``streams.decode_tcp_streams(source, ...)``. ``segments.iter_tcp_segments`` walks the
file with the files room and decodes link / IP / TCP headers (``segments.has_tcp_traffic`` is
the cheap probe the pipeline's driver runs); ``reassembly.HalfStream`` orders each direction by
sequence number; ``streams`` feeds the in-order bytes to the codec's stream decoders.
"""

from __future__ import annotations

from .segments import has_tcp_traffic, iter_tcp_segments
from .streams import decode_tcp_streams

__all__ = ["decode_tcp_streams", "has_tcp_traffic", "iter_tcp_segments"]
