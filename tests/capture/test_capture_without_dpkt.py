"""Reading captures with dpkt hidden: classic pcap needs no dpkt, the rest says so.

Each case runs in a fresh interpreter whose ``sys.meta_path`` refuses ``dpkt`` (as on a machine
without the ``capture`` extra), once per codec twin.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from nbmq.capture import read_datagrams
from nbmq.examples import CAPTURE_DIR
from nbmq.examples.streams import stream_captures

BUNDLED_PCAPS = ("dealer.pcap", "safe_dealer.pcap", "radio_dish.pcap")
RQUEUE_PCAP = next(p for p in stream_captures() if p.name == "rqueue.pcap")
REPO = Path(__file__).resolve().parents[2]

BLOCKER = """
import sys
class _NoDpkt:
    def find_spec(self, name, path=None, target=None):
        if name == "dpkt" or name.startswith("dpkt."):
            raise ModuleNotFoundError("No module named 'dpkt' (hidden by the test)", name="dpkt")
        return None
sys.meta_path.insert(0, _NoDpkt())
"""


def _run(body: str, twin: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    env["NBMQ_NO_EXTENSIONS"] = "1" if twin == "python" else "0"
    return subprocess.run(
        [sys.executable, "-c", BLOCKER + body, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def _pcap(frames: list[bytes]) -> bytes:
    """A classic little-endian microsecond pcap of Ethernet frames."""
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for i, f in enumerate(frames):
        out.append(struct.pack("<IIII", 1_700_000_000 + i, 0, len(f), len(f)) + f)
    return b"".join(out)


TWINS = pytest.mark.parametrize("twin", ["compiled", "python"])


@TWINS
def test_classic_pcap_reads_without_dpkt(twin: str) -> None:
    paths = [str(CAPTURE_DIR / name) for name in BUNDLED_PCAPS]
    body = """
import hashlib, json, sys
from nbmq.capture import read_datagrams
from nbmq.capture.tcp import has_tcp_traffic
out = {}
for p in sys.argv[1:]:
    b = read_datagrams(p)
    out[p] = [len(b), b.errors, b.fallback_rows, hashlib.sha256(bytes(b.payload)).hexdigest(), has_tcp_traffic(p, None)]
assert "dpkt" not in sys.modules
print(json.dumps(out))
"""
    proc = _run(body, twin, *paths)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    for p in paths:  # the same datagrams as a read with dpkt at hand
        b = read_datagrams(p)
        assert got[p][:4] == [len(b), b.errors, b.fallback_rows, hashlib.sha256(bytes(b.payload)).hexdigest()]
        assert len(b) > 0 and got[p][4] is False


@TWINS
def test_what_needs_dpkt_raises_dpkt_missing(twin: str, tmp_path: Path, pkt) -> None:
    mpls = tmp_path / "mpls.pcap"  # an MPLS frame: the fast path leaves it to dpkt
    mpls.write_bytes(_pcap([pkt.eth(pkt.ipv4(pkt.udp(b"\x01\x02")), ethertype=0x8847)]))
    body = """
import sys
from nbmq.capture import DpktMissing, read_datagrams
from nbmq.capture.tcp import has_tcp_traffic
for p, engine in ((sys.argv[1], "auto"), (sys.argv[2], "auto"), (sys.argv[3], "dpkt"), (sys.argv[4], "tcp")):
    try:
        has_tcp_traffic(p, [6567]) if engine == "tcp" else read_datagrams(p, engine=engine)
    except DpktMissing as exc:
        assert exc.name == "dpkt" and "nbmq[capture]" in str(exc), exc
        print("missing:", exc)
    else:
        print("read", p)
"""
    proc = _run(
        body, twin, str(mpls), str(CAPTURE_DIR / "dealer.pcapng"), str(CAPTURE_DIR / "dealer.pcap"), str(RQUEUE_PCAP)
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 4 and all(line.startswith("missing: ") for line in lines), proc.stdout
    assert "fast path leaves aside" in lines[0] and "pcapng" in lines[1] and "dpkt engine" in lines[2]
    assert "TCP segments" in lines[3]  # the probe says so rather than answer "no TCP traffic"


def test_decode_command_without_dpkt() -> None:
    body = "import sys\nfrom nbmq.cli import main\nsys.exit(main(['decode', *sys.argv[1:]]))"
    ok = _run(body, "compiled", str(CAPTURE_DIR / "dealer.pcap"))
    assert ok.returncode == 0, ok.stderr
    assert "dealer.pcap:" in ok.stdout and " datagrams, 0 malformed" in ok.stdout
    both = _run(body, "compiled", str(CAPTURE_DIR / "dealer.pcapng"), str(CAPTURE_DIR / "dealer.pcap"))
    assert both.returncode == 2  # the pcapng needs dpkt: said on stderr, the pcap still read
    assert "dealer.pcapng: error: " in both.stderr and "nbmq[capture]" in both.stderr
    assert "dealer.pcap:" in both.stdout
    tcp = _run(body, "compiled", str(RQUEUE_PCAP))
    assert tcp.returncode == 2 and "rqueue.pcap: error: " in tcp.stderr and "nbmq[capture]" in tcp.stderr
