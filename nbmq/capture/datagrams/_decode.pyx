# cython: boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of ``nbmq.capture.datagrams.decode_fast`` and of the address de-duplication.

``decode_udp`` classifies and decodes packets exactly as ``decode_fast`` does (same OK / SKIP /
FALLBACK rows, same fields), one packet at a time in C instead of one numpy pass per header
field: a packet costs a few cache lines and no temporaries. Tests hold the two to identical
tables on every bundled, synthetic and damaged capture.

``factorize_addresses`` gives every distinct (family, address) one small integer code, so
addresses are formatted as text once per distinct address and Arrow string columns can be
built from codes.
"""

import numpy as np

cimport numpy as cnp
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

from nbmq._wire cimport FNV_BASIS, FNV_MUL, fnv1a64

cnp.import_array()

cdef extern from *:
    void __builtin_prefetch(const void* addr) noexcept nogil

cdef enum:  # status values, as nbmq.capture.datagrams.rows
    OK = 0
    SKIP = 1
    FALLBACK = 3

cdef enum:  # link types, as nbmq.capture.datagrams.linktypes.LinkType
    LT_NULL = 0
    LT_ETHERNET = 1
    LT_RAW_OPENBSD = 12
    LT_RAW_BSDOS = 14
    LT_RAW = 101
    LT_LOOP = 108
    LT_SLL = 113
    LT_IPV4 = 228
    LT_IPV6 = 229
    LT_SLL2 = 276


cdef inline uint32_t _be16(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 8) | <uint32_t>p[1]


cdef inline uint32_t _be32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3]


cdef inline uint32_t _le32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[3] << 24) | (<uint32_t>p[2] << 16) | (<uint32_t>p[1] << 8) | <uint32_t>p[0]


cdef inline bint _among(int64_t v, const int64_t* values, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        if values[i] == v:
            return True
    return False


SUPPORTED = frozenset({LT_NULL, LT_ETHERNET, LT_RAW_OPENBSD, LT_RAW_BSDOS, LT_RAW, LT_LOOP, LT_SLL,
                       LT_IPV4, LT_IPV6, LT_SLL2})


def decode_udp(const uint8_t[::1] buf, const int64_t[::1] starts, const int64_t[::1] caplens,
               int linktype, const int64_t[::1] vlan, const int64_t[::1] mpls,
               const int64_t[::1] af6, const int64_t[::1] ip6_ext,
               int8_t[::1] status, uint8_t[::1] family, uint8_t[:, ::1] src, uint8_t[:, ::1] dst,
               uint16_t[::1] sport, uint16_t[::1] dport, int64_t[::1] pstart, int64_t[::1] pend,
               uint8_t[::1] truncated):
    """Fill the columns of a ``RowTable`` for n packets of one link type (see ``decode_fast``).

    Args:
        buf: the bytes holding the packets; every ``[starts[i], starts[i] + caplens[i])`` must
            lie inside it (as the record walk guarantees).
        starts, caplens: int64 (n,), first link-layer byte and captured length of each packet.
        linktype: LINKTYPE_* value; must be in ``SUPPORTED``.
        vlan, mpls, af6, ip6_ext: int64 arrays, the ethertypes / address families / IPv6 next
            headers ``decode_fast`` treats specially (``nbmq.capture.datagrams.linktypes``).
        status ... truncated: the RowTable's arrays (n rows; ``truncated`` viewed as uint8),
            written in place; rows that are neither OK nor SKIP are set to FALLBACK.

    Raises:
        ValueError: unsupported link type, an output column without n rows (``src`` and ``dst``
            not (n, 16)), or a packet outside ``buf``.
    """
    if linktype not in SUPPORTED:
        raise ValueError(f"unsupported link type {linktype}")
    cdef Py_ssize_t n = starts.shape[0], i
    cdef int64_t size = buf.shape[0]
    columns = {"caplens": caplens, "status": status, "family": family, "src": src, "dst": dst, "sport": sport,
               "dport": dport, "pstart": pstart, "pend": pend, "truncated": truncated}
    for name, column in columns.items():
        if column.shape[0] != n:
            raise ValueError(f"{name} has {column.shape[0]} rows, starts {n}")
    if src.shape[1] != 16 or dst.shape[1] != 16:
        raise ValueError(f"src and dst must be (n, 16), got (n, {src.shape[1]}) and (n, {dst.shape[1]})")
    for i in range(n):
        if starts[i] < 0 or caplens[i] < 0 or starts[i] > size - caplens[i]:  # not starts + caplens: that wraps
            raise ValueError(f"starts/caplens: packet {i} outside the buffer")
    if n == 0:
        return
    cdef const uint8_t* base = &buf[0]
    cdef const int64_t* pv = &vlan[0] if vlan.shape[0] else NULL
    cdef const int64_t* pm = &mpls[0] if mpls.shape[0] else NULL
    cdef const int64_t* pa = &af6[0] if af6.shape[0] else NULL
    cdef const int64_t* px = &ip6_ext[0] if ip6_ext.shape[0] else NULL
    cdef Py_ssize_t nv = vlan.shape[0], nm = mpls.shape[0], na = af6.shape[0], nx = ip6_ext.shape[0]
    cdef int64_t s, cap, end, l3, rem, udp, ip_end, declared, ihl, tot, plen, ulen, outer, inner1, et
    cdef int64_t fam_le, fam_be, fam
    cdef uint32_t b0, nxt, proto, frag
    cdef bint is4, is6, skip, tag1, t1, tag2, t2, resolved, special, v2, good, udp4, udp6
    cdef int hlen
    with nogil:
        for i in range(n):
            if i + 16 < n:  # packets are far apart: ask for the headers of later ones early
                __builtin_prefetch(base + starts[i + 16])
                __builtin_prefetch(base + starts[i + 16] + 63)
            s = starts[i]
            cap = caplens[i]
            end = s + cap
            is4 = is6 = skip = False
            l3 = s
            # link layer (decode_fast._link_layer)
            if linktype == LT_ETHERNET:
                if cap >= 14:
                    outer = _be16(base + s + 12)
                    tag1 = _among(outer, pv, nv)
                    t1 = tag1 and cap >= 18
                    inner1 = _be16(base + s + 16) if t1 else 0
                    tag2 = t1 and inner1 == 0x8100
                    t2 = tag2 and cap >= 22
                    if t2:
                        et = _be16(base + s + 20)
                        l3 = s + 22
                    elif t1:
                        et = inner1
                        l3 = s + 18
                    else:
                        et = outer
                        l3 = s + 14
                    resolved = not (tag1 and not t1) and not (tag2 and not t2)
                    special = (not t1) and (_among(outer, pm, nm) or outer <= 1500)
                    if resolved:
                        is4 = et == 0x0800
                        is6 = et == 0x86DD
                        skip = (not special) and not is4 and not is6
            elif linktype == LT_SLL or linktype == LT_SLL2:
                v2 = linktype == LT_SLL2
                hlen = 20 if v2 else 16
                if cap >= hlen:
                    et = _be16(base + s) if v2 else _be16(base + s + 14)
                    is4 = et == 0x0800
                    is6 = et == 0x86DD
                    skip = not is4 and not is6
                l3 = s + hlen
            elif linktype == LT_NULL or linktype == LT_LOOP:
                if cap >= 4:
                    fam_be = _be32(base + s)
                    if linktype == LT_NULL:
                        fam_le = _le32(base + s)
                        fam = fam_le if fam_le < 0x10000 else fam_be
                    else:
                        fam = fam_be
                    is4 = fam == 2
                    is6 = _among(fam, pa, na)
                    skip = not is4 and not is6
                l3 = s + 4
            else:  # raw IP
                if cap >= 1:
                    b0 = base[s] >> 4
                    is4 = b0 == 4
                    is6 = b0 == 6
            # network and transport layers (decode_fast.decode_fast)
            status[i] = SKIP if skip else FALLBACK
            rem = end - l3
            udp4 = udp6 = False
            ihl = tot = plen = 0
            if is4 and rem >= 20:
                b0 = base[l3]
                ihl = (b0 & 15) * 4
                tot = _be16(base + l3 + 2)
                if (b0 >> 4) == 4 and ihl >= 20 and tot >= ihl:
                    frag = _be16(base + l3 + 6) & 0x1FFF
                    proto = base[l3 + 9]
                    if frag != 0 or proto != 17:
                        status[i] = SKIP
                    else:
                        udp4 = True
            elif is6 and rem >= 40:
                b0 = base[l3]
                plen = _be16(base + l3 + 4)
                nxt = base[l3 + 6]
                if (b0 >> 4) == 6 and plen > 0:
                    if nxt == 17:
                        udp6 = True
                    elif not _among(nxt, px, nx):
                        status[i] = SKIP
            if not (udp4 or udp6):
                continue
            if udp6:
                udp = l3 + 40
                ip_end = l3 + 40 + plen
            else:
                udp = l3 + ihl
                ip_end = l3 + tot
            if udp + 8 > end or udp + 8 > ip_end:
                continue
            ulen = _be16(base + udp + 4)
            if ulen < 8:
                continue
            status[i] = OK
            declared = udp + ulen
            pend[i] = declared
            if ip_end < pend[i]:
                pend[i] = ip_end
            if end < pend[i]:
                pend[i] = end
            pstart[i] = udp + 8
            truncated[i] = pend[i] < declared
            sport[i] = <uint16_t>_be16(base + udp)
            dport[i] = <uint16_t>_be16(base + udp + 2)
            if udp6:
                family[i] = 6
                memcpy(&src[i, 0], base + l3 + 8, 16)
                memcpy(&dst[i, 0], base + l3 + 24, 16)
            else:
                family[i] = 4
                memcpy(&src[i, 0], base + l3 + 12, 4)
                memcpy(&dst[i, 0], base + l3 + 16, 4)


cdef inline uint64_t _hash17(uint8_t fam, const uint8_t* a) noexcept nogil:
    # FNV-1a over the family byte and the 16 address bytes
    return fnv1a64(a, 16, fnv1a64(&fam, 1, FNV_BASIS))


def factorize_addresses(const uint8_t[::1] family, const uint8_t[:, ::1] src, const uint8_t[:, ::1] dst):
    """Give every distinct (family, address) of ``src`` and ``dst`` one code, in first-seen order.

    Args:
        family: uint8 (n,), 4 or 6 per row (shared by the row's two addresses).
        src, dst: uint8 (n, 16), addresses (IPv4 in the first 4 bytes, the rest zero).

    Returns:
        ``(src_code, dst_code, unique_family, unique_address)``: int32 (n,) codes into the
        k distinct pairs; uint8 (k,) and uint8 (k, 16). Memory is O(n + k) whatever the input.
    """
    cdef Py_ssize_t n = family.shape[0], i, j
    if src.shape[0] != n or dst.shape[0] != n or (n and (src.shape[1] != 16 or dst.shape[1] != 16)):
        raise ValueError("family, src and dst must be (n,), (n, 16), (n, 16)")
    src_code = np.empty(n, np.int32)
    dst_code = np.empty(n, np.int32)
    cdef int32_t[::1] sc = src_code, dc = dst_code
    cdef Py_ssize_t cap = 1024
    slots_arr = np.full(cap, -1, np.int32)
    cdef int32_t[::1] slots = slots_arr
    ufam_arr = np.empty(min(2 * n, 64) + 1, np.uint8)
    uaddr_arr = np.empty((ufam_arr.shape[0], 16), np.uint8)
    cdef uint8_t[::1] ufam = ufam_arr
    cdef uint8_t[:, ::1] uaddr = uaddr_arr
    cdef Py_ssize_t k = 0, mask = cap - 1, side, slot
    cdef const uint8_t* a
    cdef uint8_t f
    cdef int32_t code
    for i in range(n):
        f = family[i]
        for side in range(2):
            a = &src[i, 0] if side == 0 else &dst[i, 0]
            slot = <Py_ssize_t>(_hash17(f, a) & <uint64_t>mask)
            while True:
                code = slots[slot]
                if code < 0:
                    if 2 * (k + 1) > cap:  # keep the table at most half full: grow and re-insert
                        cap *= 2
                        mask = cap - 1
                        slots_arr = np.full(cap, -1, np.int32)
                        slots = slots_arr
                        for j in range(k):
                            slot = <Py_ssize_t>(_hash17(ufam[j], &uaddr[j, 0]) & <uint64_t>mask)
                            while slots[slot] >= 0:
                                slot = (slot + 1) & mask
                            slots[slot] = <int32_t>j
                        slot = <Py_ssize_t>(_hash17(f, a) & <uint64_t>mask)
                        while slots[slot] >= 0:
                            slot = (slot + 1) & mask
                    if k == ufam.shape[0]:
                        ufam_arr = np.resize(ufam_arr, 2 * k)
                        uaddr_arr = np.resize(uaddr_arr, (2 * k, 16))
                        ufam = ufam_arr
                        uaddr = uaddr_arr
                    ufam[k] = f
                    memcpy(&uaddr[k, 0], a, 16)
                    code = <int32_t>k
                    slots[slot] = code
                    k += 1
                    break
                if ufam[code] == f and memcmp(&uaddr[code, 0], a, 16) == 0:
                    break
                slot = (slot + 1) & mask
            if side == 0:
                sc[i] = code
            else:
                dc[i] = code
    return src_code, dst_code, ufam_arr[:k].copy(), uaddr_arr[:k].copy()


def fnv1a64_ranges(const uint8_t[::1] buf, const int64_t[::1] starts, const int64_t[::1] lengths,
                   uint64_t[::1] out):
    """FNV-1a 64 of every ``buf[starts[i] : starts[i] + lengths[i]]`` into ``out[i]`` (see
    ``nbmq.capture.datagrams.ack_hashes.fnv1a64_ranges``, its numpy twin).

    Args:
        buf: uint8 (m,); starts, lengths: int64 (n,), every range inside ``buf``.
        out: uint64 (n,), written in place.

    Raises:
        ValueError: lengths of the arrays differ, or a range outside ``buf``.
    """
    cdef Py_ssize_t n = starts.shape[0], i, k
    cdef int64_t size = buf.shape[0], j, common
    if lengths.shape[0] != n or out.shape[0] != n:
        raise ValueError("column lengths differ")
    for i in range(n):
        if starts[i] < 0 or lengths[i] < 0 or starts[i] > size - lengths[i]:
            raise ValueError("range outside the buffer")
    if n == 0:
        return
    cdef const uint8_t* base = &buf[0]
    cdef const uint8_t* p0
    cdef const uint8_t* p1
    cdef const uint8_t* p2
    cdef const uint8_t* p3
    cdef uint64_t h0, h1, h2, h3
    cdef uint64_t basis = FNV_BASIS, prime = FNV_MUL  # nbmq.codec.fnv1a64, four chains at once below
    with nogil:
        i = 0
        # Four ranges at once: one range is a chain of dependent multiplies (about 4 cycles a
        # byte); four independent chains keep the multiplier busy (~2.3 GB at 5M).
        while i + 4 <= n:
            p0 = base + starts[i]
            p1 = base + starts[i + 1]
            p2 = base + starts[i + 2]
            p3 = base + starts[i + 3]
            h0 = h1 = h2 = h3 = basis
            common = min(min(lengths[i], lengths[i + 1]), min(lengths[i + 2], lengths[i + 3]))
            for j in range(common):
                h0 = (h0 ^ p0[j]) * prime
                h1 = (h1 ^ p1[j]) * prime
                h2 = (h2 ^ p2[j]) * prime
                h3 = (h3 ^ p3[j]) * prime
            for j in range(common, lengths[i]):
                h0 = (h0 ^ p0[j]) * prime
            for j in range(common, lengths[i + 1]):
                h1 = (h1 ^ p1[j]) * prime
            for j in range(common, lengths[i + 2]):
                h2 = (h2 ^ p2[j]) * prime
            for j in range(common, lengths[i + 3]):
                h3 = (h3 ^ p3[j]) * prime
            out[i] = h0
            out[i + 1] = h1
            out[i + 2] = h2
            out[i + 3] = h3
            i += 4
        for k in range(i, n):
            p0 = base + starts[k]
            h0 = basis
            for j in range(lengths[k]):
                h0 = (h0 ^ p0[j]) * prime
            out[k] = h0
