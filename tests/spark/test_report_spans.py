"""Issue 11: the pipeline and its report on captures whose messages span 1 s .. 1 day."""

from __future__ import annotations

import json

import pytest

from nbmq import codec
from nbmq.capture.pcap_writer import write_pcap

pytestmark = pytest.mark.spark

T0 = 1_700_000_000.0
SPANS = {"span_1s.pcap": 1.0, "span_60s.pcap": 60.0, "span_1h.pcap": 3600.0, "span_1d.pcap": 86400.0}


def _two_messages(span: float) -> list[tuple[float, str, int, str, int, bytes]]:
    """Two one-frame messages of session 7, ``span`` seconds apart (a valid capture)."""
    rows = []
    for i, ts in enumerate((T0, T0 + span)):
        parts = [f"message {i}".encode()]
        frames = codec.shard_message_bytes(parts, 7, codec.message_id(parts, nonce=i))
        rows += [(ts, "10.0.0.1", 40000, "10.0.0.2", 5555, f) for f in frames]
    return rows


@pytest.fixture(scope="module")
def span_run(spark, tmp_path_factory):
    from nbmq.spark.pipeline import run

    src = tmp_path_factory.mktemp("spans")
    for name, span in SPANS.items():
        write_pcap(src / name, _two_messages(span))
    out = src / "out"
    summary = run([str(src / n) for n in SPANS], out, spark=spark, progress=False, print_summary=False)
    return summary, out


def test_every_span_completes_with_summary_and_report(span_run):
    summary, out = span_run
    assert {r["capture"]: r["messages_complete"] for r in summary["captures"]} == {n: 2 for n in SPANS}
    assert json.loads((out / "summary.json").read_text())["totals"]["messages_complete"] == 8
    page = (out / "report.html").read_text()
    for name in SPANS:
        assert name in page


@pytest.mark.parametrize("span", [0.0, 1.0, 39.0, 41.0, 60.0, 3600.0, 86400.0, 10 * 86400.0])
def test_bin_width_is_a_float(span):
    from nbmq.spark.report.units import nice_bin_width as _bin_width

    width = _bin_width(span)
    assert type(width) is float and width > 0 and span / width <= 120
