"""Walking pcapng: the block walker both UDP engines and the TCP reader frame packets with.

``dpkt.pcapng.Reader`` is not used directly: it keeps only the first interface (ignoring the
interface id of each packet, so multi-interface or mixed-link-type files decode wrongly),
returns float timestamps (nanoseconds are lost), ignores Simple Packet Blocks and further
sections, and raises from inside its iterator on a truncated block. The walker below frames
blocks itself and uses dpkt's block classes to parse Interface Description Blocks (options:
``if_tsresol``, ``if_tsoffset``) and, in the dpkt engine, the packet blocks as well.

Damage: a block whose length is implausible, runs past the end of the file or disagrees with
its trailing copy is an error, and the walk resynchronises on the next plausible block (a
known type, lengths that agree, followed by another such block or the end of the file). When
that block starts where one of the two length copies says, the damaged block is still read:
one flipped bit in a length costs an error, not the rest of the file. Otherwise the block is
skipped (a packet block keeps its frame number).

Splits: a pcapng file is read as one split (``plan_splits`` returns a single range). Reading
a byte range still works -- packet blocks starting in ``[start, end)`` are returned -- but the
walk always starts at the beginning, since interfaces are defined there.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from ...errors import CaptureError
from ..dpkt_extra import load_dpkt
from .errorlog import ErrorLog
from .formats import PCAPNG_SHB_TYPE
from .source import OpenedCapture

__all__ = ["walk_pcapng", "first_interface", "PcapngPackets", "Interface"]

_BOM = 0x1A2B3C4D
_IDB, _PB, _SPB, _EPB = 1, 2, 3, 6
_PACKET_BLOCKS = frozenset({_PB, _SPB, _EPB})
# block types a resynchronisation may land on (SHB, IDB, PB, SPB, NRB, ISB, EPB, journal, DSB,
# custom)
_KNOWN_BLOCKS = frozenset({PCAPNG_SHB_TYPE, 1, 2, 3, 4, 5, 6, 9, 10, 0x00000BAD, 0x40000BAD})
_MAX_BLOCK = 64 << 20
_LENGTHS_DIFFER = "block lengths differ"
_SCAN_BYTES = 1 << 16  # byte offsets per numpy window of a resynchronisation
_NS = 1_000_000_000
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


@dataclass(slots=True)
class Interface:
    """One Interface Description Block: link type, snaplen and timestamp units.

    Attributes:
        linktype: LINKTYPE_* of its packets.
        snaplen: snapshot length (bytes, 0 = unlimited).
        resol: ``if_tsresol`` byte (6 = microseconds, the default).
        offset_s: ``if_tsoffset`` seconds added to every timestamp.
    """

    linktype: int
    snaplen: int
    resol: int = 6
    offset_s: int = 0

    def to_ns(self, ticks: int) -> int:
        """Convert a raw 64-bit timestamp of this interface to nanoseconds since the epoch."""
        exp = self.resol & 0x7F
        if self.resol & 0x80:  # negative power of two
            ns = (ticks * _NS) >> exp
        elif exp <= 9:
            ns = ticks * 10 ** (9 - exp)
        else:
            ns = ticks // 10 ** (exp - 9)
        return ns + self.offset_s * _NS


@dataclass(slots=True)
class PcapngPackets:
    """Packet blocks found by ``walk_pcapng`` in the requested range, in file order.

    Attributes:
        offsets: byte offset of each packet block.
        frames: 1-based frame number of each packet block in the file.
        data_starts: byte offset of each packet's first captured byte.
        caplens: captured length of each packet (bytes).
        ts_ns: timestamp of each packet (ns; 0 for Simple Packet Blocks, which carry none).
        linktypes: link type of each packet's interface.
        frames_bytes: the packet bytes as parsed by dpkt (dpkt engine only).
        skipped: ``(offset, frame)`` of each packet block in the range that could not be
            framed (its lengths disagree and no copy bounds it): its frame number is kept.
    """

    offsets: list[int] = field(default_factory=list)
    frames: list[int] = field(default_factory=list)
    data_starts: list[int] = field(default_factory=list)
    caplens: list[int] = field(default_factory=list)
    ts_ns: list[int] = field(default_factory=list)
    linktypes: list[int] = field(default_factory=list)
    frames_bytes: list[bytes] = field(default_factory=list)
    skipped: list[tuple[int, int]] = field(default_factory=list)


def _block_plausible(buf: object, size: int, pos: int, order: str) -> bool:
    if pos + 12 > size:
        return False
    btype, blen = struct.unpack_from(order + "II", buf, pos)  # type: ignore[call-overload]
    if btype == PCAPNG_SHB_TYPE:
        order = _shb_order(buf, size, pos) or order
        (blen,) = struct.unpack_from(order + "I", buf, pos + 4)  # type: ignore[call-overload]
    if btype not in _KNOWN_BLOCKS or blen < 12 or blen % 4 or blen > _MAX_BLOCK or pos + blen > size:
        return False
    return struct.unpack_from(order + "I", buf, pos + blen - 4)[0] == blen  # type: ignore[call-overload,no-any-return]


def block_candidates(buf: object, size: int, pos: int, order: str) -> Iterator[int]:
    """Byte offsets after ``pos``, in order, whose first word names a known block type: where a
    block may start once the chain broke. Every byte offset is a candidate (a byte deleted or
    inserted shifts every later block off the 4-byte grid); a numpy pass over a window builds
    the word at each offset and keeps the known block types, so the per-candidate checks run
    only there.
    """
    known = np.array(sorted(_KNOWN_BLOCKS), np.uint32)
    shifts = (0, 8, 16, 24) if order == "<" else (24, 16, 8, 0)
    p = pos + 1
    while p + 12 <= size:
        n = min(_SCAN_BYTES, size - p - 11)  # offsets with a whole block header after them
        b = np.frombuffer(buf, np.uint8, count=n + 3, offset=p).astype(np.uint32)  # type: ignore[call-overload]
        words = b[:n] << shifts[0] | b[1 : n + 1] << shifts[1] | b[2 : n + 2] << shifts[2] | b[3 : n + 3] << shifts[3]
        for k in np.flatnonzero(np.isin(words, known)).tolist():
            yield p + k
        p += n


def _resync(buf: object, size: int, pos: int, order: str) -> int | None:
    """First plausible block after ``pos`` that is followed by another one or the file's end."""
    for c in block_candidates(buf, size, pos, order):
        if _block_plausible(buf, size, c, order):
            (blen,) = struct.unpack_from(order + "I", buf, c + 4)  # type: ignore[call-overload]
            q = c + blen
            if q == size or _block_plausible(buf, size, q, order):
                return c
    return None


