"""Every compiled entry point checks what its caller hands it before use: extreme lengths,
offsets and counts (0, -1, +-2**31, +-(2**63 - 1)), arrays of mismatched lengths and wrong
dtypes give a typed error naming the argument, never a crash; where a Python twin exists it
raises the same error. Bounds checks are written so that int64 arithmetic cannot wrap
(``start > size - length``, not ``start + length > size``)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REQUIRED = os.environ.get("NBMQ_REQUIRE_EXTENSIONS", "") not in ("", "0")
NO_EXTENSIONS = os.environ.get("NBMQ_NO_EXTENSIONS", "") not in ("", "0")


def _built(module: str):  # type: ignore[no-untyped-def]
    """The compiled module, or None when it is not built or not used (NBMQ_NO_EXTENSIONS);
    not built under NBMQ_REQUIRE_EXTENSIONS is a failure."""
    if NO_EXTENSIONS:
        return None
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        if REQUIRED:
            raise
        return None


def _compiled(module: str):  # type: ignore[no-untyped-def]
    """The compiled module, or a skip when there is none (see ``_built``)."""
    found = _built(module)
    if found is None:
        pytest.skip(f"{module} is not built or not used")
    return found


I64 = 2**63 - 1
EXTREMES = [0, -1, 1, 2**31, -(2**31), 2**31 - 1, I64, -I64, -I64 - 1, 2**62, 12, 16]
extreme = st.sampled_from(EXTREMES) | st.integers(-I64 - 1, I64)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _outcome(fn, *args):  # type: ignore[no-untyped-def]
    """("ok", results as lists) or ("raise", error class name, message)."""
    try:
        out = fn(*args)
    except (ValueError, IndexError) as e:
        return ("raise", type(e).__name__, str(e))
    if isinstance(out, tuple):
        return ("ok", [np.asarray(x).tolist() for x in out])
    return ("ok", None if out is None else np.asarray(out).tolist())


# -- nbmq.spark._reassemble.reassemble_groups -------------------------------------------------


def _groups_args(n: int = 2) -> list:
    """Valid arguments: one group of ``n`` one-byte frames of a message of n parts."""
    buf = bytes(range(n))
    return [
        np.array([0, n], np.int64),
        np.full(n, n, np.int64),
        np.arange(n, dtype=np.int64),
        np.full(n, n, np.int64),
        np.ones(n, np.int64),
        np.zeros(n, np.int64),
        [buf],
        np.zeros(n, np.int64),
        np.arange(n, dtype=np.int64),
        np.ones(n, np.int64),
        2**32 - 1,
    ]


def _both_groups(args: list) -> tuple:
    from nbmq.spark import _reassemble_py

    want = _outcome(_reassemble_py.reassemble_groups, *args)
    compiled = _built("nbmq.spark._reassemble")
    if compiled is not None:
        assert _outcome(compiled.reassemble_groups, *args) == want
    return want


def test_groups_valid_arguments_complete_the_message():
    out = _both_groups(_groups_args())
    assert out[0] == "ok" and out[1][0] == [1] and out[1][-1] == [0, 1]


@pytest.mark.parametrize(
    "start, length", [(2**63 - 1, 1), (1, 2**63 - 1), (2**62, 2**62), (-1, 1), (0, -1), (2**63 - 2, 2)]
)
def test_groups_chunk_start_plus_length_that_wraps_is_refused(start, length):
    """start + length wraps in int64 (it once passed the check and crashed the compiled loop)."""
    args = _groups_args(1)
    args[8], args[9] = np.array([start], np.int64), np.array([length], np.int64)
    out = _both_groups(args)
    assert out[:2] == ("raise", "ValueError") and "outside its payload buffer" in out[2]


def test_groups_part_counts_whose_slot_sum_wraps_are_refused():
    """Each incomplete group holds part_count output slots: 2**62 in four groups once summed to 0
    in int64, then the loop wrote 2**62 slots into a buffer of none."""
    n = 4
    args = _groups_args(n)
    args[0] = np.arange(n + 1, dtype=np.int64)
    args[1] = np.full(n, 2**62, np.int64)
    args[3] = np.full(n, 10, np.int64)  # message_size 10: every group incomplete
    out = _both_groups(args)
    assert out[:2] == ("raise", "ValueError") and "part_count" in out[2]


def test_groups_wrong_dtypes_and_shapes_name_the_argument():
    for index, name, value in [
        (2, "part_index", np.zeros(2, np.float64)),
        (5, "chunk_offset", np.zeros((2, 1), np.int64)),
        (0, "bounds", np.array([0.0, 2.0])),
        (9, "chunk_len", np.ones(3, np.int64)),
        (7, "buf_id", np.zeros(2, bool)),
    ]:
        args = _groups_args()
        args[index] = value
        out = _both_groups(args)
        assert out[:2] == ("raise", "ValueError") and name in out[2], (name, out)
    args = _groups_args()
    args[10] = -1
    assert "max_message_size" in _both_groups(args)[2]
    for buffers in ([object()], (b"ab",), b"ab", [np.zeros((4, 4), np.uint8)[:, 1]]):
        args = _groups_args()
        args[6] = buffers
        assert "buffers" in _both_groups(args)[2], buffers


@SETTINGS
@given(st.lists(extreme, min_size=11, max_size=11), st.integers(0, 10), st.integers(1, 4), st.booleans())
def test_groups_extreme_values_give_the_same_outcome(values, field, n, keep):
    """Any field of any row set to an extreme value: both twins give the same arrays or the same
    ValueError, and the compiled loop never crashes."""
    args = _groups_args(n)
    args.append(keep)
    if field == 0:
        args[0] = np.array([0, *values[:2]], np.int64)
    elif field in (6, 10):
        args[10] = min(abs(values[0]), 2**32 - 1)
    else:
        col = args[field].copy()
        col[values[1] % n] = values[0]
        args[field] = col
    if field == 3:  # message_size: the codec's limit is the only cap the reference path needs
        args[10] = 2**32 - 1
    _both_groups(args)


# -- nbmq.capture.files._records ---------------------------------------------------------------


def test_gather_wrapping_range_is_refused():
    records = _compiled("nbmq.capture.files._records")
    buf = np.arange(64, dtype=np.uint8)
    for start, length in [(2**63 - 1, 1), (1, 2**63 - 1), (2**62, 2**62), (-1, 1), (0, -1)]:
        with pytest.raises(IndexError, match="outside the buffer"):
            records.gather(buf, np.array([start], np.int64), np.array([length], np.int64))
    with pytest.raises(ValueError, match="differ in length"):
        records.gather(buf, np.zeros(2, np.int64), np.zeros(1, np.int64))
    out = records.gather(buf, np.array([60, 0], np.int64), np.array([4, 2], np.int64))
    assert out.tolist() == [60, 61, 62, 63, 0, 1]


def test_walk_fields_offset_near_the_top_of_int64_is_refused():
    records = _compiled("nbmq.capture.files._records")
    buf = np.zeros(64, np.uint8)
    for p in [2**63 - 1, 2**63 - 12, -1, 53, -(2**63)]:
        with pytest.raises(IndexError, match="outside the buffer"):
            records.walk_fields(buf, np.array([p], np.int64), False)
    assert [x.tolist() for x in records.walk_fields(buf, np.array([52], np.int64), False)] == [[0], [0], [0]]


def test_walk_chain_validates_pos_and_header_length():
    records = _compiled("nbmq.capture.files._records")
    buf = np.zeros(64, np.uint8)
    with pytest.raises(ValueError, match="pos"):
        records.walk_chain(buf, -8, 16, 16, False, 100, 0)
    for hl in (0, -1, 11, -(2**63), 2**63 - 1, 2**31):
        with pytest.raises(ValueError, match="hl"):
            records.walk_chain(buf, 0, 16, hl, False, 100, 0)
    with pytest.raises(ValueError, match="last"):
        records.walk_chain(buf, 0, 50, 16, False, 100, 0)
    offsets, end, bad = records.walk_chain(buf, 0, 49, 16, False, 100, 0)
    assert offsets.tolist() == [0, 16, 32, 48] and end == 64 and not bad
    offsets, end, bad = records.walk_chain(buf, 40, -(2**63), 16, False, 100, 0)
    assert offsets.tolist() == [] and end == 40


@SETTINGS
@given(extreme, extreme, extreme, st.booleans())
def test_records_extreme_values_raise_or_stay_inside(pos, last, hl, big):
    records = _compiled("nbmq.capture.files._records")
    buf = np.zeros(80, np.uint8)
    try:
        offsets, end, _ = records.walk_chain(buf, pos, last, hl, big, 1 << 20, 0)
    except ValueError:
        pass
    else:
        assert all(0 <= o <= 80 - hl for o in offsets.tolist())
    for fn, args in [
        (records.gather, (buf, np.array([pos], np.int64), np.array([last], np.int64))),
        (records.walk_fields, (buf, np.array([pos, hl], np.int64), big)),
    ]:
        try:
            fn(*args)
        except (ValueError, IndexError):
            pass


# -- nbmq.capture.datagrams._decode ------------------------------------------------------------


def _decode_columns(n: int) -> dict:
    return {
        "status": np.zeros(n, np.int8),
        "family": np.zeros(n, np.uint8),
        "src": np.zeros((n, 16), np.uint8),
        "dst": np.zeros((n, 16), np.uint8),
        "sport": np.zeros(n, np.uint16),
        "dport": np.zeros(n, np.uint16),
        "pstart": np.zeros(n, np.int64),
        "pend": np.zeros(n, np.int64),
        "truncated": np.zeros(n, np.uint8),
    }


def _decode_udp(decode, buf, starts, caplens, **change):  # type: ignore[no-untyped-def]
    cols = _decode_columns(len(starts))
    cols.update(change)
    empty = np.zeros(0, np.int64)
    return decode.decode_udp(
        buf, np.asarray(starts, np.int64), np.asarray(caplens, np.int64), 1, empty, empty, empty, empty, *cols.values()
    )


def test_decode_udp_wrapping_packet_range_is_refused():
    decode = _compiled("nbmq.capture.datagrams._decode")
    buf = np.zeros(64, np.uint8)
    for start, length in [(2**63 - 1, 1), (1, 2**63 - 1), (2**62, 2**62), (-1, 1), (0, -1), (2**63 - 2, 2)]:
        with pytest.raises(ValueError, match="outside the buffer"):
            _decode_udp(decode, buf, [start], [length])
    _decode_udp(decode, buf, [0], [64])


@pytest.mark.parametrize("name", ["status", "family", "src", "dst", "sport", "dport", "pstart", "pend", "truncated"])
def test_decode_udp_checks_every_output_column(name):
    """An output column shorter than n (or src/dst narrower than 16) would be written past its end."""
    decode = _compiled("nbmq.capture.datagrams._decode")
    short = _decode_columns(1)[name]
    with pytest.raises(ValueError, match=name):
        _decode_udp(decode, np.zeros(64, np.uint8), [0, 0], [60, 60], **{name: short})
    if name in ("src", "dst"):
        with pytest.raises(ValueError, match="16"):
            _decode_udp(decode, np.zeros(64, np.uint8), [0, 0], [60, 60], **{name: np.zeros((2, 4), np.uint8)})


@SETTINGS
@given(extreme, extreme, extreme)
def test_decode_extreme_values_raise_or_stay_inside(start, length, other):
    decode = _compiled("nbmq.capture.datagrams._decode")
    buf = np.zeros(96, np.uint8)
    try:
        _decode_udp(decode, buf, [start, other], [length, 40])
    except ValueError:
        assert not (0 <= start <= 96 and 0 <= length <= 96 - start and 0 <= other <= 56)
    out = np.zeros(2, np.uint64)
    try:
        decode.fnv1a64_ranges(buf, np.array([start, other], np.int64), np.array([length, 4], np.int64), out)
    except ValueError:
        assert not (0 <= start <= 96 and 0 <= length <= 96 - start and 0 <= other <= 92)


# -- nbmq._codec: parse_frames, Reassembler.add_datagrams -------------------------------------


@SETTINGS
@given(st.lists(st.tuples(extreme, extreme), min_size=0, max_size=4), st.sampled_from(["int64", "int32", "uint64"]))
def test_codec_rows_with_extreme_offsets_match_the_twin(rows, dtype):
    """Rows outside the buffer are out-of-buffer rows (parse_frames) or malformed datagrams
    (add_datagrams) in both twins, whatever their values; unrepresentable values raise alike."""
    import importlib

    from fuzz.twins import outcome

    compiled = _compiled("nbmq._codec")
    python = importlib.import_module("nbmq._codec_py")
    from nbmq import codec

    frame = bytes(codec.encode_data_frame(7, 1, 1, 0, 3, 3, 0, b"abc"))
    buf = np.frombuffer(frame * 2, np.uint8)
    try:
        offsets = np.array([r[0] for r in rows] + [0], dtype)
        lengths = np.array([r[1] for r in rows] + [len(frame)], dtype)
    except OverflowError:
        return
    for fn in ("parse_frames",):
        results = []
        for m in (python, compiled):
            try:
                results.append(outcome(getattr(m, fn), buf, offsets, lengths))
            except (ValueError, TypeError) as e:
                results.append(("raise", type(e).__name__, str(e)))
        assert results[0] == results[1]
    results = []
    for m in (python, compiled):
        r = m.Reassembler()
        try:
            results.append((outcome(r.add_datagrams, buf, offsets, lengths, 0.0), r.malformed, r.completed))
        except (ValueError, TypeError) as e:
            results.append(("raise", type(e).__name__, str(e)))
    assert results[0] == results[1]


# -- nbmq.transports._batch ------------------------------------------------------------------


@pytest.mark.parametrize("slot", [0, -1, 65537, 2**31, 2**62, 2**63 - 1, -(2**63)])
def test_batch_io_slot_out_of_range_is_refused_by_both(slot):
    """batch * slot once wrapped for a huge slot: a receive buffer smaller than the kernel was told."""
    import socket

    from nbmq.transports import batch as python

    compiled = _built("nbmq.transports._batch")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for cls in (python.BatchIO, *([compiled.BatchIO] if compiled else [])):
            with pytest.raises((ValueError, OverflowError), match="slot|too big|convert"):
                cls(sock, 64, slot)
            assert cls(sock, 2, 65536, gro=False).buffer.size == 2 * 65536


@SETTINGS
@given(st.lists(extreme, min_size=7, max_size=7), st.binary(max_size=8))
def test_encode_data_frame_extreme_fields_match_the_twin(fields, chunk):
    """Header fields of any value: both encoders give the same bytes or the same error."""
    import importlib

    compiled = _compiled("nbmq._codec")
    python = importlib.import_module("nbmq._codec_py")
    out = []
    for m in (python, compiled):
        try:
            out.append(("ok", bytes(m.encode_data_frame(*fields, chunk))))
        except (ValueError, OverflowError, TypeError) as e:
            out.append(("raise", type(e).__name__, str(e)))
    assert out[0] == out[1]


def test_factorize_addresses_shapes_are_checked():
    decode = _compiled("nbmq.capture.datagrams._decode")
    fam, good = np.full(2, 4, np.uint8), np.zeros((2, 16), np.uint8)
    for src, dst in [
        (np.zeros((1, 16), np.uint8), good),
        (good, np.zeros((2, 4), np.uint8)),
        (np.zeros((3, 16), np.uint8), good),
    ]:
        with pytest.raises(ValueError, match="family, src and dst"):
            decode.factorize_addresses(fam, src, dst)
    codes = decode.factorize_addresses(fam, good, good)
    assert codes[0].tolist() == [0, 0] and codes[2].tolist() == [4]


def _datagrams_waiting(sock, most: int) -> list[bytes]:  # type: ignore[no-untyped-def]
    """Up to ``most`` datagrams from ``sock``, waiting at most 0.05 s for each."""
    import select

    got = []
    while len(got) < most and select.select([sock], [], [], 0.05)[0]:
        got.append(sock.recv(100))
    return got


@settings(max_examples=25, deadline=None)
@given(extreme, extreme)
def test_batch_io_recv_limit_and_send_start_match_the_twin(limit, start):
    """recv's limit and send's start of any value: both BatchIO classes read and send the same."""
    import select
    import socket

    from nbmq.transports import batch as python

    compiled = _compiled("nbmq.transports._batch")
    results = []
    for cls in (python.BatchIO, compiled.BatchIO):
        with (
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a,
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as b,
        ):
            a.bind(("127.0.0.1", 0))
            b.bind(("127.0.0.1", 0))
            a.setblocking(False)
            io = cls(a, 4, 64, gso=False, gro=False)
            try:
                sent = ("ok", io.send([(bytes([i]) * 10, b.getsockname()) for i in range(3)], start))
            except (ValueError, IndexError, OverflowError) as e:
                sent = ("raise", type(e).__name__)
            got = sorted(_datagrams_waiting(b, 3))
            b.sendto(b"abc", a.getsockname())
            b.sendto(b"de", a.getsockname())
            select.select([a], [], [], 1.0)
            try:
                n, offsets, lengths, _ = io.recv(limit)
                read = ("ok", [bytes(io.view[o : o + k]) for o, k in zip(offsets[:n].tolist(), lengths[:n].tolist())])
            except (ValueError, OverflowError) as e:
                read = ("raise", type(e).__name__)
            results.append((sent, got, read))
    assert results[0] == results[1]


@SETTINGS
@given(extreme, st.integers(0, 80), st.sampled_from(["data", "control", "bqsp"]))
def test_codec_offsets_into_buffers_match_the_twin(offset, size, which):
    """Writing a frame into, or reading a BQSP header from, a buffer at any offset: the same
    bytes or the same error from both twins; nothing written outside the buffer."""
    import importlib

    from fuzz.twins import outcome

    compiled = _compiled("nbmq._codec")
    python = importlib.import_module("nbmq._codec_py")
    out = []
    for m in (python, compiled):
        buf = bytearray(size)
        try:
            if which == "data":
                res = outcome(m.encode_data_frame_into, buf, offset, 1, 2, 1, 0, 3, 3, 0, b"abc")
            elif which == "control":
                res = outcome(m.encode_control_frame_into, buf, offset, 5, 1, b"12345678")
            else:
                res = outcome(m.decode_bqsp_header, bytes(range(size)), offset)
        except (ValueError, OverflowError, TypeError) as e:
            res = ("raise", type(e).__name__, str(e))
        out.append((res, bytes(buf)))
    assert out[0] == out[1]
