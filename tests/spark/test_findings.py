"""The findings table on captures of known faults, made by the project's own harness.

Each capture is what a capture on the server's host would hold (:class:`Tap`): every datagram
the server sends, at send time, and every one delivered to it, at delivery (after the link's
loss). The expected findings are worked out from the harness's own record of what was sent and
delivered, then compared with ``findings/`` row by row.
"""

from __future__ import annotations

import random
import struct
from collections import defaultdict
from decimal import Decimal

import pytest

from nbmq import codec
from nbmq.engine.sockets import Dealer, SafeDealer
from nbmq.testing import Link, Network
from nbmq.wire import FrameKind

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

BASE = 1_700_000_000.0  # virtual time 0, seconds since the epoch
SERVER = ("10.0.0.1", 8000)
CLIENT = ("10.0.0.2", 40000)
ETH_IP_UDP = 14 + 20 + 8  # bytes before the UDP payload in a write_pcap record (Ethernet, IPv4)
JUNK = (b"", b"\x01", bytes(range(50)))  # datagrams that do not decode (empty, 1 byte, version 0)


class Tap:
    """An engine as its host's capture sees it: records what it sends (at send time) and what
    is delivered to it (at delivery time) as ``write_pcap`` rows, and forwards every call."""

    def __init__(self, engine, addr, rows):
        self._engine, self._addr, self._rows = engine, addr, rows

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def receive_datagram(self, data, addr, now):
        self._rows.append((BASE + now, addr[0], addr[1], self._addr[0], self._addr[1], bytes(data)))
        return self._engine.receive_datagram(data, addr, now)

    def datagrams_to_send(self, now):
        out = self._engine.datagrams_to_send(now)
        for data, dst in out:
            self._rows.append((BASE + now, self._addr[0], self._addr[1], dst[0], dst[1], bytes(data)))
        return out


def _pair(kind=Dealer, seed=1):
    """A network, the server (tapped into ``rows``) and the client (tapped into ``sent``)."""
    rows, sent = [], []
    net = Network(seed=seed)
    server = net.add(Tap(kind.bound(SERVER, rng=random.Random(seed)), SERVER, rows), SERVER, "server")
    client = net.add(Tap(kind(rng=random.Random(seed + 1)), CLIENT, sent), CLIENT, "client")
    net.connect(client, SERVER)
    assert net.run_until(lambda: client.connected and server.connected, 5)
    return net, server, client, rows, sent


def _payload(i, size):
    return bytes((i * 7 + k) % 251 for k in range(size))


def _stream(net, client, count, size, every, first=0):
    for i in range(first, first + count):
        net.send(client, [_payload(i, size), _payload(i + 1, 17)])
        net.step(every)


def _with_loss(net, link, send):
    """Run ``send()`` with ``link`` from client to server, then the perfect link again."""
    net.set_link(CLIENT, SERVER, link)
    send()
    net.clear_links()


def build_killed(silence):
    """The client streams, its last message half lost, then it dies; the capture runs on."""
    net, server, client, rows, sent = _pair(seed=3)
    _stream(net, client, 10, 600, 0.1)
    _with_loss(net, Link(loss=0.5), lambda: net.send(client, [_payload(99, 5000)]))
    net.crash(client)
    net.step(silence)
    return rows, sent


def build_lossy():
    """A 10% lossy relay while 150 messages flow, then 2 s of heartbeats on a clean link."""
    net, server, client, rows, sent = _pair(seed=5)
    _with_loss(net, Link(loss=0.1), lambda: _stream(net, client, 150, 1200, 0.01))
    net.step(2.0)
    return rows, sent


def build_in_flight():
    """One message half lost early; at the end a message still crossing a slow link."""
    net, server, client, rows, sent = _pair(seed=7)
    _stream(net, client, 4, 900, 0.05)
    _with_loss(net, Link(loss=0.5), lambda: net.send(client, [_payload(50, 4000)]))
    _stream(net, client, 30, 900, 0.05, first=5)
    _with_loss(net, Link(delay=0.001, jitter=0.05), lambda: net.send(client, [_payload(60, 4500)]))
    net.step(0.02)  # the capture stops here
    return rows, sent


