"""The pipeline's tables on the bundled captures against the manifest."""

from __future__ import annotations

from decimal import Decimal

import pytest

BUNDLED = ["dealer.pcap", "radio_dish.pcap", "safe_dealer.pcap"]

pytestmark = pytest.mark.spark

DIRECTIONAL = {"data": "data", "heartbeat": "heartbeats", "ack": "acks", "disconnected": "disconnected"}


def _capture(manifest: dict, name: str) -> dict:
    return next(c for c in manifest["captures"] if c["file"] == name)


def _deliveries(cap: dict):
    addr = {p["name"]: p["addr"] for p in cap["peers"]}
    for sender, messages in cap["messages_sent"].items():
        for m in messages:
            for d in m.get("deliveries", [m]):
                yield {
                    "src": addr[sender],
                    "session_id": d["session_id"],
                    "message_id": d["message_id"],
                    "part_sizes": m["part_sizes"],
                    "part_sha256": m["part_sha256"],
                    "in_capture": d["in_capture"],
                    "frames": d["frames_in_capture"],
                    "duplicates": d["frames_in_capture"] - d.get("unique_frames_in_capture", d["frames_in_capture"]),
                }


def test_cli_exit_code_and_outputs(bundled_run):
    code, out, stdout = bundled_run
    assert code == 0
    for table in ("frames", "messages", "sessions"):
        assert list((out / table).glob("*.parquet")), table
    report = (out / "report.html").read_text()
    assert report.count("<svg") >= 3 and "nbmq traffic report" in report
    assert (out / "summary.json").exists()


@pytest.mark.parametrize("name", BUNDLED)
def test_messages_match_manifest(spark, bundled_run, manifest, name):
    _, out, _ = bundled_run
    cap = _capture(manifest, name)
    rows = spark.read.parquet(str(out / "messages")).where(f"capture = '{name}'").collect()
    got = {(int(r.session_id), r.src, int(r.message_id)): r for r in rows}
    want = {(d["session_id"], d["src"], d["message_id"]): d for d in _deliveries(cap) if d["in_capture"] == "complete"}
    complete = {k for k, r in got.items() if r.complete}
    assert complete == set(want)
    for key, d in want.items():
        r = got[key]
        assert list(r.part_sizes) == d["part_sizes"]
        assert list(r.part_sha256) == d["part_sha256"]
        assert r.missing_bytes == 0 and r.rejected == 0
        assert r.frames == d["frames"] and r.duplicates == d["duplicates"]
        assert r.message_size == sum(d["part_sizes"]) and r.part_count == len(d["part_sizes"])


@pytest.mark.parametrize("name", BUNDLED)
def test_sessions_match_manifest(spark, bundled_run, manifest, name):
    _, out, _ = bundled_run
    cap = _capture(manifest, name)
    rows = spark.read.parquet(str(out / "sessions")).where(f"capture = '{name}'").collect()
    server = next(p for p in cap["peers"] if p["mode"] == "bind")
    clients = [p for p in cap["peers"] if p["mode"] == "connect"]
    by_id = {int(r.session_id): r for r in rows}
    assert len(rows) == sum(len(p["session_ids"]) for p in clients)
    counts = cap["datagrams"]["by_direction"]
    for peer in clients:
        (sid,) = peer["session_ids"]
        r = by_id[sid]
        assert isinstance(r.session_id, Decimal)
        assert (r.client, r.server) == (peer["addr"], server["addr"])
        up = counts[f"{peer['name']}->{server['name']}"]
        down = counts[f"{server['name']}->{peer['name']}"]
        assert r.frames_c2s == up["total"] and r.frames_s2c == down["total"]
        assert r.connects == up.get("connect", 0) + down.get("connect", 0)
        assert r.connecteds == up.get("connected", 0) + down.get("connected", 0)
        for kind, col in DIRECTIONAL.items():
            assert getattr(r, f"{col}_c2s") == up.get(kind, 0), (kind, "c2s")
            assert getattr(r, f"{col}_s2c") == down.get(kind, 0), (kind, "s2c")
        assert r.connect_ts <= r.connected_ts <= r.first_heartbeat_ts
        assert r.duration_s > 0 and r.throughput_bytes_per_s > 0
        # every manifest message of this session is counted complete on its way
        for way, src in (("c2s", peer["addr"]), ("s2c", server["addr"])):
            n = sum(1 for d in _deliveries(cap) if d["session_id"] == sid and d["src"] == src)
            assert getattr(r, f"messages_complete_{way}") == n
            assert getattr(r, f"messages_incomplete_{way}") == 0


def test_frames_match_manifest_counts(spark, bundled_run, manifest):
    _, out, _ = bundled_run
    frames = spark.read.parquet(str(out / "frames"))
    got = {(r.capture, r.kind_name): r["count"] for r in frames.groupBy("capture", "kind_name").count().collect()}
    for name in BUNDLED:
        cap = _capture(manifest, name)
        for kind, n in cap["datagrams"]["by_type"].items():
            assert got[(name, kind)] == n, (name, kind)
        assert sum(v for (c, _), v in got.items() if c == name) == cap["datagrams"]["total"]
    assert frames.where("error IS NOT NULL").count() == 0


def test_summary_printed(bundled_run):
    code, out, _ = bundled_run
    import json

    summary = json.loads((out / "summary.json").read_text())
    assert [c["capture"] for c in summary["captures"]] == sorted(BUNDLED)
    assert summary["totals"]["messages_complete"] == 2200
    assert summary["totals"]["error_rows"] == 0
