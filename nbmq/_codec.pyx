# cython: language_level=3, embedsignature=True
"""The Cython codec: the names, signatures, results and errors of :mod:`nbmq._codec_py`.

Docstrings here are one line; the full ones (units, shapes, errors) live in the twin. Each
concept is one include file in ``nbmq/_cython/``. Inputs are taken the way the twin takes them,
``memoryview(x).cast("B")``, with a shortcut when ``x`` already exports 1-D unsigned bytes.
"""

cimport cython
cimport numpy as cnp
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize
from cpython.long cimport PyLong_FromUnsignedLongLong
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy, memmove

from nbmq._wire cimport (
    BUNDLE_VERSION,
    CONTROL_HEADER,
    MAX_BUNDLE_FRAMES,
    bundle_layout as _bundle_layout,
    DATA_HEADER,
    FNV_BASIS,
    MAX_CHUNK,
    MAX_FRAME,
    SECURE_COUNTER,
    SECURE_OVERHEAD,
    SECURE_VERSION,
    VERSION,
    fnv1a64 as _fnv,
)

import operator
from collections import deque

import numpy as np

from .errors import DecodeError, FrameTooLarge
from .wire import (
    BQSP_DEFAULT_MAX_PACKET,
    FNV_OFFSET_BASIS,
    FRAME_DTYPE,
    BUNDLE_ERROR_REASONS,
    FRAME_ERROR_REASONS,
    MAX_MESSAGE_SIZE,
    RQUEUE_SERVER_MAX_PAYLOAD,
    BqspPacket,
    ControlFrame,
    DataFrame,
    FrameError,
    FrameKind,
    RqueueMessage,
    RqueueType,
)
from ._codec_py.shard import ShardedMessage

cnp.import_array()

