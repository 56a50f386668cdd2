"""Frames-table throughput of the ``nbmq`` Spark data source, against a per-row Python UDF.

Generates a classic pcap of N nbmq data-frame datagrams (default 1,000,000; messages of 1..1400
bytes, so one or several frames each) with the capture writer, starts a local[2] session, warms
it up on a bundled capture, then times (median of --repeat runs, start-up excluded):

- ``nbmq source``: ``spark.read.format("nbmq").load(CAPTURE).selectExpr("count(*)",
  "sum(chunk_size)")``, without and with the ``payload`` column;
- ``raw read``: the same capture reader yielding undecoded datagrams (the floor: no decoding);
- ``UDF baseline``: the raw datagrams decoded per row by a Python UDF with ``struct`` (ids as
  signed longs, which flatters the baseline: no u64 handling);
- with ``--pipeline`` or when ``tshark`` is on PATH: the whole pipeline (frames, messages,
  sessions to Parquet) beside ``tshark -r CAPTURE -T fields`` extracting the same fields.

Run: ``python benchmarks/bench_pipeline.py [--datagrams N] [--repeat 3] [--capture PATH]``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TARGET_FPS = 1_500_000
TARGET_RATIO = 5.0


def generate(path: Path, datagrams: int, seed: int = 1) -> tuple[int, int]:
    """Write ``datagrams`` data frames (whole messages, last one cut short) to a pcap."""
    from nbmq import codec
    from nbmq.capture import DatagramBatch, write_pcap

    rng = np.random.default_rng(seed)
    pattern = (np.arange(8192) % 251).astype(np.uint8)
    buffers, offsets, lengths = [], [], []
    n = messages = base = 0
    while n < datagrams:
        size = int(rng.integers(1, 1400))
        sharded = codec.shard_message([pattern[:size]], 0xF000000000000000 + messages % 64, messages)
        k = min(len(sharded.offsets), datagrams - n)
        buffers.append(sharded.buffer)
        offsets.append(sharded.offsets[:k] + base)
        lengths.append(sharded.lengths[:k])
        base += len(sharded.buffer)
        n += k
        messages += 1
    ts = 1_700_000_000_000_000_000 + np.arange(n, dtype=np.int64) * 1000
    batch = DatagramBatch(
        timestamp=ts / 1e9,
        timestamp_ns=ts,
        src_addr=np.array(["10.0.0.1"] * n, dtype=object),
        dst_addr=np.array(["10.0.0.2"] * n, dtype=object),
        src_port=np.full(n, 40000, np.uint16),
        dst_port=np.full(n, 7000, np.uint16),
        payload=np.concatenate(buffers),
        offsets=np.concatenate(offsets),
        lengths=np.concatenate(lengths).astype(np.int32),
        frame_number=np.arange(1, n + 1, dtype=np.int64),
        truncated=np.zeros(n, bool),
    )
    write_pcap(path, batch)
    return n, messages


# A data source of undecoded datagrams, for the baseline. Defined here (in __main__), so Spark
# ships it to the workers by value with cloudpickle.
from pyspark.sql.datasource import DataSource, DataSourceReader  # noqa: E402


class RawDatagrams(DataSource):
    @classmethod
    def name(cls) -> str:
        return "nbmq_raw_bench"

    def schema(self) -> str:
        return "frame_number long, datagram binary"

    def reader(self, schema):  # type: ignore[no-untyped-def]
        return _RawReader(self.options)


class _RawReader(DataSourceReader):
    def __init__(self, options) -> None:  # type: ignore[no-untyped-def]
        self.path = options["path"]
        self.split = int(options.get("split_bytes", 64 << 20))

    def partitions(self):  # type: ignore[no-untyped-def]
        from nbmq.spark.datasource import _plan

        return _plan(self.path, self.split)

    def read(self, partition):  # type: ignore[no-untyped-def]
        import pyarrow as pa

        from nbmq.capture import read_datagrams
        from nbmq.spark.datasource import _gather

        b = read_datagrams(partition.path, start=partition.start, end=partition.end, first_frame=partition.first_frame)
        step = 65536
        for lo in range(0, len(b), step):
            hi = min(len(b), lo + step)
            yield pa.RecordBatch.from_arrays(
                [pa.array(b.frame_number[lo:hi]), _gather(b.payload, b.offsets[lo:hi], b.lengths[lo:hi])],
                names=["frame_number", "datagram"],
            )


def _udf_decode(datagram: bytes):  # type: ignore[no-untyped-def]
    import struct

    if len(datagram) < 2 or datagram[0] != 1:
        return None
    if datagram[1] == 0 and len(datagram) >= 34:
        v, k, sid, mid, pc, pi, ms, ps, cs, co = struct.unpack_from(">BBqqBBIIHI", datagram)
        return (k, sid, mid, pc, pi, ms, ps, cs, co)
    if len(datagram) >= 10:
        v, k, sid = struct.unpack_from(">BBq", datagram)
        return (k, sid, None, None, None, None, None, None, None)
    return None


def _time(fn, repeat: int) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    times = []
    result = None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datagrams", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs of each query first (JIT)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--capture", type=Path, help="reuse (or create) this capture file")
    parser.add_argument(
        "--split-mb", type=float, default=0, help="split size (default: one range per core, as nbmq pipeline plans it)"
    )
    parser.add_argument("--pipeline", action="store_true", help="also time the whole pipeline")
    parser.add_argument("--no-udf", action="store_true", help="skip the UDF baseline")
    args = parser.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    from nbmq import codec
    from nbmq.examples import CAPTURE_DIR
    from nbmq.spark.spark_session import build_session

    console = Console(stderr=True)
    tmp = Path(tempfile.mkdtemp(prefix="nbmq-bench-"))
    capture = args.capture or tmp / "bench.pcap"
    try:
        if not capture.exists():
            with console.status(f"writing {args.datagrams:,} datagrams to {capture}"):
                t = time.perf_counter()
                n, messages = generate(capture, args.datagrams)
                console.print(
                    f"capture: {n:,} datagrams, {messages:,} messages, "
                    f"{capture.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - t:.1f} s"
                )
        size = capture.stat().st_size
        with console.status("starting Spark"):
            t = time.perf_counter()
            spark = build_session(args.master, app_name="nbmq-bench")
            spark.dataSource.register(RawDatagrams)
            cores = spark.sparkContext.defaultParallelism
            split = int(args.split_mb * 2**20) if args.split_mb else max(1 << 20, -(-size // cores))
            small = str(CAPTURE_DIR / "dealer.pcap")
            spark.read.format("nbmq").load(small).selectExpr("count(*)", "sum(chunk_size)").collect()
            spark.read.format("nbmq_raw_bench").load(small).count()
            console.print(
                f"Spark {spark.version} on {spark.sparkContext.master} ({cores} cores), codec "
                f"{'cython' if codec.COMPILED else 'python'}, split {split / 2**20:.1f} MiB; start-up "
                f"{time.perf_counter() - t:.1f} s (excluded)"
            )

        from pyspark.sql import functions as F
        from pyspark.sql.types import IntegerType, LongType, StructField, StructType

        tiny = tmp / "tiny.pcap"
        generate(tiny, 1)

        def source(payload: bool, path: str):  # type: ignore[no-untyped-def]
            def q():  # type: ignore[no-untyped-def]
                df = (
                    spark.read.format("nbmq")
                    .option("payload", str(payload).lower())
                    .option("split_bytes", str(split))
                    .load(path)
                )
                return df.selectExpr("count(*)", "sum(chunk_size)").first()

            return q

        def raw(path: str):  # type: ignore[no-untyped-def]
            def q():  # type: ignore[no-untyped-def]
                df = spark.read.format("nbmq_raw_bench").option("split_bytes", str(split)).load(path)
                return df.selectExpr("count(*)", "sum(length(datagram))").first()

            return q

        header = StructType(
            [
                StructField("kind", IntegerType()),
                StructField("session_id", LongType()),
                StructField("message_id", LongType()),
                StructField("part_count", IntegerType()),
                StructField("part_index", IntegerType()),
                StructField("message_size", LongType()),
                StructField("part_size", LongType()),
                StructField("chunk_size", IntegerType()),
                StructField("chunk_offset", LongType()),
            ]
        )
        decode = F.udf(_udf_decode, header)

        def udf(path: str):  # type: ignore[no-untyped-def]
            def q():  # type: ignore[no-untyped-def]
                df = spark.read.format("nbmq_raw_bench").option("split_bytes", str(split)).load(path)
                return df.select(decode("datagram").alias("h")).selectExpr("count(*)", "sum(h.chunk_size)").first()

            return q

        # (label, median s, rows, median s of the same query on a one-datagram capture)
        results: list[tuple[str, float, int, float | None]] = []
        cases = [
            ("nbmq source, payload=false", lambda p: source(False, p)),
            ("nbmq source, with payload", lambda p: source(True, p)),
            ("raw read (capture reader, no decode)", raw),
        ]
        if not args.no_udf:
            cases.append(("UDF baseline (struct per row)", udf))
        for label, make in cases:
            with console.status(f"timing {label}"):
                for _ in range(args.warmup):  # the JVM compiles the row conversion while it runs
                    make(str(capture))()
                fixed, _ = _time(make(str(tiny)), args.repeat)
                median, row = _time(make(str(capture)), args.repeat)
            results.append((label, median, int(row[0]), fixed))  # type: ignore[index]
            console.print(
                f"{label}: median {median:.2f} s (fixed per-query cost {fixed:.2f} s), "
                f"rows {row[0]:,}, check {row[1]:,}"
            )  # type: ignore[index]
        path = str(capture)

        if args.pipeline or shutil.which("tshark"):
            from nbmq.spark.pipeline import run

            out = tmp / "out"
            with console.status("timing the whole pipeline"):

                def whole():  # type: ignore[no-untyped-def]
                    return run(
                        [path], out, spark=spark, split_bytes=split, report=False, progress=False, print_summary=False
                    )

                first, _ = _time(whole, 1)  # the JVM still compiles this job's code paths
                median, _ = _time(whole, args.repeat)
            results.append(("whole pipeline, first run in this session", first, args.datagrams, None))
            results.append(("whole pipeline (frames+messages+sessions)", median, args.datagrams, None))
            tshark = shutil.which("tshark")
            if tshark:
                fields = [
                    "frame.number",
                    "frame.time_epoch",
                    "ip.src",
                    "udp.srcport",
                    "ip.dst",
                    "udp.dstport",
                    "udp.length",
                    "data.data",
                ]
                cmd = [tshark, "-r", path, "-T", "fields", *sum((["-e", f] for f in fields), [])]
                with console.status("timing tshark"):
                    median, _ = _time(
                        lambda: subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False),
                        args.repeat,
                    )
                results.append(("tshark -T fields (no nbmq decode)", median, args.datagrams, None))

        baseline = next((r for r in results if r[0].startswith("UDF")), None)
        table = Table(
            title=f"frames-table throughput, {args.datagrams:,} datagrams, {spark.sparkContext.master}, "
            f"median of {args.repeat}"
        )
        for col in ("method", "median s", "frames/s", "vs UDF", "net s", "net frames/s", "net vs UDF"):
            table.add_column(col, justify="left" if col == "method" else "right")

        def net(r):  # type: ignore[no-untyped-def]
            return None if r[3] is None else max(1e-9, r[1] - r[3])

        for r in results:
            label, median, rows, _ = r
            n = net(r)
            table.add_row(
                label,
                f"{median:.2f}",
                f"{rows / median:,.0f}",
                f"{baseline[1] / median:.1f}x" if baseline else "-",
                "-" if n is None else f"{n:.2f}",
                "-" if n is None else f"{rows / n:,.0f}",
                f"{net(baseline) / n:.1f}x" if baseline and n is not None else "-",
            )
        out = Console() if Console().is_terminal else Console(width=140)
        out.print(table)
        out.print(
            "net = median minus the same query's median on a one-datagram capture (Spark's fixed "
            "per-query cost: planning in a fresh Python process, task launch)."
        )
        best = min((r for r in results if r[0].startswith("nbmq source")), key=lambda r: r[1])
        fps = args.datagrams / best[1]
        note = f"target {TARGET_FPS:,} frames/s: {'met' if fps >= TARGET_FPS else 'NOT met'} ({fps:,.0f} wall"
        note += f", {args.datagrams / net(best):,.0f} net)"
        if baseline:
            note += (
                f"; target {TARGET_RATIO:.0f}x the UDF: "
                f"{'met' if baseline[1] / best[1] >= TARGET_RATIO else 'NOT met'} "
                f"({baseline[1] / best[1]:.1f}x wall, {net(baseline) / net(best):.1f}x net)"
            )
        out.print(note)
        spark.stop()
    finally:
        if not args.capture:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
