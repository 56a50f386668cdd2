"""benchmarks/bench_scale.py at tiny size, so the script cannot rot.

No Spark: the generated capture is read back with the capture reader and the codec, and the
measuring code runs short Python commands instead of ``nbmq pipeline``.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # type: ignore[union-attr]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    gen = _load("scale_capture")
    path = tmp_path_factory.mktemp("scale") / "tiny.pcap"
    # three blocks (the appended ones drop their file header), 1 ms apart: 2 s, so heartbeats too
    info = gen.generate(path, 2000, block=700, spacing_ns=1_000_000)
    return path, info


def test_generated_capture_holds_the_traffic_it_promises(capture: tuple[Path, object]) -> None:
    from nbmq import codec
    from nbmq.capture import read_datagrams

    path, info = capture
    b = read_datagrams(str(path))
    assert b.errors == 0 and len(b) == info.datagrams  # type: ignore[attr-defined]
    assert 2000 <= info.datagrams <= 2020 and info.bytes == path.stat().st_size  # type: ignore[attr-defined]
    assert np.all(np.diff(b.timestamp_ns) >= 0)  # blocks appended in time order
    rows = codec.parse_frames(b.payload, b.offsets, b.lengths)
    assert np.all(rows["error"] == 0)
    kinds = set(rows["kind"].tolist())
    assert kinds == {0, 1, 2, 4, 5}  # data, Connect, Connected, Heartbeat, Ack
    data = rows[rows["kind"] == 0]
    assert data["part_count"].max() == 1 and (data["chunk_offset"] > 0).any()  # multi-chunk messages
    # every Ack carries the hash of a data frame of the capture (SafeDealer, seed 000)
    view = memoryview(b.payload)
    frames = {
        codec.ack_hash(view[o : o + n])
        for o, n, k in zip(b.offsets.tolist(), b.lengths.tolist(), rows["kind"].tolist())
        if k == 0
    }
    acks = [
        int.from_bytes(view[o + 10 : o + 18], "big")
        for o, k in zip(b.offsets.tolist(), rows["kind"].tolist())
        if k == 5
    ]
    assert acks and all(h in frames for h in acks)
    # Connect carries session id 0; the rest name their session
    assert set(rows["session_id"][rows["kind"] == 1].tolist()) == {0}
    assert 0 not in set(data["session_id"].tolist())


def test_generation_is_deterministic_and_cached_whole(capture: tuple[Path, object], tmp_path: Path) -> None:
    gen = _load("scale_capture")
    path, _ = capture
    again = tmp_path / "again.pcap"
    gen.generate(again, 2000, block=700, spacing_ns=1_000_000)
    assert again.read_bytes() == path.read_bytes()
    assert not list(tmp_path.glob("*.part")) and not list(tmp_path.glob("*.block"))
    with pytest.raises(ValueError):
        gen.generate(tmp_path / "none.pcap", 0)


def test_measure_reports_time_and_peak_memory_of_the_process_tree() -> None:
    bench = _load("bench_scale")
    # a parent holding ~40 MiB and a child holding ~80 MiB, both alive for ~0.8 s
    child = "x = bytearray(80 << 20); import time; time.sleep(0.8)"
    parent = (
        f"import subprocess, sys; x = bytearray(40 << 20); "
        f"p = subprocess.Popen([sys.executable, '-c', {child!r}]); p.wait()"
    )
    m = bench.measure([sys.executable, "-c", parent], interval=0.1, timeout=60)
    assert m.returncode == 0 and 0.5 < m.seconds < 30 and m.samples >= 3
    assert m.roles["driver"] >= 40 << 20
    assert m.roles["workers"] >= 80 << 20
    assert m.peak >= 120 << 20 and m.roles["jvm"] == 0
    failed = bench.measure([sys.executable, "-c", "raise SystemExit(3)"], timeout=60)
    assert failed.returncode == 3


def test_measure_kills_a_command_past_its_timeout() -> None:
    bench = _load("bench_scale")
    with pytest.raises(subprocess.TimeoutExpired):
        bench.measure([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)


def test_commands_name_the_pipeline_and_the_same_fields(capture: tuple[Path, object], tmp_path: Path) -> None:
    bench = _load("bench_scale")
    path, info = capture
    cmd = bench.pipeline_command([path], tmp_path / "out", "local[2]")
    assert cmd[1:4] == ["-m", "nbmq.cli", "pipeline"] and cmd[cmd.index("--master") + 1] == "local[2]"
    tshark = shutil.which("tshark")
    if tshark is None:
        pytest.skip("tshark not installed")
    lua = Path(__file__).resolve().parent.parent / "nbmq" / "wireshark" / "nbmq.lua"
    out = tmp_path / "fields.tsv"
    with open(out, "wb") as f:
        m = bench.measure(bench.tshark_command(tshark, path, lua), stdout=f, timeout=120)
    assert m.returncode == 0 and m.peak > 0
    lines = out.read_text().splitlines()
    assert len(lines) == info.datagrams  # type: ignore[attr-defined]
    kind = bench.LUA_FIELDS.index("nbmq.kind")
    assert {line.split("\t")[kind] for line in lines} == {"0", "1", "2", "4", "5"}
