"""Seed corpus for every fuzz target, cut from the bundled captures (deterministic, ~0.5 MB).

Seeds are generated at run time into a build directory (``python -m fuzz.corpus DIR``) rather
than committed: the bundled captures are the source. Inputs worth keeping for good (findings,
hand-made cases) go into ``fuzz/corpus/<target>/``, which every run also reads.

Per target (layouts in ``fuzz.framing``):
- parse_frame: datagrams of every kind / part count / size class of the nbmq captures.
- parse_frames, reassembler: runs of consecutive datagrams (parse_frames: of the secure capture
  in tests/data too); whole messages with their frames added, duplicated, batched, expired and
  dropped.
- bqsp_decoder, rqueue_decoder: each TCP direction of ``examples/streams/*.pcap`` fed segment by
  segment, whole, and in 7-byte feeds.
- ack_hashes: as parse_frames (SafeDealer data frames and their Acks among them, sealed ones too).
- reassemble_groups: frames in fuzz/spark_targets.py's layout (a message whole, with duplicates, losses, hostile sizes).
- engine_twins: scripts in fuzz/engine_targets.py's layout (peers joining, messages both ways,
  acks, resends, ticks, option changes, leaving) for every socket class and option set.
- secure_frames: scripts in fuzz/secure_targets.py's layout (every genuine sealed frame, replays,
  flipped bits, plain and forged frames).
- capture_twins, capture_split: the head and middle records of every bundled capture (pcap,
  pcapng), and the same datagrams rewritten in other link types, nanosecond and big-endian
  files, a snaplen cut, and IPv6.
"""

from __future__ import annotations

import argparse
import hashlib
import struct
import tempfile
from collections import defaultdict
from pathlib import Path

from nbmq import _codec_py as py
from nbmq.capture import read_datagrams, write_pcap, write_pcapng
from nbmq.capture.tcp.segments import iter_tcp_segments
from nbmq.examples import bundled_captures
from nbmq.examples.streams import stream_captures
from nbmq.wire import DataFrame

from .engine_targets import engine_seeds
from .framing import join_operations, join_pieces
from .secure_targets import secure_seeds

__all__ = ["seeds", "write_seeds", "REGRESSIONS"]

#: committed inputs (findings, hand-made cases), one folder per target
REGRESSIONS = Path(__file__).parent / "corpus"
SEED_BYTES = 4096  # libFuzzer's default max_len: seeds fit it
#: a real capture of secure mode's traffic (tests/data/VECTORS.md)
SECURE_CAPTURE = Path(__file__).resolve().parents[1] / "tests" / "data" / "secure_safe_dealer.pcap"
#: the same traffic with sealed bundles (version 0x82: several frames under one seal)
BUNDLE_CAPTURE = SECURE_CAPTURE.with_name("secure_bundles.pcap")


def _datagrams() -> dict[str, list[bytes]]:
    return {p.name: [bytes(x) for x in _payloads(p)] for p in bundled_captures()}


def _payloads(path: Path) -> list[bytes]:
    b = read_datagrams(path)
    return [b.payload_at(i) for i in range(len(b))]


