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
    section = page[page.index("Queues: request") : page.index("bqsp error rows")]
    rows = re.findall(
        r"<tr><td class=l>bqsp.pcap</td><td class=l>([^<]+)</td><td>(\d+)</td><td>(\d+)</td><td>(\d+)</td>", section
    )
    assert len(rows) == 7 and all(req == rsp for _, _, req, rsp in rows)


def test_latency_rows(report):
    summary, page, _ = report
    safe = next(r for r in summary["captures"] if r["capture"] == "safe_dealer.pcap")
    # Every SafeDealer data frame in the capture is acked once: the hash match finds them all.
    ack = re.search(
        r"SafeDealer ack \(data frame -&gt; its Ack\)</td><td class=l>safe_dealer.pcap</td><td>([\d,]+)</td>", page
    )
    assert ack and int(ack.group(1).replace(",", "")) == safe["data_frames"]
    for name in BUNDLED:
        assert f"handshake: Connect -&gt; Connected</td><td class=l>{name}</td>" in page
        assert f"message assembly (first -&gt; last frame)</td><td class=l>{name}</td>" in page


def test_round_trips_per_peer(report):
    """The SafeDealer capture's round trips per direction, as a loop over its datagrams finds
    them (each data frame's first copy -> the first Ack carrying its hash): the server
    (127.0.0.1:47102) sends 797 acked data frames, 10 us at least, median 36 us, p99 253 us;
    the client 1,017, 8 us, 110 us, 401 us. Quantiles from the 2.3%-wide buckets."""
    summary, page, _ = report
    rows = {r["direction"]: r for r in summary["round_trips"] if r["capture"] == "safe_dealer.pcap"}
    assert set(rows) == {"c2s", "s2c"} and len(summary["round_trips"]) == 2  # no other capture acks
    want = {"s2c": (797, 10e-6, 36e-6, 253e-6), "c2s": (1017, 8e-6, 110e-6, 401e-6)}
    for direction, (acks, low, median, p99) in want.items():
        r = rows[direction]
        assert r["session_id"] == "0x4aaad9f876ffbc2f" and r["acks"] == acks
        assert r["min_s"] == pytest.approx(low, rel=1e-9)
        assert r["p50_s"] == pytest.approx(median, rel=0.025) and r["p99_s"] == pytest.approx(p99, rel=0.025)
    safe = next(r for r in summary["captures"] if r["capture"] == "safe_dealer.pcap")
    assert sum(r["acks"] for r in rows.values()) == safe["data_frames"]
    section = page[page.index("SafeDealer round trips per peer") :]
    assert "<td class=l>safe_dealer.pcap</td><td class=l><span class=id>0x4aaad9f876ffbc2f</span></td>" in section
    assert "<td>1,017</td>" in section and "<td>797</td>" in section


def test_traffic_charts_and_flow_graph(report):
    _, page, _ = report
    data = _chart_data(page)
    titles = [c["title"] for c in data["charts"]]
    assert titles.count("frames/s by kind (c2s solid, s2c dashed)") == len(BUNDLED)
    assert sum(t.startswith("session timeline") for t in titles) == len(BUNDLED)
    assert page.count("Control-frame flow") == len(BUNDLED)
    assert ">Connected<" in page and "Heartbeat x" in page
    for chart in data["charts"]:
        assert all(len(s["values"]) == len(chart["x"]["values"]) for s in chart["series"]), chart["title"]
        xs = chart["x"]["values"]
        assert xs == sorted(xs), chart["title"]


def test_expert_info_section(report):
    _, page, _ = report
    assert "<h2 id=expert>Expert info</h2>" in page
    assert "href='#expert'" in page


def _chart_data(page: str) -> dict:
    import json

    m = re.search(r"<script type='application/json' id='nbmq-report-data'>(.*?)</script>", page, re.S)
    assert m, "the chart data is embedded in the page"
    return json.loads(m.group(1))


