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

    def seal(self, frame, uint64_t counter):
        """The sealed form of a plain frame under ``counter``: bytes, ``len(frame) + 24``."""
        if not self.encrypt:
            raise ValueError("this FrameCipher opens frames")
        cdef Py_buffer view
        cdef int outl = 0, finl = 0
        cdef const unsigned char* p
        cdef unsigned char* o
        cdef Py_ssize_t n, size
        cdef EVP_CIPHER_CTX* ctx
        cdef bytes out
        PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE)
        try:
            p = <const unsigned char*>view.buf
            n = view.len
            if n < CONTROL_HEADER:
                raise ValueError("frame shorter than a header")
            size = DATA_HEADER if p[1] == 0 else CONTROL_HEADER
            if n < size:
                raise ValueError("frame shorter than its header")
            out = PyBytes_FromStringAndSize(NULL, n + COUNTER + TAG)
            o = <unsigned char*>PyBytes_AS_STRING(out)
            o[0] = SECURE_VERSION
            memcpy(o + 1, p + 1, size - 1)
            _put_be64(o + size, counter)
            self._nonce(counter)
            ctx = self._ctx
            if (EVP_CipherUpdate(ctx, NULL, &outl, o, size + COUNTER) != 1
                    or EVP_CipherUpdate(ctx, o + size + COUNTER, &outl, p + size, <int>(n - size)) != 1
                    or EVP_CipherFinal_ex(ctx, o + size + COUNTER + outl, &finl) != 1
                    or EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, TAG, o + n + COUNTER) != 1):
                raise RuntimeError("ChaCha20-Poly1305 encryption failed")
            return out
        finally:
            PyBuffer_Release(&view)

    def open(self, datagram, Py_ssize_t size):
        """The plain frame inside a sealed one whose header is ``size`` bytes (34 or 10), or None
        when the tag does not verify. The caller checked the length and the counter."""
        if self.encrypt:
            raise ValueError("this FrameCipher seals frames")
        cdef Py_buffer view
        cdef int outl = 0, finl = 0
        cdef const unsigned char* p
        cdef unsigned char* o
        cdef Py_ssize_t n, body
        cdef EVP_CIPHER_CTX* ctx
        cdef bytes out
        PyObject_GetBuffer(datagram, &view, PyBUF_SIMPLE)
        try:
            p = <const unsigned char*>view.buf
            n = view.len
            if (size != DATA_HEADER and size != CONTROL_HEADER) or n < size + COUNTER + TAG:
                raise ValueError("datagram shorter than a sealed frame")
            body = n - size - COUNTER - TAG
            out = PyBytes_FromStringAndSize(NULL, n - COUNTER - TAG)
            o = <unsigned char*>PyBytes_AS_STRING(out)
            o[0] = PLAIN_VERSION
            memcpy(o + 1, p + 1, size - 1)
            self._nonce(_get_be64(p + size))
            ctx = self._ctx
            if (EVP_CipherUpdate(ctx, NULL, &outl, p, size + COUNTER) != 1
                    or EVP_CipherUpdate(ctx, o + size, &outl, p + size + COUNTER, <int>body) != 1
                    or EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, TAG, <void*>(p + n - TAG)) != 1):
                raise RuntimeError("ChaCha20-Poly1305 decryption failed")
            if EVP_CipherFinal_ex(ctx, o + size + outl, &finl) != 1:
                return None  # the tag did not verify
            return out
        finally:
            PyBuffer_Release(&view)