cdef extern from *:
    """
    #include <string.h>

    /* memoryview(obj).cast("B"), skipping the cast when obj already exports 1-D unsigned
       bytes. Always a new memoryview that nobody else holds. */
    static PyObject* nbmq_byteview(PyObject* obj) {
        PyObject* mv = PyMemoryView_FromObject(obj);
        if (mv == NULL) return NULL;
        Py_buffer* b = PyMemoryView_GET_BUFFER(mv);
        if (b->ndim == 1 && b->itemsize == 1 && b->format != NULL && b->format[0] == 'B'
                && b->format[1] == '\\0' && b->strides != NULL && b->strides[0] == 1
                && b->suboffsets == NULL) {
            return mv;
        }
        PyObject* cast = PyObject_CallMethod(mv, "cast", "s", "B");
        Py_DECREF(mv);
        return cast;
    }

    /* Narrow a memoryview made by nbmq_byteview / nbmq_subview (1-D, contiguous, itemsize 1,
       held by nobody else) to [start, start + length): what slicing does, without a second
       object. The buffer export (view.obj, the managed buffer) is untouched. */
    static inline void nbmq_narrow(PyObject* mv, Py_ssize_t start, Py_ssize_t length) {
        Py_buffer* b = PyMemoryView_GET_BUFFER(mv);
        b->buf = (char*)b->buf + start;
        b->len = length;
        b->shape[0] = length;
    }

    /* mv[start:start + length] for a 1-D contiguous byte memoryview: one new object sharing
       mv's buffer export. */
    static inline PyObject* nbmq_subview(PyObject* mv, Py_ssize_t start, Py_ssize_t length) {
        PyObject* out = PyMemoryView_FromObject(mv);
        if (out == NULL) return NULL;
        nbmq_narrow(out, start, length);
        return out;
    }

    static inline const unsigned char* nbmq_ptr(PyObject* mv) {
        return (const unsigned char*)PyMemoryView_GET_BUFFER(mv)->buf;
    }

    static inline unsigned char* nbmq_wptr(PyObject* mv) {
        return (unsigned char*)PyMemoryView_GET_BUFFER(mv)->buf;
    }

    static inline Py_ssize_t nbmq_len(PyObject* mv) {
        return PyMemoryView_GET_BUFFER(mv)->len;
    }

    static inline int nbmq_readonly(PyObject* mv) {
        return PyMemoryView_GET_BUFFER(mv)->readonly;
    }

    /* A tuple subclass instance (a NamedTuple) holding n items; steals the references.
       What tuple.__new__(type, items) does, minus the temporary tuple. */
    static PyObject* nbmq_struct_new(PyObject* type, Py_ssize_t n, PyObject** items) {
        Py_ssize_t i;
        for (i = 0; i < n; i++) {
            if (items[i] == NULL) {
                for (i = 0; i < n; i++) Py_XDECREF(items[i]);
                return NULL;
            }
        }
    #if PY_VERSION_HEX < 0x030E0000
        PyTypeObject* t = (PyTypeObject*)type;
        PyObject* o = t->tp_alloc(t, n);
        if (o == NULL) {
            for (i = 0; i < n; i++) Py_DECREF(items[i]);
            return NULL;
        }
        for (i = 0; i < n; i++) PyTuple_SET_ITEM(o, i, items[i]);
        return o;
    #else
        PyObject* tmp = PyTuple_New(n);
        if (tmp == NULL) {
            for (i = 0; i < n; i++) Py_DECREF(items[i]);
            return NULL;
        }
        for (i = 0; i < n; i++) PyTuple_SET_ITEM(tmp, i, items[i]);
        PyObject* args = PyTuple_Pack(1, tmp);
        Py_DECREF(tmp);
        if (args == NULL) return NULL;
        PyObject* o = PyTuple_Type.tp_new((PyTypeObject*)type, args, NULL);
        Py_DECREF(args);
        return o;
    #endif
    }

    static PyObject* nbmq_tuple3(PyObject* type, PyObject* a, PyObject* b, PyObject* c) {
        PyObject* items[3];
        Py_INCREF(a); Py_INCREF(b); Py_INCREF(c);
        items[0] = a; items[1] = b; items[2] = c;
        return nbmq_struct_new(type, 3, items);
    }

    /* The int objects of the last frame parsed, per header field: consecutive frames of one
       message share session_id, message_id, message_size and part_size, so parse_frame hands
       out the same (immutable) ints instead of allocating them again. */
    #ifndef Py_GIL_DISABLED
    static unsigned long long nbmq_int_val[5];
    static PyObject* nbmq_int_obj[5];
    static inline PyObject* nbmq_int(int slot, unsigned long long v) {
        PyObject* o = nbmq_int_obj[slot];
        if (o != NULL && nbmq_int_val[slot] == v) {
            Py_INCREF(o);
            return o;
        }
        o = PyLong_FromUnsignedLongLong(v);
        if (o == NULL) return NULL;
        Py_INCREF(o);
        Py_XSETREF(nbmq_int_obj[slot], o);
        nbmq_int_val[slot] = v;
        return o;
    }
    #else
    static inline PyObject* nbmq_int(int slot, unsigned long long v) {
        return PyLong_FromUnsignedLongLong(v);
    }
    #endif

    static PyObject* nbmq_data_frame(PyObject* type, unsigned long long sid,
            unsigned long long mid, unsigned int pc, unsigned int pi, unsigned long msize,
            unsigned long psize, unsigned long coff, PyObject* chunk) {
        PyObject* items[8];
        items[0] = nbmq_int(0, sid);
        items[1] = nbmq_int(1, mid);
        items[2] = PyLong_FromLong((long)pc);
        items[3] = PyLong_FromLong((long)pi);
        items[4] = nbmq_int(2, msize);
        items[5] = nbmq_int(3, psize);
        items[6] = nbmq_int(4, coff);
        Py_INCREF(chunk);
        items[7] = chunk;
        return nbmq_struct_new(type, 8, items);
    }

    static inline uint64_t nbmq_be64(const unsigned char* p) {
        return ((uint64_t)p[0] << 56) | ((uint64_t)p[1] << 48) | ((uint64_t)p[2] << 40)
             | ((uint64_t)p[3] << 32) | ((uint64_t)p[4] << 24) | ((uint64_t)p[5] << 16)
             | ((uint64_t)p[6] << 8) | (uint64_t)p[7];
    }
    static inline uint32_t nbmq_be32(const unsigned char* p) {
        return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8)
             | (uint32_t)p[3];
    }
    static inline uint16_t nbmq_be16(const unsigned char* p) {
        return (uint16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]);
    }
    static inline uint32_t nbmq_le32(const unsigned char* p) {
        return ((uint32_t)p[3] << 24) | ((uint32_t)p[2] << 16) | ((uint32_t)p[1] << 8)
             | (uint32_t)p[0];
    }
    static inline void nbmq_put_be64(unsigned char* p, uint64_t v) {
        p[0] = (unsigned char)(v >> 56); p[1] = (unsigned char)(v >> 48);
        p[2] = (unsigned char)(v >> 40); p[3] = (unsigned char)(v >> 32);
        p[4] = (unsigned char)(v >> 24); p[5] = (unsigned char)(v >> 16);
        p[6] = (unsigned char)(v >> 8); p[7] = (unsigned char)v;
    }
    static inline void nbmq_put_be32(unsigned char* p, uint32_t v) {
        p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16);
        p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
    }
    static inline void nbmq_put_be16(unsigned char* p, uint16_t v) {
        p[0] = (unsigned char)(v >> 8); p[1] = (unsigned char)v;
    }
    static inline void nbmq_put_le64(unsigned char* p, uint64_t v) {
        p[7] = (unsigned char)(v >> 56); p[6] = (unsigned char)(v >> 48);
        p[5] = (unsigned char)(v >> 40); p[4] = (unsigned char)(v >> 32);
        p[3] = (unsigned char)(v >> 24); p[2] = (unsigned char)(v >> 16);
        p[1] = (unsigned char)(v >> 8); p[0] = (unsigned char)v;
    }
    static inline void nbmq_put_le32(unsigned char* p, uint32_t v) {
        p[3] = (unsigned char)(v >> 24); p[2] = (unsigned char)(v >> 16);
        p[1] = (unsigned char)(v >> 8); p[0] = (unsigned char)v;
    }
    static inline void nbmq_put_le16(unsigned char* p, uint16_t v) {
        p[1] = (unsigned char)(v >> 8); p[0] = (unsigned char)v;
    }

    /* memcpy through a call: gcc inlines a copy whose size it can bound (a u16 chunk size) as
       `rep movsq`, several times slower for chunks of a few hundred bytes than libc's. */
    #if defined(__GNUC__)
    __attribute__((noinline))
    #endif
    static void nbmq_copy(void* dst, const void* src, size_t n) {
        memcpy(dst, src, n);
    }

    /* operator.index(obj) as an int64, clamped to [INT64_MIN, INT64_MAX]; -1 and an
       exception (TypeError) when obj is not an integer. *bad is set when it was clamped. */
    static int64_t nbmq_index_i64(PyObject* obj, int* bad) {
        int overflow = 0;
        long long v;
        PyObject* i;
        *bad = 0;
        if (PyLong_CheckExact(obj)) {
            i = obj;
            Py_INCREF(i);
        } else {
            i = PyNumber_Index(obj);
            if (i == NULL) { *bad = 1; return -1; }
        }
        v = PyLong_AsLongLongAndOverflow(i, &overflow);
        Py_DECREF(i);
        if (overflow > 0) { *bad = 2; return INT64_MAX; }
        if (overflow < 0) { *bad = 2; return INT64_MIN; }
        if (v == -1 && PyErr_Occurred()) { *bad = 1; return -1; }
        return (int64_t)v;
    }

    /* operator.index(obj) as a u64: 1 when it fits, 0 when it does not (no exception), -1 with
       an exception (TypeError) when obj is not an integer. */
    static int nbmq_index_u64(PyObject* obj, uint64_t* out) {
        unsigned long long v;
        PyObject* i;
        if (PyLong_CheckExact(obj)) {
            i = obj;
            Py_INCREF(i);
        } else {
            i = PyNumber_Index(obj);
            if (i == NULL) return -1;
        }
        v = PyLong_AsUnsignedLongLong(i);
        Py_DECREF(i);
        if (v == (unsigned long long)-1 && PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
            PyErr_Clear();
            return 0;
        }
        *out = (uint64_t)v;
        return 1;
    }
    """
    object nbmq_byteview(object obj)
    void nbmq_narrow(object mv, Py_ssize_t start, Py_ssize_t length)
    object nbmq_subview(object mv, Py_ssize_t start, Py_ssize_t length)
    const unsigned char* nbmq_ptr(object mv)
    unsigned char* nbmq_wptr(object mv)
    Py_ssize_t nbmq_len(object mv)
    bint nbmq_readonly(object mv)
    object nbmq_tuple3(object type, object a, object b, object c)
    object nbmq_data_frame(object type, unsigned long long sid, unsigned long long mid,
                           unsigned int pc, unsigned int pi, unsigned long msize,
                           unsigned long psize, unsigned long coff, object chunk)
    uint64_t nbmq_be64(const unsigned char* p) noexcept nogil
    uint32_t nbmq_be32(const unsigned char* p) noexcept nogil
    uint16_t nbmq_be16(const unsigned char* p) noexcept nogil
    uint32_t nbmq_le32(const unsigned char* p) noexcept nogil
    void nbmq_put_be64(unsigned char* p, uint64_t v) noexcept nogil
    void nbmq_put_be32(unsigned char* p, uint32_t v) noexcept nogil
    void nbmq_put_be16(unsigned char* p, uint16_t v) noexcept nogil
    void nbmq_put_le64(unsigned char* p, uint64_t v) noexcept nogil
    void nbmq_put_le32(unsigned char* p, uint32_t v) noexcept nogil
    void nbmq_put_le16(unsigned char* p, uint16_t v) noexcept nogil
    int64_t nbmq_index_i64(object obj, int* bad) except? -1
    int nbmq_index_u64(object obj, uint64_t* out) except -1
    void nbmq_copy(void* dst, const void* src, size_t n) noexcept nogil


