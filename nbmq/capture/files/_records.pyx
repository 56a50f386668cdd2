# cython: boundscheck=False, wraparound=False, cdivision=True
"""Compiled hot loop of the classic pcap record walk (see ``nbmq.capture.files.records``).

``walk_chain`` follows the chain of record headers in one pass over the buffer, collecting the
offsets of the headers that pass the *reading* test (``incl_len <= max_incl`` and seconds not
before ``min_sec``) and stopping at the first one that fails it. What to do at a failing or cut
record (log, resynchronise, stop) stays in ``RecordScanner.walk``, shared with the Python loop.
"""

import numpy as np

cimport numpy as cnp
from libc.stdint cimport int64_t, uint32_t
from libc.string cimport memcpy

cnp.import_array()

cdef extern from *:
    void __builtin_prefetch(const void* addr) noexcept nogil

#: Largest record header length ``walk_chain`` accepts (bytes): keeps ``hl + incl_len`` far from wrapping.
MAX_HEADER = 1 << 16


cdef inline uint32_t _u32(const unsigned char* p, bint big) noexcept nogil:
    if big:
        return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3]
    return (<uint32_t>p[3] << 24) | (<uint32_t>p[2] << 16) | (<uint32_t>p[1] << 8) | <uint32_t>p[0]


def walk_chain(const unsigned char[::1] buf, int64_t pos, int64_t last, int64_t hl, bint big,
               int64_t max_incl, int64_t min_sec):
    """Follow record headers from ``pos`` while they start below ``last``.

    Args:
        buf: the capture bytes (any read-only or writable 1-D byte buffer).
        pos: byte offset of a record header.
        last: headers must start below this offset; must be <= ``len(buf) - hl + 1``.
        hl: record header length (16); at least 12 (the walk reads the seconds at +0 and
            ``incl_len`` at +8), at most ``MAX_HEADER``.
        big: the file is big-endian.
        max_incl: largest acceptable ``incl_len``.
        min_sec: smallest acceptable seconds field.

    Returns:
        ``(offsets, end, bad)``: int64 array of accepted header offsets (increasing); ``end``
        is the offset after the last accepted record (where the walk stopped), or the offset
        of the first failing header when ``bad`` is True.

    Raises:
        ValueError: ``hl`` outside 12..MAX_HEADER, a negative ``pos``, or ``last`` past
            ``len(buf) - hl + 1`` (every header read must lie inside ``buf``).
    """
    if not 12 <= hl <= MAX_HEADER:
        raise ValueError(f"hl must be within 12..{MAX_HEADER}, got {hl}")
    if pos < 0:
        raise ValueError(f"pos must be >= 0, got {pos}")
    if last > <int64_t>buf.shape[0] - hl + 1:  # no wrap: 0 <= hl <= MAX_HEADER
        raise ValueError("last past the end of the buffer")
    cdef int64_t cap = 1024
    cdef int64_t span = last - pos if last > pos else 0  # no wrap: pos >= 0
    if span // 64 + 16 > cap:
        cap = span // 64 + 16
    out = np.empty(cap, np.int64)
    cdef int64_t[::1] o = out
    cdef int64_t n = 0
    cdef int64_t p = pos
    cdef int64_t ahead = pos
    cdef bint bad = False
    cdef const unsigned char* base = &buf[0] if buf.shape[0] > 0 else NULL
    cdef uint32_t sec, incl
    while p < last:
        sec = _u32(base + p, big)
        incl = _u32(base + p + 8, big)
        if <int64_t>incl > max_incl or <int64_t>sec < min_sec:
            bad = True
            break
        if n == cap:
            cap *= 2
            out = np.resize(out, cap)
            o = out
        o[n] = p
        n += 1
        p += hl + incl
        # the next header's position depends on this one, so the cache misses would not
        # overlap: stream every line up to 4 KiB ahead instead (prefetches never fault)
        while ahead < p + 4096:
            __builtin_prefetch(base + ahead)
            ahead += 64
    return out[:n].copy() if n < cap // 2 else out[:n], p, bad


def walk_fields(const unsigned char[::1] buf, const int64_t[::1] offsets, bint big):
    """``(seconds, fraction, incl_len)`` of the record headers at ``offsets``, as int64 arrays.

    Offsets must leave 12 bytes of header inside ``buf`` (as ``walk_chain`` returns them).

    Raises:
        IndexError: an offset leaves fewer than 12 bytes of ``buf`` (as numpy indexing would).
    """
    cdef Py_ssize_t n = offsets.shape[0], i
    cdef int64_t p
    sec = np.empty(n, np.int64)
    frac = np.empty(n, np.int64)
    incl = np.empty(n, np.int64)
    cdef int64_t[::1] s = sec, f = frac, c = incl
    cdef const unsigned char* base
    if n == 0:
        return sec, frac, incl
    base = &buf[0]
    for i in range(n):
        p = offsets[i]
        if p < 0 or p > buf.shape[0] - 12:  # not p + 12 > size: that wraps for p near 2**63
            raise IndexError("record header outside the buffer")
        s[i] = _u32(base + p, big)
        f[i] = _u32(base + p + 4, big)
        c[i] = _u32(base + p + 8, big)
    return sec, frac, incl


def gather(const unsigned char[::1] buf, const int64_t[::1] starts, const int64_t[::1] lengths):
    """Copy ``buf[starts[i] : starts[i] + lengths[i]]`` back to back (memcpy per range).

    Raises:
        IndexError: a range outside ``buf`` or a negative length (the caller falls back to
            numpy slicing on it).
        ValueError: ``starts`` and ``lengths`` differ in length, or the lengths add up past 2**62.
    """
    cdef Py_ssize_t n = starts.shape[0], i
    cdef int64_t total = 0, size = buf.shape[0], a, k
    if lengths.shape[0] != n:
        raise ValueError(f"starts and lengths differ in length ({n} and {lengths.shape[0]})")
    for i in range(n):
        a = starts[i]
        k = lengths[i]
        if k < 0 or a < 0 or a > size - k:  # not a + k > size: that wraps
            raise IndexError(f"starts/lengths: range {i} outside the buffer")
        total += k  # no wrap: k <= size, and total is checked against 2**62 each step
        if total > (<int64_t>1 << 62):
            raise ValueError("lengths add up past 2**62 bytes")
    out = np.empty(total, np.uint8)
    if total == 0:
        return out
    cdef unsigned char[::1] o = out
    cdef unsigned char* dst = &o[0]
    cdef const unsigned char* src = &buf[0]
    with nogil:
        for i in range(n):
            k = lengths[i]
            if k:
                memcpy(dst, src + starts[i], <size_t>k)
                dst += k
    return out
