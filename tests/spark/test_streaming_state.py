"""Streaming building blocks without a JVM: whole-record offsets of growing captures and the
per-peer reassembly state (TTL, byte budget, late frames). Run on both codec twins (the
reassembly goes through the codec's Reassembler)."""

from __future__ import annotations

import dataclasses
import os

import pytest

from nbmq.examples import CAPTURE_DIR as CAPTURES

pytest.importorskip("pandas")
pytest.importorskip("pyspark")

import pandas as pd  # noqa: E402

from nbmq.capture import read_datagrams  # noqa: E402
from nbmq.spark.streaming.boundaries import record_starts, whole_records  # noqa: E402
from nbmq.spark.streaming.messages import FRAME_COLUMNS, PeerMessages, StreamMessageOptions  # noqa: E402


@pytest.mark.parametrize("name", ["dealer.pcap", "dealer.pcapng"])
def test_whole_records_of_a_growing_capture(tmp_path, name):
    data = (CAPTURES / name).read_bytes()
    full = read_datagrams(str(CAPTURES / name))
    path = tmp_path / name
    # grow the file in uneven pieces; every boundary must be a record end, never past the bytes
    end = records = 0
    seen = 0
    for cut in [3, 24, 30, 1000, 1001, 70_001, len(data) // 2, len(data) - 5, len(data)]:
        path.write_bytes(data[:cut])
        b = whole_records(str(path), end, records)
        assert end <= b.end <= cut and b.records >= records
        if b.end > end:  # the records in [end, b.end) read whole, frame numbers continuing
            part = read_datagrams(data[: b.end], start=end, first_frame=records + 1 if name.endswith(".pcap") else None)
            assert part.errors == 0
            if len(part):
                assert part.frame_number[0] >= records + 1
            seen += len(part)
        end, records = b.end, b.records
    assert end == len(data) and seen == len(full)
    assert whole_records(str(path)).records == records  # from scratch: same count


def test_record_starts_cut_at_boundaries():
    path = str(CAPTURES / "dealer.pcap")
    size = whole_records(path).end
    pieces = record_starts(path, 0, size, 256 * 1024)
    assert len(pieces) > 5 and pieces[0] == (0, 0)
    walked = whole_records(path).starts  # the planner's walk, reused: the same cuts
    assert walked is not None and record_starts(path, 0, size, 256 * 1024, walked) == pieces
    mid = pieces[3][0]
    assert record_starts(path, 0, mid, 100_000, walked) == record_starts(path, 0, mid, 100_000)
    full = read_datagrams(path)
    total = 0
    for (lo, skip), hi in zip(pieces, [p for p, _ in pieces[1:]] + [size]):
        part = read_datagrams(path, start=lo, end=hi)
        assert part.errors == 0 and (len(part) == 0 or part.frame_number[0] == skip + 1)
        total += len(part)
    assert total == len(full)


def _frames(codec, parts, mid, t0_ns, nonce=1):
    sharded = codec.shard_message(parts, session_id=7, message_id=mid)
    rows = []
    for i, f in enumerate(sharded.frames()):
        d = codec.parse_frame(bytes(f))
        rows.append(
            (
                mid,
                "10.0.0.2:9",
                d.part_count,
                d.part_index,
                d.message_size,
                d.part_size,
                d.chunk_offset,
                bytes(d.chunk),
                t0_ns + i * 1000,
                i + 1,
            )
        )
    return pd.DataFrame(rows, columns=FRAME_COLUMNS)


def test_peer_state_across_batches_ttl_budget_and_late_frames(codec):
    opts = StreamMessageOptions(uncompleted_message_ttl=1.0, max_incomplete_bytes=3000)
    key = ("c.pcap", 7, "10.0.0.1:5")
    big = _frames(codec, [b"x" * 1200], 11, 0)  # 3 frames
    peer = PeerMessages()
    assert peer.advance(key, big.iloc[:2], 0, opts) == []
    peer = PeerMessages.from_bytes(peer.to_bytes())  # state survives the checkpoint format
    assert len(peer.pending) == 2
    assert peer.advance(key, big.iloc[2:], 0, opts) == [] and list(peer.held) == [11]  # complete: held
    peer = PeerMessages.from_bytes(peer.to_bytes())
    assert peer.advance(key, big.iloc[:1], 500_000_000, opts) == []  # a resend within the grace joins it
    rows = peer.advance(key, None, 1_000_002_001, opts)  # watermark past completion (2 µs) + 1 s
    assert len(rows) == 1 and rows[0][9] and rows[0][4] == 11
    assert rows[0][11] == 4 and rows[0][12] == 1  # the batch table's row: 4 frames, 1 duplicate
    # a resend of an emitted message is counted, not emitted again
    assert peer.advance(key, big.iloc[:1], 0, opts) == [] and peer.late_frames == 1
    # completed_grace=0: emitted the batch it completes
    at_once = PeerMessages()
    rows = at_once.advance(key, big, 0, dataclasses.replace(opts, completed_grace=0.0))
    assert len(rows) == 1 and rows[0][11] == 3 and not at_once.held
    # an incomplete message waits for the watermark to pass first frame + TTL, then is emitted
    half = _frames(codec, [b"y" * 1000], 12, 5_000_000_000)
    assert peer.advance(key, half.iloc[:1], 5_500_000_000, opts) == []
    assert peer.next_deadline_ns(opts) is not None
    rows = peer.advance(key, None, 6_000_000_001, opts)
    assert len(rows) == 1 and not rows[0][9] and rows[0][10] == 1000 - len(half.payload.iloc[0])
    # budget: a message claiming more than is left is dropped at once, its frames rejected
    huge = _frames(codec, [b"z" * 2900], 13, 7_000_000_000)
    rows = peer.advance(key, huge.iloc[:2], 0, opts)
    assert len(rows) == 1 and not rows[0][9] and rows[0][13] == 2 and peer.dropped_budget == 1
    assert peer.advance(key, None, 10**12, opts) == [] and peer.empty()


def test_stream_reader_offsets_rotation_and_lost_files(tmp_path):
    """The reader's planning without a JVM: growth, rotation, a file gone before its read."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes

    from nbmq.spark.schema import frames_schema
    from nbmq.spark.streaming.source import NbmqStreamReader, StreamRange, read_stream_range

    data = (CAPTURES / "dealer.pcap").read_bytes()
    ring = tmp_path / "ring"
    ring.mkdir()
    (ring / "a.pcap").write_bytes(data[:100_003])
    schema = frames_schema(payload=False)
    reader = NbmqStreamReader({"path": str(ring), "split_bytes": "40000"}, schema)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    a_end, a_records = end["files"]["a.pcap"][:2]
    assert a_end <= 100_003 and a_records > 0
    parts = reader.partitions(start, end)
    assert len(parts) >= 2 and all(isinstance(p, StreamRange) for p in parts)
    got = sum(b.num_rows for p in parts for b in read_stream_range(p, schema))
    assert got == a_records  # every record of the range once, none half
    (ring / "a.pcap").write_bytes(data)
    (ring / "b.pcap").write_bytes(data)
    capped = reader.latestOffset(end, ReadMaxBytes(10))  # a byte budget: a.pcap's rest only
    assert capped["files"]["b.pcap"][:2] == [0, 0] and capped["files"]["a.pcap"][0] == len(data)
    later = reader.latestOffset(capped, ReadAllAvailable())
    os.remove(ring / "a.pcap")  # rotated away after being read: leaves the offsets
    assert "a.pcap" not in reader.latestOffset(later, ReadAllAvailable())["files"]
    # rotated away before being read: one error row says how many bytes were lost
    lost = reader.partitions(capped, later)
    assert lost and {os.path.basename(p.path) for p in lost} == {"b.pcap"}
    os.remove(lost[0].path)
    for part in lost:
        (batch,) = list(read_stream_range(part, schema))
        assert batch.num_rows == 1 and batch.column("error")[0].as_py() == (
            f"capture: rotated away before it was read ({part.end - part.start} bytes lost)"
        )


def test_batch_and_stream_readers_check_their_request_alike():
    """One check for both frames sources: a missing path and an unknown column are clear errors."""
    from pyspark.sql.types import LongType, StructField, StructType

    from nbmq.spark.datasource import NbmqReader
    from nbmq.spark.schema import FRAMES_SCHEMA
    from nbmq.spark.streaming.source import NbmqStreamReader

    bogus = StructType([StructField("no_such_column", LongType())])
    for reader, name in ((NbmqReader, "nbmq data source"), (NbmqStreamReader, "nbmq stream source")):
        with pytest.raises(ValueError, match=f"{name}: give "):
            reader({}, FRAMES_SCHEMA)
        with pytest.raises(ValueError, match=r"no such frames column\(s\) \['no_such_column'\]"):
            reader({"path": "/nowhere"}, bogus)


def _stream_rows(folder, name, data, cuts, available_now=True):
    """Grow ``folder/name`` to each cut and read every micro-batch as the source plans it;
    returns (frame numbers, capture error texts). ``available_now``: a last availableNow run."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from nbmq.spark.schema import frames_schema
    from nbmq.spark.streaming.source import NbmqStreamReader, read_stream_range

    path = folder / name
    schema = frames_schema(payload=False)
    reader = NbmqStreamReader({"path": str(folder), "split_bytes": "3000"}, schema)
    off = reader.initialOffset()
    frames, errors = [], []
    for cut in list(cuts) + ([None] if available_now else []):
        if cut is None:
            reader.prepareForTriggerAvailableNow()
        else:
            path.write_bytes(data[:cut])
        end = reader.latestOffset(off, ReadAllAvailable())
        for part in reader.partitions(off, end):
            for batch in read_stream_range(part, schema):
                d = batch.to_pydict()
                frames += [f for f in d["frame_number"] if f is not None]
                errors += [e for f, e in zip(d["frame_number"], d["error"]) if f is None]
        off = end
    return frames, errors


def _damaged(kind, tmp_path):
    """A small capture with damage the batch readers resynchronise past:
    pcap: a zeroed region; pcapng: a block with both lengths wrong (skipped) and one flipped
    bit in another block's leading length (framed by its trailing copy)."""
    import random
    import struct

    from nbmq.capture import write_pcap, write_pcapng

    rng = random.Random(1)
    rows = [
        (1_700_000_000 + i * 0.01, "10.0.0.1", 4000, "10.0.0.2", 5555, rng.randbytes(rng.randrange(10, 300)))
        for i in range(120)
    ]
    path = tmp_path / f"src.{kind}"
    (write_pcap if kind == "pcap" else write_pcapng)(path, rows)
    data = bytearray(path.read_bytes())
    if kind == "pcap":
        data[len(data) // 2 : len(data) // 2 + 700] = bytes(700)
    else:
        pos, epbs = 0, []
        while pos + 8 <= len(data):
            btype, blen = struct.unpack_from("<II", data, pos)
            epbs += [pos] if btype == 6 else []
            pos += blen
        blen = struct.unpack_from("<I", data, epbs[40] + 4)[0]
        struct.pack_into("<I", data, epbs[40] + 4, blen + 4096)
        struct.pack_into("<I", data, epbs[40] + blen - 4, 8)
        data[epbs[80] + 7] ^= 0x02
    return bytes(data)


@pytest.mark.parametrize("kind", ["pcap", "pcapng"])
@pytest.mark.parametrize("step", [97, 1000, None])
@pytest.mark.parametrize("available_now", [True, False])
def test_stream_over_damaged_capture_equals_batch_read(tmp_path, kind, step, available_now):
    """A growing damaged capture: the stream resynchronises as the batch read does (same
    frames, each error counted once), whether the damage arrives whole or byte by byte."""
    data = _damaged(kind, tmp_path)
    whole = read_datagrams(data)
    assert whole.errors == (1 if kind == "pcap" else 2)
    ring = tmp_path / "ring"
    ring.mkdir()
    cuts = list(range(step, len(data), step)) + [len(data)] if step else [len(data)]
    frames, errors = _stream_rows(ring, f"a.{kind}", data, cuts, available_now)
    assert sorted(frames) == whole.frame_number.tolist()
    # the same rows, worded alike: a growth that cut the damaged block must not make the
    # stream say "truncated block" where the batch read says "block lengths differ" (gap a)
    assert sorted(errors) == sorted(f"capture: {r}" for r in whole.error_reasons)


def _both_lengths_wrong(tmp_path, claim):
    """A pcapng of 2000 packets whose 100th packet block claims ``claim`` more bytes than it
    has and whose trailing length is wrong too; returns (bytes, damage offset, claimed end)."""
    import random
    import struct

    from nbmq.capture import write_pcapng

    rng = random.Random(2)
    rows = [
        (1_700_000_000 + i * 0.01, "10.0.0.1", 4000, "10.0.0.2", 5555, rng.randbytes(rng.randrange(10, 300)))
        for i in range(2000)
    ]
    write_pcapng(tmp_path / "src.pcapng", rows)
    data = bytearray((tmp_path / "src.pcapng").read_bytes())
    pos, epbs = 0, []
    while pos + 8 <= len(data):
        btype, blen = struct.unpack_from("<II", data, pos)
        epbs += [pos] if btype == 6 else []
        pos += blen
    at = epbs[100]
    blen = struct.unpack_from("<I", data, at + 4)[0]
    struct.pack_into("<I", data, at + 4, blen + claim)
    struct.pack_into("<I", data, at + blen - 4, 8)
    return bytes(data), at, at + blen + claim


@pytest.mark.parametrize("reaches", [True, False])
def test_growing_pcapng_resynchronises_past_a_length_running_past_the_bytes(tmp_path, reaches):
    """Gap b: a packet block whose leading length runs past the bytes on disk and
    whose trailing copy disagrees no longer holds the frames behind it back until its claimed
    end is written or the file is final: once whole blocks follow the resynchronisation, the
    stream reads on. Its error row waits for the size to word it as the batch read does:
    ``block lengths differ`` once the file reaches the claimed end, ``truncated block`` when
    the file ends (final) before it."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from nbmq.spark.schema import frames_schema
    from nbmq.spark.streaming.source import NbmqStreamReader, read_stream_range

    claim = 100_000 if reaches else 10 << 20  # the file is ~380 KB
    data, at, claimed_end = _both_lengths_wrong(tmp_path, claim)
    whole = read_datagrams(data)
    assert whole.error_reasons == [f"offset {at}: {'block lengths differ' if reaches else 'truncated block'}"]
    ring = tmp_path / "ring"
    ring.mkdir()
    path = ring / "a.pcapng"
    schema = frames_schema(payload=False)
    reader = NbmqStreamReader({"path": str(ring)}, schema)
    off = reader.initialOffset()
    frames, errors = [], []

    def batch():
        nonlocal off
        end = reader.latestOffset(off, ReadAllAvailable())
        for part in reader.partitions(off, end):
            for b in read_stream_range(part, schema):
                d = b.to_pydict()
                frames.extend(f for f in d["frame_number"] if f is not None)
                errors.extend(e for f, e in zip(d["frame_number"], d["error"]) if f is None)
        off = end

    early = at + 20_000  # well short of the claimed end, ~100 blocks past the damage
    assert early < claimed_end
    path.write_bytes(data[:early])
    batch()
    after = [f for f in frames if f > 101]
    assert after, "the frames behind the damage are read before its claimed end is written"
    assert errors == []  # its row waits: the size decides its wording
    path.write_bytes(data)
    batch()
    if reaches:  # the claimed end is on disk: worded now, once
        assert errors == [f"capture: {whole.error_reasons[0]}"]
    else:
        assert errors == []
        reader.prepareForTriggerAvailableNow()  # the file is final: its end words the row
        batch()
        assert errors == [f"capture: {whole.error_reasons[0]}"]
    reader.prepareForTriggerAvailableNow()
    batch()
    assert sorted(frames) == whole.frame_number.tolist() and len(errors) == 1


def test_ring_file_truncated_or_replaced_under_its_name(tmp_path):
    """tcpdump -W reuses names: a file shorter than what was read, or with other first bytes,
    is a new file read from byte 0, and the old file's unread tail is one error row."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from nbmq.spark.schema import frames_schema
    from nbmq.spark.streaming.source import NbmqStreamReader, read_stream_range

    dealer = (CAPTURES / "dealer.pcap").read_bytes()
    other = (CAPTURES / "safe_dealer.pcap").read_bytes()
    ring = tmp_path / "ring"
    ring.mkdir()
    live = ring / "r0.pcap"
    schema = frames_schema(payload=False)
    reader = NbmqStreamReader({"path": str(ring), "split_bytes": "0"}, schema)

    def batch(off):
        end = reader.latestOffset(off, ReadAllAvailable())
        rows = [b.to_pydict() for p in reader.partitions(off, end) for b in read_stream_range(p, schema)]
        frames = [f for d in rows for f in d["frame_number"] if f is not None]
        errors = [e for d in rows for f, e in zip(d["frame_number"], d["error"]) if f is None]
        return end, frames, errors

    live.write_bytes(dealer[:200_003])  # ends mid-record: 3+ bytes seen, not read
    off, frames, errors = batch(reader.initialOffset())
    unread = 200_003 - off["files"]["r0.pcap"][0]
    assert frames and not errors and unread > 0
    # truncated and rewritten shorter: a new file, the old tail counted
    live.write_bytes(other[:50_000])
    off, frames, errors = batch(off)
    first = read_datagrams(other[:50_000])
    assert frames == first.frame_number.tolist()
    assert errors == [f"capture: replaced under the same name ({unread} bytes of the old file lost)"]
    unread = 50_000 - off["files"]["r0.pcap"][0]
    # rewritten longer than what was read (the size alone does not tell): the first bytes do
    live.write_bytes(dealer)
    off, frames, errors = batch(off)
    assert frames == read_datagrams(dealer).frame_number.tolist()
    assert errors == [f"capture: replaced under the same name ({unread} bytes of the old file lost)"]
    # growing as before: not a replacement
    off2, frames, errors = batch(off)
    assert frames == [] and errors == [] and off2["files"]["r0.pcap"][:3] == off["files"]["r0.pcap"][:3]

    # replaced again between planning and reading: the read sees other first bytes, one error row
    live.write_bytes(other)
    end = reader.latestOffset(off2, ReadAllAvailable())
    parts = [p for p in reader.partitions(off2, end) if not p.error]
    live.write_bytes(dealer)
    rows = [b.to_pydict() for p in parts for b in read_stream_range(p, schema)]
    assert [d["error"] for d in rows] == [[f"capture: replaced before it was read ({parts[0].end} bytes lost)"]]
