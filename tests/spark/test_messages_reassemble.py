"""messages: the compiled group loop (``nbmq.spark._reassemble``) gives exactly what its Python twin,
the reference (every group fed frame by frame to the codec's Reassembler), gives, on generated
groups with duplicates, conflicts, header disagreements, losses, reordering, empty parts, hostile
size claims and frames after completion; and the local pass is the same with either."""

from __future__ import annotations

import os
import random

import numpy as np
import pyarrow as pa
import pytest

from nbmq import codec
from nbmq.spark import _reassemble_py, messages

REQUIRED = os.environ.get("NBMQ_REQUIRE_EXTENSIONS", "") not in ("", "0")
compiled = pytest.mark.skipif(
    not messages.COMPILED and not REQUIRED, reason="nbmq.spark._reassemble not built (or NBMQ_NO_EXTENSIONS)"
)
OUTPUTS = (
    "complete",
    "part_count",
    "message_size",
    "duplicates",
    "rejected",
    "missing",
    "slots",
    "slot_size",
    "slot_start",
    "digests",
    "data",
)


def _frames(parts: list[bytes], mid: int) -> list[list]:
    """[part_count, part_index, message_size, part_size, chunk_offset, chunk] per frame."""
    out = []
    for raw in codec.shard_message(parts, session_id=7, message_id=mid).frames():
        f = codec.parse_frame(bytes(raw))
        out.append([f.part_count, f.part_index, f.message_size, f.part_size, f.chunk_offset, bytes(f.chunk)])
    return out


def _group(rng: random.Random, mid: int) -> list[list]:
    """One key's frames, mutated the ways a capture can show them."""
    parts = [rng.randbytes(rng.choice([0, 0, 1, 5, 300, 466, 467, 900, 2000])) for _ in range(rng.randrange(1, 5))]
    frames = _frames(parts, mid)
    for _ in range(rng.choice([0, 0, 1, 1, 2, 3])):
        kind = rng.randrange(10)
        i = rng.randrange(len(frames))
        f = list(frames[i])
        if kind == 0 and len(frames) > 1:
            frames.pop(i)  # lost
        elif kind == 1:
            frames.insert(rng.randrange(i, len(frames) + 1), f)  # repeated (a resend)
        elif kind == 2 and f[5]:
            j = rng.randrange(len(f[5]))
            f[5] = f[5][:j] + bytes([f[5][j] ^ 0xFF]) + f[5][j + 1 :]  # repeated with other bytes
            frames.insert(rng.randrange(len(frames) + 1), f)
        elif kind == 3:
            field = rng.choice([0, 2, 3])  # part_count, message_size or part_size disagrees
            f[field] = min(f[field] + rng.choice([1, -1 if f[field] > 1 else 1]), 255 if field == 0 else 2**32 - 1)
            f[1] = min(f[1], f[0] - 1)
            frames.insert(rng.randrange(len(frames) + 1), f)
        elif kind == 4 and len(f[5]) > 2:
            k = rng.randrange(1, len(f[5]))  # a chunk overlapping another one's bytes
            frames.insert(rng.randrange(len(frames) + 1), [*f[:4], f[4] + k, f[5][k:] + rng.choice([b"", b"z"])])
        elif kind == 5:
            rng.shuffle(frames)
        elif kind == 6:
            frames = [g for g in frames if g[3]] or frames  # no frame for an empty part (the reference)
        elif kind == 7:
            frames.insert(rng.randrange(len(frames) + 1), [*f[:2], 3_000_000_000, *f[3:]])  # a hostile claim
        elif kind == 8:
            frames.extend(_frames(parts, mid)[: rng.randrange(1, 3)])  # again after completion
        elif kind == 9:
            frames.insert(rng.randrange(len(frames) + 1), [*f[:4], f[4], b""])  # a zero-length chunk
    return frames


