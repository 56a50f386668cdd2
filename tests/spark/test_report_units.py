"""The report's formatting, time axis, flow-graph folding and ack hash, without Spark."""

from __future__ import annotations

import pytest

pd = pytest.importorskip("pandas")

from nbmq.spark.report import charts, units  # noqa: E402
from nbmq.spark.report.ackhash import _hashes  # noqa: E402


def test_ids_are_hex_u64():
    assert units.hex_id(7) == "0x0000000000000007"
    assert units.hex_id(2**64 - 1) == "0xffffffffffffffff"
    assert units.hex_id(None) == ""


@pytest.mark.parametrize(
    "value, text",
    [(999.0, "999 B/s"), (1500.0, "1.5 kB/s"), (2.5e6, "2.5 MB/s"), (3e9, "3.0 GB/s")],
)
def test_rates_are_scaled(value, text):
    assert units.rate(value) == text


@pytest.mark.parametrize(
    "seconds, text",
    [(5e-6, "5 µs"), (0.000999999, "1 ms"), (0.0123, "12.3 ms"), (3.2, "3.2 s"), (300, "5 min"), (86400, "24 h")],
)
def test_durations_pick_a_unit(seconds, text):
    assert units.duration(seconds) == text


def _cap(span, width):
    return pd.DataFrame([{"capture": "c", "protocol": "nbmq", "t0": 0.0, "span_s": span, "width_s": width}]).iloc[0]


def test_partial_last_bin_is_a_rate_over_the_time_it_covers():
    cap = _cap(span=2.5, width=1.0)  # bins [0,1) [1,2) [2,2.5]: the last covers half a bin
    bins, width, span, partial = charts.axis(cap)
    assert (bins, partial) == (3, True)
    rows = pd.DataFrame({"bin": [0, 1, 2], "frames": [10, 10, 5]})
    _, rate = charts._series(rows, "frames", bins, width, span)
    assert list(rate) == [10.0, 10.0, 10.0]  # steady traffic stays flat: no false drop


def test_a_sliver_of_a_bin_joins_the_previous_one():
    bins, _, _, _ = charts.axis(_cap(span=10.0, width=1.0))  # the last frame sits on an edge
    assert bins == 10
    bins, _, _, _ = charts.axis(_cap(span=10.1, width=1.0))
    assert bins == 10


def test_flow_rows_fold_heartbeats_and_show_gaps():
    control = pd.DataFrame(
        [
            {"capture": "c", "session_id": 5, "at_s": 0.0, "src": "a:1", "dst": "s:2", "kind_name": "connect"},
            {"capture": "c", "session_id": 5, "at_s": 0.1, "src": "s:2", "dst": "a:1", "kind_name": "connected"},
        ]
    )
    heartbeats = pd.DataFrame(
        [{"capture": "c", "session_id": 5, "src": "a:1", "dst": "s:2", "n": 100, "first_s": 0.2, "last_s": 99.0}]
    )
    gaps = pd.DataFrame([{"capture": "c", "session_id": 5, "direction": "c2s", "at_s": 50.0, "gap_s": 4.0}])
    rows = charts.flow_rows(control, heartbeats, gaps, {("c", 5): "a:1"})
    assert [r[3] for r in rows] == [
        "Connect",
        "Connected",
        "Heartbeat x100 (until 99.000 s)",
        "Heartbeat after a 4 s gap",
    ]
    assert charts.flow_svg("c", rows, ["s:2"]).startswith("<svg")


def test_ack_hash_rebuilds_the_frame(codec):
    chunk = b"hello world"
    frame = codec.encode_data_frame(0xFEEDFACECAFEBEEF, 2**63 + 5, 2, 1, 100, 40, 3, chunk)
    row = codec.parse_frame(frame)
    cols = [pd.Series([v]) for v in (1, 0, 0xFEEDFACECAFEBEEF, 2**63 + 5, 2, 1, 100, 40, len(chunk), 3)]
    got = _hashes(*cols, pd.Series([chunk]))
    assert int(got[0]) % 2**64 == codec.ack_hash(frame)  # the u64's bits as a signed BIGINT
    assert row.chunk_offset == 3


def test_quantiles_from_the_fine_histogram():
    import numpy as np

    from nbmq.spark.report.aggregate import FINE_PER_DECADE, _quantiles

    values = np.random.default_rng(1).lognormal(-8, 1, 20_000)
    fine = np.floor(np.log10(values) * FINE_PER_DECADE).astype(int)
    frame = pd.DataFrame({"fine": fine, "v": values}).groupby("fine")["v"].agg(["count", "min", "max"]).reset_index()
    frame = frame.rename(columns={"count": "n", "min": "lo", "max": "hi"}).assign(capture="c", metric="m")
    latency, hist = _quantiles(frame)
    row = latency.iloc[0]
    assert row["n"] == 20_000 and row["max"] == values.max()
    for q, name in ((50, "p50"), (90, "p90"), (99, "p99")):
        exact = np.percentile(values, q, method="inverted_cdf")
        assert abs(row[name] / exact - 1) < 0.024  # within one fine bucket
    assert hist["n"].sum() == 20_000


def test_quantiles_of_two_samples_take_the_lower_for_the_median():
    from nbmq.spark.report.aggregate import _quantiles

    frame = pd.DataFrame(
        {"capture": "c", "metric": "m", "fine": [-400, -300], "n": [1, 1], "lo": [1e-4, 1e-3], "hi": [1e-4, 1e-3]}
    )
    row = _quantiles(frame)[0].iloc[0]
    assert (row["p50"], row["p90"], row["max"]) == (1e-4, 1e-3, 1e-3)


def test_flow_graph_keeps_to_eight_endpoints():
    rows = [(float(i), f"10.0.0.{i}:1", "s:2", "Connect", "connect") for i in range(20)]
    svg = charts.flow_svg("c", rows, ["s:2"])
    assert "10.0.0.6:1" in svg and "10.0.0.7:1" not in svg  # the server and the first 7 clients
    assert "the first 7 of 20 rows, 8 of 21 endpoints" in svg
