"""Reading and writing pcap / pcapng captures of UDP traffic, column-wise.

Reading returns a ``DatagramBatch``: one row per UDP datagram, payloads in one contiguous
uint8 buffer with offsets and lengths (what the codec's ``parse_frames`` consumes). Classic
pcap goes through a vectorised numpy fast path; dpkt is the packet-at-a-time reference and
decodes whatever the fast path leaves aside. Large classic pcap files split into byte ranges
(``plan_splits``) that independent readers (Spark tasks) resynchronise on. Damage inside a
capture is counted, never raised; a file that is not a capture raises ``CaptureError``.

Example::

    from nbmq.capture import read_datagrams, plan_splits
    batch = read_datagrams("dealer.pcap", udp_ports={47101})
    print(len(batch), batch.errors, batch.payload_at(0)[:2])
"""

from __future__ import annotations

from ..errors import CaptureError
from .batch import DatagramBatch, ns_to_seconds
from .encap import DatagramRow
from .linktypes import SUPPORTED_LINKTYPES, LinkType
from .pcap_writer import write_pcap, write_pcap_packets
from .pcapng_writer import write_pcapng
from .reader import ENGINES, CaptureInfo, probe_capture, read_datagrams
from .records import CONFIRM_HEADERS
from .source import CaptureSource
from .splits import first_frames, plan_splits, range_starts

__all__ = [
    "CaptureError",
    "CaptureInfo",
    "CaptureSource",
    "CONFIRM_HEADERS",
    "DatagramBatch",
    "DatagramRow",
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
