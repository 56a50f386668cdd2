"""Differential test: the shipped Lua dissectors in tshark against our own decoding, row for row.

For every bundled capture, ``tshark -X lua_script:...`` prints the dissectors' header fields;
the same fields come from our decoding (the rows the frames / bqsp / rqueue tables are built
from: ``read_datagrams`` + ``parse_frames``, ``decode_tcp_streams``), with the codec twin under
test. Skipped, with the reason, when tshark is not installed (Debian package ``tshark``;
``make test`` installs it when apt is available).
"""

from __future__ import annotations

import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from nbmq.examples import CAPTURE_DIR, bundled_captures
from nbmq.wireshark import LUA_DIR, LUA_FILES

TSHARK = shutil.which("tshark")
pytestmark = pytest.mark.skipif(TSHARK is None, reason="tshark is not installed (apt-get install tshark)")
STREAMS = CAPTURE_DIR.parent / "streams"
UDP_CAPTURES = [p.name for p in bundled_captures(pcapng=True)]
NBMQ_FIELDS = ["version", "kind", "session_id", "message_id", "part_count", "part_index", "message_size",
               "part_size", "chunk_size", "chunk_offset"]


def tshark(capture: Path, fields: list[str], *options: str) -> list[list[str]]:
    """``tshark -T fields`` rows (one per frame) with every shipped dissector loaded."""
    cmd = [TSHARK, "-n", "-r", str(capture), "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,"]
    for name in LUA_FILES:
        cmd += ["-X", f"lua_script:{LUA_DIR / name}"]
    # The bundled stream captures hold reordered segments, as real ones do: Wireshark reassembles
    # them only with this preference (off by default in Wireshark 4.0).
    for option in ("tcp.reassemble_out_of_order:TRUE", *options):
        cmd += ["-o", option]
    for field in fields:
        cmd += ["-e", field]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Lua" not in proc.stderr and "error" not in proc.stderr.lower(), proc.stderr
    return [line.split("\t") for line in proc.stdout.splitlines()]


@pytest.mark.parametrize("name", UDP_CAPTURES)
def test_nbmq_header_fields_match_row_for_row(name, codec):
    from nbmq.capture import read_datagrams

    batch = read_datagrams(CAPTURE_DIR / name)
    rows = codec.parse_frames(batch.payload, batch.offsets, batch.lengths)
    ours = {}
    for number, r in zip(batch.frame_number.tolist(), rows):
        if r["error"] == 0:
            values = [int(r[f]) for f in NBMQ_FIELDS]
            if r["kind"] != 0:  # control frames: the data-frame fields are absent
                values = values[:3] + [None] * 7
            ours[number] = values
    theirs = {}
    for row in tshark(CAPTURE_DIR / name, ["frame.number"] + [f"nbmq.{f}" for f in NBMQ_FIELDS]):
        if row[1]:
            theirs[int(row[0])] = [int(v, 0) if v else None for v in row[1:]]
    assert len(ours) == len(batch) > 1000
    assert theirs == ours


def test_nbmq_ack_hash_field_matches_the_codec(codec):
    from nbmq.capture import read_datagrams

    batch = read_datagrams(CAPTURE_DIR / "safe_dealer.pcap")
    acks = {}
    for i, number in enumerate(batch.frame_number.tolist()):
        frame = batch.payload_at(i)
        if frame[1] == 5:
            acks[number] = int.from_bytes(frame[10:18], "big")
    theirs = {int(r[0]): int(r[1], 16) for r in tshark(CAPTURE_DIR / "safe_dealer.pcap", ["frame.number", "nbmq.ack_hash"]) if r[1]}
    assert len(acks) > 1000 and theirs == acks
    assert any(codec.ack_hash(batch.payload_at(i)) in acks.values() for i in range(50) if batch.payload_at(i)[1] == 0)


def test_tshark_display_filters_use_the_field_names():
    rows = tshark(CAPTURE_DIR / "dealer.pcap", ["frame.number"], )
    cmd = [TSHARK, "-n", "-r", str(CAPTURE_DIR / "dealer.pcap"), "-Y", "nbmq.kind == 1", "-T", "fields", "-e", "nbmq.session_id"]
    for name in LUA_FILES:
        cmd += ["-X", f"lua_script:{LUA_DIR / name}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout.split()
    assert len(rows) > 1000 and out == ["0x0000000000000000"] * 3  # the three clients' Connects


def _stream_rows(protocol: str, port: int, codec) -> dict[str, list[tuple]]:
    from nbmq.capture.tcp import decode_tcp_streams

    out: dict[str, list[tuple]] = defaultdict(list)
    for r in decode_tcp_streams(STREAMS / f"{protocol}.pcap", protocol, [port], codec=codec):
        assert r.error is None
        sender = r.client if r.direction == "c2s" else r.server
        if protocol == "bqsp":
            out[sender].append((r.kind, r.queue, r.length))
        else:
            out[sender].append((r.kind, (r.topic or b"").decode(), r.length))
    return dict(out)


def _tshark_streams(protocol: str, fields: list[str], *options: str) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = defaultdict(list)
    rows = tshark(STREAMS / f"{protocol}.pcap", ["ip.src", "ipv6.src", "tcp.srcport"] + fields, *options)
    for row in rows:
        if not row[3]:
            continue
        sender = f"{row[0]}:{row[2]}" if row[0] else f"[{row[1]}]:{row[2]}"
        columns = [v.split(",") for v in row[3:]]
        for values in zip(*columns):
            out[sender].append(values)
    return dict(out)


def test_bqsp_packets_match_in_stream_order(codec):
    ours = _stream_rows("bqsp", 7701, codec)
    theirs = _tshark_streams("bqsp", ["bqsp.data_type", "bqsp.queue", "bqsp.length"], "bqsp.tcp_port:7701")
    theirs = {k: [(int(t, 0), int(q), int(n)) for t, q, n in v] for k, v in theirs.items()}
    assert sum(map(len, ours.values())) == 14
    assert theirs == ours


def test_bqsp_needs_its_port_preference():
    assert _tshark_streams("bqsp", ["bqsp.queue"]) == {}


def test_rqueue_messages_match_in_stream_order(codec):
    ours = _stream_rows("rqueue", 6567, codec)
    theirs = _tshark_streams("rqueue", ["rqueue.type", "rqueue.topic", "rqueue.content_length"])
    theirs = {k: [(int(t), topic, int(n)) for t, topic, n in v] for k, v in theirs.items()}
    assert sum(map(len, ours.values())) == 13
    assert theirs == ours
