"""Frames captured from the Rust reference reassemble to every message the manifest lists as
complete, with the same sha256 per part, through both codec twins."""

from __future__ import annotations

import hashlib

import pytest

from nbmq.capture import read_datagrams
from nbmq.examples import CAPTURE_DIR
from nbmq.wire import FrameKind


def _reassemble(codec, path):
    """Every message completed from a capture: {(sender port, session_id, message_id): [sha256]}."""
    batch = read_datagrams(path)
    reassembler = codec.Reassembler(max_incomplete_bytes=256 << 20)
    done: dict[tuple[int, int, int], list[str]] = {}
    late_duplicates = 0
    for i in range(len(batch)):
        frame = codec.parse_frame(batch.payload_at(i))
        if frame.kind != FrameKind.DATA:
            continue
        key = (int(batch.src_port[i]), frame.session_id, frame.message_id)
        if key in done:  # a SafeDealer resend of a message already delivered
            late_duplicates += 1
            continue
        parts = reassembler.add(frame, key=key)
        if parts is not None:
            done[key] = [hashlib.sha256(p).hexdigest() for p in parts]
    return done, reassembler, late_duplicates


def _deliveries(entry):
    """(sender, record) for every copy of every message sent; a Radio message has one copy per
    Dish (each with its own message_id), the other sockets one record per message."""
    for sender, messages in entry["messages_sent"].items():
        for m in messages:
            for copy in m.get("deliveries", [m]):
                yield sender, {**m, **copy}


@pytest.mark.parametrize("name", ["dealer.pcap", "dealer.pcapng", "safe_dealer.pcap", "radio_dish.pcap"])
def test_capture_messages_match_manifest(codec, manifest, name):
    entry = next(c for c in manifest["captures"] if c["file"] == name.replace(".pcapng", ".pcap"))
    ports = {p["name"]: int(p["addr"].rsplit(":", 1)[1]) for p in entry["peers"]}
    done, reassembler, _ = _reassemble(codec, CAPTURE_DIR / name)

    expected = {}
    for sender, m in _deliveries(entry):
        if m["in_capture"] == "complete":
            expected[(ports[sender], m["session_id"], m["message_id"])] = m["part_sha256"]
    assert expected, "the manifest lists complete messages"
    assert done == expected
    assert reassembler.rejected == 0
    # Nothing incomplete is left over except messages the manifest says are partial.
    partial = sum(1 for _, m in _deliveries(entry) if m["in_capture"] == "partial")
    assert len(reassembler) == partial


def test_safe_dealer_capture_resends_are_duplicates(codec, manifest):
    entry = next(c for c in manifest["captures"] if c["file"] == "safe_dealer.pcap")
    done, reassembler, late = _reassemble(codec, CAPTURE_DIR / "safe_dealer.pcap")
    frames_in_capture = sum(m["frames_in_capture"] for _, m in _deliveries(entry))
    unique = sum(m["unique_frames_in_capture"] for _, m in _deliveries(entry))
    assert reassembler.duplicates + late == frames_in_capture - unique
