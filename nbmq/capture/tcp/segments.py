"""Reading the TCP segments of a pcap / pcapng capture (the BQSP and rqueue side of the pipeline).

Not the hot path: records are framed as the UDP reader frames them (``RecordScanner`` for
classic pcap, ``walk_pcapng`` for pcapng), a vectorised pre-filter drops the packets that are
certainly not TCP on the wanted ports (so a UDP capture costs a record walk and a few numpy
gathers), and dpkt decodes the rest one packet at a time. Link types are those of the UDP path:
Ethernet (VLAN tags as dpkt unwraps them), Linux cooked v1/v2, raw IP, BSD NULL / LOOP.

Rules (``decode_dpkt``'s, for TCP): IPv4 fragments with a non-zero offset are skipped; the TCP
segment is bounded by the IP length (Ethernet padding dropped) and the captured bytes; fewer
bytes captured than announced marks the segment ``truncated`` (its captured prefix is kept);
checksums are not verified (loopback captures carry offloaded ones). A TCP packet whose TCP
header cannot be read is logged (``frame N: bad TCP header``); link / IP damage is left to the
``nbmq`` frames table, which reports it already. Reassembly is in :mod:`nbmq.capture.tcp.streams`.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ..datagrams.decode_fast import _link_layer  # the UDP fast path's link-layer classifier, reused as is
from ..datagrams.linktypes import AF_INET, AF_INET6_VALUES, ETHERTYPE_IPV4, ETHERTYPE_IPV6, RAW_LINKTYPES, LinkType
from ..datagrams.views import ByteViews
from ..dpkt_extra import DpktMissing, load_dpkt
from ..files.errorlog import ErrorLog
from ..files.formats import PCAP_FILE_HEADER_LEN, detect_format, parse_pcap_header
from ..files.pcapng import walk_pcapng
from ..files.records import RecordScanner
from ..files.source import CaptureSource, OpenedCapture
from ..files.splits import walk_windows

if TYPE_CHECKING:
    import dpkt

__all__ = ["TcpSegment", "iter_tcp_segments", "has_tcp_traffic", "decode_tcp", "endpoint", "FIN", "SYN", "RST", "ACK"]

FIN, SYN, RST, ACK = 0x01, 0x02, 0x04, 0x10
_CHUNK = 1 << 16  # records pre-filtered per numpy pass: bounds temporary arrays on big files
_IP6_EXT = np.array([0, 43, 44, 50, 51, 60], np.int64)  # extension headers dpkt walks


class TcpSegment(NamedTuple):
    """One captured TCP segment.

    Attributes:
        frame: 1-based record number in the capture (as tshark counts, for undamaged files).
        ts_ns: capture time, nanoseconds since the epoch.
        src, dst: ``"addr:port"`` endpoints (IPv6 as ``"[addr]:port"``).
        sport, dport: TCP ports.
        seq: sequence number (u32).
        flags: TCP flags byte (``FIN``, ``SYN``, ``RST``, ``ACK``, ...).
        data: the captured payload bytes (owned).
        truncated: fewer payload bytes captured than the IP header announced.
    """

    frame: int
    ts_ns: int
    src: str
    sport: int
    dst: str
    dport: int
    seq: int
    flags: int
    data: bytes
    truncated: bool


def endpoint(addr: bytes, port: int) -> str:
    """``"a.b.c.d:port"`` for a 4-byte address, ``"[v6]:port"`` for a 16-byte one."""
    if len(addr) == 4:
        return f"{socket.inet_ntop(socket.AF_INET, addr)}:{port}"
    return f"[{socket.inet_ntop(socket.AF_INET6, addr)}]:{port}"


def _records(cap: OpenedCapture, log: ErrorLog) -> Iterator[tuple[np.ndarray, ...]]:
    """Yield (frame numbers, data starts, caplens, ts_ns, linktypes) int64 chunks, in file order.

    Classic pcap is walked in windows (``nbmq.capture.files.splits.walk_windows``: they add
    up to the whole-file walk, damage included, and the mapped pages behind are dropped), so
    memory stays flat in the capture's size (the whole walk of a 2.1 GB capture kept
    2.2 GB resident).
    """
    if detect_format(cap.buf, cap.size) == "pcap":
        hdr = parse_pcap_header(cap.buf, cap.size)
        scan = RecordScanner(cap.buf, cap.size, hdr)
        for _lo, _hi, offs, frame, _from in walk_windows(cap, scan, log, PCAP_FILE_HEADER_LEN):
            for c in range(0, offs.size, _CHUNK):
                o = offs[c : c + _CHUNK]
                sec, frac, incl = scan.fields(o)
                ts = sec * 1_000_000_000 + frac * hdr.ns_per_frac
                frames = np.arange(frame + c, frame + c + o.size, dtype=np.int64)
                yield frames, o + scan.hl, incl, ts, np.full(o.size, hdr.linktype, np.int64)
        return
    pk = walk_pcapng(cap, 0, cap.size, log)
    cols = [np.array(c, np.int64) for c in (pk.frames, pk.data_starts, pk.caplens, pk.ts_ns, pk.linktypes)]
    del pk
    for lo in range(0, cols[0].size, _CHUNK):
        yield tuple(c[lo : lo + _CHUNK] for c in cols)


def _candidates(
    views: ByteViews, starts: np.ndarray, caplens: np.ndarray, linktype: int, ports: np.ndarray | None
) -> np.ndarray:
    """Mask of the packets dpkt must look at: all but those certainly not TCP on ``ports``."""
    link = _link_layer(views, starts, caplens, linktype)
    if link is None:  # unsupported link type: nothing to read
        return np.zeros(starts.shape[0], bool)
    is4, is6, l3, skip = link
    rem = starts + caplens - l3
    b0 = views.u8(l3).astype(np.int64)
    ihl = (b0 & 15) * 4
    frag = views.be16(l3 + 6).astype(np.int64) & 0x1FFF
    proto = views.u8(l3 + 9).astype(np.int64)
    good4 = is4 & (rem >= 20) & ((b0 >> 4) == 4) & (ihl >= 20)
    nxt = views.u8(l3 + 6).astype(np.int64)
    good6 = is6 & (rem >= 40) & ((b0 >> 4) == 6)
    tcp4 = good4 & (proto == 6) & (frag == 0)
    tcp6 = good6 & (nxt == 6)
    unsure = ~skip & ~good4 & ~good6 & ~is4 & ~is6  # link layer left to dpkt (VLAN cut, MPLS...)
    unsure |= good6 & np.isin(nxt, _IP6_EXT)
    if ports is None:
        return tcp4 | tcp6 | unsure
    tcp = np.where(tcp6, l3 + 40, l3 + ihl)
    short = (tcp4 | tcp6) & (tcp + 4 > starts + caplens)  # ports not captured: dpkt reports it
    sport, dport = views.be16(tcp).astype(np.int64), views.be16(tcp + 2).astype(np.int64)
    on_port = np.isin(sport, ports) | np.isin(dport, ports)
    return ((tcp4 | tcp6) & (on_port | short)) | unsure


def _null_family(linktype: int, buf: bytes) -> int:
    (be,) = struct.unpack_from(">I", buf, 0)
    if linktype == LinkType.LOOP:
        return int(be)
    (le,) = struct.unpack_from("<I", buf, 0)  # DLT_NULL: the writer's byte order, the small reading
    return int(le if le < 0x10000 else be)


def _network(linktype: int, frame: bytes) -> object:
    """The dpkt IP / IP6 object of a link-layer frame, or None when it carries no IP."""
    dpkt = load_dpkt("decoding TCP segments")
    if linktype == LinkType.ETHERNET:
        return dpkt.ethernet.Ethernet(frame).data
    if linktype in (LinkType.LINUX_SLL, LinkType.LINUX_SLL2):
        head = 16 if linktype == LinkType.LINUX_SLL else 20
        if len(frame) < head:
            return None
        et = struct.unpack_from(">H", frame, 14 if head == 16 else 0)[0]
        body = frame[head:]
    elif linktype in RAW_LINKTYPES:
        et = {4: ETHERTYPE_IPV4, 6: ETHERTYPE_IPV6}.get(frame[0] >> 4 if frame else 0, 0)
        body = frame
    elif linktype in (LinkType.NULL, LinkType.LOOP):
        if len(frame) < 4:
            return None
        fam = _null_family(linktype, frame)
        et = ETHERTYPE_IPV4 if fam == AF_INET else ETHERTYPE_IPV6 if fam in AF_INET6_VALUES else 0
        body = frame[4:]
    else:
        return None
    if et == ETHERTYPE_IPV4:
        return dpkt.ip.IP(body)
    if et == ETHERTYPE_IPV6:
        return dpkt.ip6.IP6(body)
    return None


def decode_tcp(linktype: int, frame: bytes) -> tuple[bytes, bytes, dpkt.tcp.TCP, bool] | str | None:
    """Decode one captured frame down to its TCP segment with dpkt.

    Args:
        linktype: LINKTYPE_* of the frame.
        frame: the captured bytes of the record.

    Returns:
        ``(src address, dst address, tcp, truncated)`` for a TCP segment (addresses packed, 4
        or 16 bytes; ``tcp.data`` the captured payload), a reason string for a TCP packet whose
        TCP header cannot be read, or None for anything else (not IP, not TCP, a non-first
        fragment, or link / IP damage, which the frames table reports). Never raises.
    """
    dpkt = load_dpkt("decoding TCP segments")
    try:
        ip = _network(linktype, frame)
    except Exception:  # dpkt raises many types on hostile link / IP bytes: not ours to report
        return None
    if isinstance(ip, dpkt.ip.IP):
        if ip.v != 4 or ip.hl < 5 or ip.p != 6 or ip.offset:
            return None
        expected = (ip.len - ip.hl * 4) if ip.len else None  # 0: TSO, the captured bytes count
    elif isinstance(ip, dpkt.ip6.IP6):
        if ip.v != 6 or getattr(ip, "p", ip.nxt) != 6:
            return None
        for ext in ip.all_extension_headers:
            if isinstance(ext, dpkt.ip6.IP6FragmentHeader) and ext.frag_off:
                return None
        ext_len = sum(ext.length for ext in ip.all_extension_headers)
        expected = (ip.plen - ext_len) if ip.plen else None
    else:
        return None
    tcp = ip.data
    if not isinstance(tcp, dpkt.tcp.TCP):
        return "truncated TCP header" if len(tcp) < 20 else "bad TCP header"
    if tcp.off * 4 > 20 + len(tcp.opts):
        return "truncated TCP header"
    truncated = expected is not None and tcp.off * 4 + len(tcp.data) < expected
    return bytes(ip.src), bytes(ip.dst), tcp, truncated


def _ports_array(ports: Iterable[int] | None) -> np.ndarray | None:
    return None if ports is None else np.array(sorted({int(p) for p in ports}), np.int64)


def iter_tcp_segments(
    source: CaptureSource, ports: Iterable[int] | None = None, log: ErrorLog | None = None
) -> Iterator[TcpSegment]:
    """Yield the TCP segments of a capture in file order.

    Args:
        source: path or bytes of a pcap / pcapng capture.
        ports: keep only segments from or to one of these TCP ports; None keeps every segment.
        log: receives damage (cut or implausible records, unreadable TCP headers); reading
            goes on after it.

    Yields:
        :class:`TcpSegment`, one per TCP packet (payload owned, so the capture may be closed).

    Raises:
        CaptureError: ``source`` is not a pcap or pcapng capture (raised before any segment).
        OSError: the file cannot be opened.
    """
    log = ErrorLog() if log is None else log
    wanted = _ports_array(ports)
    wanted_set = None if wanted is None else set(wanted.tolist())
    with OpenedCapture(source) as cap:
        views = ByteViews(cap.buf, cap.size)
        for frames, starts, caplens, ts, linktypes in _records(cap, log):
            mask = np.zeros(frames.size, bool)
            for lt in np.unique(linktypes).tolist():  # one vectorised pass per link type
                sel = np.flatnonzero(linktypes == lt)
                mask[sel] = _candidates(views, starts[sel], caplens[sel], int(lt), wanted)
            for i in np.flatnonzero(mask).tolist():
                s, lt = int(starts[i]), int(linktypes[i])
                got = decode_tcp(lt, bytes(cap.buf[s : s + int(caplens[i])]))  # type: ignore[index]
                if got is None:
                    continue
                if isinstance(got, str):
                    log.at_frame(s, int(frames[i]), got)
                    continue
                src, dst, tcp, truncated = got
                if wanted_set is not None and tcp.sport not in wanted_set and tcp.dport not in wanted_set:
                    continue
                yield TcpSegment(
                    int(frames[i]),
                    int(ts[i]),
                    endpoint(src, tcp.sport),
                    tcp.sport,
                    endpoint(dst, tcp.dport),
                    tcp.dport,
                    tcp.seq,
                    tcp.flags,
                    bytes(tcp.data),
                    truncated,
                )


def has_tcp_traffic(source: CaptureSource, ports: Iterable[int] | None) -> bool:
    """True when the capture holds at least one TCP segment from or to ``ports``.

    Cheap on captures without such traffic: a record walk plus the vectorised pre-filter; dpkt
    runs only on candidate packets, and the scan stops at the first segment found. Used by
    ``nbmq pipeline`` to skip the BQSP / rqueue jobs. A file that is not a capture (or cannot
    be opened) gives False.

    Raises:
        DpktMissing: a candidate packet needs dpkt and it is not installed (not a silent False).
    """
    try:
        for _segment in iter_tcp_segments(source, ports):
            return True
    except DpktMissing:
        raise
    except Exception:  # not a capture / unreadable: the frames job reports it
        return False
    return False
