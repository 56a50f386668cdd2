"""UDP datagrams in and out of captures: link / IP / UDP decoding into columnar batches.

Entry: ``read.read_datagrams(source)`` -> ``batch.DatagramBatch``. On the way it walks the file
with the files room, decodes every record's headers at once with ``decode_fast`` (numpy, or
the compiled ``_decode.pyx``; link layers in ``linktypes``, unaligned reads in ``views``,
per-record results in ``rows``), hands the rows the fast path leaves aside to ``decode_dpkt``
(the dpkt reference, imported only then), and builds the batch in ``assemble``. The way back:
``write.write_pcap`` / ``write_pcapng`` frame rows with ``encap`` and write the records.
"""

from __future__ import annotations

from .batch import DatagramBatch
from .read import ENGINES, CaptureInfo, probe_capture, read_datagrams
from .write import write_pcap, write_pcap_packets, write_pcapng

__all__ = [
    "CaptureInfo",
    "DatagramBatch",
    "ENGINES",
    "probe_capture",
    "read_datagrams",
    "write_pcap",
    "write_pcap_packets",
    "write_pcapng",
]