def build_malformed():
    """Clean traffic with three datagrams that do not decode, then the client closes."""
    net, server, client, rows, sent = _pair(seed=9)
    _stream(net, client, 5, 700, 0.1)
    for junk in JUNK:
        rows.append((BASE + net.now, CLIENT[0], CLIENT[1], SERVER[0], SERVER[1], junk))
    _stream(net, client, 3, 700, 0.1, first=5)
    client.engine.close(net.now)
    net.flush(client)
    net.step(5.0)
    return rows, sent


def build_resends():
    """SafeDealer over a link losing 20% both ways: resends reach the server twice."""
    net, server, client, rows, sent = _pair(SafeDealer, seed=11)
    net.set_links(CLIENT, SERVER, Link(loss=0.2))
    _stream(net, client, 30, 300, 0.05)
    net.step(3.0)
    net.clear_links()
    net.step(0.5)
    return rows, sent


def build_duplicates():
    """A Dealer over a link that duplicates 30% of the datagrams."""
    net, server, client, rows, sent = _pair(seed=13)
    _with_loss(net, Link(duplicate=0.3), lambda: _stream(net, client, 20, 300, 0.02))
    net.step(0.5)
    return rows, sent


def _records(rows):
    """Byte offset of each pcap record ``write_pcap`` writes for ``rows`` (Ethernet, IPv4)."""
    offsets, at = [], 24
    for r in rows:
        offsets.append(at)
        at += 16 + ETH_IP_UDP + len(r[5])
    return offsets


@pytest.fixture(scope="session")
def fault_captures(tmp_path_factory):
    """The fault captures written to a folder: (folder, {name: (rows, sent)}, (in-chunk frame,
    in-header frame) of the damaged capture's deleted bytes)."""
    from nbmq.capture import write_pcap, write_pcapng

    src = tmp_path_factory.mktemp("faults")
    caps = {
        "killed.pcap": build_killed(5.5),
        "killed_short.pcap": build_killed(2.2),
        "lossy.pcap": build_lossy(),
        "in_flight.pcap": build_in_flight(),
        "malformed.pcap": build_malformed(),
        "resends.pcap": build_resends(),
        "duplicates.pcap": build_duplicates(),
    }
    for name, (rows, _sent) in caps.items():
        write_pcap(src / name, rows)
    # damaged: a clean stream with one byte deleted inside a data frame's chunk (the record
    # still decodes, with wrong bytes) and one inside a later data frame's header (it does not)
    net, server, client, rows, sent = _pair(seed=15)
    _stream(net, client, 6, 1000, 0.05)
    net.step(1.2)
    write_pcap(src / "damaged.pcap", rows)
    full = [i for i, r in enumerate(rows) if len(r[5]) == 500]  # whole 466-byte chunks
    in_chunk, in_header = full[3], full[8]
    raw = (src / "damaged.pcap").read_bytes()
    payload = [at + 16 + ETH_IP_UDP for at in _records(rows)]
    for at in (payload[in_header] + 25, payload[in_chunk] + 34 + 100):  # the later one first
        raw = raw[:at] + raw[at + 1 :]
    (src / "damaged.pcap").write_bytes(raw)
    caps["damaged.pcap"] = (rows, sent)
    # the same stream as pcapng: the first block's trailing length copy damaged (it is read, and
    # suspect) and a byte deleted inside the second (it cannot be framed: skipped, counted)
    write_pcapng(src / "damaged.pcapng", rows)
    raw = bytearray((src / "damaged.pcapng").read_bytes())
    blocks = _pcapng_blocks(bytes(raw))
    (chunk_at, chunk_len), (header_at, _) = blocks[in_chunk], blocks[in_header]
    raw[chunk_at + chunk_len - 4] ^= 1
    raw = raw[: header_at + 28 + 25] + raw[header_at + 28 + 26 :]
    (src / "damaged.pcapng").write_bytes(bytes(raw))
    caps["damaged.pcapng"] = (rows, sent)
    return src, caps, (in_chunk + 1, in_header + 1)


def _pcapng_blocks(raw: bytes) -> list[tuple[int, int]]:
    """(offset, length) of each Enhanced Packet Block of a pcapng file, in order."""
    out, pos = [], 0
    while pos < len(raw):
        kind, length = struct.unpack_from("<II", raw, pos)
        if kind == 6:
            out.append((pos, length))
        pos += length
    return out


