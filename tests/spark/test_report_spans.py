"""The pipeline and its report on captures whose messages span 1 s .. 1 day."""

from __future__ import annotations

import json
import re

import pytest

from nbmq import codec
from nbmq.capture import write_pcap

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]  # one pipeline run in the first test

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


C, S = ("10.0.0.1", 40000), ("10.0.0.2", 5555)
SID = 0xABCDEF0123456789


def _health() -> list[tuple[float, str, int, str, int, bytes]]:
    """A session with a handshake, a 5 s silence between heartbeats, a duplicated frame, an
    expired and an in-flight incomplete message, and a malformed datagram."""
    ctl = codec.encode_control_frame

    def up(ts, frame):
        return (T0 + ts, *C, *S, frame)

    def down(ts, frame):
        return (T0 + ts, *S, *C, frame)

    rows = [up(0.0, ctl(1, 0)), down(0.001, ctl(2, SID)), up(0.002, ctl(4, SID))]
    rows += [up(float(t), ctl(4, SID)) for t in (1, 2, 3, 8, 9)]  # 3 -> 8: a 5 s silence
    whole = codec.shard_message_bytes([b"x" * 1000], SID, 1)
    rows += [up(0.5 + i * 0.001, f) for i, f in enumerate(whole)] + [up(0.6, whole[0])]  # one duplicate
    rows += [up(0.7, codec.shard_message_bytes([b"y" * 1000], SID, 2)[0])]  # expires: 10 s TTL
    rows += [up(19.0, codec.shard_message_bytes([b"z" * 1000], SID, 3)[0])]  # in flight at the end
    rows += [up(19.5, b"\x02\x04" + bytes(8))]  # version 2: malformed
    return sorted(rows)


@pytest.fixture(scope="module")
def span_run(spark, tmp_path_factory):
    from nbmq.spark.pipeline import run

    src = tmp_path_factory.mktemp("spans")
    for name, span in SPANS.items():
        write_pcap(src / name, _two_messages(span))
    write_pcap(src / "health.pcap", _health())
    out = src / "out"
    summary = run(
        [str(src / n) for n in [*SPANS, "health.pcap"]], out, spark=spark, progress=False, print_summary=False
    )
    return summary, out


def test_every_span_completes_with_summary_and_report(span_run):
    summary, out = span_run
    complete = {r["capture"]: r["messages_complete"] for r in summary["captures"]}
    assert {n: complete[n] for n in SPANS} == {n: 2 for n in SPANS}
    assert json.loads((out / "summary.json").read_text())["totals"]["messages_complete"] == 9
    page = (out / "report.html").read_text()
    for name in SPANS:
        assert name in page


@pytest.mark.parametrize("span", [0.0, 1.0, 39.0, 41.0, 60.0, 3600.0, 86400.0, 10 * 86400.0])
def test_bin_width_is_a_float(span):
    from nbmq.spark.report.units import nice_bin_width as _bin_width

    width = _bin_width(span)
    assert type(width) is float and width > 0 and span / width <= 120


def test_health_section(span_run):
    _, out = span_run
    page = (out / "report.html").read_text()
    section = page[page.index("<h2 id='cap-health.pcap'>") :]
    section = section[: section.index("<h2", 10)]
    assert re.search(r"<td class=l>wrong version[^<]*</td><td>1</td>", section)
    assert "Heartbeat after a 5 s gap" in section  # the flow graph's gap row
    assert ">Connected<" in section
    # the capture's findings: the 5 s silence, the expired message, the one in flight at the end
    for kind in ("peer_silent", "message_lost_frames", "message_in_flight_at_end", "malformed_frame"):
        assert re.search(rf"<a href='#kind-{kind}'>{kind}</a> 1\b", section), kind
    expert = page[page.index("<h2 id=expert>") :]
    sid = f"0x{SID:016x}"
    assert re.search(
        rf"<td class=l>health.pcap</td><td>3.000000</td><td>11</td><td class=l><a href='#sess-health-pcap-{sid}'>",
        expert,
    )
    data = json.loads(re.search(r"id='nbmq-report-data'>(.*?)</script>", page, re.S).group(1))
    health = [c for c in data["charts"] if c["group"] == "health.pcap" and c["title"] == "loss and health"]
    assert [s["label"] for s in health[0]["series"]] == [
        "duplicate data frames/s",
        "incomplete messages/s (by first frame)",
    ]
