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
NBMQ_FIELDS = [
    "version",
    "kind",
    "session_id",
    "message_id",
    "part_count",
    "part_index",
    "message_size",
    "part_size",
    "chunk_size",
    "chunk_offset",
]


def tshark(capture: Path, fields: list[str], *options: str, args: tuple[str, ...] = ()) -> list[list[str]]:
    """``tshark -T fields`` rows (one per frame) with every shipped dissector loaded; ``options``
    are preferences (``-o``), ``args`` more command-line arguments."""
    cmd = [TSHARK, "-n", "-r", str(capture), "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,", *args]
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
    theirs = {
        int(r[0]): int(r[1], 16)
        for r in tshark(CAPTURE_DIR / "safe_dealer.pcap", ["frame.number", "nbmq.ack_hash"])
        if r[1]
    }
    assert len(acks) > 1000 and theirs == acks
    assert any(codec.ack_hash(batch.payload_at(i)) in acks.values() for i in range(50) if batch.payload_at(i)[1] == 0)


def test_tshark_display_filters_use_the_field_names():
    rows = tshark(
        CAPTURE_DIR / "dealer.pcap",
        ["frame.number"],
    )
    cmd = [
        TSHARK,
        "-n",
        "-r",
        str(CAPTURE_DIR / "dealer.pcap"),
        "-Y",
        "nbmq.kind == 1",
        "-T",
        "fields",
        "-e",
        "nbmq.session_id",
    ]
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


def _malformed_frames(codec) -> list[bytes]:
    """The nine ways a datagram fails the codec's frame check, each from a valid frame."""
    good = bytes(codec.shard_message([b"x" * 40], session_id=7, message_id=9).frames()[0])

    def patched(offset: int, value: bytes) -> bytes:
        return good[:offset] + value + good[offset + len(value) :]

    return [
        good[:-1],  # chunk_size disagrees with the bytes present
        patched(19, b"\x01"),  # part_index >= part_count
        patched(18, b"\x00"),  # part_count is 0
        patched(30, (10).to_bytes(4, "big")),  # chunk past its part
        patched(24, (41).to_bytes(4, "big")),  # part larger than its message
        good[:20],  # truncated header
        patched(0, b"\x02"),  # wrong version
        patched(1, b"\x09"),  # unknown kind
        good + bytes(500 - len(good) + 1),  # datagram over 500 bytes
    ]


def _expert_rows(capture: Path, *args: str) -> dict[int, str]:
    rows = tshark(capture, ["frame.number", "_ws.expert.message"], args=args)
    return {int(r[0]): r[1] for r in rows}


def test_malformed_frames_get_the_codecs_words(tmp_path, codec):
    """With Decode As, every datagram the codec rejects carries an expert-info error whose text
    is the codec's DecodeError message; the valid frame around them carries none."""
    from nbmq.capture import write_pcap
    from nbmq.errors import DecodeError

    frames = _malformed_frames(codec)
    expected = {}
    for i, data in enumerate(frames):
        with pytest.raises(DecodeError) as raised:
            codec.parse_frame(data)
        expected[i + 1] = str(raised.value)
    valid = bytes(codec.shard_message([b"ok"], session_id=7, message_id=10).frames()[0])
    rows = [(1.0 + i, "10.0.0.1", 40000, "10.0.0.2", 7000, d) for i, d in enumerate([*frames, valid])]
    path = tmp_path / "malformed.pcap"
    write_pcap(path, rows)
    assert len(set(expected.values())) == 9
    theirs = _expert_rows(path, "-d", "udp.port==7000,nbmq")  # Decode As
    assert theirs == {**expected, len(frames) + 1: ""}
    # Without Decode As the heuristic claims the nbmq-shaped ones (version 1, kind 0..5, at least
    # a control header) and flags them alike; the rest are left to other dissectors. (Each from
    # its own port: a claimed datagram binds its conversation to nbmq, as Wireshark does.)
    write_pcap(path, [(t, a, 40000 + i, b, 7000 + i, d) for i, (t, a, _, b, _, d) in enumerate(rows)])
    heuristic = _expert_rows(path)
    shaped = {n for n, data in enumerate(frames, 1) if len(data) >= 10 and data[0] == 1 and data[1] <= 5}
    assert {n for n, text in heuristic.items() if text} == shaped and len(shaped) == 7
    assert all(heuristic[n] == expected[n] for n in shaped)