@pytest.fixture(scope="session")
def faults(spark, fault_captures, tmp_path_factory):
    """The fault captures, one pipeline run over all of them: (summary, out dir, captures, cut)."""
    from nbmq.spark.pipeline import run

    src, caps, cut = fault_captures
    out = tmp_path_factory.mktemp("faults_out") / "out"
    summary = run([str(src)], out, spark=spark, report=False, progress=False, print_summary=False)
    return summary, out, caps, cut


def _findings(out, capture):
    from nbmq.spark.findings import read_findings

    df = read_findings(str(out / "findings"))
    return df[df.capture == capture].reset_index(drop=True)


def _sid(rows):
    return next(codec.parse_frame(r[5]).session_id for r in rows if codec.parse_frame(r[5]).kind == FrameKind.CONNECTED)


def _messages(rows, sent, client_only=True):
    """Per message id (from the client): (first row index, last delivered time, delivered
    (part, offset) chunks in order, the (part, offset) chunks sent, part count)."""
    got = defaultdict(list)
    first, last = {}, {}
    for i, r in enumerate(rows):
        if r[5] in JUNK or (r[1], r[2]) != CLIENT:
            continue
        f = codec.parse_frame(r[5])
        if f.kind != FrameKind.DATA:
            continue
        got[f.message_id].append((f.part_index, f.chunk_offset))
        first.setdefault(f.message_id, i)
        last[f.message_id] = r[0]
    want, parts = defaultdict(set), {}
    for r in sent:
        f = codec.parse_frame(r[5])
        if f.kind == FrameKind.DATA:
            want[f.message_id].add((f.part_index, f.chunk_offset))
            parts[f.message_id] = f.part_count
    return {m: (first[m], last[m], got[m], want[m], parts[m]) for m in got}


def _expected_messages(rows, sent, window=1.0, acked=False):
    """(kind, frame, message_id) rows the message rules must give."""
    end = max(r[0] for r in rows)
    out = []
    for mid, (i, last, got, want, _n) in _messages(rows, sent).items():
        if set(got) != want:
            kind = "message_in_flight_at_end" if end - last <= window else "message_lost_frames"
            out.append((kind, i + 1, mid))
        if len(got) > len(set(got)):
            out.append(("resend" if acked else "duplicate", i + 1, mid))
    return out


def _rows_of(df, kinds):
    sel = df[df.kind.isin(kinds)]
    return sorted((k, int(f), int(m)) for k, f, m in zip(sel.kind, sel.frame, sel.message_id))


def test_killed_peer_is_silent_to_the_capture_end(faults):
    _summary, out, caps, _cut = faults
    rows, sent = caps["killed.pcap"]
    df = _findings(out, "killed.pcap")
    last = max(i for i, r in enumerate(rows) if (r[1], r[2]) == CLIENT)
    silence = max(r[0] for r in rows) - rows[last][0]
    assert silence > 3.0
    live = df[df.kind.isin(["peer_silent", "heartbeat_gap"])]
    assert [(k, int(f), int(s)) for k, f, s in zip(live.kind, live.frame, live.session_id)] == [
        ("peer_silent", last + 1, _sid(rows))
    ]
    detail = live.detail.iloc[0]
    assert f"10.0.0.2:40000 sent nothing for {silence:.3f} s, until the capture's end, and no Disconnected" in detail
    assert "estimated from" in detail  # the interval comes from the capture's heartbeats
    # its last message, half lost, is lost (not "in flight": the capture ran 5 s past it)
    assert _rows_of(df, ["message_lost_frames", "message_in_flight_at_end"]) == sorted(_expected_messages(rows, sent))
    assert _rows_of(df, ["message_lost_frames"])  # the scenario did lose frames
    assert set(df.kind) == {"peer_silent", "message_lost_frames"}


def test_killed_peer_short_silence_is_a_heartbeat_gap(faults):
    _summary, out, caps, _cut = faults
    rows, _sent = caps["killed_short.pcap"]
    df = _findings(out, "killed_short.pcap")
    last = max(i for i, r in enumerate(rows) if (r[1], r[2]) == CLIENT)
    silence = max(r[0] for r in rows) - rows[last][0]
    assert 1.5 < silence <= 3.0
    live = df[df.kind.isin(["peer_silent", "heartbeat_gap"])]
    assert [(k, int(f)) for k, f in zip(live.kind, live.frame)] == [("heartbeat_gap", last + 1)]
    assert "until the capture's end" in live.detail.iloc[0]
    assert (live.severity == "warning").all()


