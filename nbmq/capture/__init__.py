"""Reading and writing pcap / pcapng captures of UDP traffic, column-wise; TCP streams out of them.

Three rooms, one entry each, in the order the data passes through them:

* ``files/`` -- opening a capture and walking its records: ``OpenedCapture`` (path, bytes or
  gzip), ``detect_format``, ``RecordScanner`` (classic pcap, with byte ranges from
  ``plan_splits``) and ``walk_pcapng``. Knows containers, not packets.
* ``datagrams/`` -- ``read_datagrams``: link / IP / UDP decoding of the walked records into a
  ``DatagramBatch``, and the writers (``write_pcap``, ``write_pcapng``) for the way back.
* ``tcp/`` -- ``decode_tcp_streams``: TCP segments of the walked records, reassembled per
  direction and decoded as BQSP / rqueue.

The way of one UDP datagram: ``datagrams.read.read_datagrams`` -> ``files.source.OpenedCapture``
-> ``files.formats.detect_format`` -> ``files.records.RecordScanner.walk_range`` (pcapng:
``files.pcapng.walk_pcapng``) -> ``datagrams.decode_fast.decode_packets`` (compiled
``datagrams._decode`` or numpy; the rows it leaves aside: ``datagrams.decode_dpkt``) ->
``datagrams.assemble.assemble`` -> ``datagrams.batch.DatagramBatch``. Rooms import only rooms
before them (files <- datagrams <- tcp).

Reading returns a ``DatagramBatch``: one row per UDP datagram, payloads in one contiguous
uint8 buffer with offsets and lengths (what the codec's ``parse_frames`` consumes). Classic
pcap goes through a vectorised numpy fast path; dpkt is the packet-at-a-time reference and
decodes whatever the fast path leaves aside (imported only then: reading a classic pcap
needs no dpkt unless some packet falls back; ``DpktMissing`` says when one does). Large classic pcap files split into byte ranges
(``plan_splits``) that independent readers (Spark tasks) resynchronise on. Damage inside a
capture is counted, never raised; a file that is not a capture raises ``CaptureError``.

Example::

    from nbmq.capture import read_datagrams, plan_splits
    batch = read_datagrams("dealer.pcap", udp_ports={47101})
    print(len(batch), batch.errors, batch.payload_at(0)[:2])
"""

from __future__ import annotations

from ..errors import CaptureError
from .datagrams import (
    ENGINES,
    CaptureInfo,
    DatagramBatch,
    probe_capture,
    read_datagrams,
    write_pcap,
    write_pcap_packets,
    write_pcapng,
)
from .datagrams.batch import ns_to_seconds
from .datagrams.encap import DatagramRow
from .datagrams.linktypes import SUPPORTED_LINKTYPES, LinkType
from .dpkt_extra import DpktMissing
from .files import CaptureSource, first_frames, plan_splits, range_starts
from .files.records import CONFIRM_HEADERS

__all__ = [
    "CaptureError",
    "CaptureInfo",
    "CaptureSource",
    "CONFIRM_HEADERS",
    "DatagramBatch",
    "DatagramRow",
    "DpktMissing",
    "ENGINES",
    "LinkType",
    "SUPPORTED_LINKTYPES",
    "first_frames",
    "ns_to_seconds",
    "plan_splits",
    "probe_capture",
    "range_starts",
    "read_datagrams",
    "write_pcap",
    "write_pcap_packets",
    "write_pcapng",
]
