"""The findings rules as pure functions: no Spark (these run on the pure-Python twin too)."""

from __future__ import annotations

import gzip
import struct
from decimal import Decimal

import numpy as np
import pandas as pd
import pytest

from nbmq.spark.findings import (
    DEFAULT_HEARTBEAT_INTERVAL_S,
    KINDS,
    MIN_INTERVAL_S,
    damage_findings,
    damage_spans,
    estimate_interval,
    findings_frame,
    in_flight_window,
    liveness_findings,
    liveness_gaps,
    message_findings,
    silences,
)

S = 1_000_000_000  # ns per second
T0 = 1_700_000_000 * S


def _spans(rows):
    """rows: (capture, session_id, src, times in seconds after T0) -> spans of length 0."""
    out = [(c, sid, src, T0 + int(t * S), i + 1) for c, sid, src, times in rows for i, t in enumerate(times)]
    df = pd.DataFrame(out, columns=["capture", "session_id", "src", "start_ns", "start_frame"])
    return df.assign(end_ns=df.start_ns, end_frame=df.start_frame)


def _frames(rows):
    return [None if pd.isna(f) else int(f) for f in rows.frame]


NO_DISCONNECT = pd.DataFrame({"capture": [], "session_id": [], "first_ns": []})
ONE_SECOND = {"c": (1.0, "reference default")}


def test_silences_mid_capture_and_to_the_end():
    times = T0 + np.array([0, 0.5, 1.0, 2.7, 3.0, 7.5, 8.0]) * S
    gaps = silences(times, T0 + 10 * S, 1.0)
    assert gaps[["kind", "to_end"]].values.tolist() == [
        ["heartbeat_gap", False],  # 1.0 -> 2.7: 1.7 s
        ["peer_silent", False],  # 3.0 -> 7.5: 4.5 s
        ["heartbeat_gap", True],  # 8.0 -> the end: 2.0 s
    ]
    assert gaps.seconds.round(6).tolist() == [1.7, 4.5, 2.0]
    assert gaps.span.tolist() == [2, 4, 6]  # index of the frame each gap follows
    assert gaps.start_ns.tolist() == [times[2], times[4], times[6]]


def test_silences_thresholds_are_strict():
    times = T0 + np.array([0, 1.5, 4.5]) * S
    gaps = silences(times, T0 + int(7.5 * S), 1.0)  # 1.5 s, 3.0 s, 3.0 s
    assert gaps.kind.tolist() == ["heartbeat_gap", "heartbeat_gap"]  # 1.5 is not over 1.5


def test_silences_any_order_and_overlapping_spans():
    times = T0 + np.array([5.0, 0.0, 1.0]) * S
    assert silences(times, T0 + 5 * S, 1.0).span.tolist() == [2]  # after the frame at 1.0
    # a long busy span covers what its neighbours leave open
    starts = T0 + np.array([0, 1, 8]) * S
    ends = T0 + np.array([9, 1, 8]) * S
    assert liveness_gaps(starts, ends, T0 + 9 * S, 1.0).empty


def test_silences_bad_arguments():
    with pytest.raises(ValueError, match="interval_s"):
        silences(np.array([T0]), T0, 0.0)
    with pytest.raises(ValueError, match="differ in length"):
        liveness_gaps(np.array([T0]), np.array([T0, T0]), T0, 1.0)
    assert silences(np.array([], np.int64), T0, 1.0).empty


def test_estimate_interval():
    assert estimate_interval([]) == (DEFAULT_HEARTBEAT_INTERVAL_S, "reference default")
    assert estimate_interval([0.2, 0.25, 0.3, 9.0]) == (pytest.approx(0.275), "estimated from 4 heartbeats")
    assert estimate_interval([0.001]) == (MIN_INTERVAL_S, "estimated from 1 heartbeats")
    # heartbeats on a fixed clock whatever else is sent: the spacing says 1 s
    assert estimate_interval([0.01, 0.02, 0.03], [1.0, 1.0, 2.0]) == (1.0, "estimated from 6 heartbeats")
    # the reference heartbeats every tick once idle: the first after traffic says 1 s
    assert estimate_interval([1.0, 1.01], [0.001] * 50)[0] == pytest.approx(1.005)
    # idle heartbeats plus longer spacings across traffic: the first kind still
    assert estimate_interval([1.0, 1.0, 1.0], [1.25, 1.0, 1.8])[0] == 1.0
    assert estimate_interval([], [0.5, 0.5]) == (0.5, "estimated from 2 heartbeats")
    assert estimate_interval([float("nan"), -1.0])[1] == "reference default"


