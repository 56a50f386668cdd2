"""Codec benchmarks: the Cython codec against its pure-Python twin and plain-Python / numpy
baselines, each group measured in the same run.

    python -m pytest benchmarks/bench_codec.py [--benchmark-columns=median,ops]

Groups (pytest-benchmark compares within a group; the last test prints every figure, its
baseline, the ratio and the target, without asserting anything, since a shared machine is
noisy):

* ``header-decode``: decode the headers of the 2,251 frames of a 1 MiB message (distinct
  datagrams, as they arrive). Baseline ``struct.Struct('>BBQQBBIIHI').unpack_from``; target:
  ``parse_frame`` at least 3x faster per frame. ``parse_frames`` (all 2,251 in one call) is in
  the group to show the per-header cost without per-call Python objects.
* ``header-encode``: encode those frames one by one (header and chunk). Baseline
  ``struct.pack`` plus the chunk; no target.
* ``batch-decode``: 1,000,000 datagrams of 500 bytes in one buffer. Baseline ``np.frombuffer``
  with a big-endian structured dtype of the ten header fields (itemsize 500) followed by
  ``astype`` to native integers (frombuffer alone is a lazy view and decodes nothing); target:
  ``parse_frames`` at least 20 million frames/s and faster than the baseline.
* ``bqsp-decode`` / ``rqueue-decode``: 2 KB packets / notifications fed in 64 KiB slices, as a
  server loop reads them: each read's packets are handed on as a list and dropped after it
  (keeping all of them alive would mostly measure the garbage collector, for both sides).
  Baseline: the best pure-Python loop (unpack the header with ``struct``, hand out memoryview
  slices, carry a split packet over); target: the Cython decoder at least 2x faster, payloads
  as views (no copy) except the one split across two slices.
"""

from __future__ import annotations

import importlib
import os
import struct

import numpy as np
import pytest

py = importlib.import_module("nbmq._codec_py")
c = importlib.import_module("nbmq._codec")

MEDIANS: dict[str, float] = {}


def keep(benchmark, name: str) -> None:
    stats = getattr(benchmark, "stats", None)
    if stats is not None:  # None under --benchmark-disable
        MEDIANS[name] = stats.stats.median


# -- header decode / encode --------------------------------------------------------------------

HEADER = struct.Struct(">BBQQBBIIHI")


@pytest.fixture(scope="module")
def message_frames() -> list[bytes]:
    payload = np.random.default_rng(1).integers(0, 256, 1 << 20, dtype=np.uint8)
    return c.shard_message_bytes([payload], 0x1122334455667788, 0x99AABBCCDDEEFF00)


def _loop(fn, frames):
    def run():
        for f in frames:
            fn(f)

    return run


@pytest.mark.benchmark(group="header-decode")
def test_decode_struct_baseline(benchmark, message_frames):
    """Baseline: struct.unpack_from of the ten header fields, one call per datagram."""
    benchmark(_loop(HEADER.unpack_from, message_frames))
    keep(benchmark, "decode struct")


@pytest.mark.benchmark(group="header-decode")
def test_decode_cython(benchmark, message_frames):
    """parse_frame (Cython): a validated DataFrame with a memoryview chunk. Target: >= 3x struct."""
    benchmark(_loop(c.parse_frame, message_frames))
    keep(benchmark, "decode cython")


@pytest.mark.benchmark(group="header-decode")
def test_decode_cython_memoryview(benchmark, message_frames):
    """parse_frame (Cython) on memoryview datagrams (as from a receive buffer)."""
    views = [memoryview(f) for f in message_frames]
    benchmark(_loop(c.parse_frame, views))
    keep(benchmark, "decode cython memoryview")


