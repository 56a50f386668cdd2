"""Input paths a PySpark user expects (issue 11): nested directories, gzip, file:// and Hadoop URIs.

No Spark session here: path expansion runs on the driver, ``capture_source`` on executors.
"""

from __future__ import annotations

import gzip
import shutil

import pytest
from nbmq.examples import CAPTURE_DIR as CAPTURES

from nbmq.capture import read_datagrams
from nbmq.spark import inputs


@pytest.fixture
def nested(tmp_path):
    """a/dealer.pcap, a/b/safe.pcap.gz, a/b/c/dealer.pcapng.gz, plus files Spark would skip."""
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    shutil.copy(CAPTURES / "dealer.pcap", tmp_path / "a" / "dealer.pcap")
    (tmp_path / "a" / "b" / "safe.pcap.gz").write_bytes(gzip.compress((CAPTURES / "safe_dealer.pcap").read_bytes(), 1))
    (tmp_path / "a" / "b" / "c" / "dealer.pcapng.gz").write_bytes(gzip.compress((CAPTURES / "dealer.pcapng").read_bytes(), 1))
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
    uri = f"file://{nested}"
    files = inputs.expand_paths([uri])
    assert files == [f"{uri}/{w}" for w in WANT]
    for path, name in zip(files, WANT):
        data = inputs.capture_source(path)
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
    from nbmq.capture.tcp import has_tcp_traffic
    from nbmq.examples.streams import stream_captures
    from nbmq.spark import pipeline

    monkeypatch.setattr(inputs, "is_local", lambda path: False)
    uri = f"file://{nested}"
    files = inputs.expand_paths([uri])
    assert pipeline._split_for(files, cores=2) == 64 << 20  # nothing splittable: the default
    rqueue = next(p for p in stream_captures() if str(p).endswith("rqueue.pcap"))
    shutil.copy(rqueue, nested / "a" / "rqueue.pcap")
    assert has_tcp_traffic(inputs.capture_source(f"{uri}/a/rqueue.pcap"), [6567])