def _frame_class(raw: bytes) -> tuple:
    f = py.parse_frame(raw)
    if isinstance(f, DataFrame):
        return (0, f.part_count, min(f.message_size // 500, 4), f.chunk_offset == 0, len(raw) == 500)
    return (raw[1], len(raw) > 10)


def _parse_frame_seeds(grams: dict[str, list[bytes]]) -> list[bytes]:
    per_class: dict[tuple, list[bytes]] = defaultdict(list)
    for raws in grams.values():
        for raw in raws:
            bucket = per_class[_frame_class(raw)]
            if len(bucket) < 2:
                bucket.append(raw)
    return [r for bucket in per_class.values() for r in bucket]


def _parse_frames_seeds(grams: dict[str, list[bytes]]) -> list[bytes]:
    out = []
    for k, raws in enumerate(grams.values()):
        for start in (0, len(raws) // 3, len(raws) // 2):
            run = _fit(raws[start : start + 12], SEED_BYTES - 64)
            out.append(bytes([k & 1]) + join_pieces(run) + struct.pack(">ii", 0, 40))
    return out


def _messages(raws: list[bytes]) -> list[list[bytes]]:
    """Data frames grouped by (session, message), in capture order, smallest messages first."""
    groups: dict[tuple, list[bytes]] = defaultdict(list)
    for raw in raws:
        f = py.parse_frame(raw)
        if isinstance(f, DataFrame):
            groups[(f.session_id, f.message_id)].append(raw)
    return sorted(groups.values(), key=lambda g: (sum(map(len, g)), g[0]))


def _reassembler_seeds(grams: dict[str, list[bytes]]) -> list[bytes]:
    out = []
    for k, raws in enumerate(grams.values()):
        msgs = _messages(raws)
        small, mid = msgs[:4], msgs[len(msgs) // 2 : len(msgs) // 2 + 2]
        frames = [f for m in small + mid for f in m]
        plans = [
            [(0, f) for f in frames],  # every frame once
            [(3 + (i & 1), f) for i, f in enumerate(frames)] + [(3, frames[0])],  # parsed, one duplicate
            [(5, f) for f in frames[:4]] + [(6 | 16 * 4, b"")] + [(0 | 16 * 5, f) for f in frames[4:]],  # batch, expire
            [(0, f) for f in reversed(frames)] + [(7, frames[0])],  # reversed, then a drop
            [(0, f) for f in frames[::2]] + [(8, frames[0]), (9, frames[1])],  # then drop_owner, owner_bytes
        ]
        for j, plan in enumerate(plans):
            body = join_operations(plan)[: SEED_BYTES - 1]
            out.append(bytes([(k * 5 + j) * 7 % 108]) + body)  # every budget, cap, peer budget and key mode
    return out


def _stream_seeds(name: str) -> list[bytes]:
    path = next(p for p in stream_captures() if p.stem == name)
    directions: dict[tuple[str, str], list[bytes]] = defaultdict(list)
    for seg in iter_tcp_segments(path):
        if seg.data:
            directions[(seg.src, seg.dst)].append(seg.data)
    out = []
    for k, segs in enumerate(directions.values()):
        whole = b"".join(segs)[: SEED_BYTES - 64]
        limit = 3 if k % 2 else 2  # byte 0 picks the size limit: the largest two
        out.append(bytes([limit]) + join_pieces(_fit(segs, SEED_BYTES - 64)))
        out.append(bytes([limit]) + join_pieces([whole]))
        out.append(bytes([k % 4]) + join_pieces([whole[i : i + 7] for i in range(0, min(len(whole), 600), 7)]))
    return out


def _fit(pieces: list[bytes], budget: int) -> list[bytes]:
    """The longest prefix of ``pieces`` whose framed size fits ``budget`` bytes (at least one)."""
    out, used = [], 0
    for p in pieces:
        if out and used + len(p) + 2 > budget:
            break
        out.append(p[:budget])
        used += len(p) + 2
    return out


def _pcap_records(data: bytes) -> list[tuple[int, int]]:
    """(offset, length) of each record of an undamaged little-endian classic pcap."""
    out, pos = [], 24
    while pos + 16 <= len(data):
        incl = struct.unpack_from("<I", data, pos + 8)[0]
        out.append((pos, 16 + incl))
        pos += 16 + incl
    return out


def _pcapng_blocks(data: bytes) -> list[tuple[int, int, int]]:
    """(offset, length, block type) of each block of an undamaged little-endian pcapng."""
    out, pos = [], 0
    while pos + 12 <= len(data):
        btype, blen = struct.unpack_from("<II", data, pos)
        out.append((pos, blen, btype))
        pos += blen
    return out


def _cut_pcap(data: bytes, first: int) -> bytes:
    out = bytearray(data[:24])
    for off, n in _pcap_records(data)[first:]:
        if len(out) + n > SEED_BYTES and len(out) > 24:
            break
        out += data[off : off + n]
    return bytes(out)


def _cut_pcapng(data: bytes, first: int) -> bytes:
    blocks = _pcapng_blocks(data)
    head = [b for b in blocks[:4] if b[2] != 6]  # section header, interface description(s)
    out = bytearray(b"".join(data[o : o + n] for o, n, _ in head))
    for off, n, btype in blocks[first:]:
        if btype != 6:
            continue
        if len(out) + n > SEED_BYTES:
            break
        out += data[off : off + n]
    return bytes(out)


def _rewritten(rows: list[tuple]) -> list[bytes]:
    """The same datagrams in the other layouts the readers accept."""
    v6 = [(t, "2001:db8::1", sp, "2001:db8::2", dp, p) for t, _s, sp, _d, dp, p in rows]
    variants = [
        ("pcap", rows, dict(linktype=0)),
        ("pcap", rows, dict(linktype=101)),
        ("pcap", rows, dict(linktype=108)),
        ("pcap", rows, dict(linktype=113)),
        ("pcap", rows, dict(linktype=276)),
        ("pcap", rows, dict(nanosecond=True)),
        ("pcap", rows, dict(byte_order=">")),
        ("pcap", rows, dict(snaplen=60)),
        ("pcap", v6, dict()),
        ("pcapng", v6, dict(linktype=113)),
    ]
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (fmt, rs, kw) in enumerate(variants):
            path = Path(tmp) / f"{i}.{fmt}"
            (write_pcap if fmt == "pcap" else write_pcapng)(path, rs, **kw)  # type: ignore[operator]
            out.append(path.read_bytes())
    return out


def _capture_seeds() -> list[bytes]:
    out = []
    for path in bundled_captures(pcapng=True) + stream_captures():
        data = path.read_bytes()
        if path.suffix == ".pcapng":
            n = len(_pcapng_blocks(data))
            out += [_cut_pcapng(data, k) for k in (0, n // 2)]
        else:
            n = len(_pcap_records(data))
            out += [_cut_pcap(data, k) for k in (0, n // 3, n - 4)]
    b = read_datagrams(bundled_captures()[0])
    rows = [
        (
            float(b.timestamp[i]),
            b.src_addr[i],
            int(b.src_port[i]),
            b.dst_addr[i],
            int(b.dst_port[i]),
            b.payload_at(i)[:200],
        )
        for i in range(8)
    ]
    return out + _rewritten(rows)


def _reassemble_groups_seeds() -> list[bytes]:
    """Frames for ``reassemble_groups`` (fuzz/spark_targets.py's layout): a 3-part message whole,
    with a duplicate and a lost part, two groups, a claimed size of gigabytes, an empty part,
    groups of more than 256 frames, several buffers, full-width values."""
    from .spark_targets import encode

    payload = bytes(range(60))
    whole = [(0, 3, i, 30, 10, 0, 10, i * 10) for i in range(3)]
    return [
        encode(whole, payload),
        encode(whole + [(0, 3, 1, 30, 10, 0, 10, 10)], payload, keep_parts=False),
        encode(whole[:2], payload, limit=2),
        encode(whole + [(1, 2, 0, 40, 20, 0, 20, 30), (0, 2, 1, 40, 20, 0, 20, 40)], payload),
        encode([(2, 1, 0, 60000, 60000, 0, 10, 0)], payload, limit=0),
        encode([(0, 2, 0, 10, 10, 0, 10, 0), (0, 2, 1, 10, 0, 0, 0, 0)], payload, limit=1),
        encode(
            [(0, 1, 0, 10240, 10240, 0, 20, 0), (0, 1, 0, 10240, 10240, 5120, 20, 20)], payload, repeat=256
        ),  # 512 frames of one message
        encode(
            [(2, 1, 0, 2, 60000, 0, 20, 0), (0, 1, 0, 2, 60000, 2800, 20, 0)], payload, repeat=140
        ),  # 280 frames that never complete
        encode([(k << 5, 3, k, 30, 10, 0, 10, 0) for k in range(3)], payload * 3, buffers=3),  # three buffers
        encode(
            [(8, 1, 0, 10, 10, 0, 10, 0), (9, 1, 0, 10, 10, 0, 10, 0)], payload, wide={0: (6, 2**63 - 1), 1: (0, 2**62)}
        ),  # full-width claims
    ]


def seeds() -> dict[str, list[bytes]]:
    """Seed inputs per target name, built from the bundled captures."""
    grams = _datagrams()
    captures = _capture_seeds()
    # secure mode's frames (version 0x81): parse_frames reads their clear headers, parse_frame refuses
    # them; bundles (0x82) go through split_bundles
    sealed = {**grams, **{p.name: _payloads(p) for p in (SECURE_CAPTURE, BUNDLE_CAPTURE)}}
    return {
        "parse_frame": _parse_frame_seeds(grams),
        "parse_frames": _parse_frames_seeds(sealed),
        "reassembler": _reassembler_seeds(grams),
        "bqsp_decoder": _stream_seeds("bqsp"),
        "rqueue_decoder": _stream_seeds("rqueue"),
        "capture_twins": captures,
        "capture_split": captures,
        "ack_hashes": _parse_frames_seeds(sealed),  # the same layout (the first byte sets the gap)
        "reassemble_groups": _reassemble_groups_seeds(),
        "engine_twins": engine_seeds(),
        "secure_frames": secure_seeds(),
    }


def write_seeds(out: Path) -> dict[str, int]:
    """Write the seeds to ``out/<target>/<sha1>`` (what libFuzzer reads); returns counts."""
    counts = {}
    for target, inputs in seeds().items():
        folder = out / target
        folder.mkdir(parents=True, exist_ok=True)
        for data in inputs:
            (folder / hashlib.sha1(data).hexdigest()).write_bytes(data)
        counts[target] = len(inputs)
    return counts


def main() -> None:
    """``python -m fuzz.corpus DIR``: write the seed corpus under DIR."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    for target, n in write_seeds(args.out).items():
        print(f"{target:16} {n:4} seeds")


if __name__ == "__main__":
    main()