def test_liveness_killed_client_server_goes_quiet_later():
    """The client dies at 2 s; the server heartbeats it until its keepalive (10 s) expires:
    only the client's silence is a finding, the server's later one follows from it."""
    spans = _spans(
        [
            ("c", 7, "client", [0.0, 1.0, 2.0]),
            ("c", 7, "server", [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0]),
        ]
    )
    rows = liveness_findings(spans, NO_DISCONNECT, {"c": T0 + 20 * S}, ONE_SECOND)
    assert rows[["kind", "frame", "time_ns"]].values.tolist() == [["peer_silent", 3, T0 + 2 * S]]
    assert rows.detail[0] == (
        "client sent nothing for 18.000 s, until the capture's end, and no Disconnected "
        "(heartbeat interval 1 s, reference default)"
    )
    assert rows.severity[0] == "error" and rows.session_id[0] == 7


def test_liveness_both_sides_stop_together():
    spans = _spans([("c", 7, "a", [0.0, 1.0]), ("c", 7, "b", [0.0, 1.0])])
    rows = liveness_findings(spans, NO_DISCONNECT, {"c": T0 + 6 * S}, ONE_SECOND)
    assert rows.kind.tolist() == ["peer_silent", "peer_silent"]


def test_liveness_one_sided_capture_is_judged_alone():
    spans = _spans([("c", 7, "a", [0.0, 1.0, 4.5])])
    rows = liveness_findings(spans, NO_DISCONNECT, {"c": T0 + int(4.5 * S)}, ONE_SECOND)
    assert rows[["kind", "frame"]].values.tolist() == [["peer_silent", 2]]


