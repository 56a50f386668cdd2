"""The Spark start of ``nbmq pipeline``: the driver JVM's class-data-sharing archive,
the local heap bound, the driver work done while the JVM launches, and a JVM that cannot start.

Only the tests marked ``spark`` start a JVM (the shared session fixture, or a child process).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from nbmq.spark import spark_session as S  # noqa: E402

MAGIC = (0xF00BABA8).to_bytes(4, "little")


@pytest.fixture
def fake_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A fake java binary and Spark home, and an empty cache directory."""
    java_home = tmp_path / "jdk"
    (java_home / "bin").mkdir(parents=True)
    (java_home / "bin" / "java").write_text("#!/bin/sh\n")
    home = tmp_path / "spark"
    (home / "jars").mkdir(parents=True)
    (home / "jars" / "spark-core.jar").write_text("")
    monkeypatch.setenv("JAVA_HOME", str(java_home))
    monkeypatch.delenv("NBMQ_SPARK_CDS", raising=False)
    return home, tmp_path / "cache"


def test_archive_is_dumped_once_then_used(fake_install: tuple[Path, Path]) -> None:
    home, cache = fake_install
    first = S.class_archive_options(str(home), cache)
    assert "-XX:ArchiveClassesAtExit=" in first and "-Xlog:cds=off" in first
    part = Path(first.split("-XX:ArchiveClassesAtExit=")[1].split()[0])
    assert part.parent == cache and part.name.endswith(f".{os.getpid()}.part")
    part.write_bytes(b"\0" * 64)  # the JVM is writing it (header last): no second dump meanwhile
    assert S.class_archive_options(str(home), cache) == ""
    part.write_bytes(MAGIC + b"\0" * 60)  # header written: the next start renames and maps it
    used = S.class_archive_options(str(home), cache)
    final = part.with_name(part.name.split(".")[0] + ".jsa")
    assert used.startswith(f"-XX:SharedArchiveFile={final} ") and final.is_file() and not part.exists()
    assert S.class_archive_options(str(home), cache) == used


def test_archive_stale_parts_and_copies_are_removed(fake_install: tuple[Path, Path]) -> None:
    home, cache = fake_install
    part = Path(S.class_archive_options(str(home), cache).split("=")[1].split()[0])
    part.write_bytes(b"\0" * 64)
    old = time.time() - 2 * S._CDS_STALE_S
    os.utime(part, (old, old))  # its JVM died mid-dump
    again = S.class_archive_options(str(home), cache)
    assert "ArchiveClassesAtExit" in again and not part.exists()
    done = Path(again.split("=")[1].split()[0])
    done.write_bytes(MAGIC)
    copy = done.with_name(done.name.replace(f".{os.getpid()}.", ".1."))
    copy.write_bytes(MAGIC)  # two runs dumped at once: one becomes the archive, the other goes
    assert "SharedArchiveFile" in S.class_archive_options(str(home), cache)
    assert [p.suffix for p in cache.iterdir()] == [".jsa"]