def _trailing_length(buf: object, pos: int, end: int, order: str) -> bool:
    """True when the block at ``pos`` ends at ``end`` by its trailing length copy."""
    blen = end - pos
    return blen >= 12 and struct.unpack_from(order + "I", buf, end - 4)[0] == blen  # type: ignore[call-overload,no-any-return]


def _shb_order(buf: object, size: int, pos: int) -> str | None:
    if pos + 12 > size:
        return None
    (bom,) = struct.unpack_from("<I", buf, pos + 8)  # type: ignore[call-overload]
    if bom == _BOM:
        return "<"
    if bom == 0x4D3C2B1A:
        return ">"
    return None


def _first_section_order(buf: object, size: int) -> str:
    """Byte order of the Section Header Block that must open the file.

    Raises:
        CaptureError: the file does not start with a valid Section Header Block.
    """
    order = _shb_order(buf, size, 0)
    if order is None:
        raise CaptureError("not a pcapng capture: bad or truncated section header block")
    return order


def _interface(block: bytes, order: str, log: ErrorLog, pos: int) -> Interface:
    linktype, _res, snaplen = struct.unpack_from(order + "HHI", block, 8)
    iface = Interface(linktype=linktype, snaplen=snaplen)
    dpkt = load_dpkt("reading pcapng interface blocks")
    cls = dpkt.pcapng.InterfaceDescriptionBlockLE if order == "<" else dpkt.pcapng.InterfaceDescriptionBlock
    try:
        idb = cls(block)
    except Exception:  # dpkt raises several types on malformed options
        log.at_offset(pos, "bad interface description options")
        return iface
    for opt in idb.opts:
        if opt.code == dpkt.pcapng.PCAPNG_OPT_IF_TSRESOL and len(opt.data) >= 1:
            iface.resol = opt.data[0]
        elif opt.code == dpkt.pcapng.PCAPNG_OPT_IF_TSOFFSET and len(opt.data) >= 8:
            (iface.offset_s,) = struct.unpack_from(order + "q", opt.data, 0)
    return iface


