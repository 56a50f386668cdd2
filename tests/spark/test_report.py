"""The HTML report on every bundled capture (UDP and TCP), its content, and a real browser load."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from nbmq.examples import CAPTURE_DIR
BUNDLED = ["dealer.pcap", "dealer.pcapng", "radio_dish.pcap", "safe_dealer.pcap"]  # every bundled UDP capture

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]  # one pipeline run in the first test

STREAMS = CAPTURE_DIR.parent / "streams"


@pytest.fixture(scope="module")
def report(spark, tmp_path_factory):
    """The pipeline with its report on the bundled nbmq, BQSP and rqueue captures."""
    from nbmq.spark.pipeline import run

    out = tmp_path_factory.mktemp("report") / "out"
    captures = [str(CAPTURE_DIR / n) for n in BUNDLED] + [str(STREAMS / "bqsp.pcap"), str(STREAMS / "rqueue.pcap")]
    summary = run(captures, out, spark=spark, progress=False, print_summary=False, bqsp_ports=[7701])
    sessions = spark.read.parquet(summary["tables"]["sessions"]).select("capture", "session_id").collect()
    return summary, (out / "report.html").read_text(encoding="utf-8"), sessions


def test_every_capture_has_its_section(report):
    _, page, _ = report
    for name in BUNDLED:
        assert f"<h2 id='cap-{name}'>{name}</h2>" in page
    assert "<h2 id=bqsp>BQSP over TCP</h2>" in page and "<h2 id=rqueue>rqueue over TCP</h2>" in page


def test_session_ids_are_hex_everywhere(report):
    _, page, sessions = report
    for r in sessions:
        assert f"0x{int(r.session_id):016x}" in page
        assert str(int(r.session_id)) not in page  # never the decimal form


def test_stream_captures_are_not_zero_rows(report):
    _, page, _ = report
    row = re.search(r"<tr><td class=l>bqsp.pcap</td><td class=l>bqsp</td><td>[^<]*</td><td>(\d+)</td>", page)
    assert row and int(row.group(1)) == 14  # 14 BQSP packets (streams manifest)
    row = re.search(r"<tr><td class=l>rqueue.pcap</td><td class=l>rqueue</td><td>[^<]*</td><td>(\d+)</td>", page)
    assert row and int(row.group(1)) == 13


def test_rqueue_fan_out_per_topic(report):
    _, page, _ = report
    assert re.search(r"<td class=l>news</td><td>2</td><td>2</td><td>1</td><td>3</td><td>3</td><td>1.00</td>", page)
    assert re.search(r"<td class=l>sport</td><td>1</td><td>1</td><td>0</td><td>1</td><td>1</td><td>1.00</td>", page)


def test_bqsp_queues_are_matched(report):
    _, page, _ = report
    section = page[page.index("Queues: request"):page.index("bqsp error rows")]
    rows = re.findall(r"<tr><td class=l>bqsp.pcap</td><td class=l>([^<]+)</td><td>(\d+)</td><td>(\d+)</td><td>(\d+)</td>", section)
    assert len(rows) == 7 and all(req == rsp for _, _, req, rsp in rows)


def test_latency_rows(report):
    summary, page, _ = report
    safe = next(r for r in summary["captures"] if r["capture"] == "safe_dealer.pcap")
    # Every SafeDealer data frame in the capture is acked once: the hash match finds them all.
    ack = re.search(r"SafeDealer ack \(data frame -&gt; its Ack\)</td><td class=l>safe_dealer.pcap</td><td>([\d,]+)</td>", page)
    assert ack and int(ack.group(1).replace(",", "")) == safe["data_frames"]
    for name in BUNDLED:
        assert f"handshake: Connect -&gt; Connected</td><td class=l>{name}</td>" in page
        assert f"message assembly (first -&gt; last frame)</td><td class=l>{name}</td>" in page


def test_traffic_charts_and_flow_graph(report):
    _, page, _ = report
    assert page.count("frames/s by kind") == len(BUNDLED)
    assert page.count("Control-frame flow") == len(BUNDLED)
    assert ">Connected<" in page and "Heartbeat x" in page


def test_self_contained(report):
    _, page, _ = report
    assert "<script" not in page and " src=" not in page
    assert not re.search(r"""(href|url)\s*[=(]\s*['"]?https?:""", page)


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def test_loads_in_headless_chromium_without_console_errors(report, tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium on PATH (Debian package `chromium`; `make test` installs it when apt is available)")
    _, page, _ = report
    html = tmp_path / "report.html"
    html.write_text(page, encoding="utf-8")
    shot = tmp_path / "shot.png"
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
           f"--user-data-dir={tempfile.mkdtemp(dir=tmp_path)}", "--enable-logging=stderr", "--v=0",
           f"--screenshot={shot}", "--window-size=1400,2000", html.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(tmp_path)})
    console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert console == []
    assert shot.stat().st_size > 50_000  # a rendered page, not a blank one
    from PIL import Image

    image = Image.open(shot).convert("L")
    assert image.size == (1400, 2000)
    # Nothing overflows the 1400 px window: the page keeps a 10 px margin on the right.
    assert image.crop((1392, 0, 1400, 2000)).getextrema()[0] > 230