def test_liveness_peer_that_moved_is_not_silent():
    spans = _spans(
        [
            ("c", 7, "10.0.0.2:40000", [0.0, 1.0, 2.0]),
            ("c", 7, "10.0.0.9:51000", [2.5, 3.5, 4.5, 5.5, 6.5]),  # the same peer after NAT rebinding
            ("c", 7, "server", [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
        ]
    )
    assert liveness_findings(spans, NO_DISCONNECT, {"c": T0 + 7 * S}, ONE_SECOND).empty
    # without the new address, the same silence is reported
    alone = spans[spans.src != "10.0.0.9:51000"]
    assert liveness_findings(alone, NO_DISCONNECT, {"c": T0 + 7 * S}, ONE_SECOND).kind.tolist() == ["peer_silent"]


def test_liveness_disconnected_ends_the_watch():
    spans = _spans([("c", 7, "a", [0.0, 1.0, 2.0]), ("c", 7, "b", [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0])])
    after = pd.DataFrame({"capture": ["c"], "session_id": [7], "first_ns": [T0 + 2 * S]})
    assert liveness_findings(spans, after, {"c": T0 + 20 * S}, ONE_SECOND).empty
    # a Disconnected 2.5 s into the silence cuts it there: a gap, not a silence
    during = after.assign(first_ns=T0 + int(4.5 * S))
    rows = liveness_findings(spans, during, {"c": T0 + 20 * S}, ONE_SECOND)
    assert rows.kind.tolist() == ["heartbeat_gap"]
    assert "until its Disconnected" in rows.detail[0] and "no Disconnected" not in rows.detail[0]


def _message(**over):
    m = {
        "capture": "c",
        "session_id": Decimal(7),
        "src": "10.0.0.2:40000",
        "message_id": Decimal(2**64 - 1),
        "part_count": 3,
        "message_size": 3000,
        "part_sizes": [1000, None, None],
        "complete": False,
        "missing_bytes": 2000,
        "duplicates": 0,
        "first_ns": T0,
        "last_ns": T0 + S // 2,
        "capture_end_ns": T0 + 10 * S,
        "window_s": 1.0,
        "acked": False,
        "first_frame": 4,
        "suspect_frame": None,
    }
    m.update(over)
    return m


def test_messages_lost_or_in_flight():
    rows = message_findings(
        pd.DataFrame(
            [
                _message(),
                _message(last_ns=T0 + 9 * S),  # 1.0 s before the end: within the window
                _message(last_ns=T0 + 9 * S - 1),  # just over
            ]
        )
    )
    assert rows.kind.tolist() == ["message_lost_frames", "message_in_flight_at_end", "message_lost_frames"]
    assert rows.detail[0] == (
        "message from 10.0.0.2:40000: 2000 of 3000 bytes missing, parts 1-2 of 3 never "
        "seen; last frame 9.500 s before the capture's end (over 1 s: lost)"
    )
    assert rows.severity.tolist() == ["error", "note", "error"]
    assert rows.frame.tolist() == [4, 4, 4] and rows.time_ns.tolist() == [T0] * 3
    assert rows.message_id[0] == Decimal(2**64 - 1)


def test_messages_resend_duplicate_suspect():
    rows = message_findings(
        pd.DataFrame(
            [
                _message(complete=True, missing_bytes=0, duplicates=2, acked=True),
                _message(complete=True, missing_bytes=0, duplicates=1),
                _message(complete=True, missing_bytes=0, suspect_frame=9),
                _message(part_sizes=[1000, 1000, None], missing_bytes=1500, suspect_frame=np.nan, first_frame=np.nan),
            ]
        )
    )
    assert rows.kind.tolist() == ["resend", "duplicate", "message_suspect", "message_lost_frames"]
    assert "2 chunk(s) resent" in rows.detail[0]
    assert _frames(rows)[2:] == [9, None]
    assert "(reassembled complete)" in rows.detail[2]
    assert "parts 2 of 3 never seen" in rows.detail[3]


def test_damage_findings_from_error_texts():
    spans = pd.DataFrame({"offset": [500], "frame": [4], "time_ns": [T0], "reason": ["implausible record header"]})
    texts = [
        "capture: offset 500: implausible record header",
        "capture: frame 9: bad UDP length",
        "capture: unreadable record",
    ]
    rows = damage_findings("c", texts, spans)
    assert set(rows.kind) == {"capture_damage"} and _frames(rows) == [4, 9, None]
    assert "byte offset 500" in rows.detail[0] and rows.detail[1] == "packet did not decode: bad UDP length"
    # a framing error past the texts the frames table kept replaces a filler row
    two = pd.concat([spans, spans.assign(offset=900, frame=7)], ignore_index=True)
    assert _frames(damage_findings("c", texts, two)) == [4, 7, 9]
    # a capture that is not walked: one row per error text
    assert len(damage_findings("c", texts, None)) == 3


def test_damage_spans_of_a_pcap_with_a_deleted_byte(tmp_path):
    from nbmq.capture import write_pcap

    rows = [(1_700_000_000.0 + i, "10.0.0.1", 1, "10.0.0.2", 2, bytes(100)) for i in range(5)]
    write_pcap(tmp_path / "a.pcap", rows)
    raw = (tmp_path / "a.pcap").read_bytes()
    at = 24 + 2 * (16 + 42 + 100) + 16 + 50  # inside the third record's payload
    (tmp_path / "b.pcap").write_bytes(raw[:at] + raw[at + 1 :])
    assert damage_spans(str(tmp_path / "a.pcap")).empty
    spans = damage_spans(str(tmp_path / "b.pcap"))
    assert spans[["frame", "reason"]].values.tolist() == [[3, "implausible record header"]]
    assert spans.time_ns[0] == (1_700_000_000 + 2) * S
    (tmp_path / "c.pcap.gz").write_bytes(gzip.compress(raw[:at] + raw[at + 1 :]))
    assert damage_spans(str(tmp_path / "c.pcap.gz")).equals(spans)  # a gzip capture is walked the same
    (tmp_path / "d.pcap").write_bytes(b"not a capture at all, just text")
    assert damage_spans(str(tmp_path / "d.pcap")) is None
    assert damage_spans(str(tmp_path / "missing.pcap")) is None


def test_damage_spans_of_a_pcapng_name_the_damaged_block(tmp_path):
    from nbmq.capture import write_pcapng

    rows = [(1_700_000_000.0 + i, "10.0.0.1", 1, "10.0.0.2", 2, bytes(100)) for i in range(5)]
    write_pcapng(tmp_path / "a.pcapng", rows)
    raw = (tmp_path / "a.pcapng").read_bytes()
    blocks, pos = [], 0
    while pos < len(raw):
        kind, length = struct.unpack_from("<II", raw, pos)
        blocks.append((pos, kind, length))
        pos += length
    packets = [(at, length) for at, kind, length in blocks if kind == 6]  # Enhanced Packet Blocks
    assert len(packets) == 5 and damage_spans(str(tmp_path / "a.pcapng")).empty
    # the second block's trailing length copy damaged: the block is read, and it is the damaged one
    bad = bytearray(raw)
    bad[packets[1][0] + packets[1][1] - 4] ^= 1
    (tmp_path / "b.pcapng").write_bytes(bytes(bad))
    spans = damage_spans(str(tmp_path / "b.pcapng"))
    assert spans[["offset", "frame", "time_ns"]].values.tolist() == [[packets[1][0], 2, (1_700_000_000 + 1) * S]]
    # a byte deleted inside the third block: that block cannot be framed (no packet of it is
    # read, so no time), but its frame number is known
    at = packets[2][0] + 28 + 50
    (tmp_path / "c.pcapng").write_bytes(raw[:at] + raw[at + 1 :])
    spans = damage_spans(str(tmp_path / "c.pcapng"))
    assert spans[["offset", "frame"]].values.tolist() == [[packets[2][0], 3]] and spans.time_ns.isna().all()
    assert spans.reason[0].startswith("block lengths differ")
    (tmp_path / "d.pcapng").write_bytes(b"\x0a\x0d\x0d\x0a" + bytes(40))
    assert damage_spans(str(tmp_path / "d.pcapng")) is None  # no valid section header: not walked
    (tmp_path / "e.pcapng").write_bytes(raw[:20])
    assert damage_spans(str(tmp_path / "e.pcapng")) is None  # shorter than a file header


def test_findings_frame():
    with pytest.raises(ValueError, match="unknown finding kind 'gap'"):
        findings_frame(
            [
                {
                    "capture": "c",
                    "time_ns": None,
                    "frame": None,
                    "session_id": None,
                    "message_id": None,
                    "kind": "gap",
                    "detail": "",
                }
            ]
        )
    empty = findings_frame([])
    assert list(empty.columns) == [
        "capture",
        "time_ns",
        "frame",
        "session_id",
        "message_id",
        "severity",
        "kind",
        "detail",
    ]
    assert set(KINDS.values()) == {"error", "warning", "note"}


def test_in_flight_window():
    assert in_flight_window(1.0) == 1.0 and in_flight_window(1.0, float("nan")) == 1.0
    assert in_flight_window(1.0, 0.001) == 1.0  # a fast link: the interval
    assert in_flight_window(1.0, 0.8) == 1.6  # a slow one: two round trips


def test_frames_pass_over_row_groups_is_the_pass_over_the_file():
    """The driver runs the frames pass a row group at a time: cut anywhere, the rows equal the
    pass over the whole piece (peers, spans, heartbeat samples and Acks across the cuts)."""
    from nbmq.spark.findings import _peer_file, _peer_group, _peer_pass

    rng = np.random.default_rng(3)
    rows, t = [], 0.0
    for frame in range(1, 400):
        t += float(rng.choice([0.01, 0.3, 1.0, 2.5]))
        addr, port, sid = [("10.0.0.2", 4001, 7), ("10.0.0.3", 4002, 7), ("10.0.0.4", 4003, 9)][frame % 3]
        kind = int(rng.choice([0, 4, 4, 5, 3]))
        rows.append((addr, port, sid, t, frame, kind, frame % 17, None))
    rows.append(("10.0.0.9", 4009, None, t + 1, 400, None, None, "frame too short"))
    piece = _frames_piece(rows)
    wanted = np.array([3, 5], np.int64)
    whole = _peer_pass(wanted, piece).to_pandas().astype({"peer": object})
    for cuts in ([0, 1, 400], [0, 150, 151, 300, 400], [0, 57, 400]):
        groups = [_peer_group(wanted, piece.slice(a, b - a)) for a, b in zip(cuts, cuts[1:])]
        parts = _peer_file(groups).to_pandas().astype({"peer": object})
        for what in ("span", "heartbeat", "spacing", "acks", "disconnected", "malformed"):
            a = whole[whole.what == what].reset_index(drop=True)
            b = parts[parts.what == what].reset_index(drop=True)
            assert len(a) and a.equals(b), what
        first = parts[parts.what == "first"].groupby(["peer", "a_ns"])["a_frame"].min()
        assert first.equals(whole[whole.what == "first"].groupby(["peer", "a_ns"])["a_frame"].min())
        assert parts[parts.what == "end"].b_ns.max() == whole[whole.what == "end"].b_ns.max()


def _frames_piece(rows):
    """A piece of ``frames/`` as the frames pass reads it, from (src_addr, src_port, session_id,
    ts seconds, frame_number, kind, message_id, error) tuples; one capture, dst 10.0.0.1:8000."""
    import pyarrow as pa

    cols = list(zip(*rows))
    ids = pa.decimal128(20, 0)
    return pa.table(
        {
            "capture": pa.array(["c.pcap"] * len(rows)),
            "session_id": pa.array([None if s is None else Decimal(s) for s in cols[2]], ids),
            "src_addr": pa.array(cols[0]),
            "src_port": pa.array(cols[1], pa.int32()),
            "dst_addr": pa.array(["10.0.0.1"] * len(rows)),
            "dst_port": pa.array([8000] * len(rows), pa.int32()),
            "ts_ns": pa.array([T0 + int(t * S) for t in cols[3]], pa.int64()),
            "frame_number": pa.array(cols[4], pa.int64()),
            "kind": pa.array(cols[5], pa.int32()),
            "ack_hash": pa.array([None] * len(rows), pa.int64()),
            "error": pa.array(cols[7], pa.string()),
            "length": pa.array([40] * len(rows), pa.int32()),
            "message_id": pa.array([None if m is None else Decimal(m) for m in cols[6]], ids),
        }
    )


def test_frames_pass_rows():
    from nbmq.spark.findings import _peer_pass

    big = 2**64 - 5  # a message id over 2**63: carried as the u64's bits
    piece = _frames_piece(
        [
            ("fe80::2", 4000, 7, 0.0, 1, 0, big, None),
            ("fe80::2", 4000, 7, 0.05, 2, 0, big, None),
            ("10.0.0.2", 4001, None, 0.2, 3, None, None, "frame too short"),
            ("fe80::2", 4000, 7, 5.0, 4, 3, None, None),
            ("10.0.0.2", 4001, None, 5.5, None, None, None, "capture: offset 99: bad record"),
        ]
    )
    out = _peer_pass(np.array([np.uint64(big).view(np.int64), 3], np.int64), piece).to_pandas()
    by = {w: g.reset_index(drop=True) for w, g in out.groupby("what")}
    assert set(by) == {"damage", "end", "malformed", "disconnected", "first", "span"}
    key = "c.pcap\x1f7\x1f[fe80::2]:4000"
    assert by["first"][["peer", "a_frame"]].values.tolist() == [[key, 1]]
    assert int(np.int64(by["first"].a_ns[0]).view(np.uint64)) == big
    assert by["disconnected"][["peer", "a_frame", "n", "text"]].values.tolist() == [
        [key, 4, 3, "[fe80::2]:4000 sent Disconnected to 10.0.0.1:8000"]
    ]
    assert by["malformed"][["peer", "a_frame", "text"]].values.tolist() == [
        ["c.pcap", 3, "datagram 10.0.0.2:4001 -> 10.0.0.1:8000 (40 bytes) does not decode: frame too short"]
    ]
    assert by["damage"].peer.tolist() == ["c.pcap\x1fcapture: offset 99: bad record"]
    assert by["end"].b_ns.tolist() == [T0 + int(5.5 * S)]
    assert by["span"][["a_frame", "b_frame", "n"]].values.tolist() == [[1, 2, 2], [4, 4, 1]]  # 4.9 s apart: two spans


def test_joined_spans_give_the_same_liveness_findings():
    """Joining a peer's spans closer than GAP_FACTOR intervals (what the step does before the
    rules) changes no finding: random, overlapping, out-of-order spans of three peers, with a
    Disconnected in one session."""
    from nbmq.spark.findings import _SEP, _merged_spans

    rng = np.random.default_rng(7)
    rows = []
    for sid, src in ((1, "10.0.0.1:1"), (1, "10.0.0.2:2"), (2, "10.0.0.3:3")):
        starts = np.sort(rng.uniform(0, 60, 400)) + np.repeat(rng.uniform(0, 8, 8), 50)  # bursts and silences
        lengths = rng.choice([0.0, 0.0, 0.3], starts.size)
        rng.shuffle(starts)
        for i, (s, n) in enumerate(zip(starts, lengths)):
            rows.append(("c.pcap", sid, src, T0 + int(s * S), i + 1, T0 + int((s + n) * S), i + 2))
    spans = pd.DataFrame(
        rows, columns=["capture", "session_id", "src", "start_ns", "start_frame", "end_ns", "end_frame"]
    )
    disc = pd.DataFrame({"capture": ["c.pcap"], "session_id": [2], "first_ns": [T0 + 50 * S]})
    end = {"c.pcap": T0 + 75 * S}
    intervals = {"c.pcap": (0.4, "estimated")}
    raw = pd.DataFrame(
        {
            "peer": [f"c.pcap{_SEP}{sid}{_SEP}{src}" for sid, src in zip(spans.session_id, spans.src)],
            "a_ns": spans.start_ns,
            "a_frame": spans.start_frame,
            "b_ns": spans.end_ns,
            "b_frame": spans.end_frame,
        }
    )
    joined = _merged_spans(raw, intervals)
    parts = joined["peer"].str.split(_SEP, n=2, expand=True)
    joined = joined.assign(capture=parts[0], session_id=parts[1].astype(int), src=parts[2])
    assert len(joined) < len(spans) / 4
    want = liveness_findings(spans, disc, end, intervals)
    got = liveness_findings(joined, disc, end, intervals)
    assert len(want) > 3 and set(want["kind"]) == {"peer_silent", "heartbeat_gap"}
    assert got.equals(want)