cdef uint64_t U64_MAX = 0xFFFFFFFFFFFFFFFF
cdef int64_t U32_MAX = 0xFFFFFFFF


cdef inline int64_t _i64(object obj) except? -1:
    """operator.index(obj) clamped into int64 (TypeError for non-integers)."""
    cdef int bad = 0
    return nbmq_index_i64(obj, &bad)


cdef object _bytes_of(object obj, const unsigned char** p, Py_ssize_t* n):
    """The bytes of obj as the twin's memoryview(obj).cast("B") sees them: sets p and n and
    returns the object that keeps them alive. bytes and contiguous uint8 / int8 arrays are read
    in place; anything else goes through nbmq_byteview (the same errors as the twin)."""
    if PyBytes_CheckExact(obj):
        p[0] = <const unsigned char*>PyBytes_AS_STRING(obj)
        n[0] = len(<bytes>obj)
        return obj
    if (cnp.PyArray_CheckExact(obj) and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>obj)
            and (cnp.PyArray_TYPE(<cnp.ndarray>obj) == cnp.NPY_UINT8
                 or cnp.PyArray_TYPE(<cnp.ndarray>obj) == cnp.NPY_INT8)):
        p[0] = <const unsigned char*>cnp.PyArray_DATA(<cnp.ndarray>obj)
        n[0] = cnp.PyArray_NBYTES(<cnp.ndarray>obj)
        return obj
    view = nbmq_byteview(obj)
    p[0] = nbmq_ptr(view)
    n[0] = nbmq_len(view)
    return view


cdef inline object _empty_view():
    return memoryview(b"")


include "_cython/frames.pxi"
include "_cython/fnv.pxi"
include "_cython/shard.pxi"
include "_cython/batch.pxi"
include "_cython/reassembly.pxi"
include "_cython/stream.pxi"
include "_cython/bqsp.pxi"
include "_cython/rqueue.pxi"


__all__ = [
    "parse_frames",
    "split_bundles",
    "bundle_layout",
    "BqspDecoder",
    "decode_bqsp_header",
    "encode_bqsp_header",
    "encode_bqsp_packet",
    "ack_hash",
    "fnv1a64",
    "message_id",
    "session_id",
    "encode_control_frame",
    "encode_control_frame_into",
    "encode_data_frame",
    "encode_data_frame_into",
    "parse_frame",
    "MESSAGE_OVERHEAD",
    "MESSAGE_RESERVATION",
    "Reassembler",
    "RqueueDecoder",
    "encode_deregister",
    "encode_notification",
    "encode_remove",
    "encode_subscribe",
    "ShardedMessage",
    "frame_count",
    "shard_message",
    "shard_message_bytes",
]
