# cython: language_level=3, embedsignature=True
"""Secure mode's per-frame ChaCha20-Poly1305, compiled: the twin of ``nbmq.engine.secure.FrameCipher``.

The cipher is OpenSSL libcrypto's ``EVP_chacha20_poly1305`` (RFC 8439), the same primitive the
``cryptography`` package wraps for the Python twin; nothing here is cryptography of our own. One
``EVP_CIPHER_CTX`` per key and direction is set up once and only re-nonced per frame, which is
what makes a 100-byte frame cheap (the Python twin pays a key set-up and a Python call per
frame). The frame layout is ``nbmq.engine.secure``'s (docs/secure.md); the parity tests check
that both twins give the same bytes and refuse the same frames.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.long cimport PyLong_FromUnsignedLongLong
from libc.stdint cimport uint64_t
from libc.string cimport memcpy, memset


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

    cdef object _open(self, const unsigned char* p, Py_ssize_t n, Py_ssize_t size):
        """The plain frame of the sealed one at ``p`` (``n`` bytes, header ``size``), or None."""
        cdef int outl = 0, finl = 0
        cdef Py_ssize_t body = n - size - COUNTER - TAG
        cdef bytes out = PyBytes_FromStringAndSize(NULL, n - COUNTER - TAG)
        cdef unsigned char* o = <unsigned char*>PyBytes_AS_STRING(out)
        cdef EVP_CIPHER_CTX* ctx = self._ctx
        o[0] = PLAIN_VERSION
        memcpy(o + 1, p + 1, size - 1)
        self._nonce(_get_be64(p + size))
        if (EVP_CipherUpdate(ctx, NULL, &outl, p, <int>(size + COUNTER)) != 1
                or EVP_CipherUpdate(ctx, o + size, &outl, p + size + COUNTER, <int>body) != 1
                or EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, TAG, <void*>(p + n - TAG)) != 1):
            raise RuntimeError("ChaCha20-Poly1305 decryption failed")
        if EVP_CipherFinal_ex(ctx, o + size + outl, &finl) != 1:
            return None  # the tag did not verify
        return out

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

    cdef bytes _seal_ptr(self, const unsigned char* p, Py_ssize_t n):
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
        return self._send._seal(p, n, counter)

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
        if not self._fresh(counter[0]):
            return 3
        epoch = counter[0] // self.rekey_frames
        if epoch == self._recv_epoch or epoch == self._recv_epoch + 1:
            return 0
        if epoch + 1 == self._recv_epoch and self._recv_prev is not None:
            return 0
        return 4

    cdef object _open_ptr(self, const unsigned char* p, Py_ssize_t n, Py_ssize_t size, uint64_t counter):
        """Decrypt a frame ``_prepare`` let through; the plain frame (the window and keys moved
        on), or None when the tag failed (nothing changed)."""
        cdef uint64_t epoch = counter // self.rekey_frames
        cdef FrameCipher cipher
        if epoch == self._recv_epoch:
            cipher = self._recv
        elif epoch == self._recv_epoch + 1:
            cipher = FrameCipher(self._rekeyed(self._recv.key), False)
        else:
            cipher = self._recv_prev
        plain = cipher._open(p, n, size)
        if plain is None:
            return None
        if epoch == self._recv_epoch + 1:  # the peer moved to the next key: so do we
            self._recv_prev = self._recv
            self._recv = cipher
            self._recv_epoch = epoch
            self.rekeys += 1
        self._take(counter)
        return plain

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


def seal_frames(dict sessions, list out):
    """Compiled twin of ``nbmq.engine.secure.seal_frames`` (same arguments and result)."""
    cdef list sealed = []
    cdef Py_ssize_t count = 0, unsealed = 0
    cdef Py_buffer view
    cdef const unsigned char* p
    for data, addr in out:
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            p = <const unsigned char*>view.buf
            if view.len >= CONTROL_HEADER and p[0] == PLAIN_VERSION:
                keys = sessions.get(PyLong_FromUnsignedLongLong(_get_be64(p + 2)))
                if keys is None:
                    unsealed += 1
                    continue
                if p[1] == 0 and view.len < DATA_HEADER:
                    raise ValueError("frame shorter than its header")
                data = (<SessionKeys?>keys)._seal_ptr(p, view.len)
                count += 1
        finally:
            PyBuffer_Release(&view)
        sealed.append((data, addr))
    return sealed, count, unsealed


def open_frames(dict sessions, buffer, offsets, lengths, addrs, Py_ssize_t start, list run, list froms):
    """Compiled twin of ``nbmq.engine.secure.open_frames`` (same arguments and result)."""
    cdef Py_buffer view
    cdef const unsigned char* base
    cdef const unsigned char* p
    cdef Py_ssize_t i = start, count, offset, length
    cdef Py_ssize_t size = 0
    cdef uint64_t counter = 0
    if start < 0:
        raise ValueError(f"start must be >= 0, got {start}")
    count = min(len(offsets), len(lengths), len(addrs))
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
            if length <= CONTROL_HEADER or p[0] != SECURE_VERSION or p[1] == 1 or p[1] == 2:
                return i
            keys = sessions.get(PyLong_FromUnsignedLongLong(_get_be64(p + 2)))
            if keys is None or (<SessionKeys?>keys)._prepare(p, length, &size, &counter) != 0:
                return i
            plain = (<SessionKeys>keys)._open_ptr(p, length, size, counter)
            if plain is None:
                return i
            run.append(plain)
            froms.append(addrs[i])
            i += 1
        return i
    finally:
        PyBuffer_Release(&view)