def test_lossy_relay_messages_are_lost_not_in_flight(faults):
    _summary, out, caps, _cut = faults
    rows, sent = caps["lossy.pcap"]
    df = _findings(out, "lossy.pcap")
    expected = sorted(_expected_messages(rows, sent))
    assert len(expected) > 20 and {k for k, _f, _m in expected} == {"message_lost_frames"}
    assert _rows_of(df, ["message_lost_frames", "message_in_flight_at_end"]) == expected
    assert set(df.kind) == {"message_lost_frames"}
    # the detail names the parts never seen and the bytes missing
    msgs = _messages(rows, sent)
    for mid, detail in zip(df.message_id, df.detail):
        _i, _last, got, want, n = msgs[int(mid)]
        absent = sorted({p for p, _o in want} - {p for p, _o in got})
        assert (f"parts {', '.join(map(str, absent))} of {n} never seen" if absent else f"all {n} parts seen") in detail
        assert "lost" in detail


def test_in_flight_at_end_and_lost_earlier(faults):
    _summary, out, caps, _cut = faults
    rows, sent = caps["in_flight.pcap"]
    df = _findings(out, "in_flight.pcap")
    expected = sorted(_expected_messages(rows, sent))
    assert {k for k, _f, _m in expected} == {"message_lost_frames", "message_in_flight_at_end"}
    assert _rows_of(df, ["message_lost_frames", "message_in_flight_at_end"]) == expected
    assert set(df.kind) == {"message_lost_frames", "message_in_flight_at_end"}
    assert (df[df.kind == "message_in_flight_at_end"].severity == "note").all()


def _damaged_ids(rows, in_chunk: int, in_header: int) -> tuple[int, int, int]:
    """The message ids of the damaged capture's two damaged frames, and the first other frame
    of the second one's message."""
    suspect = codec.parse_frame(rows[in_chunk - 1][5]).message_id
    cut = codec.parse_frame(rows[in_header - 1][5]).message_id
    rest = min(
        i + 1
        for i, r in enumerate(rows)
        if i + 1 != in_header and len(r[5]) > 34 and codec.parse_frame(r[5]).message_id == cut
    )
    return suspect, cut, rest


def test_damaged_records(faults, spark):
    _summary, out, caps, (in_chunk, in_header) = faults
    rows, _sent = caps["damaged.pcap"]
    df = _findings(out, "damaged.pcap")
    suspect, cut, rest = _damaged_ids(rows, in_chunk, in_header)
    assert [(k, int(f)) for k, f in zip(df.kind, df.frame)] == [
        ("capture_damage", in_chunk),
        ("message_suspect", in_chunk),  # still decodes: suspect
        ("capture_damage", in_header),
        ("malformed_frame", in_header),  # does not decode:
        ("message_lost_frames", rest),  # its message lacks it
    ]
    assert [int(m) for m in df.message_id.dropna()] == [suspect, cut]
    assert (df.session_id.dropna() == Decimal(_sid(rows))).all()
    assert df.time.iloc[0].timestamp() == pytest.approx(rows[in_chunk - 1][0], abs=1e-6)
    assert "(reassembled complete)" in df.detail.iloc[1]
    messages = spark.read.parquet(str(out / "messages")).where("capture = 'damaged.pcap'").collect()
    assert [(int(m.message_id), m.complete) for m in messages if m.suspect] == [(suspect, True)]
    assert len(messages) == 6


def test_damaged_pcapng_blocks(faults, spark):
    _summary, out, caps, (in_chunk, in_header) = faults
    rows, _sent = caps["damaged.pcapng"]
    df = _findings(out, "damaged.pcapng")
    suspect, cut, rest = _damaged_ids(rows, in_chunk, in_header)
    assert [(k, int(f)) for k, f in zip(df.kind, df.frame)] == [
        ("capture_damage", in_header),  # not framed, so not read (no time: first):
        ("capture_damage", in_chunk),  # read by its leading length:
        ("message_suspect", in_chunk),  # suspect
        ("message_lost_frames", rest),  # the other one's message lacks it
    ]
    assert "was not read" in df.detail[0] and "may hold bytes that were not sent" in df.detail[1]
    assert [int(m) for m in df.message_id.dropna()] == [suspect, cut]
    messages = spark.read.parquet(str(out / "messages")).where("capture = 'damaged.pcapng'").collect()
    assert [(int(m.message_id), m.complete) for m in messages if m.suspect] == [(suspect, True)]