@pytest.mark.benchmark(group="header-decode")
def test_decode_cython_batch(benchmark, message_frames):
    """parse_frames (Cython): the same 2,251 headers in one call, as FRAME_DTYPE rows."""
    buffer = b"".join(message_frames)
    lengths = np.array([len(f) for f in message_frames], np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    benchmark(c.parse_frames, buffer, offsets, lengths)
    keep(benchmark, "decode cython batch")


@pytest.mark.benchmark(group="header-decode")
def test_decode_twin(benchmark, message_frames):
    """parse_frame (pure-Python twin)."""
    benchmark.pedantic(_loop(py.parse_frame, message_frames), rounds=5)
    keep(benchmark, "decode twin")


def _fields(frames):
    out = []
    for f in frames:
        _, _, sid, mid, pc, pi, ms, ps, _, co = HEADER.unpack_from(f)
        out.append((sid, mid, pc, pi, ms, ps, co, f[34:]))
    return out


@pytest.mark.benchmark(group="header-encode")
def test_encode_struct_baseline(benchmark, message_frames):
    """Baseline: struct.pack of the header plus the chunk (no validation)."""
    fields = _fields(message_frames)
    pack = HEADER.pack

    def run():
        for sid, mid, pc, pi, ms, ps, co, chunk in fields:
            pack(1, 0, sid, mid, pc, pi, ms, ps, len(chunk), co) + chunk

    benchmark(run)
    keep(benchmark, "encode struct")


@pytest.mark.benchmark(group="header-encode")
def test_encode_cython(benchmark, message_frames):
    """encode_data_frame (Cython), validated."""
    fields = _fields(message_frames)
    encode = c.encode_data_frame
    benchmark(lambda: [encode(*f) for f in fields])
    keep(benchmark, "encode cython")


@pytest.mark.benchmark(group="header-encode")
def test_encode_twin(benchmark, message_frames):
    """encode_data_frame (pure-Python twin), validated."""
    fields = _fields(message_frames)
    encode = py.encode_data_frame
    benchmark.pedantic(lambda: [encode(*f) for f in fields], rounds=5)
    keep(benchmark, "encode twin")


# -- batch decode ------------------------------------------------------------------------------

N_BATCH = 1_000_000
BE_HEADER = np.dtype(
    {
        "names": [
            "version",
            "kind",
            "session_id",
            "message_id",
            "part_count",
            "part_index",
            "message_size",
            "part_size",
            "chunk_size",
            "chunk_offset",
        ],
        "formats": ["u1", "u1", ">u8", ">u8", "u1", "u1", ">u4", ">u4", ">u2", ">u4"],
        "offsets": [0, 1, 2, 10, 18, 19, 20, 24, 28, 30],
        "itemsize": 500,
    }
)
NATIVE_HEADER = np.dtype([(name, BE_HEADER.fields[name][0].newbyteorder("=")) for name in BE_HEADER.names])


@pytest.fixture(scope="module")
def big_batch():
    frame = np.frombuffer(
        c.encode_data_frame(0x1122334455667788, 0x99AABBCCDDEEFF00, 3, 1, 100_000, 50_000, 1398, os.urandom(466)),
        np.uint8,
    )
    buffer = np.tile(frame, N_BATCH)
    offsets = np.arange(N_BATCH, dtype=np.int64) * 500
    lengths = np.full(N_BATCH, 500, dtype=np.int64)
    yield buffer, offsets, lengths
    del buffer


@pytest.mark.benchmark(group="batch-decode")
def test_batch_numpy_baseline(benchmark, big_batch):
    """Baseline: np.frombuffer (big-endian structured dtype, stride 500) then astype(native)."""
    buffer = big_batch[0]
    out = benchmark.pedantic(lambda: np.frombuffer(buffer, BE_HEADER).astype(NATIVE_HEADER), rounds=5)
    assert len(out) == N_BATCH
    keep(benchmark, "batch numpy")


@pytest.mark.benchmark(group="batch-decode")
def test_batch_cython(benchmark, big_batch):
    """parse_frames (Cython), validated rows. Target: >= 20 M frames/s and faster than numpy."""
    rows = benchmark.pedantic(c.parse_frames, args=big_batch, rounds=5, warmup_rounds=1)
    assert len(rows) == N_BATCH and not rows["error"].any()
    keep(benchmark, "batch cython")


# -- stream decoders ---------------------------------------------------------------------------

SLICE = 64 * 1024
BQSP = struct.Struct("<IHB")
PREAMBLE = struct.Struct(">HB")


def python_bqsp(slices, handle=None) -> int:
    """The best pure-Python BQSP loop: struct for the header, memoryview slices for the data,
    a bytearray only for the packet split across two slices. Each slice's packets go to
    ``handle`` as a list of (data_type, queue, data); returns the packet count."""
    count = 0
    unpack = BQSP.unpack_from
    pending = None
    for piece in slices:
        out = []
        append = out.append
        view = memoryview(piece)
        n = len(view)
        pos = 0
        if pending is not None:
            if len(pending) < 7:
                take = min(7 - len(pending), n)
                pending += view[:take]
                pos = take
                if len(pending) < 7:
                    continue
            size, kind, queue = unpack(pending)
            take = min(7 + size - len(pending), n - pos)
            pending += view[pos : pos + take]
            pos += take
            if len(pending) < 7 + size:
                continue
            append((kind, queue, memoryview(pending)[7:]))
            pending = None
        while n - pos >= 7:
            size, kind, queue = unpack(view, pos)
            end = pos + 7 + size
            if end > n:
                break
            append((kind, queue, view[pos + 7 : end]))
            pos = end
        if pos < n:
            pending = bytearray(view[pos:])
        count += len(out)
        if handle is not None:
            handle(out)
    return count


def python_rqueue(slices, handle=None) -> int:
    """The best pure-Python rqueue loop for notifications, built like python_bqsp."""
    count = 0
    unpack = PREAMBLE.unpack_from
    pending = None
    for piece in slices:
        out = []
        append = out.append
        view = memoryview(piece)
        n = len(view)
        pos = 0
        if pending is not None:
            if len(pending) < 3:
                take = min(3 - len(pending), n)
                pending += view[:take]
                pos = take
                if len(pending) < 3:
                    continue
            size, kind = unpack(pending)
            take = min(3 + size - len(pending), n - pos)
            pending += view[pos : pos + take]
            pos += take
            if len(pending) < 3 + size:
                continue
            whole = memoryview(pending)
            topic_len = whole[3]
            append((kind, whole[4 : 4 + topic_len], whole[4 + topic_len :]))
            pending = None
        while n - pos >= 3:
            size, kind = unpack(view, pos)
            end = pos + 3 + size
            if end > n:
                break
            topic_len = view[pos + 3]
            append((kind, view[pos + 4 : pos + 4 + topic_len], view[pos + 4 + topic_len : end]))
            pos = end
        if pos < n:
            pending = bytearray(view[pos:])
        count += len(out)
        if handle is not None:
            handle(out)
    return count


def decode_with(module, name):
    def run(slices, handle=None):
        decoder = getattr(module, name)()
        count = 0
        for piece in slices:
            decoder.feed(piece)
            out = list(decoder)
            count += len(out)
            if handle is not None:
                handle(out)
        return count

    return run


def collected(run, slices) -> list:
    packets = []
    run(slices, packets.extend)
    return [(p[0], p[1], bytes(p[2])) for p in packets]


N_PACKETS = 4000


@pytest.fixture(scope="module")
def bqsp_slices():
    rng = np.random.default_rng(2)
    stream = b"".join(c.encode_bqsp_packet(rng.bytes(2048), i % 65536, i % 256) for i in range(N_PACKETS))
    return [stream[i : i + SLICE] for i in range(0, len(stream), SLICE)]


@pytest.fixture(scope="module")
def rqueue_slices():
    rng = np.random.default_rng(3)
    stream = b"".join(
        c.encode_notification(b"topic/%02d" % (i % 100), rng.bytes(2048 - 1 - 8)) for i in range(N_PACKETS)
    )
    return [stream[i : i + SLICE] for i in range(0, len(stream), SLICE)]


@pytest.mark.benchmark(group="bqsp-decode")
def test_bqsp_python_baseline(benchmark, bqsp_slices):
    """Baseline: the best pure-Python loop (python_bqsp)."""
    assert benchmark(python_bqsp, bqsp_slices) == N_PACKETS
    assert collected(python_bqsp, bqsp_slices) == collected(decode_with(c, "BqspDecoder"), bqsp_slices)
    keep(benchmark, "bqsp python")


@pytest.mark.benchmark(group="bqsp-decode")
def test_bqsp_cython(benchmark, bqsp_slices):
    """BqspDecoder (Cython). Target: >= 2x the pure-Python loop."""
    assert benchmark(decode_with(c, "BqspDecoder"), bqsp_slices) == N_PACKETS
    keep(benchmark, "bqsp cython")


@pytest.mark.benchmark(group="bqsp-decode")
def test_bqsp_twin(benchmark, bqsp_slices):
    """BqspDecoder (pure-Python twin)."""
    benchmark.pedantic(decode_with(py, "BqspDecoder"), args=(bqsp_slices,), rounds=5)
    keep(benchmark, "bqsp twin")


@pytest.mark.benchmark(group="rqueue-decode")
def test_rqueue_python_baseline(benchmark, rqueue_slices):
    """Baseline: the best pure-Python loop (python_rqueue)."""
    assert benchmark(python_rqueue, rqueue_slices) == N_PACKETS
    assert collected(python_rqueue, rqueue_slices) == collected(decode_with(c, "RqueueDecoder"), rqueue_slices)
    keep(benchmark, "rqueue python")


@pytest.mark.benchmark(group="rqueue-decode")
def test_rqueue_cython(benchmark, rqueue_slices):
    """RqueueDecoder (Cython). Target: >= 2x the pure-Python loop."""
    assert benchmark(decode_with(c, "RqueueDecoder"), rqueue_slices) == N_PACKETS
    keep(benchmark, "rqueue cython")


@pytest.mark.benchmark(group="rqueue-decode")
def test_rqueue_twin(benchmark, rqueue_slices):
    """RqueueDecoder (pure-Python twin)."""
    benchmark.pedantic(decode_with(py, "RqueueDecoder"), args=(rqueue_slices,), rounds=5)
    keep(benchmark, "rqueue twin")


# -- report ------------------------------------------------------------------------------------


def test_report(capsys):
    """Every figure against its same-run baseline and target; reports, asserts nothing."""
    n_frames = 2251
    lines = []

    def ratio(name, base, target, unit_work, unit):
        if name not in MEDIANS or base not in MEDIANS:
            return
        t, b = MEDIANS[name], MEDIANS[base]
        lines.append(
            f"{name:<26} {t / unit_work * 1e9:>10.1f} ns/{unit}  {b / t:>6.2f}x {base}"
            + (f"  (target >= {target}x)" if target else "")
        )

    ratio("decode cython", "decode struct", 3, n_frames, "frame")
    ratio("decode cython memoryview", "decode struct", 3, n_frames, "frame")
    ratio("decode cython batch", "decode struct", None, n_frames, "frame")
    ratio("decode twin", "decode struct", None, n_frames, "frame")
    ratio("encode cython", "encode struct", None, n_frames, "frame")
    ratio("encode twin", "encode struct", None, n_frames, "frame")
    ratio("batch cython", "batch numpy", 1, N_BATCH, "frame")
    if "batch cython" in MEDIANS:
        lines.append(
            f"{'batch cython':<26} {N_BATCH / MEDIANS['batch cython'] / 1e6:>10.1f} M frames/s  (target >= 20)"
        )
    ratio("bqsp cython", "bqsp python", 2, N_PACKETS, "packet")
    ratio("bqsp twin", "bqsp python", None, N_PACKETS, "packet")
    ratio("rqueue cython", "rqueue python", 2, N_PACKETS, "message")
    ratio("rqueue twin", "rqueue python", None, N_PACKETS, "message")
    with capsys.disabled():  # the report shows without -s
        print("\ncodec benchmarks, medians (ratio = baseline time / this time):")
        for line in lines:
            print("  " + line)
