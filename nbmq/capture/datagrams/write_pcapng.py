"""Writing pcapng files: dpkt builds the section and interface blocks, numpy the packet blocks."""

from __future__ import annotations

import os
from collections.abc import Iterable

import dpkt
import numpy as np

from .batch import DatagramBatch
from ..files.emit import row_slices, write_interleaved
from .encap import DatagramRow, columns_from_rows, frame_headers, link_header_len
from ..files.formats import STANDARD_MAX_SNAPLEN

__all__ = ["write_pcapng"]

_EPB = 6


def _head_blocks(linktype: int, nanosecond: bool) -> bytes:
    shb = dpkt.pcapng.SectionHeaderBlockLE()
    opts = [
        dpkt.pcapng.PcapngOptionLE(code=dpkt.pcapng.PCAPNG_OPT_IF_TSRESOL, data=bytes([9 if nanosecond else 6])),
        dpkt.pcapng.PcapngOptionLE(code=dpkt.pcapng.PCAPNG_OPT_ENDOFOPT, data=b""),
    ]
    idb = dpkt.pcapng.InterfaceDescriptionBlockLE(linktype=linktype, snaplen=STANDARD_MAX_SNAPLEN, opts=opts)
    return bytes(shb) + bytes(idb)


def write_pcapng(
    path: str | os.PathLike[str],
    rows: Iterable[DatagramRow] | DatagramBatch,
    linktype: int = 1,
    nanosecond: bool = False,
) -> int:
    """Write UDP datagrams to a pcapng file: one section, one interface, Enhanced Packet Blocks.

    Args:
        path: file to create (overwritten).
        rows: ``(timestamp_s, src_ip, src_port, dst_ip, dst_port, payload)`` tuples (see
            ``write_pcap``) or a ``DatagramBatch``.
        linktype: as for ``write_pcap``.
        nanosecond: ``if_tsresol`` 9 (nanoseconds); else 6 (microseconds, rounded).

    Returns:
        Number of datagrams written.

    Raises:
        ValueError: unsupported link type, bad address / port, payload too large, negative
            timestamp.
        OSError: the file cannot be written.
    """
    cols = columns_from_rows(rows)
    n = len(cols)
    link_len = link_header_len(linktype)
    ticks = cols.ts_ns if nanosecond else (cols.ts_ns + 500) // 1000
    if ticks.size and ticks.min() < 0:
        raise ValueError("timestamps before 1970 cannot be written")
    frame_len = link_len + np.where(cols.family == 6, 48, 28) + cols.lengths
    pad = (-frame_len) % 4
    block_len = 32 + frame_len + pad
    epb = np.empty((n, 7), "<u4")
    epb[:, 0], epb[:, 1], epb[:, 2] = _EPB, block_len, 0
    epb[:, 3], epb[:, 4] = ticks >> 32, ticks & 0xFFFFFFFF
    epb[:, 5], epb[:, 6] = frame_len, frame_len
    epb_bytes = epb.view(np.uint8).reshape(-1, 28)
    heads: list[object] = [None] * n
    for family in (4, 6):
        idx = np.flatnonzero(cols.family == family)
        if idx.size:
            block = np.concatenate([epb_bytes[idx], frame_headers(cols, idx, linktype, family)], axis=1)
            for i, piece in zip(idx.tolist(), row_slices(block)):
                heads[i] = piece
    # tail: 0..3 padding bytes then the repeated block length
    tails = np.zeros((n, 8), np.uint8)
    tails[np.arange(n)[:, None], pad[:, None] + np.arange(4)] = block_len.astype("<u4").view(np.uint8).reshape(-1, 4)
    with open(path, "wb") as f:
        f.write(_head_blocks(linktype, nanosecond))
        if n:
            write_interleaved(f, [heads, list(cols.payloads), row_slices(tails, pad + 4)])
    return n

