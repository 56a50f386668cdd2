"""A realistic nbmq capture of any size, generated block by block in bounded memory.

Used by ``bench_scale.py``. The traffic: ``sessions`` Dealer
clients (10.0.x.y:40000+i) talking to one bound socket (10.1.0.1:7000) at 50,000 datagrams/s of
capture time:

- a handshake per session at the start (``Connect`` with session id 0, ``Connected``);
- heartbeats both ways, once per second of capture time per session;
- messages of 1..2199 bytes of random content (one part; 1..5 chunks of at most 466 bytes),
  the frames of a message back to back, sessions picked at random;
- every eighth session is a SafeDealer: the server acks each data frame (``Ack`` with the
  frame's FNV-1a 64 hash, ``codec.ack_hash``) and 0.2% of its frames are resent 0.2 s later
  (a resend whose original arrived: a duplicate);
- 0.05% of the other sessions' data frames are lost (their messages stay incomplete).

Each block of ``block`` datagrams is built with numpy (headers as a big-endian structured array,
content from ``rng.bytes``), written by the project's writer (:func:`nbmq.capture.write_pcap`) to
a scratch file and appended to the capture, so memory stays bounded by one block (~0.2 GB at
250,000) whatever the size. About 5 s per million datagrams.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["CaptureInfo", "generate", "generate_heartbeat_heavy"]

#: Big-endian data frame header (34 bytes), the layout of nbmq.wire.
_DATA = np.dtype(
    [
        ("version", "u1"),
        ("kind", "u1"),
        ("session_id", ">u8"),
        ("message_id", ">u8"),
        ("part_count", "u1"),
        ("part_index", "u1"),
        ("message_size", ">u4"),
        ("part_size", ">u4"),
        ("chunk_size", ">u2"),
        ("chunk_offset", ">u4"),
    ]
)
_CONTROL = np.dtype([("version", "u1"), ("kind", "u1"), ("session_id", ">u8")])
_CHUNK = 466
_MAX_MESSAGE = 2200  # exclusive; with the acks and heartbeats, ~460 bytes a record (5M ~ 2.3 GB)
_SPACING_NS = 20_000  # 50,000 datagrams per second of capture time
_START_NS = 1_700_000_000_000_000_000
_SERVER = ("10.1.0.1", 7000)


@dataclass(frozen=True)
class CaptureInfo:
    """What :func:`generate` wrote: ``datagrams`` records, ``messages`` sent (whole or not),
    ``bytes`` of file, ``seconds`` it took."""

    datagrams: int
    messages: int
    bytes: int
    seconds: float


def _clients(sessions: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from nbmq import codec

    addrs = np.array([f"10.0.{i // 250}.{i % 250 + 1}" for i in range(sessions)], dtype=object)
    ports = 40000 + np.arange(sessions, dtype=np.uint16)
    sids = np.array(
        [codec.session_id(i + 1, f"{a}:{p}") for i, (a, p) in enumerate(zip(addrs, ports))], dtype=np.uint64
    )
    return addrs, ports, sids


def _block(
    rng: np.random.Generator,
    n_target: int,
    first: int,
    t0: int,
    sessions: int,
    handshake: bool,
    clients: tuple[np.ndarray, np.ndarray, np.ndarray],
    spacing_ns: int,
    safe_every: int = 8,
) -> tuple[object, int]:
    """About ``n_target`` datagrams from ``t0`` (ns) to ``t0 + n_target * spacing_ns``: (DatagramBatch, messages)."""
    from nbmq import codec
    from nbmq.capture import DatagramBatch

    addrs, ports, sids = clients
    span = n_target * spacing_ns
    safe = np.arange(sessions) % safe_every == 0 if safe_every else np.zeros(sessions, bool)

    # control frames first (their count is known): handshakes and heartbeats
    ctl_sess, ctl_kind, ctl_dir, ctl_t = [], [], [], []
    if handshake:
        s = np.arange(sessions)
        for kind, d, dt in ((1, 0, 0), (2, 1, 5_000)):
            ctl_sess.append(s), ctl_kind.append(np.full(sessions, kind)), ctl_dir.append(np.full(sessions, d))
            ctl_t.append(t0 + s * 2 * spacing_ns + dt)
    phase = (np.arange(sessions) * 7_919_000) % 1_000_000_000  # each session's heartbeat phase
    k0 = np.maximum(1, (t0 - _START_NS - phase + 999_999_999) // 1_000_000_000)  # after the handshake
    k1 = (t0 + span - _START_NS - phase + 999_999_999) // 1_000_000_000
    counts = np.maximum(k1 - k0, 0)
    hb_s = np.repeat(np.arange(sessions), counts)
    hb_k = np.arange(hb_s.size) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(k0, counts)
    hb_t = _START_NS + phase[hb_s] + hb_k * 1_000_000_000
    for d, dt in ((0, 0), (1, 300_000)):
        ctl_sess.append(hb_s), ctl_kind.append(np.full(hb_s.size, 4)), ctl_dir.append(np.full(hb_s.size, d))
        ctl_t.append(hb_t + dt)
    c_sess = np.concatenate(ctl_sess).astype(np.int64)
    c_kind = np.concatenate(ctl_kind).astype(np.uint8)
    c_dir = np.concatenate(ctl_dir).astype(np.int8)
    c_t = np.concatenate(ctl_t).astype(np.int64)

    # data frames (and the acks and resends they bring) fill the rest
    budget = max(1, n_target - c_sess.size)
    m = int(budget / 2.0) + 16
    size = rng.integers(1, _MAX_MESSAGE, m)
    per = -(-size // _CHUNK)
    sess = rng.integers(0, sessions, m)
    cost = per * np.where(safe[sess], 2, 1)  # a safe session's frame brings its ack
    m = max(1, int(np.searchsorted(np.cumsum(cost), budget)))
    size, per, sess = size[:m], per[:m], sess[:m]
    n = int(per.sum())
    msg = np.repeat(np.arange(m), per)
    k = np.arange(n) - np.repeat(np.cumsum(per) - per, per)
    hdr = np.zeros(n, _DATA)
    hdr["version"] = 1
    hdr["session_id"] = sids[sess][msg]
    hdr["message_id"] = rng.integers(1, 2**63, m, dtype=np.int64).astype(np.uint64)[msg] * np.uint64(2) + np.uint64(1)
    hdr["part_count"] = 1
    hdr["message_size"] = size[msg]
    hdr["part_size"] = size[msg]
    co = k * _CHUNK
    cs = np.minimum(_CHUNK, size[msg] - co)
    hdr["chunk_size"] = cs
    hdr["chunk_offset"] = co
    lengths = 34 + cs
    starts = np.cumsum(lengths) - lengths
    buf = np.frombuffer(bytearray(rng.bytes(int(lengths.sum()))), np.uint8)
    buf[starts[:, None] + np.arange(34)] = hdr.view(np.uint8).reshape(n, 34)
    d_sess = sess[msg]
    d_t = t0 + np.arange(n) * span // max(n, 1)
    d_safe = safe[d_sess]

    # acks: one per safe data frame, 50 us later, hash of the frame's exact bytes
    acked = np.flatnonzero(d_safe)
    view = memoryview(buf)
    hashes = np.fromiter(
        (codec.ack_hash(view[s : s + ln]) for s, ln in zip(starts[acked].tolist(), lengths[acked].tolist())),
        np.uint64,
        acked.size,
    )
    ack = np.zeros(acked.size, [("h", _CONTROL), ("hash", ">u8")])
    ack["h"]["version"], ack["h"]["kind"], ack["h"]["session_id"] = 1, 5, sids[d_sess[acked]]
    ack["hash"] = hashes
    ctl = np.zeros(c_sess.size, _CONTROL)
    ctl["version"], ctl["kind"] = 1, c_kind
    ctl["session_id"] = np.where(c_kind == 1, np.uint64(0), sids[c_sess])
    payload = np.concatenate([buf, ctl.view(np.uint8), ack.view(np.uint8)])
    c_off = buf.size + np.arange(c_sess.size) * 10
    a_off = buf.size + c_sess.size * 10 + np.arange(acked.size) * 18

    # loss on the other sessions, resends (a copy of the frame 0.2 s later) on safe ones
    u = rng.random(n)
    keep = d_safe | (u >= 0.0005)
    resend = np.flatnonzero(d_safe & (u < 0.002))
    r_t = np.minimum(d_t[resend] + 200_000_000, t0 + span - 1)

    rows_off = np.concatenate([starts[keep], c_off, a_off, starts[resend]]).astype(np.int64)
    rows_len = np.concatenate(
        [lengths[keep], np.full(c_sess.size, 10), np.full(acked.size, 18), lengths[resend]]
    ).astype(np.int32)
    rows_t = np.concatenate([d_t[keep], c_t, d_t[acked] + 50_000, r_t])
    rows_sess = np.concatenate([d_sess[keep], c_sess, d_sess[acked], d_sess[resend]])
    rows_dir = np.concatenate(
        [np.zeros(int(keep.sum()), np.int8), c_dir, np.ones(acked.size, np.int8), np.zeros(resend.size, np.int8)]
    )
    rows_t = np.minimum(rows_t, t0 + span - 1)  # replies due after the block's end: the next block starts there
    order = np.argsort(rows_t, kind="stable")
    rows_t, rows_off, rows_len = rows_t[order], rows_off[order], rows_len[order]
    rows_sess, rows_dir = rows_sess[order], rows_dir[order]
    out = rows_dir == 1
    client, server = addrs[rows_sess], np.full(rows_sess.size, _SERVER[0], dtype=object)
    cport, sport = ports[rows_sess], np.full(rows_sess.size, _SERVER[1], np.uint16)
    nrows = rows_t.size
    batch = DatagramBatch(
        timestamp=rows_t / 1e9,
        timestamp_ns=rows_t,
        src_addr=np.where(out, server, client),
        dst_addr=np.where(out, client, server),
        src_port=np.where(out, sport, cport).astype(np.uint16),
        dst_port=np.where(out, cport, sport).astype(np.uint16),
        payload=payload,
        offsets=rows_off,
        lengths=rows_len,
        frame_number=np.arange(first + 1, first + nrows + 1, dtype=np.int64),
        truncated=np.zeros(nrows, bool),
    )
    return batch, m


def generate(
    path: str | os.PathLike[str],
    datagrams: int,
    *,
    seed: int = 1,
    sessions: int = 64,
    block: int = 250_000,
    spacing_ns: int = _SPACING_NS,
    safe_every: int = 8,
) -> CaptureInfo:
    """Write a classic pcap (Ethernet, microsecond timestamps) of about ``datagrams`` records.

    Args:
        path: the capture to create; written to ``path + ".part"`` and renamed when whole, so a
            file at ``path`` is always complete (callers may cache it).
        datagrams: records wanted (int > 0); the result holds within 1% of it (each block
            ends on a whole message).
        seed: numpy seed; the same arguments give the same bytes.
        sessions: client sessions (1..62,500).
        block: datagrams built in memory at a time (bounds the memory: ~0.8 KB each).
        spacing_ns: capture time per datagram (ns; default 20,000: 50,000 datagrams/s).
        safe_every: every ``safe_every``-th session is a SafeDealer (0: none, Dealers only).

    Returns:
        A :class:`CaptureInfo`.

    Raises:
        ValueError: ``datagrams`` or ``sessions`` out of range.
        OSError: the file cannot be written.
    """
    import time

    from nbmq.capture import write_pcap

    if datagrams <= 0 or not 1 <= sessions <= 62_500:
        raise ValueError("datagrams must be > 0 and sessions within 1..62,500")
    started = time.perf_counter()
    target = Path(path)
    part = target.with_name(target.name + ".part")
    scratch = target.with_name(target.name + ".block")
    rng = np.random.default_rng(seed)
    clients = _clients(sessions)
    written = messages = 0
    clock = _START_NS
    try:
        with open(part, "wb") as f:
            while written < datagrams:
                want = min(block, datagrams - written)
                batch, m = _block(rng, want, written, clock, sessions, written == 0, clients, spacing_ns, safe_every)
                clock += want * spacing_ns
                write_pcap(scratch, batch)
                with open(scratch, "rb") as s:
                    if written:
                        s.seek(24)  # the file header, written once
                    while chunk := s.read(16 << 20):
                        f.write(chunk)
                written += len(batch.frame_number)  # type: ignore[attr-defined]
                messages += m
        part.replace(target)
    finally:
        scratch.unlink(missing_ok=True)
        part.unlink(missing_ok=True)
    return CaptureInfo(written, messages, target.stat().st_size, time.perf_counter() - started)


def generate_heartbeat_heavy(path: str | os.PathLike[str], datagrams: int, *, seed: int = 1) -> CaptureInfo:
    """A capture shaped as a real Dealer pair's: one session, no SafeDealer, 300 ms of capture
    time per datagram, so the two heartbeats a second are ~60% of the datagrams (the measured
    capture: 271k datagrams, 109k data frames, 162k heartbeats). Arguments as :func:`generate`."""
    return generate(path, datagrams, seed=seed, sessions=1, spacing_ns=300_000_000, safe_every=0)