def walk_pcapng(
    cap: OpenedCapture, start: int, stop: int, log: ErrorLog, *, dpkt_blocks: bool = False
) -> PcapngPackets:
    """Frame every block of a pcapng capture and collect the packets starting in [start, stop).

    Args:
        cap: the opened capture.
        start: first byte offset of the range.
        stop: packet blocks must start below this byte offset.
        log: receives framing errors (bad, cut or unparsable blocks).
        dpkt_blocks: parse packet blocks with dpkt's block classes (dpkt engine).

    Returns:
        The packets found.

    Raises:
        CaptureError: the file does not start with a valid Section Header Block.
    """
    buf, size = cap.buf, cap.size
    order = _first_section_order(buf, size)
    out = PcapngPackets()
    interfaces: list[Interface] = []
    frame = 0
    pos = 0
    while pos < size:
        if pos + 12 > size:
            log.at_offset(pos, "truncated block header")
            break
        btype, blen = struct.unpack_from(order + "II", buf, pos)  # type: ignore[call-overload]
        if btype == PCAPNG_SHB_TYPE:
            order = _shb_order(buf, size, pos) or order
            (blen,) = struct.unpack_from(order + "I", buf, pos + 4)  # type: ignore[call-overload]
        problem = _length_problem(buf, size, pos, blen, order)
        if problem is not None:
            # one damaged length (leading or trailing) must not end the file: the next
            # plausible block bounds this one; if the trailing copy agrees, keep the block
            nxt = _resync(buf, size, pos, order)
            if problem == _LENGTHS_DIFFER and (size if nxt is None else nxt) == pos + blen:
                log.at_offset(pos, f"{problem}; next block found at the leading length")
            elif nxt is None:
                log.at_offset(pos, problem)
                break
            elif _trailing_length(buf, pos, nxt, order):
                log.at_offset(pos, f"{problem}; trailing length copy used")
                blen = nxt - pos
            else:
                log.at_offset(pos, problem)
                if btype in _PACKET_BLOCKS:  # a skipped packet keeps its frame number
                    frame += 1
                    if start <= pos < stop:
                        out.skipped.append((pos, frame))
                pos = nxt
                continue
        if btype == PCAPNG_SHB_TYPE:
            interfaces = []  # interface ids are per section
        elif btype == _IDB and blen >= 20:
            interfaces.append(_interface(bytes(buf[pos : pos + blen]), order, log, pos))  # type: ignore[index]
        elif btype in _PACKET_BLOCKS:
            frame += 1
            if start <= pos < stop:
                _packet(cap, pos, btype, blen, order, interfaces, frame, out, log, dpkt_blocks)
        pos += blen
    return out


def _length_problem(buf: object, size: int, pos: int, blen: int, order: str) -> str | None:
    """Why the block at ``pos`` with leading length ``blen`` cannot be framed (None: it can)."""
    if blen < 12 or blen % 4 or blen > _MAX_BLOCK:
        return "implausible block header"
    if pos + blen > size:
        return "truncated block"
    if struct.unpack_from(order + "I", buf, pos + blen - 4)[0] != blen:  # type: ignore[call-overload]
        return _LENGTHS_DIFFER
    return None


