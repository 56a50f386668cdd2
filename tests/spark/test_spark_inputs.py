"""Input paths a PySpark user expects: nested directories, gzip, file:// and Hadoop URIs.

No Spark session here: path expansion runs on the driver, ``capture_source`` on executors.
"""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from nbmq.capture import read_datagrams
from nbmq.examples import CAPTURE_DIR as CAPTURES
from nbmq.spark import inputs


@pytest.fixture
def nested(tmp_path):
    """a/dealer.pcap, a/b/safe.pcap.gz, a/b/c/dealer.pcapng.gz, plus files Spark would skip."""
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    shutil.copy(CAPTURES / "dealer.pcap", tmp_path / "a" / "dealer.pcap")
    (tmp_path / "a" / "b" / "safe.pcap.gz").write_bytes(gzip.compress((CAPTURES / "safe_dealer.pcap").read_bytes(), 1))
    (tmp_path / "a" / "b" / "c" / "dealer.pcapng.gz").write_bytes(
        gzip.compress((CAPTURES / "dealer.pcapng").read_bytes(), 1)
    )
    for skipped in ("_tmp", ".hidden"):
        (tmp_path / "a" / skipped).mkdir()
        shutil.copy(CAPTURES / "dealer.pcap", tmp_path / "a" / skipped / "x.pcap")
    (tmp_path / "a" / "notes.txt").write_text("not a capture")
    (tmp_path / "a" / "_SUCCESS.pcap").write_bytes(b"")
    return tmp_path


WANT = ["a/b/c/dealer.pcapng.gz", "a/b/safe.pcap.gz", "a/dealer.pcap"]


def test_directories_are_read_recursively(nested):
    for given in (str(nested), f"file://{nested}", f"file:{nested}/"):
        assert inputs.expand_paths([given]) == [str(nested / w) for w in WANT]
    assert inputs.expand_paths([f"{nested}/**/*.gz"]) == [str(nested / w) for w in WANT[:2]]
    assert not inputs.splittable(str(nested / WANT[0])) and inputs.splittable(str(nested / WANT[2]))


def test_uris_through_pyarrow_fs(nested, monkeypatch):
    """The pyarrow.fs path (what hdfs:// and s3a:// take), run for real on file:// URIs."""
    monkeypatch.setattr(inputs, "is_local", lambda path: False)
    monkeypatch.setattr(inputs, "_COPY_STEP", 1000)  # the copy goes in steps, none lost
    uri = f"file://{nested}"
    files = inputs.expand_paths([uri])
    assert files == [f"{uri}/{w}" for w in WANT]
    for path, name in zip(files, WANT):
        data = inputs.capture_source(path)
        assert isinstance(data, memoryview)  # a map of a temporary file, not the bytes in memory
        assert data == (nested / name).read_bytes()  # the bytes as stored; gzip is the reader's
        assert len(read_datagrams(data)) == len(read_datagrams(nested / name))
        assert inputs.file_size(path) == (nested / name).stat().st_size
    with pytest.raises(FileNotFoundError, match="missing.pcap"):
        inputs.expand_paths([f"{uri}/missing.pcap"])


def test_unsupported_scheme_names_the_path():
    with pytest.raises(ValueError, match=r"'foo://bucket/x.pcap'.*scheme 'foo' is not supported.*hdfs"):
        inputs.expand_paths(["foo://bucket/x.pcap"])
    with pytest.raises(ValueError, match="foo://bucket/x.pcap"):
        inputs.capture_source("foo://bucket/x.pcap")


def test_missing_local_path_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.pcap"):
        inputs.expand_paths([str(tmp_path / "nope.pcap")])
    with pytest.raises(FileNotFoundError, match="no file matches"):
        inputs.expand_paths([str(tmp_path / "*.pcap")])


