# cython: language_level=3, embedsignature=True
"""Secure mode's per-frame ChaCha20-Poly1305, compiled: the twin of ``nbmq.engine.secure.FrameCipher``.

The cipher is OpenSSL libcrypto's ``EVP_chacha20_poly1305`` (RFC 8439), the same primitive the
``cryptography`` package wraps for the Python twin; nothing here is cryptography of our own. One
``EVP_CIPHER_CTX`` per key and direction is set up once and only re-nonced per frame, which is
what makes a 100-byte frame cheap (the Python twin pays a key set-up and a Python call per
frame). The frame layout is ``nbmq.engine.secure``'s (docs/secure.md); the parity tests check
that both twins give the same bytes and refuse the same frames.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.ref cimport Py_REFCNT
from cpython.long cimport PyLong_FromUnsignedLongLong
from libc.stdint cimport uint64_t
from libc.string cimport memcmp, memcpy, memmove, memset
from nbmq._wire cimport BUNDLE_ENTRY, BUNDLE_HEAD, BUNDLE_VERSION, MAX_BUNDLE_FRAMES, MIN_BUNDLE_FRAMES, bundle_layout

from nbmq.wire import BUNDLE_ERROR_REASONS


cdef extern from "openssl/evp.h" nogil:
    ctypedef struct EVP_CIPHER_CTX:
        pass
    ctypedef struct EVP_CIPHER:
        pass
    ctypedef struct ENGINE:
        pass
    EVP_CIPHER_CTX* EVP_CIPHER_CTX_new()
    void EVP_CIPHER_CTX_free(EVP_CIPHER_CTX* ctx)
    const EVP_CIPHER* EVP_chacha20_poly1305()
    int EVP_CipherInit_ex(EVP_CIPHER_CTX* ctx, const EVP_CIPHER* cipher, ENGINE* impl,
                          const unsigned char* key, const unsigned char* iv, int enc)
    int EVP_CIPHER_CTX_ctrl(EVP_CIPHER_CTX* ctx, int type, int arg, void* ptr)
    int EVP_CipherUpdate(EVP_CIPHER_CTX* ctx, unsigned char* out, int* outl,
                         const unsigned char* inp, int inl)
    int EVP_CipherFinal_ex(EVP_CIPHER_CTX* ctx, unsigned char* out, int* outl)
    int EVP_CTRL_AEAD_GET_TAG
    int EVP_CTRL_AEAD_SET_TAG


DEF TAG = 16
DEF COUNTER = 8
DEF DATA_HEADER = 34
DEF CONTROL_HEADER = 10
DEF SECURE_VERSION = 0x81
DEF PLAIN_VERSION = 1


cdef inline void _put_be64(unsigned char* p, uint64_t v) noexcept nogil:
    cdef int i
    for i in range(8):
        p[7 - i] = <unsigned char>(v >> (8 * i))


cdef inline uint64_t _get_be64(const unsigned char* p) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(8):
        v = (v << 8) | p[i]
    return v


DEF POOLED_BUNDLE = 32768  # bytes from which a bundle's buffer comes from the pool
DEF POOL_BYTES = 1 << 21  # most bytes the pool keeps (per process)

cdef list _pool = []  # recent large bundles, oldest first: reused once nobody else holds one
cdef Py_ssize_t _pool_bytes = 0


cdef object _bundle_buffer(Py_ssize_t size):
    """A bytearray of ``size`` bytes for a large bundle: a pooled one that only the pool still
    holds (its memory is warm: a new 64 KiB allocation is fresh pages to fault in, about as
    much as sealing it costs), else a new one, pooled. The transport may keep a datagram as
    long as it likes: one it (or anyone) holds is never reused."""
    global _pool_bytes
    cdef Py_ssize_t i, n = len(_pool)
    cdef object buf
    for i in range(n):
        buf = _pool[i]
        if Py_REFCNT(buf) == 2:  # the pool's reference and ``buf``: dropped by everyone else
            _pool_bytes -= PyByteArray_GET_SIZE(buf)
            PyByteArray_Resize(buf, size)  # (no views of it can exist: each holds a reference)
            _pool_bytes += size
            del _pool[i]
            _pool.append(buf)  # the newest now
            return buf
    buf = PyByteArray_FromStringAndSize(NULL, size)
    _pool.append(buf)
    _pool_bytes += size
    while _pool_bytes > POOL_BYTES:  # forget the oldest (its holder, if any, keeps it)
        _pool_bytes -= PyByteArray_GET_SIZE(_pool[0])
        del _pool[0]
    return buf


cdef class FrameCipher:
    """One key of one direction of a secure session (see ``nbmq.engine.secure.FrameCipher``)."""

    cdef EVP_CIPHER_CTX* _ctx
    cdef readonly bint encrypt
    cdef readonly bytes key

    def __cinit__(self, key, bint encrypt):
        cdef bytes k = bytes(key)
        if len(k) != 32:
            raise ValueError(f"key must be 32 bytes, got {len(k)}")
        self.key = k
        self.encrypt = encrypt
        self._ctx = EVP_CIPHER_CTX_new()
        if self._ctx == NULL:
            raise MemoryError("EVP_CIPHER_CTX_new failed")
        if EVP_CipherInit_ex(self._ctx, EVP_chacha20_poly1305(), NULL,
                             <const unsigned char*>PyBytes_AS_STRING(k), NULL, 1 if encrypt else 0) != 1:
            raise RuntimeError("EVP_CipherInit_ex failed")

    def __dealloc__(self):
        if self._ctx != NULL:
            EVP_CIPHER_CTX_free(self._ctx)

    cdef int _nonce(self, uint64_t counter) except -1:
        cdef unsigned char iv[12]
        cdef int i
        memset(iv, 0, 4)
        for i in range(8):  # Noise's ChaChaPoly nonce: 32 zero bits, the counter little-endian
            iv[4 + i] = <unsigned char>(counter >> (8 * i))
        if EVP_CipherInit_ex(self._ctx, NULL, NULL, NULL, iv, -1) != 1:
            raise RuntimeError("EVP_CipherInit_ex (nonce) failed")
        return 0

    cdef bytes _seal(self, const unsigned char* p, Py_ssize_t n, uint64_t counter):
        """Seal the plain frame at ``p`` (``n`` bytes, at least its header)."""
        cdef int outl = 0, finl = 0
        cdef Py_ssize_t size = DATA_HEADER if p[1] == 0 else CONTROL_HEADER
        cdef bytes out = PyBytes_FromStringAndSize(NULL, n + COUNTER + TAG)
        cdef unsigned char* o = <unsigned char*>PyBytes_AS_STRING(out)
        cdef EVP_CIPHER_CTX* ctx = self._ctx
        o[0] = SECURE_VERSION
        memcpy(o + 1, p + 1, size - 1)
        _put_be64(o + size, counter)
        self._nonce(counter)
        if (EVP_CipherUpdate(ctx, NULL, &outl, o, <int>(size + COUNTER)) != 1
                or EVP_CipherUpdate(ctx, o + size + COUNTER, &outl, p + size, <int>(n - size)) != 1
                or EVP_CipherFinal_ex(ctx, o + size + COUNTER + outl, &finl) != 1
                or EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, TAG, o + n + COUNTER) != 1):
            raise RuntimeError("ChaCha20-Poly1305 encryption failed")
        return out

    cdef int _open_into(self, const unsigned char* p, Py_ssize_t n, Py_ssize_t size, unsigned char* o) except -1:
        """Write the plain frame of the sealed one at ``p`` (``n`` bytes, header ``size``) to
        ``o`` (``n - 24`` bytes): 1, or 0 when the tag did not verify."""
        cdef int outl = 0, finl = 0
        cdef Py_ssize_t body = n - size - COUNTER - TAG
        cdef EVP_CIPHER_CTX* ctx = self._ctx
        o[0] = PLAIN_VERSION
        memcpy(o + 1, p + 1, size - 1)
        self._nonce(_get_be64(p + size))
        if (EVP_CipherUpdate(ctx, NULL, &outl, p, <int>(size + COUNTER)) != 1
                or EVP_CipherUpdate(ctx, o + size, &outl, p + size + COUNTER, <int>body) != 1
                or EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, TAG, <void*>(p + n - TAG)) != 1):
            raise RuntimeError("ChaCha20-Poly1305 decryption failed")
        return EVP_CipherFinal_ex(ctx, o + size + outl, &finl) == 1

    cdef object _open(self, const unsigned char* p, Py_ssize_t n, Py_ssize_t size):
        """The plain frame of the sealed one at ``p`` (``n`` bytes, header ``size``), or None."""
        cdef bytes out = PyBytes_FromStringAndSize(NULL, n - COUNTER - TAG)
        if not self._open_into(p, n, size, <unsigned char*>PyBytes_AS_STRING(out)):
            return None  # the tag did not verify
        return out

    cdef object _seal_bundle(self, list frames, Py_ssize_t first, Py_ssize_t last, uint64_t counter):
        """One bundle of ``frames[first:last]`` (2..255 plain frames) under ``counter``: bytes,
        or a bytearray of :func:`_bundle_buffer` when it is large."""
        cdef Py_buffer views[MAX_BUNDLE_FRAMES]
        cdef Py_ssize_t k = last - first, got = 0, i, total = BUNDLE_HEAD + COUNTER + TAG, pos, size, length, start
        cdef int outl = 0, finl = 0
        cdef const unsigned char* p
        cdef unsigned char* o
        cdef object out
        cdef EVP_CIPHER_CTX* ctx = self._ctx
        if k < MIN_BUNDLE_FRAMES or k > MAX_BUNDLE_FRAMES:
            raise ValueError(f"a bundle holds 2..255 frames, got {k}")
        try:
            for i in range(k):
                PyObject_GetBuffer(frames[first + i], &views[i], PyBUF_SIMPLE)
                got += 1
                total += BUNDLE_ENTRY + views[i].len
            if total >= POOLED_BUNDLE:
                out = _bundle_buffer(total)
                o = <unsigned char*>PyByteArray_AS_STRING(out)
            else:
                out = PyBytes_FromStringAndSize(NULL, total)
                o = <unsigned char*>PyBytes_AS_STRING(out)
            o[0] = BUNDLE_VERSION
            o[1] = <unsigned char>k
            pos = BUNDLE_HEAD
            for i in range(k):
                p = <const unsigned char*>views[i].buf
                size = DATA_HEADER if views[i].len > 1 and p[1] == 0 else CONTROL_HEADER
                length = views[i].len - size
                if length < 0 or length > 0xFFFF:
                    raise ValueError("frame shorter than its header, or its payload over 65535 bytes")
                o[pos] = <unsigned char>(length >> 8)
                o[pos + 1] = <unsigned char>length
                o[pos + 2] = SECURE_VERSION
                memcpy(o + pos + 3, p + 1, size - 1)
                pos += BUNDLE_ENTRY + size
            _put_be64(o + pos, counter)
            pos += COUNTER
            start = pos
            for i in range(k):  # the payloads back to back, then encrypted in place in one call:
                p = <const unsigned char*>views[i].buf  # a call's set-up is most of its cost
                size = DATA_HEADER if p[1] == 0 else CONTROL_HEADER
                memcpy(o + pos, p + size, views[i].len - size)
                pos += views[i].len - size
            self._nonce(counter)
            if (EVP_CipherUpdate(ctx, NULL, &outl, o, <int>start) != 1
                    or EVP_CipherUpdate(ctx, o + start, &outl, o + start, <int>(pos - start)) != 1):
                raise RuntimeError("ChaCha20-Poly1305 encryption failed")
            if (EVP_CipherFinal_ex(ctx, o + pos, &finl) != 1
                    or EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, TAG, o + pos) != 1):
                raise RuntimeError("ChaCha20-Poly1305 encryption failed")
            return out
        finally:
            for i in range(got):
                PyBuffer_Release(&views[i])

    cdef int _open_bundle_into(self, const unsigned char* p, Py_ssize_t n, Py_ssize_t k,
                               const Py_ssize_t* heads, const Py_ssize_t* sizes, const Py_ssize_t* lens,
                               Py_ssize_t end, unsigned char* o) except -1:
        """Write the plain frames of the bundle at ``p`` (layout checked by ``bundle_layout``)
        back to back to ``o`` (their total size): 1, or 0 when the tag did not verify."""
        cdef int outl = 0, finl = 0
        cdef Py_ssize_t i, start = end + COUNTER, body = n - start - TAG, heads_total = 0, at, to = 0
        cdef EVP_CIPHER_CTX* ctx = self._ctx
        for i in range(k):
            heads_total += sizes[i]
        self._nonce(_get_be64(p + end))
        # the whole ciphertext in one call (a call's set-up is most of its cost), to the tail
        # of ``o``; each payload then moves down to follow its header (never past its source)
        if (EVP_CipherUpdate(ctx, NULL, &outl, p, <int>start) != 1
                or EVP_CipherUpdate(ctx, o + heads_total, &outl, p + start, <int>body) != 1
                or EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, TAG, <void*>(p + n - TAG)) != 1):
            raise RuntimeError("ChaCha20-Poly1305 decryption failed")
        if EVP_CipherFinal_ex(ctx, o + heads_total + outl, &finl) != 1:
            return 0  # the tag did not verify
        at = heads_total
        for i in range(k):
            memmove(o + to + sizes[i], o + at, lens[i])
            o[to] = PLAIN_VERSION
            memcpy(o + to + 1, p + heads[i] + 1, sizes[i] - 1)
            to += sizes[i] + lens[i]
            at += lens[i]
        return 1

    cdef object _open_bundle(self, const unsigned char* p, Py_ssize_t n, Py_ssize_t k,
                             const Py_ssize_t* heads, const Py_ssize_t* sizes, const Py_ssize_t* lens,
                             Py_ssize_t end):
        """The plain frames of the bundle at ``p`` (layout checked by ``bundle_layout``), or None."""
        cdef Py_ssize_t i, total = 0, at = 0
        for i in range(k):
            total += sizes[i] + lens[i]
        cdef bytes plain = PyBytes_FromStringAndSize(NULL, total)
        if not self._open_bundle_into(p, n, k, heads, sizes, lens, end, <unsigned char*>PyBytes_AS_STRING(plain)):
            return None
        frames = []
        for i in range(k):
            frames.append(plain[at : at + sizes[i] + lens[i]])
            at += sizes[i] + lens[i]
        return frames

    def seal(self, frame, uint64_t counter):
        """The sealed form of a plain frame under ``counter``: bytes, ``len(frame) + 24``."""
        if not self.encrypt:
            raise ValueError("this FrameCipher opens frames")
        cdef Py_buffer view
        PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE)
        try:
            if view.len < 2 or view.len < (DATA_HEADER if (<const unsigned char*>view.buf)[1] == 0 else CONTROL_HEADER):
                raise ValueError("frame shorter than its header")
            return self._seal(<const unsigned char*>view.buf, view.len, counter)
        finally:
            PyBuffer_Release(&view)

    def seal_bundle(self, frames, uint64_t counter):
        """One bundle of 2..255 plain frames under ``counter`` (see the Python twin)."""
        if not self.encrypt:
            raise ValueError("this FrameCipher opens frames")
        cdef list run = list(frames)
        return self._seal_bundle(run, 0, len(run), counter)

    def open_bundle(self, datagram, entries, Py_ssize_t end):
        """The plain frames of a bundle whose ``codec.bundle_layout`` is ``(entries, end)``, or None
        when the tag does not verify (see the Python twin)."""
        if self.encrypt:
            raise ValueError("this FrameCipher seals frames")
        cdef Py_ssize_t heads[MAX_BUNDLE_FRAMES]
        cdef Py_ssize_t sizes[MAX_BUNDLE_FRAMES]
        cdef Py_ssize_t lens[MAX_BUNDLE_FRAMES]
        cdef Py_ssize_t k = 0, total = 0
        cdef Py_buffer view
        if not MIN_BUNDLE_FRAMES <= len(entries) <= MAX_BUNDLE_FRAMES:
            raise ValueError("a bundle holds 2..255 frames")
        for head, size, length in entries:
            heads[k], sizes[k], lens[k] = head, size, length
            total += length
            k += 1
        PyObject_GetBuffer(datagram, &view, PyBUF_SIMPLE)
        try:
            if end < 0 or view.len != end + COUNTER + TAG + total:
                raise ValueError("entries do not match the datagram")
            for i in range(k):
                if heads[i] < 0 or sizes[i] < 2 or heads[i] + sizes[i] > end or lens[i] < 0:
                    raise ValueError("entries do not match the datagram")
            return self._open_bundle(<const unsigned char*>view.buf, view.len, k, heads, sizes, lens, end)
        finally:
            PyBuffer_Release(&view)

    def open(self, datagram, Py_ssize_t size):
        """The plain frame inside a sealed one whose header is ``size`` bytes (34 or 10), or None
        when the tag does not verify. The caller checked the length and the counter."""
        if self.encrypt:
            raise ValueError("this FrameCipher seals frames")
        cdef Py_buffer view
        PyObject_GetBuffer(datagram, &view, PyBUF_SIMPLE)
        try:
            if (size != DATA_HEADER and size != CONTROL_HEADER) or view.len < size + COUNTER + TAG:
                raise ValueError("datagram shorter than a sealed frame")
            return self._open(<const unsigned char*>view.buf, view.len, size)
        finally:
            PyBuffer_Release(&view)


_BUNDLE_ERRORS = {4 + i: reason for i, reason in enumerate(BUNDLE_ERROR_REASONS) if i}


DEF WINDOW = 2048  # bits of the replay window (nbmq.engine.secure.REPLAY_WINDOW)
DEF WORDS = WINDOW // 64
DEF LAST_COUNTER = 0xFFFFFFFFFFFFFFFE  # 2**64 - 1 is REKEY's nonce


cdef class SessionKeys:
    """The transport keys of one secure session, compiled (twin of ``nbmq.engine.secure.SessionKeys``:
    the same arguments, results and errors; see there). The replay window is a ring of 2048 bits
    indexed by counter; REKEY goes through ``rekeyed`` (a Python callable, once per 65536 frames)."""

    cdef public object remote_static
    cdef readonly uint64_t rekey_frames
    cdef public Py_ssize_t rekeys
    cdef FrameCipher _send
    cdef FrameCipher _recv
    cdef FrameCipher _recv_prev
    cdef uint64_t _send_counter
    cdef uint64_t _send_epoch
    cdef uint64_t _recv_epoch
    cdef uint64_t _top
    cdef bint _seen_any
    cdef uint64_t _bits[WORDS]
    cdef object _rekeyed
    cdef object _error

    def __init__(self, send_key, recv_key, remote_static, uint64_t rekey_frames, rekeyed, error):
        if rekey_frames == 0:
            raise ValueError("rekey_frames must be > 0, got 0")
        self.remote_static = remote_static
        self.rekey_frames = rekey_frames
        self.rekeys = 0
        self._send = FrameCipher(send_key, True)
        self._recv = FrameCipher(recv_key, False)
        self._recv_prev = None
        self._send_counter = 0
        self._send_epoch = 0
        self._recv_epoch = 0
        self._top = 0
        self._seen_any = False
        memset(self._bits, 0, sizeof(self._bits))
        self._rekeyed = rekeyed
        self._error = error

    @property
    def frames_sealed(self):
        return self._send_counter

    cdef uint64_t _next_counter(self) except? 0xFFFFFFFFFFFFFFFF:
        """Take the next send counter, moving to the next key every ``rekey_frames`` seals."""
        cdef uint64_t counter = self._send_counter
        cdef uint64_t epoch
        if counter > LAST_COUNTER:
            raise OverflowError("secure session exhausted its frame counter")
        epoch = counter // self.rekey_frames
        if epoch != self._send_epoch:
            self._send = FrameCipher(self._rekeyed(self._send.key), True)
            self._send_epoch = epoch
            self.rekeys += 1
        self._send_counter = counter + 1
        return counter

    cdef bytes _seal_ptr(self, const unsigned char* p, Py_ssize_t n):
        cdef uint64_t counter = self._next_counter()
        return self._send._seal(p, n, counter)

    cdef object _seal_run(self, list frames, Py_ssize_t first, Py_ssize_t last):
        cdef uint64_t counter = self._next_counter()
        return self._send._seal_bundle(frames, first, last, counter)

    def seal_bundle(self, frames):
        cdef list run = list(frames)
        if len(run) < MIN_BUNDLE_FRAMES or len(run) > MAX_BUNDLE_FRAMES:
            raise ValueError(f"a bundle holds 2..255 frames, got {len(run)}")
        return self._seal_run(run, 0, len(run))

    def seal(self, frame):
        cdef Py_buffer view
        PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE)
        try:
            if view.len < 2 or view.len < (DATA_HEADER if (<const unsigned char*>view.buf)[1] == 0 else CONTROL_HEADER):
                raise ValueError("frame shorter than its header")
            return self._seal_ptr(<const unsigned char*>view.buf, view.len)
        finally:
            PyBuffer_Release(&view)

    cdef bint _fresh(self, uint64_t counter) noexcept:
        if not self._seen_any or counter > self._top:
            return True
        if self._top - counter >= WINDOW:
            return False
        cdef uint64_t slot = counter % WINDOW
        return not (self._bits[slot >> 6] >> (slot & 63)) & 1

    cdef void _take(self, uint64_t counter) noexcept:
        cdef uint64_t c, slot
        if not self._seen_any or counter > self._top:
            if self._seen_any and counter - self._top < WINDOW:
                c = self._top + 1
                while c < counter:  # the counters skipped over were never taken
                    slot = c % WINDOW
                    self._bits[slot >> 6] &= ~(<uint64_t>1 << (slot & 63))
                    c += 1
            else:
                memset(self._bits, 0, sizeof(self._bits))
            self._top = counter
            self._seen_any = True
        slot = counter % WINDOW
        self._bits[slot >> 6] |= <uint64_t>1 << (slot & 63)

    cdef int _prepare(self, const unsigned char* p, Py_ssize_t n, Py_ssize_t* size, uint64_t* counter) noexcept:
        """0 when the frame at ``p`` may be opened (``size`` and ``counter`` set), else why not:
        1 an unknown or unsealed kind, 2 truncated, 3 a replay, 4 a counter past the next key."""
        cdef uint64_t epoch
        if n > 1 and p[1] == 0:
            size[0] = DATA_HEADER
        elif n > 1 and 3 <= p[1] <= 5:
            size[0] = CONTROL_HEADER
        else:
            return 1
        if n < size[0] + COUNTER + TAG:
            return 2
        counter[0] = _get_be64(p + size[0])
        return self._check_counter(counter[0])

    cdef int _check_counter(self, uint64_t counter) noexcept:
        """0 when a frame or bundle under ``counter`` may be opened; 3 a replay, 4 a counter
        past the next key."""
        cdef uint64_t epoch
        if not self._fresh(counter):
            return 3
        epoch = counter // self.rekey_frames
        if epoch == self._recv_epoch or epoch == self._recv_epoch + 1:
            return 0
        if epoch + 1 == self._recv_epoch and self._recv_prev is not None:
            return 0
        return 4

    cdef object _open_ptr(self, const unsigned char* p, Py_ssize_t n, Py_ssize_t size, uint64_t counter):
        """Decrypt a frame ``_prepare`` let through; the plain frame (the window and keys moved
        on), or None when the tag failed (nothing changed)."""
        cdef FrameCipher cipher = self._recv_cipher(counter)
        plain = cipher._open(p, n, size)
        if plain is None:
            return None
        self._opened(cipher, counter)
        return plain

    cdef FrameCipher _recv_cipher(self, uint64_t counter):
        """The key of ``counter`` (``_check_counter`` let it through)."""
        cdef uint64_t epoch = counter // self.rekey_frames
        if epoch == self._recv_epoch:
            return self._recv
        if epoch == self._recv_epoch + 1:
            return FrameCipher(self._rekeyed(self._recv.key), False)
        return self._recv_prev

    cdef void _opened(self, FrameCipher cipher, uint64_t counter):
        """A frame or bundle under ``counter`` verified: take the counter, and follow the peer
        to its next key when ``cipher`` is that key."""
        if counter // self.rekey_frames == self._recv_epoch + 1:
            self._recv_prev = self._recv
            self._recv = cipher
            self._recv_epoch += 1
            self.rekeys += 1
        self._take(counter)

    cdef FrameCipher _bundle_cipher(self, const unsigned char* p, Py_ssize_t n, Py_ssize_t* k,
                                    Py_ssize_t* heads, Py_ssize_t* sizes, Py_ssize_t* lens,
                                    Py_ssize_t* end, uint64_t* counter, int* why):
        """The key that opens the bundle at ``p`` (its layout and counter checked), or None with
        ``why`` set (3, 4 as ``_check_counter`` says; 5..9 a malformed bundle: 4 + the index of
        its reason in ``wire.BUNDLE_ERROR_REASONS``)."""
        cdef Py_ssize_t at = 0
        why[0] = bundle_layout(p, n, k, heads, sizes, lens, end, &at)
        if why[0] != 0:
            why[0] += 4  # 5..9: after _check_counter's 3 and 4
            return None
        counter[0] = _get_be64(p + end[0])
        why[0] = self._check_counter(counter[0])
        if why[0] != 0:
            return None
        return self._recv_cipher(counter[0])

    cdef object _open_bundle_ptr(self, const unsigned char* p, Py_ssize_t n, int* why):
        """The plain frames of the bundle at ``p``; None with ``why`` set (3..9) or 0 when the
        tag failed."""
        cdef Py_ssize_t heads[MAX_BUNDLE_FRAMES]
        cdef Py_ssize_t sizes[MAX_BUNDLE_FRAMES]
        cdef Py_ssize_t lens[MAX_BUNDLE_FRAMES]
        cdef Py_ssize_t k = 0, end = 0
        cdef uint64_t counter = 0
        cdef FrameCipher cipher = self._bundle_cipher(p, n, &k, heads, sizes, lens, &end, &counter, why)
        if cipher is None:
            return None
        frames = cipher._open_bundle(p, n, k, heads, sizes, lens, end)
        if frames is not None:
            self._opened(cipher, counter)
        return frames

    cdef Py_ssize_t _open_run(self, const unsigned char* p, Py_ssize_t n, unsigned char* o, list lengths) except -2:
        """Open the sealed frame or bundle at ``p`` (first byte 0x81 or 0x82, not a handshake),
        writing its plain frames to ``o`` (room for ``n`` bytes: sealing only adds bytes) and
        appending their sizes to ``lengths``: the bytes written, or -1 when it was refused
        (nothing appended, nothing moved)."""
        cdef Py_ssize_t heads[MAX_BUNDLE_FRAMES]
        cdef Py_ssize_t sizes[MAX_BUNDLE_FRAMES]
        cdef Py_ssize_t lens[MAX_BUNDLE_FRAMES]
        cdef Py_ssize_t k = 1, end = 0, i, total = 0
        cdef uint64_t counter = 0
        cdef int why = 0, ok
        cdef FrameCipher cipher
        if p[0] == BUNDLE_VERSION:
            cipher = self._bundle_cipher(p, n, &k, heads, sizes, lens, &end, &counter, &why)
            if cipher is None:
                return -1
            ok = cipher._open_bundle_into(p, n, k, heads, sizes, lens, end, o)
        else:
            if self._prepare(p, n, &sizes[0], &counter) != 0:
                return -1
            cipher = self._recv_cipher(counter)
            lens[0] = n - sizes[0] - COUNTER - TAG
            ok = cipher._open_into(p, n, sizes[0], o)
        if not ok:
            return -1
        self._opened(cipher, counter)
        for i in range(k):
            lengths.append(sizes[i] + lens[i])
            total += sizes[i] + lens[i]
        return total

    def open_bundle(self, datagram):
        cdef Py_buffer view
        cdef int why = 0
        PyObject_GetBuffer(datagram, &view, PyBUF_SIMPLE)
        try:
            frames = self._open_bundle_ptr(<const unsigned char*>view.buf, view.len, &why)
        finally:
            PyBuffer_Release(&view)
        if why == 3:
            raise self._error("replay", "secure frame replayed or too old")
        if why == 4:
            raise self._error("auth", "secure frame counter outside the current keys")
        if why:
            raise self._error("malformed", _BUNDLE_ERRORS[why])
        if frames is None:
            raise self._error("auth", "secure frame failed authentication")
        return frames

    def open(self, datagram):
        cdef Py_buffer view
        cdef Py_ssize_t size = 0
        cdef uint64_t counter = 0
        cdef int why
        PyObject_GetBuffer(datagram, &view, PyBUF_SIMPLE)
        try:
            why = self._prepare(<const unsigned char*>view.buf, view.len, &size, &counter)
            if why == 0:
                plain = self._open_ptr(<const unsigned char*>view.buf, view.len, size, counter)
        finally:
            PyBuffer_Release(&view)
        if why == 1:
            raise self._error("malformed", "secure frame of an unknown or unsealed kind")
        if why == 2:
            raise self._error("malformed", "secure frame truncated")
        if why == 3:
            raise self._error("replay", "secure frame replayed or too old")
        if why == 4:
            raise self._error("auth", "secure frame counter outside the current keys")
        if plain is None:
            raise self._error("auth", "secure frame failed authentication")
        return plain


def seal_frames(dict sessions, list out, Py_ssize_t max_datagram_size=0):
    """Compiled twin of ``nbmq.engine.secure.seal_frames`` (same arguments and result)."""
    cdef list slots = []
    cdef dict groups = {}
    cdef list sealed = []
    cdef list queued
    cdef Py_ssize_t merged = 0, added = 0, unsealed = 0, n, i, j, size, grown
    cdef Py_buffer view
    cdef const unsigned char* p
    cdef SessionKeys keys
    cdef uint64_t raw, last_sid = 0
    last = last_addr = None
    for data, addr in out:
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            p = <const unsigned char*>view.buf
            if view.len >= CONTROL_HEADER and p[0] == PLAIN_VERSION:
                if p[1] == 0 and view.len < DATA_HEADER:
                    raise ValueError("frame shorter than its header")
                raw = _get_be64(p + 2)
                if last is not None and raw == last_sid and addr is last_addr:
                    (<list>(<list>last)[2]).append(data)  # the usual case: the same peer again
                    continue
                sid = PyLong_FromUnsignedLongLong(raw)
                group = groups.get((sid, addr))
                if group is None:
                    found = sessions.get(sid)
                    if found is None:
                        unsealed += 1
                        continue
                    group = groups[sid, addr] = [<SessionKeys?>found, addr, []]
                    slots.append(group)
                (<list>(<list>group)[2]).append(data)
                last, last_sid, last_addr = group, raw, addr
            else:
                slots.append((data, addr))
        finally:
            PyBuffer_Release(&view)
    for slot in slots:
        if type(slot) is tuple:
            sealed.append(slot)
            continue
        keys = (<list>slot)[0]
        addr = (<list>slot)[1]
        queued = (<list>slot)[2]
        n = len(queued)
        i = 0
        while i < n:
            size = BUNDLE_HEAD + COUNTER + TAG + BUNDLE_ENTRY + len(queued[i])
            j = i + 1
            while j < n and j - i < MAX_BUNDLE_FRAMES:
                grown = size + BUNDLE_ENTRY + len(queued[j])
                if grown > max_datagram_size:
                    break
                size = grown
                j += 1
            if j - i == 1:
                sealed.append((keys.seal(queued[i]), addr))
                added += COUNTER + TAG
            else:
                sealed.append((keys._seal_run(queued, i, j), addr))
                added += BUNDLE_HEAD + COUNTER + TAG + BUNDLE_ENTRY * (j - i)
                merged += j - i - 1
            i = j
    return sealed, merged, added, unsealed


def open_frames(dict sessions, buffer, offsets, lengths, addrs, Py_ssize_t start, plain, list sizes,
                list froms):
    """Compiled twin of ``nbmq.engine.secure.open_frames`` (same arguments and result)."""
    cdef Py_buffer view, room
    cdef const unsigned char* base
    cdef const unsigned char* p
    cdef unsigned char* out
    cdef Py_ssize_t i = start, count, offset, length, k, at, wrote, used = 0
    cdef Py_ssize_t before
    if start < 0:
        raise ValueError(f"start must be >= 0, got {start}")
    count = min(len(offsets), len(lengths), len(addrs))
    for k in sizes:
        used += k
    try:
        PyObject_GetBuffer(plain, &room, PyBUF_WRITABLE)
    except BufferError:
        raise ValueError("plain must be a writable buffer") from None
    try:
        if used > room.len:
            raise ValueError(f"sizes add up to {used} bytes, more than plain's {room.len}")
        out = <unsigned char*>room.buf
        PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
        try:
            base = <const unsigned char*>view.buf
            while i < count:
                try:
                    offset = offsets[i]
                    length = lengths[i]
                except OverflowError:
                    return i
                if offset < 0 or length < 0 or offset > view.len or length > view.len - offset:
                    return i
                p = base + offset
                if length <= CONTROL_HEADER or length > room.len - used:  # (opened, it is shorter)
                    return i
                if p[0] == BUNDLE_VERSION:
                    if length < BUNDLE_HEAD + BUNDLE_ENTRY + 2 + COUNTER:
                        return i
                    at = BUNDLE_HEAD + BUNDLE_ENTRY + 2  # the first bundled header's session
                elif p[0] == SECURE_VERSION and p[1] != 1 and p[1] != 2:
                    at = 2
                else:
                    return i
                keys = sessions.get(PyLong_FromUnsignedLongLong(_get_be64(p + at)))
                if keys is None:
                    return i
                before = len(sizes)
                wrote = (<SessionKeys?>keys)._open_run(p, length, out + used, sizes)
                if wrote < 0:
                    return i
                used += wrote
                addr = addrs[i]
                for k in range(len(sizes) - before):
                    froms.append(addr)
                i += 1
            return i
        finally:
            PyBuffer_Release(&view)
    finally:
        PyBuffer_Release(&room)