def test_archive_key_follows_the_jars_and_can_be_turned_off(
    fake_install: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    home, cache = fake_install
    before = S.class_archive_options(str(home), cache)
    (home / "jars" / "spark-sql.jar").write_text("")  # an upgrade: another archive, never the old one
    after = S.class_archive_options(str(home), cache)
    assert before.split("=")[1].split(".")[0] != after.split("=")[1].split(".")[0]
    monkeypatch.setenv("NBMQ_SPARK_CDS", "0")
    assert S.class_archive_options(str(home), cache) == ""
    monkeypatch.setenv("NBMQ_SPARK_CDS", "1")
    monkeypatch.setenv("JAVA_HOME", str(cache / "nowhere"))
    monkeypatch.setenv("PATH", "")
    assert S.class_archive_options(str(home), cache) == ""  # no java: nothing to archive


@pytest.mark.parametrize(
    "master, cores",
    [
        ("local", 1),
        ("local[2]", 2),
        ("local[3,2]", 3),
        ("local-cluster[2,3,1024]", 6),
        ("spark://h:7077", None),
        (None, None),
    ],
)
def test_cores_of_master(master: str | None, cores: int | None) -> None:
    assert S.cores_of_master(master) == cores
    assert S.cores_of_master("local[2]", {"spark.default.parallelism": "5"}) == 5


def test_local_heap_bound_and_yours_wins() -> None:
    assert S.local_driver_memory(2) == "640m" and S.local_driver_memory(1) == "512m"
    local = S.session_settings("local[2]")
    assert local["spark.driver.memory"] == "640m"
    assert "-XX:MaxDirectMemorySize=1g" in local["spark.driver.extraJavaOptions"]
    assert "-XX:TieredStopAtLevel=1" in local["spark.driver.extraJavaOptions"]  # a quick start
    assert S.session_settings("local[2]", {"spark.driver.memory": "3g"})["spark.driver.memory"] == "3g"
    for master in ("local-cluster[2,1,1024]", "spark://h:7077"):  # the driver runs no task there
        assert "spark.driver.memory" not in S.session_settings(master)
        assert "TieredStopAtLevel" not in S.session_settings(master)["spark.driver.extraJavaOptions"]


def test_prestart_walks_and_reraises(monkeypatch: pytest.MonkeyPatch) -> None:
    from nbmq.capture.dpkt_extra import DpktMissing
    from nbmq.capture.tcp import segments
    from nbmq.examples import CAPTURE_DIR, bundled_captures
    from nbmq.spark import datasource
    from nbmq.spark.prestart import Prestart

    streams = sorted(str(p) for p in (CAPTURE_DIR.parent / "streams").rglob("*.pcap"))
    udp = [str(p) for p in bundled_captures()]
    assert streams and udp
    with Prestart(udp + streams, split=lambda: 4096, tcp_ports={"rqueue": [6567], "bqsp": None}, report=False) as prep:
        found = prep.with_traffic("rqueue")
        with pytest.raises(KeyError):
            prep.with_traffic("bqsp")  # no ports: not looked for
    assert found and set(found) <= set(streams) and not set(found) & set(udp)
    planned = {key[0] for key in datasource._PLANNED if key[1] == 4096}
    assert set(udp) <= planned  # the bundled pcaps are > 4 KiB: planned into ranges, kept
    assert datasource._plan(udp[0], 4096) == datasource._plan_now(udp[0], 4096)

    def missing(*a: object, **k: object) -> bool:
        raise DpktMissing("decoding TCP segments")

    monkeypatch.setattr(segments, "has_tcp_traffic", missing)
    with Prestart(streams, split=None, tcp_ports={"rqueue": [6567]}, report=False) as prep:
        with pytest.raises(DpktMissing):  # not a silent "no traffic"
            prep.with_traffic("rqueue")


@pytest.mark.spark
def test_the_shared_session_has_the_bounds(spark) -> None:  # type: ignore[no-untyped-def]
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.driver.memory") == S.local_driver_memory(2)
    assert "-XX:MaxDirectMemorySize=1g" in conf.get("spark.driver.extraJavaOptions")


@pytest.mark.spark
def test_a_jvm_that_cannot_start_is_a_clear_error(tmp_path: Path) -> None:
    from nbmq.examples import bundled_captures

    capture = str(bundled_captures()[0])
    env = dict(os.environ, JAVA_HOME=str(tmp_path / "no-jdk"), NBMQ_SPARK_CDS="0")
    env.pop("PYSPARK_GATEWAY_PORT", None)
    code = (
        "from nbmq.spark.pipeline import run; "
        f"run([{capture!r}], {str(tmp_path / 'out')!r}, master='local[1]', progress=False)"
    )
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "JAVA_GATEWAY_EXITED" in proc.stderr or "Java gateway process exited" in proc.stderr
    assert time.monotonic() - started < 120  # the driver's own work never holds it up
