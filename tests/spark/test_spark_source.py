"""The ``nbmq`` data source: path forms, options, byte-range splits, pcap vs pcapng."""

from __future__ import annotations

import pytest

from nbmq.examples import CAPTURE_DIR as CAPTURES

pytestmark = pytest.mark.spark

DEALER = str(CAPTURES / "dealer.pcap")
DEALER_NG = str(CAPTURES / "dealer.pcapng")
SAFE = str(CAPTURES / "safe_dealer.pcap")


def _same(a, b) -> bool:
    return a.exceptAll(b).count() == 0 and b.exceptAll(a).count() == 0


def test_path_forms(spark):
    def read():  # a DataFrameReader keeps its options: a fresh one each time
        return spark.read.format("nbmq")

    one = read().load(DEALER).count()
    two = read().load(DEALER).count() + read().load(SAFE).count()
    assert one == 6538
    assert read().load([DEALER, SAFE]).count() == two
    assert read().load(f"{DEALER},{SAFE}").count() == two
    assert read().option("paths", f"{DEALER}, {SAFE}").load().count() == two
    assert read().load(str(CAPTURES / "*dealer.pcap")).count() == two
    # a directory: every capture in it, pcapng included
    names = {r.capture for r in read().load(str(CAPTURES)).select("capture").distinct().collect()}
    assert names == {"dealer.pcap", "dealer.pcapng", "radio_dish.pcap", "safe_dealer.pcap"}
    assert "payload" not in read().option("payload", "false").load(DEALER).columns
    with pytest.raises(Exception, match="no such capture"):
        read().load(str(CAPTURES / "missing.pcap")).count()


def test_udp_ports_option(spark):
    df = spark.read.format("nbmq").option("udp_ports", "1").load(DEALER)
    assert df.count() == 0


def test_splits_give_the_same_rows(spark):
    whole = spark.read.format("nbmq").load(DEALER)
    split = spark.read.format("nbmq").option("split_bytes", str(300_000)).load(DEALER)
    assert split.rdd.getNumPartitions() >= 8
    assert whole.rdd.getNumPartitions() == 1
    assert _same(whole, split)


def test_pcap_and_pcapng_give_identical_tables(spark):
    from nbmq.spark.messages import build_messages
    from nbmq.spark.sessions_table import build_sessions

    tables = []
    for path in (DEALER, DEALER_NG):
        frames = spark.read.format("nbmq").load(path).cache()
        messages = build_messages(frames).cache()
        sessions = build_sessions(frames, messages)
        tables.append([t.drop("capture") for t in (frames, messages, sessions)])
    (f1, m1, s1), (f2, m2, s2) = tables
    assert f1.count() == 6538 and m1.count() == 1200 and s1.count() == 3
    assert _same(f1, f2)
    assert _same(m1, m2)
    assert _same(s1, s2)


def test_nested_gzip_and_file_uris(spark, tmp_path):
    """Directories recursively, .pcap.gz / .pcapng.gz, file:// URIs; unknown schemes named."""
    import gzip
    import shutil

    (tmp_path / "day1" / "late").mkdir(parents=True)
    shutil.copy(SAFE, tmp_path / "day1" / "safe_dealer.pcap")
    (tmp_path / "day1" / "late" / "dealer.pcapng.gz").write_bytes(
        gzip.compress((CAPTURES / "dealer.pcapng").read_bytes(), 1)
    )
    (tmp_path / "dealer.pcap.gz").write_bytes(gzip.compress((CAPTURES / "dealer.pcap").read_bytes(), 1))
    plain = spark.read.format("nbmq").load([DEALER, SAFE, DEALER_NG])
    for given in (str(tmp_path), f"file://{tmp_path}"):
        df = spark.read.format("nbmq").option("split_bytes", "100000").load(given)
        assert df.rdd.getNumPartitions() > 3  # the plain pcap is split, the .gz files are not
        assert df.filter("error like 'capture:%'").count() == 0
        assert _same(df.drop("capture"), plain.drop("capture"))
    names = {
        r.capture for r in spark.read.format("nbmq").load(f"file://{tmp_path}").select("capture").distinct().collect()
    }
    assert names == {"dealer.pcap.gz", "safe_dealer.pcap", "dealer.pcapng.gz"}
    with pytest.raises(Exception, match="scheme 'foo' is not supported"):
        spark.read.format("nbmq").load("foo://bucket/captures/").count()


def test_damaged_pcap_splits_match_the_whole_read(spark, tmp_path):
    """A deleted byte once made 256 KiB splits lose 3 datagrams and the error, silently."""
    data = (CAPTURES / "dealer.pcap").read_bytes()
    path = tmp_path / "damaged.pcap"
    path.write_bytes(data[:2_098_474] + data[2_098_475:])
    whole = spark.read.format("nbmq").option("split_bytes", "0").load(str(path))
    split = spark.read.format("nbmq").option("split_bytes", str(256 * 1024)).load(str(path))
    assert split.rdd.getNumPartitions() > 8
    assert _same(whole, split)
    assert split.filter("error like 'capture:%'").count() == 1
    assert split.filter("error is null or error not like 'capture:%'").count() == 6538
