# cython: language_level=3, embedsignature=True
"""Compiled twin of ``nbmq.spark._reassemble_py.reassemble_groups``: same arguments, same results.

The codec Reassembler's rules for one message at a time, in C: received bytes are tracked with a
byte map (so "inside one received range" is "every byte received"), parts are written straight
into the output buffer. A group this loop does not model (a claim larger than the bytes left,
header values outside the wire's ranges in an incomplete group, more than 256 frames that can
never complete) goes to the Python reference (``reassemble_group``), so the results never differ.
Both twins check their arguments with the same ``check_arguments`` before any byte is read.
"""

cimport cython
from cpython.buffer cimport PyBUF_READ
from cpython.memoryview cimport PyMemoryView_FromMemory
from libc.stdint cimport int64_t, uint8_t
from libc.stdlib cimport free, malloc, qsort, realloc
from libc.string cimport memchr, memcmp, memcpy, memset

import hashlib

import numpy as np

from ._reassemble_py import _coverage, check_arguments, group_frames, reassemble_group

__all__ = ["reassemble_groups"]

cdef int64_t U32 = 0xFFFFFFFF


cdef struct Part:
    int64_t size  # -1: no frame of this part yet
    int64_t base  # where its bytes start in the message's region
    int64_t received
    bint done


cdef object _sha256 = hashlib.sha256
cdef char _nothing = 0


cdef int _digest(const uint8_t* data, int64_t size, uint8_t[:, ::1] out, Py_ssize_t slot) except -1:
    """sha256 of ``data[:size]`` into ``out[slot]`` (hashlib's: the digest stays the reference's)."""
    cdef bytes d = _sha256(PyMemoryView_FromMemory(<char*> data if size else &_nothing, size, PyBUF_READ)).digest()
    memcpy(&out[slot, 0], <const char*> d, 32)
    return 0


cdef struct Span:
    int64_t index
    int64_t start
    int64_t end


cdef int _by_start(const void* x, const void* y) noexcept nogil:
    cdef const Span* a = <const Span*> x
    cdef const Span* b = <const Span*> y
    if a.index != b.index:
        return -1 if a.index < b.index else 1
    if a.start != b.start:
        return -1 if a.start < b.start else 1
    return 0


cdef class _State:
    """Scratch of one call: the message's parts, its byte map, span and buffer tables."""
    cdef Part parts[256]
    cdef uint8_t* seen
    cdef int64_t seen_cap
    cdef Span* spans
    cdef int64_t spans_cap
    cdef uint8_t* tmp
    cdef int64_t tmp_cap
    cdef const uint8_t** ptrs

    def __dealloc__(self):
        free(self.seen)
        free(self.spans)
        free(self.tmp)
        free(self.ptrs)

    cdef int grow_seen(self, int64_t size) except -1:
        cdef uint8_t* p
        if size > self.seen_cap:
            p = <uint8_t*> realloc(self.seen, size)
            if p == NULL:
                raise MemoryError()
            self.seen, self.seen_cap = p, size
        return 0

    cdef int grow_spans(self, int64_t count) except -1:
        cdef Span* p
        if count > self.spans_cap:
            p = <Span*> realloc(self.spans, count * sizeof(Span))
            if p == NULL:
                raise MemoryError()
            self.spans, self.spans_cap = p, count
        return 0

    cdef int grow_tmp(self, int64_t size) except -1:
        cdef uint8_t* p
        if size > self.tmp_cap:
            p = <uint8_t*> realloc(self.tmp, size)
            if p == NULL:
                raise MemoryError()
            self.tmp, self.tmp_cap = p, size
        return 0


