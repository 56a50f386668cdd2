"""Secure mode's traffic in the pipeline: a real capture of a secure SafeDealer pair
(``tests/data/secure_safe_dealer.pcap``, recorded by ``tests/data/record_secure_capture.py``)
decodes to frames with their clear headers and the ``secure`` flag, its sessions are marked
secure, its sealed frames are counted and neither reassembled nor called malformed or lost."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

from nbmq.examples import CAPTURE_DIR

SECURE = Path(__file__).resolve().parents[1] / "data" / "secure_safe_dealer.pcap"
#: the same traffic with sealed bundles (``max_datagram_size`` 1472): the two-part message's
#: four data frames in one datagram, their four Acks in another
BUNDLES = SECURE.with_name("secure_bundles.pcap")
#: the capture's data frames, in order: three 14-byte messages, one of two parts (1280 + 11
#: bytes: chunks of 466, 466, 348 and 11), the server's 5-byte reply
CHUNKS = [14, 14, 14, 466, 466, 348, 11, 5]
KINDS = ["connect", "connected", "heartbeat", "data", "ack", "data", "ack", "data", "ack"]


def _frames(capture: Path = SECURE) -> pa.Table:
    """A capture's frames table, built without Spark (the ``nbmq`` source's batches)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from nbmq.capture import read_datagrams
    from nbmq.spark.datasource import frames_batches
    from nbmq.spark.schema import FRAMES_SCHEMA

    schema = to_arrow_schema(FRAMES_SCHEMA, timezone="UTC")
    return pa.Table.from_batches(list(frames_batches(capture.name, read_datagrams(str(capture)), schema)), schema)


@pytest.mark.parametrize("capture", [SECURE, BUNDLES], ids=["lone", "bundles"])
def test_sealed_frames_keep_their_clear_headers(capture):
    frames = _frames(capture)
    assert frames.num_rows == 25
    assert frames["error"].null_count == 25  # nothing malformed
    assert frames["secure"].to_pylist() == [True] * 25 and set(frames["version"].to_pylist()) == {0x81}
    assert frames["kind_name"].to_pylist()[: len(KINDS)] == KINDS
    assert frames["kind_name"].to_pylist()[-1] == "disconnected"
    sessions = set(frames["session_id"].to_pylist())
    assert len(sessions) == 2 and 0 in sessions  # Connect carries 0, every other frame the session's
    data = frames.filter(pa.compute.equal(frames["kind"], 0))
    assert data["chunk_size"].to_pylist() == CHUNKS
    assert [len(p) for p in data["payload"].to_pylist()] == CHUNKS  # the ciphertext, counter and tag set aside
    assert data["part_index"].to_pylist()[3:7] == [0, 0, 0, 1]
    assert len(set(data["message_id"].to_pylist())) == 5
    assert frames["ack_hash"].null_count == 25  # sealed: no Ack can be matched to its frame