def _arrays(groups: list[list[list]], n_buffers: int = 3) -> tuple:
    """The arguments of ``reassemble_groups`` (chunks spread over ``n_buffers`` buffers)."""
    rows = [f for g in groups for f in g]
    bounds = np.cumsum([0] + [len(g) for g in groups]).astype(np.int64)
    cols = [np.array([f[k] for f in rows], np.int64) for k in range(5)]
    blobs: list[bytearray] = [bytearray(b"\x00\x01") for _ in range(n_buffers)]
    ids, starts = [], []
    for i, f in enumerate(rows):
        b = i % n_buffers
        ids.append(b)
        starts.append(len(blobs[b]))
        blobs[b] += f[5]
    lengths = np.array([len(f[5]) for f in rows], np.int64)
    return (bounds, *cols, [bytes(b) for b in blobs], np.array(ids, np.int64), np.array(starts, np.int64), lengths)


def _same(args: tuple, limit: int, keep: bool) -> tuple:
    from nbmq.spark import _reassemble

    got = _reassemble.reassemble_groups(*args, limit, keep)
    want = _reassemble_py.reassemble_groups(*args, limit, keep)
    for name, x, y in zip(OUTPUTS, got, want):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=name)
    return want


def test_compiled_loop_is_in_use():
    """With NBMQ_REQUIRE_EXTENSIONS=1 (as `make test` sets) a missing build fails here."""
    if not REQUIRED:
        pytest.skip("NBMQ_REQUIRE_EXTENSIONS is not set")
    assert messages.COMPILED and messages._KERNEL is not messages._reassemble_groups_py


@compiled
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("limit", [2**32 - 1, 1000])
@pytest.mark.parametrize("keep", [True, False])
def test_compiled_groups_equal_the_reference(seed, limit, keep):
    rng = random.Random(seed)
    groups = [_group(rng, mid) for mid in range(1, 250)]
    want = _same(_arrays(groups), limit, keep)
    complete, dups, rejected = want[0], want[3], want[4]
    # the generator reaches every outcome
    assert complete.sum() > 50 and (complete == 0).sum() > 5 and dups.sum() > 10 and rejected.sum() > 5


@compiled
def test_groups_the_loop_leaves_to_the_reference():
    """A claim larger than every byte left (after a rejection) and more than 256 frames that can
    never complete go to the Python reference inside the compiled call: same results."""
    frames = _frames([b"a" * 300, b"b" * 900], 1)
    claim = [frames[0][0], frames[0][1], frames[0][2] + 1, *frames[0][3:]]  # disagrees: rejected
    huge = [1, 0, 2_000_000, 2_000_000, 0, b"c" * 10]  # then a new message claims 2 MB
    lossy = [[1, 0, 10_000_000, 10_000_000, 466 * i, bytes([i % 256]) * 466] for i in range(300)]
    lossy += lossy[:5]  # exact repeats: duplicates
    want = _same(_arrays([frames, frames[:1] + [claim, huge] + frames[1:], lossy]), 2**32 - 1, True)
    assert list(want[0]) == [1, 0, 0] and list(want[4]) == [0, 2, 0] and want[3][2] == 5


@compiled
def test_argument_errors_are_the_same():
    args = list(_arrays([_frames([b"x" * 10], 1)]))
    from nbmq.spark import _reassemble

    bad = args.copy()
    bad[9] = np.array([50], np.int64)  # the chunk would run past its buffer
    for module in (_reassemble, _reassemble_py):
        with pytest.raises(ValueError):
            module.reassemble_groups(*bad, 2**32 - 1)
        with pytest.raises(ValueError):
            module.reassemble_groups(np.array([0, 2], np.int64), *args[1:], 2**32 - 1)