@cython.boundscheck(False)
@cython.wraparound(False)
def reassemble_groups(bounds, part_count, part_index, message_size, part_size, chunk_offset,
                      buffers, buf_id, chunk_start, chunk_len, max_message_size, bint keep_parts=True):
    """Reassemble every group of frames sorted by key and capture order (see the twin's docstring)."""
    (bounds, part_count, part_index, message_size, part_size, chunk_offset, buf_id, chunk_start,
     chunk_len) = check_arguments(bounds, [part_count, part_index, message_size, part_size, chunk_offset, buf_id,
                                           chunk_start, chunk_len], buffers, max_message_size)
    # from here on: rows sum to at most MAX_TOTAL_BYTES, part counts fit a u8, chunks lie in their buffer
    bounds = np.ascontiguousarray(bounds)
    cdef const int64_t[::1] bnd = bounds
    cdef const int64_t[::1] pc = np.ascontiguousarray(part_count)
    cdef const int64_t[::1] pi = np.ascontiguousarray(part_index)
    cdef const int64_t[::1] msz = np.ascontiguousarray(message_size)
    cdef const int64_t[::1] psz = np.ascontiguousarray(part_size)
    cdef const int64_t[::1] off = np.ascontiguousarray(chunk_offset)
    cdef const int64_t[::1] bid = np.ascontiguousarray(buf_id)
    cdef const int64_t[::1] cst = np.ascontiguousarray(chunk_start)
    cdef const int64_t[::1] cln = np.ascontiguousarray(chunk_len)
    cdef int64_t limit = max_message_size
    cdef Py_ssize_t n = pc.shape[0]
    cdef Py_ssize_t g = bnd.shape[0] - 1
    cdef Py_ssize_t nb = len(buffers)
    cdef _State st = _State()
    cdef const uint8_t[::1] view
    cdef Py_ssize_t i, r, a, e, j, k
    st.ptrs = <const uint8_t**> malloc((nb + 1) * sizeof(uint8_t*))
    if st.ptrs == NULL:
        raise MemoryError()
    held = []
    for i in range(nb):
        arr = np.frombuffer(buffers[i], np.uint8)
        held.append(arr)
        view = arr
        st.ptrs[i] = &view[0] if view.shape[0] else NULL

    capacity = int(np.asarray(cln).sum()) if n else 0
    pcmax = np.maximum.reduceat(np.asarray(pc), bounds[:g]) if g else np.zeros(0, np.int64)
    n_slots = int(np.clip(pcmax, 0, None).sum())
    data = np.empty(capacity, np.uint8)
    out_complete = np.zeros(g, np.uint8)
    out_count = np.zeros(g, np.int32)
    out_size = np.zeros(g, np.int64)
    out_dup = np.zeros(g, np.int64)
    out_rej = np.zeros(g, np.int64)
    out_missing = np.zeros(g, np.int64)
    slots = np.zeros(g + 1, np.int64)
    slot_size = np.empty(n_slots, np.int64)
    slot_start = np.empty(n_slots, np.int64)
    digests = np.zeros((n_slots, 32), np.uint8)
    cdef uint8_t[:, ::1] dg = digests
    cdef uint8_t[::1] d = data
    cdef uint8_t* dp = &d[0] if capacity else NULL
    cdef uint8_t[::1] o_complete = out_complete
    cdef int[::1] o_count = out_count
    cdef int64_t[::1] o_size = out_size, o_dup = out_dup, o_rej = out_rej, o_missing = out_missing
    cdef int64_t[::1] o_slots = slots, s_size = slot_size, s_start = slot_start
    cdef int64_t cursor = 0, ns = 0, total, ms0, pc0, dups, rej, covered, reach, x, y
    cdef int status  # 1 complete, 0 incomplete, -1 the Python reference
    cdef int64_t sizes[256]
    cdef const uint8_t* src
    cdef const uint8_t* other
    cdef Span* sp
    for i in range(g):
        a, e = bnd[i], bnd[i + 1]
        ms0, pc0 = msz[a], pc[a]
        dups = rej = 0
        total = 0
        for r in range(a, e):
            total += cln[r]
        if (e - a == 1 and pc0 == 1 and off[a] == 0 and cln[a] == psz[a] and psz[a] == ms0
                and ms0 <= limit):
            # a whole message in one frame
            _digest(st.ptrs[bid[a]] + cst[a], cln[a], dg, ns)
            s_size[ns], s_start[ns] = cln[a], cursor
            ns += 1
            if keep_parts and cln[a]:
                memcpy(dp + cursor, st.ptrs[bid[a]] + cst[a], cln[a])
                cursor += cln[a]
            o_complete[i], o_count[i], o_size[i] = 1, 1, cln[a]
            o_slots[i + 1] = ns
            continue
        if total >= ms0:
            status = _message(st, a, e, pc, pi, msz, psz, off, bid, cst, cln, limit, dp, capacity,
                              &cursor, &dups, &rej, s_size, s_start, &ns)
            if status == 1:
                for k in range(o_slots[i], ns):
                    _digest(dp + s_start[k], s_size[k], dg, k)
                if not keep_parts:
                    cursor = 0
                    for k in range(o_slots[i], ns):
                        s_start[k] = 0
        elif e - a <= 256:
            # can never complete: duplicates are exact repeats of (part, offset, bytes)
            status = 0
            for r in range(a + 1, e):
                src = st.ptrs[bid[r]] + cst[r] if cln[r] else NULL
                for k in range(a, r):
                    if pi[k] == pi[r] and off[k] == off[r] and cln[k] == cln[r]:
                        other = st.ptrs[bid[k]] + cst[k] if cln[k] else NULL
                        if cln[r] == 0 or memcmp(src, other, cln[r]) == 0:
                            dups += 1
                            break
        else:
            status = -1
        if status == 1:
            o_complete[i] = 1
            o_count[i] = <int> (ns - o_slots[i])
            o_size[i] = 0
            for k in range(o_slots[i], ns):
                o_size[i] += s_size[k]
        elif status == 0:
            # incomplete: part sizes (first frame of each part) and distinct bytes from the headers
            for k in range(256):
                sizes[k] = -1
            for r in range(a, e):
                if not (0 <= pi[r] < 256 and 0 <= psz[r] <= U32 and 0 <= off[r] <= U32):
                    status = -1
                    break
            if status == 0:
                st.grow_spans(e - a)
                sp = st.spans
                k = 0
                for r in range(a, e):
                    if sizes[pi[r]] < 0:
                        sizes[pi[r]] = psz[r]
                    if psz[r] != sizes[pi[r]]:
                        continue
                    y = psz[r] if cln[r] > psz[r] - off[r] else off[r] + cln[r]  # min(off + cln, psz), no wrap
                    if y > off[r]:
                        sp[k].index, sp[k].start, sp[k].end = pi[r], off[r], y
                        k += 1
                qsort(sp, k, sizeof(Span), _by_start)
                covered = 0
                for j in range(k):
                    if j == 0 or sp[j].index != sp[j - 1].index:
                        reach = 0
                    if sp[j].end > reach:
                        x = sp[j].start if sp[j].start > reach else reach
                        covered += sp[j].end - x
                        reach = sp[j].end
                o_count[i] = <int> pc0
                o_size[i] = ms0
                o_missing[i] = ms0 - covered if ms0 > covered else 0
                for j in range(pc0 if pc0 > 0 else 0):
                    s_size[ns] = sizes[j] if j < 256 else -1
                    s_start[ns] = 0
                    ns += 1
        if status == -1:
            cursor, ns = _reference(i, a, e, pc, pi, msz, psz, off, buffers, bid, cst, cln, limit, data,
                                    cursor, ns, out_complete, out_count, out_size, out_dup, out_rej,
                                    out_missing, slot_size, slot_start, digests, keep_parts)
        else:
            o_dup[i], o_rej[i] = dups, rej
        o_slots[i + 1] = ns
    return (out_complete, out_count, out_size, out_dup, out_rej, out_missing, slots,
            slot_size[:ns], slot_start[:ns], digests[:ns], data[:cursor])


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int _message(_State st, Py_ssize_t a, Py_ssize_t e, const int64_t[::1] pc, const int64_t[::1] pi,
                  const int64_t[::1] msz, const int64_t[::1] psz, const int64_t[::1] off,
                  const int64_t[::1] bid, const int64_t[::1] cst, const int64_t[::1] cln, int64_t limit,
                  uint8_t* dp, int64_t capacity, int64_t* cursor, int64_t* dups, int64_t* rej,
                  int64_t[::1] s_size, int64_t[::1] s_start, int64_t* ns) except -2:
    """The codec Reassembler's ``add`` for one group's frames, in order, one message at a time.

    Returns 1 (completed: its parts written at ``cursor`` in part order, slots filled), 0
    (incomplete), or -1 (a claim this loop does not hold: the caller asks the reference)."""
    cdef Part* parts = st.parts
    cdef Part* p
    cdef bint active = False
    cdef int64_t m_pc = 0, m_ms = 0, sizes_seen = 0, parts_seen = 0, parts_done = 0
    cdef int64_t start, end, size, at, j
    cdef uint8_t* region = dp + cursor[0] if dp != NULL else NULL
    cdef uint8_t* seen
    cdef const uint8_t* chunk
    cdef Py_ssize_t r
    cdef bint ordered
    cdef bint mapped = False  # received bytes tracked in st.seen; until then each part's are [0, received)
    for r in range(a, e):
        # the field checks of Reassembler.add (frames from parse_frame always pass them)
        if not (0 < pc[r] <= 255 and 0 <= pi[r] < pc[r] and 0 <= msz[r] <= U32 and 0 <= psz[r] <= U32
                and 0 <= off[r] <= U32):
            rej[0] += 1
            active = False
            continue
        if not active:
            if msz[r] > limit:
                rej[0] += 1  # FrameTooLarge: nothing held, nothing dropped
                continue
            if msz[r] > capacity - cursor[0]:
                return -1  # more than every byte left could fill: the reference path
            active = True
            m_pc, m_ms = pc[r], msz[r]
            sizes_seen = parts_seen = parts_done = 0
            mapped = False
            for j in range(m_pc):
                parts[j].size = -1
        elif pc[r] != m_pc or msz[r] != m_ms:
            rej[0] += 1
            active = False
            continue
        p = &parts[pi[r]]
        if p.size < 0:
            sizes_seen += psz[r]
            if sizes_seen > m_ms:
                rej[0] += 1
                active = False
                continue
            p.size, p.base, p.received, p.done = psz[r], sizes_seen - psz[r], 0, False
            parts_seen += 1
        elif psz[r] != p.size:
            rej[0] += 1
            active = False
            continue
        size = cln[r]
        start = off[r]
        end = start + size
        if end > p.size:
            rej[0] += 1
            active = False
            continue
        if size == 0:
            if p.done or p.size:
                dups[0] += 1
                continue
        else:
            chunk = st.ptrs[bid[r]] + cst[r]
            if not mapped and start > p.received:
                # a gap: from now on a byte map says which bytes are in
                mapped = True
                st.grow_seen(m_ms)
                memset(st.seen, 0, m_ms)
                for j in range(m_pc):
                    if parts[j].size > 0 and parts[j].received:
                        memset(st.seen + parts[j].base, 1, parts[j].received)
        if size == 0:
            pass
        elif not mapped:
            if start < p.received:  # starts inside the received prefix
                if end <= p.received and memcmp(region + p.base + start, chunk, size) == 0:
                    dups[0] += 1
                    continue
                rej[0] += 1
                active = False
                continue
            memcpy(region + p.base + start, chunk, size)  # right after the prefix: nothing after it is in
            p.received += size
        else:
            seen = st.seen + p.base + start
            if seen[0]:
                if memchr(seen, 0, size) == NULL and memcmp(region + p.base + start, chunk, size) == 0:
                    dups[0] += 1
                    continue
                rej[0] += 1
                active = False
                continue
            if memchr(seen, 1, size) != NULL:
                rej[0] += 1
                active = False
                continue
            memcpy(region + p.base + start, chunk, size)
            memset(seen, 1, size)
            p.received += size
        if p.received < p.size:
            continue
        p.done = True
        parts_done += 1
        if parts_done < m_pc:
            if parts_done < parts_seen or sizes_seen != m_ms:
                continue
        elif sizes_seen != m_ms:
            rej[0] += 1
            active = False
            continue
        # complete: every later frame of the group is a duplicate
        dups[0] += e - 1 - r
        ordered = True
        at = 0
        for j in range(m_pc):
            if parts[j].size >= 0:
                if parts[j].base != at:
                    ordered = False
                at += parts[j].size
        if not ordered:  # parts came out of index order: lay them out in part order
            st.grow_tmp(m_ms)
            memcpy(st.tmp, region, m_ms)
            at = 0
            for j in range(m_pc):
                if parts[j].size > 0:
                    memcpy(region + at, st.tmp + parts[j].base, parts[j].size)
                    at += parts[j].size
        at = 0
        for j in range(m_pc):
            size = parts[j].size if parts[j].size >= 0 else 0
            s_size[ns[0]] = size
            s_start[ns[0]] = cursor[0] + at
            ns[0] += 1
            at += size
        cursor[0] += m_ms
        return 1
    return 0