@pytest.mark.parametrize("name", ["dealer.pcap", "safe_dealer.pcap", "radio_dish.pcap"])
def test_reassembly_matches_the_codec(name, codec):
    """The frame that completes a message shows it whole, and every other frame of it links there:
    the same messages, part sizes and part bytes (sha256) as the codec's reassembly of the same
    datagrams (the pipeline's messages/ are built by it), completed by the same frame."""
    import hashlib

    from nbmq.capture import read_datagrams

    batch = read_datagrams(CAPTURE_DIR / name)
    reassembler = codec.Reassembler(max_incomplete_bytes=1 << 30)
    ours, members = {}, defaultdict(list)
    for i, number in enumerate(batch.frame_number.tolist()):
        data = batch.payload_at(i)
        if len(data) < 2 or data[1] != 0:
            continue
        frame = codec.parse_frame(data)
        key = (f"{batch.src_addr[i]}:{int(batch.src_port[i])}", frame.session_id, frame.message_id)
        members[key].append(number)
        message = reassembler.add(frame, key=key)
        if message is not None:
            ours[number] = (
                frame.message_id,
                [len(p) for p in message],
                [hashlib.sha256(bytes(p)).hexdigest() for p in message if len(p)],
            )
    theirs, links = {}, {}
    for row in tshark(
        CAPTURE_DIR / name,
        ["frame.number", "nbmq.message.id", "nbmq.message.part_size", "nbmq.message.part", "nbmq.reassembled_in"],
        args=("-2",),
    ):
        number = int(row[0])
        if row[1]:
            parts = [bytes.fromhex(p.replace(":", "")) for p in row[3].split(",") if p]
            theirs[number] = (
                int(row[1], 16),
                [int(s) for s in row[2].split(",")],
                [hashlib.sha256(p).hexdigest() for p in parts],
            )
        if row[4]:
            links[number] = int(row[4])
    assert len(ours) > 50 and theirs == ours
    done = {n for n in ours}
    expected_links = {
        n: last for key, numbers in members.items() for last in done.intersection(numbers) for n in numbers if n < last
    }
    assert links == expected_links


def test_secure_frames_show_their_headers_and_say_the_content_is_encrypted(tmp_path, codec):
    """Secure mode's frames (version byte 0x81; docs/secure.md): the handshake's Connect and
    Connected, a sealed data frame (its plain header, a counter, the encrypted chunk and a tag)
    and a sealed heartbeat are claimed by the heuristic, show their header fields and counter,
    are never reassembled, and carry no expert error; a sealed frame over 524 bytes is flagged."""
    from nbmq.capture import write_pcap

    plain = bytes(codec.shard_message([b"x" * 40], session_id=0x1234, message_id=0xABC).frames()[0])
    sealed_data = b"\x81" + plain[1:34] + (7).to_bytes(8, "big") + bytes(range(40)) + b"\xee" * 16
    frames = [
        b"\x81\x01" + bytes(8) + b"\x11" * 96,  # Connect: Noise IK message 1
        b"\x81\x02" + (0x1234).to_bytes(8, "big") + b"\x22" * 56,  # Connected: message 2
        sealed_data,
        b"\x81\x04" + (0x1234).to_bytes(8, "big") + (8).to_bytes(8, "big") + b"\xee" * 16,  # heartbeat
        b"\x81\x04" + (0x1234).to_bytes(8, "big") + bytes(515),  # 525 bytes: over a sealed frame's 524
    ]
    path = tmp_path / "secure.pcap"
    write_pcap(path, [(1.0 + i, "10.0.0.1", 40000, "10.0.0.2", 7000, d) for i, d in enumerate(frames)])
    fields = ["frame.number", "nbmq.secure", "nbmq.kind", "nbmq.session_id", "nbmq.message_id", "nbmq.chunk_size"]
    fields += ["nbmq.counter", "nbmq.ciphertext", "nbmq.handshake", "nbmq.reassembled_in", "_ws.expert.message"]
    rows = {int(r[0]): r[1:] for r in tshark(path, fields, args=("-2",))}
    assert [rows[n][:2] for n in range(1, 6)] == [["1", "1"], ["1", "2"], ["1", "0"], ["1", "4"], ["1", "4"]]
    assert rows[1][7] == "11" * 96 and rows[2][7] == "22" * 56  # the handshake messages, as bytes
    assert rows[3][2:7] == ["0x0000000000001234", "0x0000000000000abc", "40", "7", bytes(range(40)).hex()]
    assert rows[4][5:7] == ["8", ""]  # a heartbeat: its counter, no content
    assert [rows[n][8] for n in range(1, 6)] == ["", "", "", "", ""]  # never reassembled
    assert [rows[n][9] for n in range(1, 5)] == ["", "", "", ""]
    assert rows[5][9] == "sealed frame over 524 bytes (at byte 524)"