def _data_table(groups: list[list[list]]) -> pa.Table:
    """A frames table (``build_messages``'s columns) of the groups, in capture order, senders alternating."""
    # frame j of key k at k * 3 us + j us: keys interleave in capture order
    rows = sorted(
        ((mid, f, mid * 3000 + j * 1000) for mid, g in enumerate(groups, start=1) for j, f in enumerate(g)),
        key=lambda r: r[2],
    )
    n = len(rows)
    dec = pa.decimal128(20, 0)
    from decimal import Decimal

    return pa.table(
        {
            "capture": ["c.pcap"] * n,
            "session_id": pa.array([Decimal(7)] * n, dec),
            "src": [f"10.0.0.{1 + r[0] % 2}:4000" for r in rows],
            "message_id": pa.array([Decimal(r[0]) for r in rows], dec),
            "dst": ["10.0.0.9:5555"] * n,
            "part_count": pa.array([r[1][0] for r in rows], pa.int32()),
            "part_index": pa.array([r[1][1] for r in rows], pa.int32()),
            "message_size": pa.array([r[1][2] for r in rows], pa.int64()),
            "part_size": pa.array([r[1][3] for r in rows], pa.int64()),
            "chunk_offset": pa.array([r[1][4] for r in rows], pa.int64()),
            "payload": pa.array([r[1][5] for r in rows], pa.binary()),
            "ts_ns": pa.array([r[2] for r in rows], pa.int64()),
            "frame_number": pa.array(range(n), pa.int64()),
        }
    )


@pytest.mark.parametrize("parts", [False, True])
def test_local_pass_is_the_same_with_either_loop(monkeypatch, parts):
    """``_local_pass`` in small segments (keys carried over and left as frame records): the
    records of the compiled loop equal the Python twin's (with NBMQ_NO_EXTENSIONS both are the
    twin; the records are still checked against the frame-at-a-time rule below)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from nbmq.spark import messages_local as ml
    from nbmq.spark.schema import messages_schema

    rng = random.Random(9)
    table = _data_table([_group(rng, mid) for mid in range(1, 400)])
    out_schema = to_arrow_schema(messages_schema(parts), timezone="UTC")
    rec = to_arrow_schema(ml._record_schema(parts), timezone="UTC")

    def records() -> pa.Table:
        got = ml._local_pass(iter(table.to_batches(max_chunksize=97)), rec, parts, 2**32 - 1, out_schema, 300)
        keys = ["_kind", "capture", "session_id", "src", "message_id", "_t0", "_f0"]
        return pa.Table.from_batches(list(got), schema=rec).sort_by([(k, "ascending") for k in keys])

    fast = records()
    monkeypatch.setattr(messages, "_KERNEL", messages._reassemble_groups_py)
    assert fast.equals(records())
    kinds = fast.column("_kind").to_numpy()
    assert (kinds == ml.ROW).sum() > 100 and (kinds == ml.FRAME).sum() > 10
    # every frame is in exactly one record: a row record's ``frames``, or its own frame record
    row = kinds == ml.ROW
    assert fast.column("frames").to_numpy(zero_copy_only=False)[row].sum() + (~row).sum() == table.num_rows
    # a row record's first and last frame are its key's earliest and latest in that segment
    us = lambda name: fast.column(name).cast(pa.int64()).to_numpy(zero_copy_only=False)[row]  # noqa: E731
    assert np.array_equal(us("_t0") // 1000, us("first_ts")) and np.array_equal(us("_t1") // 1000, us("last_ts"))
    # every row record is what the batch rule (``reassemble_batches``) makes of its key's frames
    want = pa.Table.from_batches(
        list(
            messages.reassemble_batches(
                iter(table.sort_by([(k, "ascending") for k in messages.KEY + ["ts_ns", "frame_number"]]).to_batches()),
                out_schema,
                parts=parts,
            )
        ),
        schema=out_schema,
    )
    by_key = {(int(r["message_id"]), r["src"]): r for r in want.to_pylist()}
    rows = fast.filter(pa.compute.equal(fast.column("_kind"), ml.ROW)).select(out_schema.names).to_pylist()
    for r in rows:
        ref = by_key[(int(r["message_id"]), r["src"])]
        if ref["complete"] and ref["frames"] == r["frames"]:
            assert r == ref


@compiled
def test_twins_have_the_same_signature():
    """Names, order and defaults of the parameters (annotations live in the twin only)."""
    import inspect

    from nbmq.spark import _reassemble

    def shape(f):
        return [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]

    assert shape(_reassemble.reassemble_groups) == shape(_reassemble_py.reassemble_groups)