def test_self_contained(report):
    _, page, _ = report
    assert "<script src" not in page and "<link" not in page and " src=" not in page
    assert not re.search(r"""(href|url)\s*[=(]\s*['"]?https?:""", page)
    assert "uPlot" in page and "nbmqCharts" in page  # the drawing code ships inside the page


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


#: Runs before the page's scripts: records uncaught errors and console.error calls.
_CATCH = (
    "<script>window.__errors=[];window.addEventListener('error',function(e){__errors.push(String(e.message))});"
    "var __ce=console.error;console.error=function(){__errors.push([].slice.call(arguments).join(' '));"
    "__ce.apply(console,arguments)};</script>"
)
#: Run after them: zoom the first chart of a capture with several charts to the middle of its x
#: range (as a drag does); then, once uPlot has committed (between two scripts the browser runs
#: its microtasks), write every chart's x range before and after into the page.
_ZOOM = """<script>(function(){
var cs=window.nbmqCharts||[],by={};
cs.forEach(function(u){if(u._nbmqGroup)(by[u._nbmqGroup]=by[u._nbmqGroup]||[]).push(u);});
var g=Object.keys(by).filter(function(k){return by[k].length>2;})[0],grp=by[g]||[];
var range=function(u){return [u.scales.x.min,u.scales.x.max];};
var u0=grp[0],lo=u0.scales.x.min,hi=u0.scales.x.max,want=[lo+(hi-lo)*0.25,lo+(hi-lo)*0.5];
window.__zoom={group:g,grp:grp,range:range,want:want,before:grp.map(range)};
u0.setScale('x',{min:want[0],max:want[1]});
})();</script><script>(function(){
var z=window.__zoom,cs=window.nbmqCharts||[];
var out={errors:__errors,charts:cs.length,canvases:document.querySelectorAll('.uplot canvas').length,group:z.group,
want:z.want,before:z.before,after:z.grp.map(z.range),overflow:document.documentElement.scrollWidth>window.innerWidth};
var pre=document.createElement('pre');pre.id='nbmq-check';pre.textContent=JSON.stringify(out);document.body.appendChild(pre);
})();</script>"""


def _browser(browser: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={tempfile.mkdtemp(dir=tmp_path)}",
        "--enable-logging=stderr",
        "--v=0",
        "--window-size=1400,2000",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(tmp_path)})


def test_charts_draw_and_zoom_together_in_headless_chromium(report, tmp_path):
    """The page loads without console errors, every chart draws, and a zoom in one chart sets
    the same x range in every chart of its capture."""
    import json

    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium on PATH (Debian package `chromium`; `make test` installs it when apt is available)")
    _, page, _ = report
    html = tmp_path / "report.html"
    html.write_text(
        page.replace("<head>", "<head>" + _CATCH, 1).replace("</body>", _ZOOM + "</body>"), encoding="utf-8"
    )
    proc = _browser(browser, tmp_path, "--dump-dom", html.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = re.search(r"<pre id=\"nbmq-check\">(.*?)</pre>", proc.stdout, re.S)
    assert m, "the check script ran: " + proc.stderr[-2000:]
    out = json.loads(m.group(1).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
    assert out["errors"] == []
    assert out["charts"] == len(_chart_data(page)["charts"]) and out["canvases"] >= out["charts"]
    assert out["group"] in BUNDLED and len(out["after"]) >= 3
    for before, after in zip(out["before"], out["after"]):
        assert after != before
        assert after == pytest.approx(out["want"])
    assert out["overflow"] is False  # nothing wider than the 1400 px window


def test_renders_in_headless_chromium(report, tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium on PATH (Debian package `chromium`; `make test` installs it when apt is available)")
    _, page, _ = report
    html = tmp_path / "report.html"
    html.write_text(page, encoding="utf-8")
    shot = tmp_path / "shot.png"
    proc = _browser(browser, tmp_path, f"--screenshot={shot}", html.as_uri())
    console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert console == []
    assert shot.stat().st_size > 50_000  # a rendered page, not a blank one