def test_malformed_frames_and_disconnected(faults):
    _summary, out, caps, _cut = faults
    rows, _sent = caps["malformed.pcap"]
    df = _findings(out, "malformed.pcap")
    junk = [i + 1 for i, r in enumerate(rows) if r[5] in JUNK]
    bye = [
        i + 1 for i, r in enumerate(rows) if r[5] not in JUNK and codec.parse_frame(r[5]).kind == FrameKind.DISCONNECTED
    ]
    assert len(junk) == 3 and len(bye) == 1
    assert [(k, int(f)) for k, f in zip(df.kind, df.frame)] == sorted(
        [("malformed_frame", f) for f in junk] + [("peer_disconnected", f) for f in bye], key=lambda r: r[1]
    )
    assert int(df[df.kind == "peer_disconnected"].session_id.iloc[0]) == _sid(rows)
    assert df[df.kind == "malformed_frame"].session_id.isna().all()
    assert all("does not decode" in d for d in df[df.kind == "malformed_frame"].detail)


def test_resends_and_duplicates(faults):
    _summary, out, caps, _cut = faults
    for name, acked, kind in (("resends.pcap", True, "resend"), ("duplicates.pcap", False, "duplicate")):
        rows, sent = caps[name]
        df = _findings(out, name)
        expected = sorted(r for r in _expected_messages(rows, sent, acked=acked) if r[0] == kind)
        assert expected, name
        assert _rows_of(df, [kind]) == expected, name
        assert (df[df.kind == kind].severity == "note").all()


def test_summary_counts_the_table(faults):
    summary, out, _caps, _cut = faults
    from nbmq.spark.findings import KINDS, read_findings

    df = read_findings(str(out / "findings"))
    counts = summary["findings"]
    assert counts["rows"] == len(df)
    assert counts["kind"] == {k: int((df.kind == k).sum()) for k in KINDS}
    assert counts["severity"] == {s: int((df.severity == s).sum()) for s in ("error", "warning", "note")}
    import json

    assert json.loads((out / "summary.json").read_text())["findings"] == counts


def test_table_schema(faults):
    import pyarrow as pa
    import pyarrow.parquet as pq

    _summary, out, _caps, _cut = faults
    schema = pq.read_schema(next((out / "findings").glob("*.parquet")))
    assert schema.names == ["capture", "time", "frame", "session_id", "message_id", "severity", "kind", "detail"]
    assert schema.field("time").type == pa.timestamp("us", tz="UTC")
    assert schema.field("frame").type == pa.int64()
    assert schema.field("session_id").type == pa.decimal128(20, 0)
    assert schema.field("message_id").type == pa.decimal128(20, 0)


def test_messages_table_gains_suspect(faults, spark):
    from nbmq.spark.schema import messages_table_schema

    _summary, out, _caps, _cut = faults
    written = spark.read.parquet(str(out / "messages")).schema
    want = messages_table_schema(parts=False)
    assert [(f.name, f.dataType) for f in written.fields] == [(f.name, f.dataType) for f in want.fields]


def test_spark_pass_gives_the_same_tables(faults, fault_captures, spark, tmp_path):
    """A Hadoop-compatible output runs the frames pass in Spark: same findings, counts and
    suspect messages as the driver's pyarrow pass the pipeline ran on this local output."""
    import shutil

    from pandas.testing import assert_frame_equal

    from nbmq.spark.findings import read_findings, write_findings
    from nbmq.spark.inputs import expand_paths
    from nbmq.spark.report.passes import Passes

    summary, out, _caps, _cut = faults
    tables = {}
    for name in ("frames", "messages"):
        shutil.copytree(out / name, tmp_path / name)
        tables[name] = str(tmp_path / name)
    files = expand_paths([str(fault_captures[0])])
    counts = write_findings(spark, tables, files, passes=Passes(spark, tables, False), on_driver=False)
    assert tables["findings"] == str(tmp_path / "findings")
    assert_frame_equal(read_findings(tables["findings"]), read_findings(str(out / "findings")))
    assert counts == summary["findings"] and counts["rows"] > 0

    def suspect(path):
        return sorted((m.capture, int(m.message_id)) for m in spark.read.parquet(path).where("suspect").collect())

    assert suspect(tables["messages"]) == suspect(str(out / "messages")) != []
    assert spark.read.parquet(tables["messages"]).count() == spark.read.parquet(str(out / "messages")).count()
