"""The ``nbmq_bqsp`` / ``nbmq_rqueue`` data sources and the pipeline's stream tables."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import struct

import pytest

from nbmq.examples.streams import STREAMS_DIR, streams_manifest_path

pytestmark = pytest.mark.spark

MANIFEST = json.loads(streams_manifest_path().read_text())


def _want(protocol: str) -> set[tuple]:
    out = set()
    for name, cap in MANIFEST["captures"].items():
        if cap["protocol"] != protocol:
            continue
        for c in cap["connections"]:
            for d in ("c2s", "s2c"):
                for r in c[d]:
                    fields = (
                        (r["data_type"], r["queue_number"]) if protocol == "bqsp" else (r["message_type"], r["topic"])
                    )
                    out.add((name, c["client"], c["server"], d, r["stream_offset"], *fields, r["length"], r["sha256"]))
    return out


def test_tables_equal_the_manifest(spark):
    bqsp = spark.read.format("nbmq_bqsp").option("ports", ",".join(map(str, MANIFEST["bqsp_ports"])))
    rows = bqsp.load(str(STREAMS_DIR)).collect()
    assert all(r.error is None and r.timestamp is not None for r in rows)
    got = {
        (
            r.capture,
            r.client,
            r.server,
            r.direction,
            r.stream_offset,
            r.data_type,
            r.queue_number,
            r.length,
            hashlib.sha256(r.payload).hexdigest(),
        )
        for r in rows
    }
    assert len(rows) == len(got) and got == _want("bqsp")

    rows = spark.read.format("nbmq_rqueue").load(str(STREAMS_DIR)).collect()  # default port 6567
    assert all(r.error is None for r in rows)
    got = {
        (
            r.capture,
            r.client,
            r.server,
            r.direction,
            r.stream_offset,
            r.message_type,
            bytes(r.topic).decode(),
            r.content_length,
            hashlib.sha256(r.content).hexdigest(),
        )
        for r in rows
    }
    assert len(rows) == len(got) and got == _want("rqueue")
    names = {r.message_type_name for r in rows}
    assert names == {"SUBSCRIBE", "REMOVE", "DEREGISTER", "NOTIFICATION"}


def test_garbage_stream_and_bad_files_give_error_rows(spark, tmp_path):
    import dpkt

    from nbmq.capture import write_pcap_packets

    def frame(seq: int, flags: int, data: bytes) -> bytes:
        tcp = dpkt.tcp.TCP(sport=50000, dport=6567, seq=seq, flags=flags, data=data)
        ip = dpkt.ip.IP(src=b"\x0a\0\0\x01", dst=b"\x0a\0\0\x02", p=6, ttl=64, data=tcp)
        ip.len = 20 + len(bytes(tcp))
        return bytes(12) + b"\x08\x00" + bytes(ip)

    junk = struct.pack(">HB", 4, 99) + b"xxxx" * 50  # type 99: not an rqueue message
    write_pcap_packets(tmp_path / "junk.pcap", [(1.0, frame(1, 2, b"")), (2.0, frame(2, 0x18, junk))])
    (tmp_path / "notacapture.pcap").write_bytes(b"hello world, not a capture")
    rows = spark.read.format("nbmq_rqueue").option("payload", "false").load(str(tmp_path)).collect()
    errs = sorted((r.capture, r.stream_offset, r.error) for r in rows)
    assert errs[0] == ("junk.pcap", 2, "decode: unknown type")
    assert errs[1] == ("junk.pcap", 2, f"unparsed: {len(junk) - 2} bytes not decoded")
    assert errs[2][0] == "notacapture.pcap" and errs[2][2].startswith("capture: not a pcap")
    assert "content" not in rows[0].asDict()
    with pytest.raises(Exception, match="no well-known port"):
        spark.read.format("nbmq_bqsp").load(str(tmp_path)).count()


def test_pipeline_writes_stream_tables(spark, tmp_path, bundled_run):
    from nbmq.spark.pipeline import run

    out = tmp_path / "out"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        summary = run([str(STREAMS_DIR)], out, spark=spark, bqsp_ports=[7701], report=False, progress=False)
    text = buf.getvalue()
    assert summary["streams"]["bqsp"] == {"files": 1, "rows": 14, "error_rows": 0, "connections": 2}
    assert summary["streams"]["rqueue"] == {"files": 1, "rows": 13, "error_rows": 0, "connections": 3}
    assert "bqsp: 14 packets, 0 error rows, 2 connections" in text
    assert "rqueue: 13 messages, 0 error rows, 3 connections" in text
    assert spark.read.parquet(str(out / "bqsp")).count() == 14
    assert spark.read.parquet(str(out / "rqueue")).count() == 13
    # the bundled nbmq captures hold no TCP: nothing new written or printed
    code, bundled_out, bundled_text = bundled_run
    assert code == 0 and not (bundled_out / "bqsp").exists() and not (bundled_out / "rqueue").exists()
    assert "streams" not in json.loads((bundled_out / "summary.json").read_text())


def test_gzip_file_uri_in_a_nested_directory(spark, tmp_path):
    """The TCP sources take the same paths as ``nbmq`` (recursive, .gz, file://)."""
    import gzip

    (tmp_path / "x" / "y").mkdir(parents=True)
    (tmp_path / "x" / "y" / "rqueue.pcap.gz").write_bytes(gzip.compress((STREAMS_DIR / "rqueue.pcap").read_bytes()))
    got = spark.read.format("nbmq_rqueue").load(f"file://{tmp_path}")
    want = spark.read.format("nbmq_rqueue").load(str(STREAMS_DIR / "rqueue.pcap"))
    assert got.count() == want.count() > 0
    assert got.drop("capture").exceptAll(want.drop("capture")).count() == 0
    assert {r.capture for r in got.select("capture").distinct().collect()} == {"rqueue.pcap.gz"}