def test_a_bundle_gives_a_row_per_frame_with_its_record():
    """Each bundled frame has its own row, as if it had been sealed alone (its length too),
    with the bundle's packet number, time and addresses: the same rows as the lone capture."""
    bundled, lone = _frames(BUNDLES), _frames(SECURE)
    numbers = bundled["frame_number"].to_pylist()
    assert numbers[9:17] == [10] * 4 + [11] * 4 and len(set(numbers)) == 19  # 19 packets, 25 frames
    assert len(set(bundled["ts_ns"].to_pylist()[9:13])) == 1 and len(set(bundled["src_addr"].to_pylist()[9:13])) == 1
    same = ["kind_name", "chunk_size", "part_index", "length", "secure"]
    assert sorted(zip(*(bundled[c].to_pylist() for c in same)), key=str) == sorted(
        zip(*(lone[c].to_pylist() for c in same)), key=str
    )


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed (apt-get install tshark)")
@pytest.mark.parametrize("capture", [SECURE, BUNDLES], ids=["lone", "bundles"])
def test_dissector_shows_the_same_headers_and_ciphertext(capture):
    """The Lua dissector under tshark and the frames table agree frame by frame: secure, kind,
    session, message id, chunk size, and the encrypted content (the frames table's payload); a
    bundle's frames are the occurrences of its packet's fields."""
    from nbmq.wireshark import LUA_DIR

    fields = ["nbmq.secure", "nbmq.kind", "nbmq.session_id", "nbmq.message_id", "nbmq.chunk_size", "nbmq.ciphertext"]
    cmd = ["tshark", "-n", "-2", "-r", str(capture), "-X", f"lua_script:{LUA_DIR / 'nbmq.lua'}", "-T", "fields"]
    proc = subprocess.run(
        [*cmd, *(a for f in [*fields, "_ws.expert"] for a in ("-e", f))], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and "Lua" not in proc.stderr, proc.stderr
    rows = iter(_frames(capture).to_pylist())
    seen = 0
    for line in proc.stdout.splitlines():
        secure, kinds, sids, mids, chunks, ciphertexts, expert = (v.split(",") if v else [] for v in line.split("\t"))
        assert secure[0] in ("1", "True") and not expert  # nothing flagged malformed
        mids, chunks, ciphertexts = iter(mids), iter(chunks), iter(ciphertexts)
        for kind, sid in zip(kinds, sids):
            row = next(rows)
            seen += 1
            assert (int(kind), int(sid, 16)) == (row["kind"], row["session_id"])
            if row["kind"] == 0:
                assert (int(next(mids), 16), int(next(chunks))) == (row["message_id"], row["chunk_size"])
            if row["kind"] not in (1, 2) and row["payload"]:  # the handshake carries no ciphertext of ours
                assert bytes.fromhex(next(ciphertexts).replace(":", "")) == row["payload"]
    assert seen == 25 and next(rows, None) is None


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed (apt-get install tshark)")
def test_dissector_flags_a_malformed_bundle_in_the_codec_words(tmp_path):
    from nbmq import codec
    from nbmq.capture import read_datagrams
    from nbmq.capture.datagrams.write import write_pcap
    from nbmq.errors import DecodeError
    from nbmq.wireshark import LUA_DIR

    batch = read_datagrams(str(BUNDLES))
    bundle = bytearray(batch.payload_at(9))
    bundle[1] = 1  # a count of one
    with pytest.raises(DecodeError) as caught:
        codec.bundle_layout(bytes(bundle))
    path = tmp_path / "bad.pcap"
    write_pcap(str(path), [(1.0, "127.0.0.1", 40000, "127.0.0.1", 7000, bytes(bundle))])
    cmd = [
        "tshark",
        "-n",
        "-r",
        str(path),
        "-X",
        f"lua_script:{LUA_DIR / 'nbmq.lua'}",
        "-T",
        "fields",
        "-e",
        "_ws.expert.message",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == str(caught.value)


def test_sealed_data_frames_are_not_reassembled():
    from nbmq.spark.messages_local import data_frames

    frames = _frames()
    assert data_frames(frames.to_batches()[0]).num_rows == 0


@pytest.fixture(scope="module")
def secure_run(spark, tmp_path_factory):
    """The pipeline over the secure capture, its bundled twin and a plain one (dealer.pcap)."""
    from nbmq.spark.pipeline import run

    out = tmp_path_factory.mktemp("secure") / "out"
    captures = [str(SECURE), str(BUNDLES), str(CAPTURE_DIR / "dealer.pcap")]
    summary = run(captures, out, spark=spark, progress=False, print_summary=False)
    return summary, out


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_pipeline_marks_the_session_secure_and_counts_sealed_frames(spark, secure_run):
    import pyarrow.parquet as pq

    summary, out = secure_run
    rows = {r["capture"]: r for r in summary["captures"]}
    secure, plain = rows[SECURE.name], rows["dealer.pcap"]
    assert (secure["datagrams"], secure["error_rows"], secure["sessions"]) == (25, 0, 1)
    assert (secure["secure_sessions"], secure["sealed_frames"]) == (1, 23)  # all but Connect and Connected
    assert (secure["messages_complete"], secure["messages_incomplete"]) == (0, 0)
    assert (plain["secure_sessions"], plain["sealed_frames"]) == (0, 0) and plain["messages_complete"] > 0
    bundled = rows[BUNDLES.name]  # the same 25 frames in 19 datagrams: a bundle counts once
    assert {k: bundled[k] for k in ("datagrams", "error_rows", "secure_sessions", "sealed_frames")} == {
        "datagrams": 19,
        "error_rows": 0,
        "secure_sessions": 1,
        "sealed_frames": 23,
    }
    sessions = pq.read_table(out / "sessions").to_pandas()
    mine = sessions[sessions.capture == SECURE.name]
    assert mine["secure"].tolist() == [True] and mine["sealed_frames"].tolist() == [23]
    assert (mine["data_c2s"] + mine["data_s2c"]).tolist() == [8]
    assert not sessions[sessions.capture == "dealer.pcap"]["secure"].any()
    findings = pq.read_table(out / "findings").to_pandas()
    for capture in (SECURE, BUNDLES):
        flagged = set(findings[findings.capture == capture.name]["kind"])
        assert flagged <= {"peer_disconnected"}  # no malformed_frame, no message_lost_frames
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "secure sessions" in page and "sealed frames (content encrypted)" in page


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_spark_reassembly_leaves_sealed_frames_out(spark, secure_run):
    """The plan for a Hadoop-compatible output reassembles with Spark: the same rule."""
    from nbmq.spark.messages_local import build_messages_local

    _, out = secure_run
    frames = spark.read.parquet(str(out / "frames"))
    messages = build_messages_local(frames).toPandas()
    assert SECURE.name not in set(messages["capture"]) and len(messages) > 0


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_streamed_messages_leave_sealed_frames_out(spark, tmp_path):
    """The streaming reassembly reads the same frames as the batch one: none of secure mode's."""
    from nbmq.spark.streaming import register
    from nbmq.spark.streaming.messages import StreamMessageOptions, build_stream_messages

    register(spark)
    folder = tmp_path / "ring"
    folder.mkdir()
    shutil.copy(SECURE, folder / SECURE.name)
    source = spark.readStream.format("nbmq").option("end_row", "true").load(str(folder))
    opts = StreamMessageOptions(uncompleted_message_ttl=1.0, watermark="1 second")
    query = (
        build_stream_messages(source, opts)
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert spark.read.parquet(str(tmp_path / "out")).count() == 0


def test_a_bundle_counts_as_one_datagram_wherever_the_pieces_cut_it():
    import pyarrow as pa

    from nbmq.spark.report.passes import _bundled_piece, bundled_rows

    # records 1..6 of capture "a"; record 3 is a bundle of three frames, record 5 of two
    numbers = [1, 2, 3, 3, 3, 4, 5, 5, 6]
    table = pa.table({"capture": ["a"] * len(numbers), "frame_number": pa.array(numbers, pa.int64())})
    for cuts in ([], [3], [4], [2, 4, 7], list(range(1, len(numbers)))):
        edges = [0, *cuts, len(numbers)]
        pieces = pa.concat_tables([_bundled_piece(table.slice(a, b - a)) for a, b in zip(edges, edges[1:])])
        assert bundled_rows(pieces) == {"a": 3}, cuts
    # unreadable records (no frame number) are never bundled frames
    holes = pa.table({"capture": ["a", "a", "b"], "frame_number": pa.array([None, None, 1], pa.int64())})
    assert bundled_rows(_bundled_piece(holes)) == {"b": 0}
