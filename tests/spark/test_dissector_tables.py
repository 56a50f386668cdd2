"""The Lua dissector's message reassembly under tshark equals the pipeline's messages/ table on
the bundled captures: the same complete messages (sender, session, id), part sizes and part
bytes (sha256). Skipped, with the reason, when tshark is not installed."""

from __future__ import annotations

import hashlib
import shutil
import subprocess

import pytest

from nbmq.examples import CAPTURE_DIR
from nbmq.wireshark import LUA_DIR

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed (apt-get install tshark)"),
]

FIELDS = ["ip.src", "udp.srcport", "nbmq.session_id", "nbmq.message.id", "nbmq.message.part_size", "nbmq.message.part"]


def _dissected(name: str) -> dict[tuple, tuple]:
    cmd = [
        "tshark",
        "-n",
        "-2",
        "-r",
        str(CAPTURE_DIR / name),
        "-X",
        f"lua_script:{LUA_DIR / 'nbmq.lua'}",
        "-Y",
        "nbmq.message.id",
        "-T",
        "fields",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=,",
    ]
    for field in FIELDS:
        cmd += ["-e", field]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Lua" not in proc.stderr, proc.stderr
    out = {}
    for line in proc.stdout.splitlines():
        src, port, sid, mid, sizes, parts = line.split("\t")
        hashes = iter(hashlib.sha256(bytes.fromhex(p.replace(":", ""))).hexdigest() for p in parts.split(",") if p)
        sizes_list = [int(s) for s in sizes.split(",")]
        digests = [next(hashes) if s else hashlib.sha256(b"").hexdigest() for s in sizes_list]
        out[(f"{src}:{port}", int(sid, 16), int(mid, 16))] = (sizes_list, digests)
    return out


def test_dissector_messages_equal_the_pipeline_table(spark, bundled_run):
    code, out, _ = bundled_run
    assert code == 0
    rows = spark.read.parquet(str(out / "messages")).where("complete").collect()
    for name in ("dealer.pcap", "safe_dealer.pcap", "radio_dish.pcap"):
        table = {
            (r.src, int(r.session_id), int(r.message_id)): (list(r.part_sizes), list(r.part_sha256))
            for r in rows
            if r.capture == name
        }
        assert len(table) > 100
        assert _dissected(name) == table, name
