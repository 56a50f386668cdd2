"""The report's SafeDealer figures: ack round trips and resends come from one aggregation per
frame hash; a repeated frame of a session that never acks is a duplicate, not a resend."""

from __future__ import annotations

import pytest

from nbmq import codec
from nbmq.capture import write_pcap

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]  # one pipeline run

T0 = 1_700_000_000.0
C, S = ("10.0.0.1", 40000), ("10.0.0.2", 5555)
C2 = ("10.0.0.3", 40001)
SAFE, PLAIN = 0x1111111111111111, 0xF222222222222222  # the second above 2**63


def _capture() -> list[tuple[float, str, int, str, int, bytes]]:
    """A SafeDealer-like session: frame A sent three times then acked, frame B acked once, frame
    C never acked; and a session without Acks that repeats its one frame."""
    ctl = codec.encode_control_frame

    def up(ts, frame, client=C):
        return (T0 + ts, *client, *S, frame)

    def down(ts, frame, client=C):
        return (T0 + ts, *S, *client, frame)

    def ack(frame):
        return ctl(5, SAFE, codec.ack_hash(frame).to_bytes(8, "big"))

    a, b, c = (codec.shard_message_bytes([bytes([i]) * 100], SAFE, i)[0] for i in (1, 2, 3))
    rows = [up(0.0, ctl(1, 0)), down(0.001, ctl(2, SAFE)), up(0.002, ctl(4, SAFE))]
    rows += [up(0.1, a), up(0.3, a), up(0.5, a), down(0.55, ack(a))]  # two resends, acked 0.45 s after the first send
    rows += [up(0.2, b), down(0.25, ack(b)), up(0.6, c)]  # acked after 0.05 s; never acked
    d = codec.shard_message_bytes([b"d" * 100], PLAIN, 4)[0]
    rows += [up(0.0, ctl(1, 0), C2), down(0.001, ctl(2, PLAIN), C2), up(0.7, d, C2), up(0.8, d, C2)]
    rows += [up(10.0, ctl(4, SAFE))]  # a 10 s axis: 0.1 s bins
    return sorted(rows)


@pytest.fixture(scope="module")
def acks_run(spark, tmp_path_factory):
    from nbmq.spark.pipeline import run
    from nbmq.spark.report import collect

    d = tmp_path_factory.mktemp("acks")
    write_pcap(d / "acks.pcap", _capture())
    summary = run([str(d / "acks.pcap")], d / "out", spark=spark, progress=False, print_summary=False)
    return summary, collect(spark, summary["tables"]), (d / "out" / "report.html").read_text(encoding="utf-8")


def test_resends_of_the_acking_session_only(acks_run):
    _, data, _ = acks_run
    resends = data.resends
    assert int(resends["resends"].sum()) == 2  # frame A twice again; D's repeat is not a resend
    width = float(data.captures["width_s"].iloc[0])
    assert list(resends["bin"]) == [round(0.5 / width)]  # counted at A's last send (0.5 s)


def test_ack_latencies(acks_run):
    _, data, page = acks_run
    lat = data.latency.set_index("metric").loc["SafeDealer ack (data frame -> its Ack)"]
    assert int(lat["n"]) == 2  # A (first send -> its Ack) and B; C has no Ack
    assert lat["max"] == pytest.approx(0.45, abs=1e-6)
    assert "SafeDealer ack (data frame -&gt; its Ack)" in page
    assert "resent data frames/s (same ack hash)" in page  # the health chart's resend series


def test_round_trips_per_peer(acks_run):
    summary, data, page = acks_run
    # A: first send 0.1 s, Ack 0.55 s; B: 0.2 -> 0.25 s; C never acked; D's session has no Acks
    (row,) = summary["round_trips"]
    assert row == {
        "capture": "acks.pcap",
        "session_id": f"0x{SAFE:016x}",
        "direction": "c2s",
        "acks": 2,
        "min_s": pytest.approx(0.05, abs=1e-6),
        "p50_s": pytest.approx(0.05, abs=1e-6),  # nearest rank: the first of two
        "p99_s": pytest.approx(0.45, abs=1e-6),
    }
    assert data.round_trips[["acks", "direction"]].values.tolist() == [[2, "c2s"]]
    assert "SafeDealer round trips per peer" in page


def test_duplicate_counted_in_the_plain_session(acks_run):
    summary, data, _ = acks_run
    assert summary["totals"]["duplicates"] >= 1  # D's repeat
    plain = data.messages[data.messages["session_id"] == PLAIN]
    assert int(plain["duplicates"].sum()) == 1


def test_findings_and_report_read_one_ack_matching(acks_run, monkeypatch):
    """The findings' in-flight window takes its round trip from the report's matching: the
    capture's median is the report's ack latency p50, and the frames are matched once."""
    from nbmq.spark.report.passes import Passes

    summary, data, _ = acks_run
    passes = Passes(None, summary["tables"], on_driver=True)
    calls = []
    acks = Passes.acks
    monkeypatch.setattr(Passes, "acks", lambda self, *a: calls.append(a) or acks(self, *a))
    assert passes.round_trip_medians() == {"acks.pcap": pytest.approx(0.05, abs=1e-6)}
    lat = data.latency.set_index("metric").loc["SafeDealer ack (data frame -> its Ack)"]
    assert passes.round_trip_medians()["acks.pcap"] == lat["p50"]
    assert passes.ack_matching() is passes.ack_matching() and len(calls) == 1
    assert passes.acked_sessions() == [SAFE]


def test_heartbeat_gaps_are_stitched_across_pieces(acks_run, tmp_path):
    """Each piece keeps its senders' runs of heartbeats, not the heartbeats: the same frames
    cut into row groups of two rows give the same pairs and gaps (C's 10 s wait)."""
    import shutil

    import pyarrow.parquet as pq

    from nbmq.spark.report.passes import Passes

    summary, _, _ = acks_run
    tables = {name: summary["tables"][name] for name in ("frames", "messages")}
    cut = {"frames": str(tmp_path / "frames"), "messages": str(tmp_path / "messages")}
    shutil.copytree(tables["messages"], cut["messages"])
    (tmp_path / "frames").mkdir()
    pq.write_table(pq.read_table(tables["frames"]), cut["frames"] + "/part-0.parquet", row_group_size=2)
    assert pq.read_metadata(cut["frames"] + "/part-0.parquet").num_row_groups > 5
    whole, pieces = Passes(None, tables, on_driver=True), Passes(None, cut, on_driver=True)
    (pairs, gaps), (pairs2, gaps2) = whole.heartbeats(), pieces.heartbeats()
    assert pairs.equals(pairs2) and gaps.equals(gaps2)
    assert pairs["n"].tolist() == [2] and gaps[["prev_s", "at_s"]].values.tolist() == [
        [pytest.approx(0.002, abs=1e-6), pytest.approx(10.0, abs=1e-6)]
    ]