def _reference(i, a, e, pc, pi, msz, psz, off, buffers, bid, cst, cln, limit, data, cursor, ns,
               out_complete, out_count, out_size, out_dup, out_rej, out_missing, slot_size, slot_start,
               digests, keep_parts):
    """Group ``i`` (rows ``a:e``) by the Python reference; its results written in place.

    Returns the new (cursor, slot count)."""
    rows, chunks = group_frames(a, e, np.asarray(pc), np.asarray(pi), np.asarray(msz), np.asarray(psz),
                                np.asarray(off), buffers, np.asarray(bid), np.asarray(cst), np.asarray(cln))
    done, out_dup[i], out_rej[i] = reassemble_group(rows, chunks, limit)
    if done is not None:
        out_complete[i] = 1
        out_count[i] = len(done)
        out_size[i] = 0
        for part in done:
            blob = bytes(part)
            if cursor + len(blob) > len(data):
                raise RuntimeError("completed parts past the output buffer")  # cannot happen: bytes <= input
            digests[ns] = np.frombuffer(hashlib.sha256(blob).digest(), np.uint8)
            slot_size[ns], slot_start[ns] = len(blob), cursor if keep_parts else 0
            ns += 1
            if keep_parts:
                data[cursor : cursor + len(blob)] = np.frombuffer(blob, np.uint8)
                cursor += len(blob)
            out_size[i] += len(blob)
        return cursor, ns
    found, covered = _coverage(rows, chunks)
    pc0, ms0 = rows[0][0], rows[0][2]
    out_count[i], out_size[i], out_missing[i] = pc0, ms0, max(0, ms0 - covered)
    for j in range(max(pc0, 0)):
        slot_size[ns], slot_start[ns] = found.get(j, -1), 0
        ns += 1
    return cursor, ns