def first_interface(cap: OpenedCapture) -> Interface | None:
    """Return the first Interface Description Block of a pcapng capture (None if none).

    Stops at the first IDB or the first damaged block, so it reads only the file's start.

    Raises:
        CaptureError: the file does not start with a valid Section Header Block.
    """
    buf, size = cap.buf, cap.size
    order = _first_section_order(buf, size)
    pos = 0
    while pos + 12 <= size:
        btype, blen = struct.unpack_from(order + "II", buf, pos)  # type: ignore[call-overload]
        if blen < 12 or blen % 4 or pos + blen > size:
            return None
        if btype == _IDB and blen >= 20:
            return _interface(bytes(buf[pos : pos + blen]), order, ErrorLog(), pos)  # type: ignore[index]
        pos += blen
    return None


def _packet(
    cap: OpenedCapture,
    pos: int,
    btype: int,
    blen: int,
    order: str,
    interfaces: list[Interface],
    frame: int,
    out: PcapngPackets,
    log: ErrorLog,
    dpkt_blocks: bool,
) -> None:
    buf = cap.buf
    data: bytes | None = None
    if btype == _SPB:
        if blen < 16 or not interfaces:
            log.at_offset(pos, "bad packet block")
            return
        (orig,) = struct.unpack_from(order + "I", buf, pos + 8)  # type: ignore[call-overload]
        caplen = min(orig, blen - 16)
        if interfaces[0].snaplen:
            caplen = min(caplen, interfaces[0].snaplen)
        iface, ticks, dstart = interfaces[0], None, pos + 12
    else:
        if blen < 32:
            log.at_offset(pos, "bad packet block")
            return
        if btype == _EPB:
            iface_id, th, tl, caplen, _orig = struct.unpack_from(order + "IIIII", buf, pos + 8)  # type: ignore[call-overload]
        else:
            iface_id, _drops, th, tl, caplen, _orig = struct.unpack_from(order + "HHIIII", buf, pos + 8)  # type: ignore[call-overload]
        if 28 + caplen + 4 > blen or iface_id >= len(interfaces):
            log.at_offset(pos, "bad packet block")
            return
        iface, ticks, dstart = interfaces[iface_id], (th << 32) | tl, pos + 28
        if dpkt_blocks:
            try:
                block = bytearray(buf[pos : pos + blen])  # type: ignore[index]
                struct.pack_into(order + "I", block, 4, blen)  # the framed length, if repaired
                struct.pack_into(order + "I", block, blen - 4, blen)
                data, ticks = _dpkt_packet(bytes(block), btype, order)
            except Exception:  # dpkt rejects malformed options in several ways
                log.at_offset(pos, "bad packet block")
                return
    ts_ns = 0 if ticks is None else iface.to_ns(ticks)
    if not _INT64_MIN <= ts_ns <= _INT64_MAX:  # past year 2262 in nanoseconds: damaged
        log.at_offset(pos, "timestamp out of range")
        return
    out.offsets.append(pos)
    out.frames.append(frame)
    out.data_starts.append(dstart)
    out.caplens.append(caplen)
    out.ts_ns.append(ts_ns)
    out.linktypes.append(iface.linktype)
    if dpkt_blocks:
        out.frames_bytes.append(data if data is not None else bytes(buf[dstart : dstart + caplen]))  # type: ignore[index]


def _dpkt_packet(block: bytes, btype: int, order: str) -> tuple[bytes, int]:
    le = order == "<"
    dpkt = load_dpkt("the dpkt engine")
    if btype == _EPB:
        cls = dpkt.pcapng.EnhancedPacketBlockLE if le else dpkt.pcapng.EnhancedPacketBlock
    else:
        cls = dpkt.pcapng.PacketBlockLE if le else dpkt.pcapng.PacketBlock
    blk = cls(block)
    return bytes(blk.pkt_data), (blk.ts_high << 32) | blk.ts_low
