# The wire facts of nbmq 0.2.0 (seed 000; ARCHITECTURE.md, wire facts) and FNV-1a 64, defined once
# for every compiled module: the codec (_codec.pyx and its _cython/*.pxi), the engine's hot path
# (engine/_fast.pyx) and the capture decoder (capture/datagrams/_decode.pyx) cimport them from here.
# nbmq/wire.py holds the same values for Python code; tests/codec/test_wire_pxd.py compares them.

from libc.stdint cimport uint64_t
from libc.string cimport memcmp

cdef enum:
    VERSION = 1
    DATA_HEADER = 34        # wire.DATA_HEADER_SIZE
    CONTROL_HEADER = 10     # wire.CONTROL_HEADER_SIZE
    MAX_FRAME = 500         # wire.MAX_FRAME_SIZE
    MAX_CHUNK = 466         # wire.MAX_CHUNK_SIZE: MAX_FRAME - DATA_HEADER
    MAX_PARTS = 255         # wire.MAX_PARTS
    SECURE_VERSION = 0x81   # wire.SECURE_VERSION
    SECURE_COUNTER = 8      # wire.SECURE_COUNTER_SIZE
    SECURE_OVERHEAD = 24    # wire.SECURE_OVERHEAD: counter + Poly1305 tag
    BUNDLE_VERSION = 0x82   # wire.BUNDLE_VERSION
    BUNDLE_HEAD = 2         # wire.BUNDLE_HEAD_SIZE: version byte and frame count
    BUNDLE_ENTRY = 2        # wire.BUNDLE_ENTRY_SIZE: a frame's u16 ciphertext length
    MIN_BUNDLE_FRAMES = 2   # wire.MIN_BUNDLE_FRAMES
    MAX_BUNDLE_FRAMES = 255 # wire.MAX_BUNDLE_FRAMES

cdef extern from *:
    """
    #define NBMQ_FNV_BASIS 0xCBF29CE484222325ULL
    #define NBMQ_FNV_MUL 0x100000001B3ULL
    """
    const uint64_t FNV_BASIS "NBMQ_FNV_BASIS"   # wire.FNV_OFFSET_BASIS
    const uint64_t FNV_MUL "NBMQ_FNV_MUL"       # wire.FNV_PRIME


cdef inline uint64_t fnv1a64(const unsigned char* p, Py_ssize_t n, uint64_t h) noexcept nogil:
    """FNV-1a 64 of ``n`` bytes at ``p``, continuing from ``h`` (FNV_BASIS to start)."""
    cdef Py_ssize_t i
    for i in range(n):
        h = (h ^ p[i]) * FNV_MUL
    return h


cdef inline void fnv1a64x4(const unsigned char** p, const Py_ssize_t* n, uint64_t* out) noexcept nogil:
    """FNV-1a 64 of the four byte ranges ``p[k][:n[k]]`` into ``out[k]``. One hash is a chain of
    dependent multiplies (each byte waits for the last product, about 4 cycles a byte); four
    independent chains in one loop overlap, so the four cost about what one does."""
    cdef uint64_t h0 = FNV_BASIS, h1 = FNV_BASIS, h2 = FNV_BASIS, h3 = FNV_BASIS
    cdef Py_ssize_t i, m = n[0]
    for i in range(1, 4):
        if n[i] < m:
            m = n[i]
    for i in range(m):
        h0 = (h0 ^ p[0][i]) * FNV_MUL
        h1 = (h1 ^ p[1][i]) * FNV_MUL
        h2 = (h2 ^ p[2][i]) * FNV_MUL
        h3 = (h3 ^ p[3][i]) * FNV_MUL
    out[0] = fnv1a64(p[0] + m, n[0] - m, h0)
    out[1] = fnv1a64(p[1] + m, n[1] - m, h1)
    out[2] = fnv1a64(p[2] + m, n[2] - m, h2)
    out[3] = fnv1a64(p[3] + m, n[3] - m, h3)


cdef inline int bundle_layout(const unsigned char* p, Py_ssize_t n, Py_ssize_t* k, Py_ssize_t* heads,
                              Py_ssize_t* sizes, Py_ssize_t* lens, Py_ssize_t* end,
                              Py_ssize_t* at) noexcept nogil:
    """Where the frames of the sealed bundle at ``p`` (``n`` bytes) lie: 0, with ``k`` frames,
    per frame ``heads`` (offset of its clear header), ``sizes`` (34 or 10) and ``lens`` (its
    ciphertext's length), and ``end`` the offset of the counter; else a reason, an index of
    wire.BUNDLE_ERROR_REASONS, with ``at`` the offset of the field at fault. The arrays hold
    MAX_BUNDLE_FRAMES. The checks and their order are the codec twin's ``bundle_layout``."""
    cdef Py_ssize_t count = p[1] if n >= BUNDLE_HEAD else 0
    cdef Py_ssize_t i, pos = BUNDLE_HEAD, head, size, total = 0
    cdef unsigned char kind
    if count < MIN_BUNDLE_FRAMES or count > MAX_BUNDLE_FRAMES:
        at[0] = 1
        return 1
    for i in range(count):
        head = pos + BUNDLE_ENTRY
        if head + CONTROL_HEADER > n:
            at[0] = n
            return 2
        kind = p[head + 1]
        if p[head] != SECURE_VERSION or not (kind == 0 or 3 <= kind <= 5):
            at[0] = head
            return 3
        size = DATA_HEADER if kind == 0 else CONTROL_HEADER
        if head + size > n:
            at[0] = n
            return 2
        if i and memcmp(p + head + 2, p + heads[0] + 2, 8) != 0:
            at[0] = head + 2
            return 4
        heads[i] = head
        sizes[i] = size
        lens[i] = (<Py_ssize_t>p[pos] << 8) | p[pos + 1]
        total += lens[i]
        pos = head + size
    if n != pos + SECURE_OVERHEAD + total:
        at[0] = BUNDLE_HEAD
        return 5
    k[0] = count
    end[0] = pos
    return 0