def test_pipeline_driver_steps_take_uris(nested, monkeypatch):
    """`nbmq pipeline hdfs://...`: the driver's split planning and TCP probe go through
    ``inputs`` (a URI has no local size and no local file to probe)."""
    from nbmq.capture.tcp.segments import has_tcp_traffic
    from nbmq.examples.streams import stream_captures
    from nbmq.spark import pipeline

    monkeypatch.setattr(inputs, "is_local", lambda path: False)
    uri = f"file://{nested}"
    files = inputs.expand_paths([uri])
    assert pipeline._split_for(files, cores=2) == 64 << 20  # nothing splittable: the default
    rqueue = next(p for p in stream_captures() if str(p).endswith("rqueue.pcap"))
    shutil.copy(rqueue, nested / "a" / "rqueue.pcap")
    assert has_tcp_traffic(inputs.capture_source(f"{uri}/a/rqueue.pcap"), [6567])


def test_default_split_is_a_range_per_core_within_bounds(monkeypatch):
    """One byte range per core for the largest capture, never under 64 MiB nor over 128 MiB: a
    capture past cores x 128 MiB gets more ranges, so no frames file (and no driver pass over
    one) grows with the capture."""
    from nbmq.spark import pipeline

    sizes = {"small.pcap": 10 << 20, "mid.pcap": 200 << 20, "big.pcap": 2 << 30}
    monkeypatch.setattr(inputs, "file_size", lambda path: sizes[path])
    monkeypatch.setattr(inputs, "splittable", lambda path: True)
    assert pipeline._split_for(["small.pcap"], cores=2) == 64 << 20
    assert pipeline._split_for(["mid.pcap"], cores=2) == 100 << 20
    assert pipeline._split_for(["mid.pcap", "big.pcap"], cores=2) == pipeline.MAX_SPLIT_BYTES == 128 << 20


def test_capture_names_tell_same_named_files_apart():
    names = inputs.capture_names(["/d/a/x.pcap", "/d/b/x.pcap", "/d/b/y.pcap", "hdfs://nn/d/c/a/x.pcap"])
    assert names == {
        "/d/a/x.pcap": "d/a/x.pcap",
        "/d/b/x.pcap": "b/x.pcap",
        "/d/b/y.pcap": "y.pcap",
        "hdfs://nn/d/c/a/x.pcap": "c/a/x.pcap",
    }
    assert inputs.capture_names(["/only/x.pcap"]) == {"/only/x.pcap": "x.pcap"}
    assert inputs.capture_names([]) == {}


def test_same_named_captures_in_two_directories_get_distinct_capture_values(tmp_path):
    # The messages and sessions tables key on `capture`: two files named alike must not merge.
    from pyspark.sql.types import StructType

    from nbmq.spark.datasource import NbmqReader, read_partition
    from nbmq.spark.schema import frames_schema
    from nbmq.spark.tcp_schema import bqsp_schema
    from nbmq.spark.tcp_source import StreamsReader

    for d in ("run1", "run2"):
        (tmp_path / d).mkdir()
        shutil.copy(CAPTURES / "dealer.pcap", tmp_path / d / "dealer.pcap")
    schema = StructType([f for f in frames_schema(payload=False).fields if f.name in ("capture", "frame")])
    reader = NbmqReader({"path": str(tmp_path), "split_bytes": "4096"}, schema)
    parts = reader.partitions()
    assert len(parts) > 2  # split into ranges, each keeping its file's name
    seen = {}
    for part in parts:
        for batch in read_partition(part, schema):
            for name in set(batch.column("capture").to_pylist()):
                seen.setdefault(name, set()).add(part.path)
    assert seen == {
        "run1/dealer.pcap": {str(tmp_path / "run1" / "dealer.pcap")},
        "run2/dealer.pcap": {str(tmp_path / "run2" / "dealer.pcap")},
    }
    streams = StreamsReader("bqsp", {"path": str(tmp_path), "ports": "any"}, bqsp_schema())
    assert sorted(p.capture for p in streams.partitions()) == ["run1/dealer.pcap", "run2/dealer.pcap"]
    # the pipeline reads only the files with TCP traffic there, naming them as the frames source does
    one = str(tmp_path / "run1" / "dealer.pcap")
    named = StreamsReader(
        "bqsp", {"path": one, "ports": "any", "capture_names": json.dumps({one: "run1/dealer.pcap"})}, bqsp_schema()
    )
    assert [p.capture for p in named.partitions()] == ["run1/dealer.pcap"]
