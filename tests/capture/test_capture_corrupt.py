"""Damaged input never crashes: cut files, garbage, unknown link types, non-captures."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbmq.capture import CaptureError, read_datagrams, write_pcap, write_pcapng
from nbmq.capture.files.errorlog import ErrorLog
from nbmq.capture.files.formats import parse_pcap_header
from nbmq.capture.files.records import RecordScanner
from nbmq.errors import NbmqError

T0 = 1_795_312_315.0


def _small_rows(n: int = 120) -> list[tuple]:
    rng = np.random.default_rng(3)
    return [
        (
            T0 + i * 0.01,
            "::1" if i % 5 == 0 else "127.0.0.1",
            40000,
            "::2" if i % 5 == 0 else "127.0.0.2",
            47101,
            rng.bytes(int(rng.integers(0, 400))),
        )
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def small_pcap(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("c") / "small.pcap"
    write_pcap(path, _small_rows())
    return path.read_bytes()


@pytest.fixture(scope="module")
def small_pcapng(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("c") / "small.pcapng"
    write_pcapng(path, _small_rows(), nanosecond=True)
    return path.read_bytes()


def _record_ends(data: bytes) -> np.ndarray:
    scanner = RecordScanner(data, len(data), parse_pcap_header(data, len(data)))
    offsets = scanner.walk(24, len(data), ErrorLog())
    _sec, _frac, incl = scanner.fields(offsets)
    return offsets + 16 + incl


def _check_cut(data: bytes, ends: np.ndarray, cut: int, engine: str) -> None:
    head = memoryview(data)[:cut]  # no copy per cut point
    if cut < 24:
        with pytest.raises(CaptureError):
            read_datagrams(head, engine=engine)
        return
    batch = read_datagrams(head, engine=engine)
    whole = int(np.searchsorted(ends, cut, side="right"))  # records entirely before the cut
    np.testing.assert_array_equal(batch.frame_number, np.arange(1, whole + 1))
    at_boundary = cut == 24 or (whole > 0 and int(ends[whole - 1]) == cut)
    assert batch.errors == (0 if at_boundary else 1)
    if not at_boundary:
        assert "truncated record" in batch.error_reasons[0]


def test_truncation_every_997th_byte_bundled(captures_dir):
    data = (captures_dir / "safe_dealer.pcap").read_bytes()
    ends = _record_ends(data)
    for cut in range(0, len(data), 997):
        _check_cut(data, ends, cut, "fast")


def test_truncation_every_997th_byte_both_engines(small_pcap):
    ends = _record_ends(small_pcap)
    for cut in list(range(0, len(small_pcap), 997)) + [1, 4, 23, 24, 25, 39, 40, 41, len(small_pcap) - 1]:
        for engine in ("fast", "dpkt"):
            _check_cut(small_pcap, ends, cut, engine)


def test_truncated_pcapng(small_pcapng):
    whole = read_datagrams(small_pcapng)
    assert len(whole) == 120
    for cut in range(0, len(small_pcapng), 97):
        for engine in ("fast", "dpkt"):
            if cut < 12:
                with pytest.raises(CaptureError):
                    read_datagrams(small_pcapng[:cut], engine=engine)
                continue
            batch = read_datagrams(small_pcapng[:cut], engine=engine)
            n = len(batch)
            np.testing.assert_array_equal(batch.frame_number, np.arange(1, n + 1))
            assert batch.same_rows(_head(whole, n))
            assert batch.errors <= 1


def _head(batch, n):
    from nbmq.capture import DatagramBatch

    if n == 0:
        return DatagramBatch.empty()
    end = int(batch.offsets[n - 1] + batch.lengths[n - 1])
    return DatagramBatch(
        batch.timestamp[:n],
        batch.timestamp_ns[:n],
        batch.src_addr[:n],
        batch.dst_addr[:n],
        batch.src_port[:n],
        batch.dst_port[:n],
        batch.payload[:end],
        batch.offsets[:n],
        batch.lengths[:n],
        batch.frame_number[:n],
        batch.truncated[:n],
    )


def test_zeroed_region_is_skipped_and_reading_resumes(captures_dir):
    data = bytearray((captures_dir / "dealer.pcap").read_bytes())
    whole = read_datagrams(bytes(data))
    ends = _record_ends(bytes(data))
    starts = np.concatenate([[24], ends[:-1]])
    a, b = 1_000_003, 1_020_011
    data[a:b] = bytes(b - a)
    for engine in ("fast", "dpkt"):
        batch = read_datagrams(bytes(data), engine=engine)
        assert batch.errors >= 1 and "implausible record header" in batch.error_reasons[0]
        got = set(batch.timestamp_ns.tolist())
        before = whole.timestamp_ns[ends <= a]
        after = whole.timestamp_ns[starts >= b]
        assert set(before.tolist()) <= got and set(after.tolist()) <= got
        assert len(batch) <= len(before) + len(after) + 1


def test_inserted_garbage_is_skipped(captures_dir):
    data = (captures_dir / "safe_dealer.pcap").read_bytes()
    ends = _record_ends(data)
    cut = int(ends[1000])
    garbage = np.random.default_rng(9).bytes(5000)
    broken = data[:cut] + garbage + data[cut:]
    whole = read_datagrams(data)
    for engine in ("fast", "dpkt"):
        batch = read_datagrams(broken, engine=engine)
        assert batch.errors == 1 and batch.error_reasons == [f"offset {cut}: implausible record header"]
        assert batch.same_rows(whole)  # resynchronised on the very next record: nothing lost


def test_unknown_linktype(pkt, tmp_path):
    from nbmq.capture import write_pcap_packets

    path = tmp_path / "u.pcap"
    write_pcap_packets(path, [(T0, pkt.ipv4(pkt.udp(b"x")))] * 3, linktype=147)
    for engine in ("fast", "dpkt"):
        b = read_datagrams(path, engine=engine)
        assert (len(b), b.packets, b.errors) == (0, 3, 3)
        assert b.error_reasons[0] == "frame 1: unsupported link type 147"


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xd4\xc3",
        b"hello world, this is not a capture at all",
        bytes(100),
        b"\xd4\xc3\xb2\xa1" + bytes(10),
        b"\x0a\x0d\x0d\x0a" + bytes(20),
    ],
)
def test_not_a_capture(data, tmp_path):
    for engine in ("fast", "dpkt"):
        with pytest.raises(CaptureError) as info:
            read_datagrams(data, engine=engine)
        assert isinstance(info.value, ValueError) and isinstance(info.value, NbmqError)
    path = tmp_path / "f"
    path.write_bytes(data)
    with pytest.raises(CaptureError):
        read_datagrams(path)


def test_bad_arguments(captures_dir):
    with pytest.raises(ValueError):
        read_datagrams(captures_dir / "dealer.pcap", engine="turbo")
    with pytest.raises(ValueError):
        read_datagrams(captures_dir / "dealer.pcap", start=-1)
    with pytest.raises(FileNotFoundError):
        read_datagrams(captures_dir / "missing.pcap")


_PCAP_HEADER = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=3000))
def test_random_bytes_only_raise_capture_error(blob):
    for data in (blob, _PCAP_HEADER + blob, b"\x0a\x0d\x0d\x0a" + blob):
        for engine in ("fast", "dpkt"):
            try:
                batch = read_datagrams(data, engine=engine)
            except CaptureError:
                continue
            assert len(batch) + batch.skipped <= batch.packets <= len(batch) + batch.skipped + batch.errors


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 255)), min_size=1, max_size=30))
def test_random_byte_flips_never_crash(small_pcap, small_pcapng, flips):
    for original in (small_pcap, small_pcapng):
        data = bytearray(original)
        for pos, value in flips:
            data[pos % len(data)] = value
        for engine in ("fast", "dpkt"):
            try:
                batch = read_datagrams(bytes(data), engine=engine)
            except CaptureError:  # a flip in the magic number
                continue
            assert len(batch) <= batch.packets


def test_pcapng_timestamp_out_of_range(pkt):
    import dpkt

    frame = pkt.eth(pkt.ipv4(pkt.udp(b"x")))
    shb = bytes(dpkt.pcapng.SectionHeaderBlockLE())
    idb = bytes(dpkt.pcapng.InterfaceDescriptionBlockLE(linktype=1, snaplen=0))

    def epb(hi: int) -> bytes:
        return bytes(
            dpkt.pcapng.EnhancedPacketBlockLE(
                ts_high=hi, ts_low=0, caplen=len(frame), pkt_len=len(frame), pkt_data=frame
            )
        )

    data = shb + idb + epb(0xFFFFFFFF) + epb(0)
    for engine in ("fast", "dpkt"):
        b = read_datagrams(data, engine=engine)
        assert list(b.frame_number) == [2] and b.errors == 1
        assert "timestamp out of range" in b.error_reasons[0]


def _epb_offsets(data: bytes) -> list[int]:
    pos, found = 0, []
    while pos + 8 <= len(data):
        btype, blen = struct.unpack_from("<II", data, pos)
        if btype == 6:
            found.append(pos)
        pos += blen
    return found


def test_pcapng_flipped_length_bit_framed_by_the_trailing_copy(captures_dir):
    """An EPB length of 576 read as 33,555,008 used to end the file ("truncated block")."""
    data = (captures_dir / "dealer.pcapng").read_bytes()
    at = [p for p in _epb_offsets(data) if struct.unpack_from("<I", data, p + 4)[0] == 576][2000]
    broken = bytearray(data)
    broken[at + 7] ^= 0x02  # bit 25 of the leading block length
    assert struct.unpack_from("<I", broken, at + 4)[0] == 33_555_008
    for engine in ("fast", "dpkt"):
        clean = read_datagrams(data, engine=engine)
        batch = read_datagrams(bytes(broken), engine=engine)
        assert batch.same_rows(clean) and len(batch) == 6538  # the trailing copy frames the block
        assert batch.errors == 1 and batch.error_reasons == [f"offset {at}: truncated block; trailing length copy used"]


@pytest.mark.parametrize("where", ["leading", "trailing"])
def test_pcapng_any_flipped_length_bit_costs_one_error(small_pcapng, where):
    whole = read_datagrams(small_pcapng)
    at = _epb_offsets(small_pcapng)[60]
    blen = struct.unpack_from("<I", small_pcapng, at + 4)[0]
    field = at + 4 if where == "leading" else at + blen - 4
    for bit in range(32):
        broken = bytearray(small_pcapng)
        broken[field + bit // 8] ^= 1 << (bit % 8)
        for engine in ("fast", "dpkt"):
            batch = read_datagrams(bytes(broken), engine=engine)
            assert batch.errors == 1, (bit, batch.error_reasons)
            assert batch.same_rows(whole), bit  # nothing lost: one length copy frames the block


def test_pcapng_damaged_lengths_skip_only_their_block(small_pcapng):
    whole = read_datagrams(small_pcapng)
    offsets = _epb_offsets(small_pcapng)
    broken = bytearray(small_pcapng)
    for at in (offsets[10], offsets[70]):  # both copies damaged: the block is skipped, counted
        blen = struct.unpack_from("<I", broken, at + 4)[0]
        struct.pack_into("<I", broken, at + 4, blen + 4096)
        struct.pack_into("<I", broken, at + blen - 4, 8)
    for engine in ("fast", "dpkt"):
        batch = read_datagrams(bytes(broken), engine=engine)
        assert batch.errors == 2 and len(batch) == len(whole) - 2
        assert set(batch.frame_number.tolist()) == set(whole.frame_number.tolist()) - {11, 71}


@pytest.mark.parametrize("edit", ["delete", "insert"])
def test_pcapng_byte_deleted_or_inserted_costs_only_its_block(small_pcapng, edit):
    # every later block is off the 4-byte grid: reading must find it at any byte offset
    whole = read_datagrams(small_pcapng)
    at = _epb_offsets(small_pcapng)[40] + 28 + 5  # inside the 41st packet's bytes
    data = (
        small_pcapng[:at] + small_pcapng[at + 1 :]
        if edit == "delete"
        else small_pcapng[:at] + b"\0" + small_pcapng[at:]
    )
    for engine in ("fast", "dpkt"):
        batch = read_datagrams(data, engine=engine)
        assert batch.errors == 1 and "block lengths differ" in batch.error_reasons[0]
        assert set(batch.frame_number.tolist()) == set(whole.frame_number.tolist()) - {41}
        assert len(batch) == len(whole) - 1


def test_pcapng_ranges_count_each_error_once(small_pcapng):
    from nbmq.capture import DatagramBatch

    offsets = _epb_offsets(small_pcapng)
    broken = bytearray(small_pcapng)
    broken[offsets[30] + 7] ^= 0x02  # a flipped length bit: read, one error
    blen = struct.unpack_from("<I", broken, offsets[80] + 4)[0]
    struct.pack_into("<I", broken, offsets[80] + 4, blen + 4096)  # both copies bad: skipped
    struct.pack_into("<I", broken, offsets[80] + blen - 4, 8)
    data = bytes(broken)
    whole = read_datagrams(data)
    assert whole.errors == 2 and len(whole) == 119
    for step in (97, len(data) // 3 + 1):
        cuts = list(range(0, len(data), step)) + [len(data)]
        parts = [read_datagrams(data, start=a, end=b) for a, b in zip(cuts, cuts[1:])]
        union = DatagramBatch.concat(parts)
        assert union.same_rows(whole) and union.errors == whole.errors
