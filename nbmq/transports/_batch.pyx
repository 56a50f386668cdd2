# cython: language_level=3, embedsignature=True
"""Linux batch datagram I/O: up to 64 datagrams per syscall with recvmmsg / sendmmsg.

Same class and behaviour as the pure fallback :mod:`nbmq.transports.batch` (docstrings there).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyObject_GetBuffer, PyBuffer_Release
from libc.errno cimport EAGAIN, EINTR, ENOBUFS, errno

cdef extern from "<errno.h>" nogil:
    int EWOULDBLOCK, EIO, EINVAL, ENOPROTOOPT, EOPNOTSUPP

cdef extern from *:
    """
    #include <netinet/udp.h>
    #ifndef UDP_SEGMENT
    #define UDP_SEGMENT 103
    #endif
    #ifndef UDP_GRO
    #define UDP_GRO 104
    #endif
    #ifndef SOL_UDP
    #define SOL_UDP 17
    #endif
    #include <sys/socket.h>
    #ifndef SO_RXQ_OVFL
    #define SO_RXQ_OVFL 40
    #endif
    """
    int UDP_SEGMENT, UDP_GRO, SOL_UDP, SO_RXQ_OVFL, SOL_SOCKET

cdef extern from "<string.h>" nogil:
    size_t strnlen(const char *s, size_t maxlen)
from libc.string cimport memcpy, memset

import os

import numpy as np

cdef extern from "<sys/socket.h>" nogil:
    ctypedef unsigned int socklen_t
    ctypedef unsigned short sa_family_t
    struct sockaddr:
        sa_family_t sa_family
    struct sockaddr_storage:
        sa_family_t ss_family
    struct iovec:
        void *iov_base
        size_t iov_len
    struct msghdr:
        void *msg_name
        socklen_t msg_namelen
        iovec *msg_iov
        size_t msg_iovlen
        void *msg_control
        size_t msg_controllen
        int msg_flags
    struct mmsghdr:
        msghdr msg_hdr
        unsigned int msg_len
    struct cmsghdr:
        size_t cmsg_len
        int cmsg_level
        int cmsg_type
    unsigned char *CMSG_DATA(cmsghdr *cmsg)
    cmsghdr *CMSG_FIRSTHDR(msghdr *msgh)
    cmsghdr *CMSG_NXTHDR(msghdr *msgh, cmsghdr *cmsg)
    size_t CMSG_LEN(size_t length)
    size_t CMSG_SPACE(size_t length)
    int recvmmsg(int fd, mmsghdr *msgvec, unsigned int vlen, int flags, void *timeout)
    int sendmmsg(int fd, mmsghdr *msgvec, unsigned int vlen, int flags)
    int AF_INET, AF_INET6, AF_UNIX, MSG_DONTWAIT

cdef extern from "<netinet/in.h>" nogil:
    struct in_addr:
        unsigned int s_addr
    struct in6_addr:
        unsigned char s6_addr[16]
    struct sockaddr_in:
        sa_family_t sin_family
        unsigned short sin_port
        in_addr sin_addr
    struct sockaddr_in6:
        sa_family_t sin6_family
        unsigned short sin6_port
        unsigned int sin6_flowinfo
        in6_addr sin6_addr
        unsigned int sin6_scope_id
    unsigned short ntohs(unsigned short)
    unsigned short htons(unsigned short)
    unsigned int ntohl(unsigned int)
    unsigned int htonl(unsigned int)

cdef extern from "<sys/un.h>" nogil:
    struct sockaddr_un:
        sa_family_t sun_family
        char sun_path[108]

cdef extern from "<arpa/inet.h>" nogil:
    const char *inet_ntop(int af, const void *src, char *dst, socklen_t size)
    int inet_pton(int af, const char *src, void *dst)

cdef enum:
    MAX_BATCH = 64      # messages per recvmmsg / sendmmsg
    MAX_IOV = 1024      # datagrams per sendmmsg (GSO groups several into one message)
    MAX_SEGS = 64       # datagrams per GSO message (the kernel's UDP_MAX_SEGMENTS floor)
    GSO_LIMIT = 65000   # bytes per GSO message
    CTRL_WORDS = 8      # 64 bytes of control buffer per message, 8-byte aligned (GRO + RXQ_OVFL)
    GRO_BATCH = 16      # receive messages per recvmmsg with UDP_GRO on
    GRO_SLOT = 65536    # bytes per receive message with UDP_GRO on
    CACHE_LIMIT = 4096

IMPLEMENTATION = "recvmmsg"


cdef class BatchIO:
    """Batched datagram I/O on one non-blocking SOCK_DGRAM socket (UDP v4/v6 or Unix)."""

    cdef int _fd
    cdef int _family
    cdef readonly object sock
    cdef readonly Py_ssize_t slot
    cdef readonly Py_ssize_t batch
    cdef readonly Py_ssize_t capacity
    cdef readonly object buffer
    cdef readonly object view
    cdef readonly object offsets
    cdef readonly object lengths
    cdef readonly list addrs
    cdef readonly unsigned long long send_errors
    cdef readonly object last_send_error
    cdef public bint gso
    cdef public bint gro
    cdef readonly unsigned long long gso_messages
    cdef readonly unsigned long long gro_messages
    cdef readonly bint rxq_ovfl
    cdef readonly unsigned long long kernel_drops
    cdef readonly Py_ssize_t largest_run
    cdef unsigned int _ovfl_last
    cdef unsigned char[::1] _buf
    cdef long long[::1] _offsets
    cdef int[::1] _lengths
    cdef dict _from_cache
    cdef dict _to_cache
    cdef mmsghdr _rmsgs[MAX_BATCH]
    cdef iovec _riov[MAX_BATCH]
    cdef sockaddr_storage _rnames[MAX_BATCH]
    cdef unsigned long long _rctrl[MAX_BATCH * CTRL_WORDS]
    cdef mmsghdr _smsgs[MAX_BATCH]
    cdef iovec _siov[MAX_IOV]
    cdef Py_buffer _sbufs[MAX_IOV]
    cdef unsigned long long _sctrl[MAX_BATCH * CTRL_WORDS]
    cdef Py_ssize_t _snext[MAX_BATCH]

    def __init__(self, sock, Py_ssize_t batch=64, Py_ssize_t slot=512, gso=None, gro=None):
        """One socket's batch reader and writer; see nbmq.transports.batch.BatchIO.

        UDP only, default on, each turning itself off if the OS refuses it:
        ``gso``: a run of datagrams of one size to one address goes out as one UDP_SEGMENT
        message, so the kernel walks its stack once per run, not once per datagram.
        ``gro``: the kernel may hand over such a run as one buffer (UDP_GRO), split here
        into its datagrams; each receive slot is then 64 KiB and ``batch`` is at most 16.
        """
        cdef Py_ssize_t i
        if batch < 1 or batch > MAX_BATCH:
            raise ValueError(f"batch must be 1..{MAX_BATCH}, got {batch}")
        if slot < 1 or slot > GRO_SLOT:  # batch * slot cannot wrap; a slot holds any UDP datagram
            raise ValueError(f"slot must be 1..{GRO_SLOT}, got {slot}")
        udp = sock.family in (AF_INET, AF_INET6)
        self.sock = sock
        self._fd = sock.fileno()
        self._family = sock.family
        self.gso = udp if gso is None else bool(gso)
        self.gro = udp if gro is None else bool(gro)
        self.kernel_drops = 0
        self.largest_run = 1
        self._ovfl_last = 0
        try:  # the kernel then tells, with each datagram, how many it dropped so far
            sock.setsockopt(SOL_SOCKET, SO_RXQ_OVFL, 1)
            self.rxq_ovfl = True
        except OSError:
            self.rxq_ovfl = False
        if self.gro:
            try:
                sock.setsockopt(SOL_UDP, UDP_GRO, 1)
            except OSError:
                self.gro = False
        if self.gro:
            batch = min(batch, GRO_BATCH)
            slot = GRO_SLOT
        self.batch = batch
        self.slot = slot
        self.capacity = batch * MAX_SEGS if self.gro else batch
        self.buffer = np.zeros(batch * slot, dtype=np.uint8)
        self._buf = self.buffer
        self.view = memoryview(self.buffer).cast("B")
        self.offsets = np.arange(self.capacity, dtype=np.int64) * slot
        self._offsets = self.offsets
        self.lengths = np.zeros(self.capacity, dtype=np.intc)
        self._lengths = self.lengths
        self.addrs = []
        self._from_cache = {}
        self._to_cache = {}
        self.send_errors = 0
        self.last_send_error = None
        self.gso_messages = 0
        self.gro_messages = 0
        memset(self._rmsgs, 0, sizeof(self._rmsgs))
        memset(self._smsgs, 0, sizeof(self._smsgs))
        for i in range(batch):
            self._riov[i].iov_base = <void *>&self._buf[i * slot]
            self._riov[i].iov_len = slot
            self._rmsgs[i].msg_hdr.msg_iov = &self._riov[i]
            self._rmsgs[i].msg_hdr.msg_iovlen = 1
            self._rmsgs[i].msg_hdr.msg_name = <void *>&self._rnames[i]

    def recv(self, Py_ssize_t limit=-1):
        """Read what is waiting, at most ``limit`` datagrams (default ``capacity``); returns
        ``(n, offsets, lengths, addrs)`` (see batch.py)."""
        cdef int n, i, seg
        cdef int fd = self._fd
        cdef Py_ssize_t m = 0, length, off, part, base, vlen
        cdef Py_ssize_t largest = 0, run_start
        cdef unsigned int ovfl
        cdef cmsghdr *cm
        cdef msghdr *hdr
        cdef bint gro = self.gro
        # (a GRO buffer may still hold coalesced runs queued before GRO was turned off)
        cdef bint ctrl = gro or self.rxq_ovfl or self.slot == GRO_SLOT
        if limit < 0 or limit > self.capacity:
            limit = self.capacity
        # A GRO message may hold MAX_SEGS datagrams: read only as many as surely fit.
        vlen = limit // MAX_SEGS if gro else limit
        if vlen > self.batch:
            vlen = self.batch
        if vlen < 1:  # not even one worst-case message fits: leave it in the kernel
            self.addrs = []
            return 0, self.offsets, self.lengths, self.addrs
        for i in range(vlen):
            hdr = &self._rmsgs[i].msg_hdr
            hdr.msg_namelen = sizeof(sockaddr_storage)
            hdr.msg_flags = 0
            if ctrl:
                hdr.msg_control = <void *>&self._rctrl[i * CTRL_WORDS]
                hdr.msg_controllen = CTRL_WORDS * 8
        while True:
            with nogil:
                n = recvmmsg(fd, self._rmsgs, <unsigned int>vlen, MSG_DONTWAIT, NULL)
            if n >= 0:
                break
            if errno == EAGAIN or errno == EWOULDBLOCK:
                n = 0
                break
            if errno != EINTR:
                raise OSError(errno, os.strerror(errno))
        addrs = []
        for i in range(n):
            hdr = &self._rmsgs[i].msg_hdr
            addr = self._decode_addr(&self._rnames[i], hdr.msg_namelen)
            length = self._rmsgs[i].msg_len
            base = i * self.slot
            seg = 0
            if ctrl and hdr.msg_controllen > 0:
                cm = CMSG_FIRSTHDR(hdr)
                while cm != NULL:
                    if cm.cmsg_level == SOL_UDP and cm.cmsg_type == UDP_GRO:
                        seg = (<int *>CMSG_DATA(cm))[0]
                    elif cm.cmsg_level == SOL_SOCKET and cm.cmsg_type == SO_RXQ_OVFL:
                        memcpy(&ovfl, CMSG_DATA(cm), sizeof(ovfl))
                        # the kernel's running u32 count for this socket: add what is new
                        if <unsigned int>(ovfl - self._ovfl_last) < 0x80000000u:
                            self.kernel_drops += <unsigned int>(ovfl - self._ovfl_last)
                            self._ovfl_last = ovfl
                    cm = CMSG_NXTHDR(hdr, cm)
            if seg > 0 and length > seg:
                self.gro_messages += 1
                run_start = m
                off = 0
                while off < length and m < self.capacity:
                    part = min(<Py_ssize_t>seg, length - off)
                    self._offsets[m] = base + off
                    self._lengths[m] = part
                    addrs.append(addr)
                    m += 1
                    off += part
                if m - run_start > largest:
                    largest = m - run_start
            else:
                self._offsets[m] = base
                self._lengths[m] = length
                addrs.append(addr)
                m += 1
        if largest > self.largest_run:  # the senders' GSO run: what a dropped entry most likely held
            self.largest_run = largest
        self.addrs = addrs
        return m, self.offsets, self.lengths, addrs

    cdef object _decode_addr(self, sockaddr_storage *ss, socklen_t namelen):
        cdef sockaddr_in *a4
        cdef sockaddr_in6 *a6
        cdef sockaddr_un *au
        cdef char text[64]
        cdef Py_ssize_t plen
        cdef object key
        a4 = <sockaddr_in *>ss
        if ss.ss_family == AF_INET:
            key = (<unsigned long long>a4.sin_addr.s_addr << 16) | a4.sin_port
        else:
            key = (<char *>ss)[:namelen]
        addr = self._from_cache.get(key)
        if addr is not None:
            return addr
        if ss.ss_family == AF_INET:
            inet_ntop(AF_INET, &a4.sin_addr, text, sizeof(text))
            addr = (text.decode("ascii"), ntohs(a4.sin_port))
        elif ss.ss_family == AF_INET6:
            a6 = <sockaddr_in6 *>ss
            inet_ntop(AF_INET6, &a6.sin6_addr, text, sizeof(text))
            addr = (text.decode("ascii"), ntohs(a6.sin6_port), ntohl(a6.sin6_flowinfo), a6.sin6_scope_id)
        elif ss.ss_family == AF_UNIX:
            au = <sockaddr_un *>ss
            plen = <Py_ssize_t>namelen - <Py_ssize_t>(<char *>&au.sun_path[0] - <char *>au)
            if plen <= 0:
                addr = ""
            elif au.sun_path[0] == 0:
                addr = au.sun_path[:plen]  # abstract namespace: bytes, as the socket module gives
            else:
                addr = os.fsdecode(au.sun_path[:strnlen(au.sun_path, plen)])
        else:
            addr = None
        if len(self._from_cache) >= CACHE_LIMIT:
            self._from_cache.clear()
        self._from_cache[key] = addr
        return addr

    cdef bytes _encode_addr(self, object addr):
        cdef sockaddr_in a4
        cdef sockaddr_in6 a6
        cdef sockaddr_un au
        cdef bytes raw = self._to_cache.get(addr)
        if raw is not None:
            return raw
        if self._family == AF_INET:
            memset(&a4, 0, sizeof(a4))
            a4.sin_family = AF_INET
            host = addr[0].encode("ascii")
            if inet_pton(AF_INET, host, &a4.sin_addr) != 1:
                raise OSError(22, f"not an IPv4 address: {addr[0]!r}")
            a4.sin_port = htons(<unsigned short>addr[1])
            raw = (<char *>&a4)[:sizeof(a4)]
        elif self._family == AF_INET6:
            memset(&a6, 0, sizeof(a6))
            a6.sin6_family = AF_INET6
            host = addr[0].split("%")[0].encode("ascii")
            if inet_pton(AF_INET6, host, &a6.sin6_addr) != 1:
                raise OSError(22, f"not an IPv6 address: {addr[0]!r}")
            a6.sin6_port = htons(<unsigned short>addr[1])
            if len(addr) > 2:
                a6.sin6_flowinfo = htonl(<unsigned int>addr[2])
            if len(addr) > 3:
                a6.sin6_scope_id = <unsigned int>addr[3]
            raw = (<char *>&a6)[:sizeof(a6)]
        elif self._family == AF_UNIX:
            memset(&au, 0, sizeof(au))
            au.sun_family = AF_UNIX
            path = addr if isinstance(addr, bytes) else os.fsencode(addr)
            if len(path) >= <Py_ssize_t>sizeof(au.sun_path):
                raise OSError(36, f"unix socket path too long: {addr!r}")
            memcpy(au.sun_path, <char *>path, len(path))
            raw = (<char *>&au)[:<Py_ssize_t>(<char *>&au.sun_path[0] - <char *>&au) + len(path)
                                + (0 if path[:1] == b"\0" else 1)]
        else:
            raise OSError(97, "unsupported address family")
        if len(self._to_cache) >= CACHE_LIMIT:
            self._to_cache.clear()
        self._to_cache[addr] = raw
        return raw

    def send(self, list datagrams, Py_ssize_t start=0):
        """Send ``datagrams[start:]`` (``(data, addr)`` pairs); returns the index of the first
        one not sent (``len(datagrams)`` when all went). See batch.py."""
        cdef Py_ssize_t total = len(datagrams)
        cdef Py_ssize_t i, k, niov, nmsg, first, count, seg, size, length
        cdef int sent = 0, err = 0
        cdef int fd = self._fd
        cdef cmsghdr *cm
        cdef msghdr *hdr
        cdef list names = []
        while start < total:
            names.clear()
            niov = 0
            nmsg = 0
            try:
                i = start
                while i < total and nmsg < self.batch and niov < MAX_IOV:
                    data, addr = datagrams[i]
                    raw = self._encode_addr(addr)
                    names.append(raw)
                    first = niov
                    PyObject_GetBuffer(data, &self._sbufs[niov], PyBUF_SIMPLE)
                    niov += 1
                    seg = self._sbufs[first].len
                    size = seg
                    count = 1
                    if self.gso and seg > 0:
                        # A GSO run: every datagram but the last exactly ``seg`` bytes, one address.
                        while (i + count < total and count < MAX_SEGS and niov < MAX_IOV
                               and self._sbufs[niov - 1].len == seg):
                            ndata, naddr = datagrams[i + count]
                            if naddr is not addr and naddr != addr:
                                break
                            PyObject_GetBuffer(ndata, &self._sbufs[niov], PyBUF_SIMPLE)
                            length = self._sbufs[niov].len
                            if length == 0 or length > seg or size + length > GSO_LIMIT:
                                PyBuffer_Release(&self._sbufs[niov])
                                break
                            niov += 1
                            size += length
                            count += 1
                    for k in range(first, niov):
                        self._siov[k].iov_base = self._sbufs[k].buf
                        self._siov[k].iov_len = self._sbufs[k].len
                    hdr = &self._smsgs[nmsg].msg_hdr
                    hdr.msg_iov = &self._siov[first]
                    hdr.msg_iovlen = count
                    hdr.msg_name = <void *><char *>raw
                    hdr.msg_namelen = len(raw)
                    if count > 1:
                        cm = <cmsghdr *>&self._sctrl[nmsg * CTRL_WORDS]
                        cm.cmsg_level = SOL_UDP
                        cm.cmsg_type = UDP_SEGMENT
                        cm.cmsg_len = CMSG_LEN(sizeof(unsigned short))
                        (<unsigned short *>CMSG_DATA(cm))[0] = <unsigned short>seg
                        hdr.msg_control = <void *>cm
                        hdr.msg_controllen = CMSG_SPACE(sizeof(unsigned short))
                    else:
                        hdr.msg_control = NULL
                        hdr.msg_controllen = 0
                    i += count
                    self._snext[nmsg] = i
                    nmsg += 1
                while True:
                    with nogil:
                        sent = sendmmsg(fd, self._smsgs, <unsigned int>nmsg, MSG_DONTWAIT)
                    err = errno
                    if sent >= 0 or err != EINTR:
                        break
            finally:
                for k in range(niov):
                    PyBuffer_Release(&self._sbufs[k])
            if sent > 0:
                for k in range(sent):
                    if self._smsgs[k].msg_hdr.msg_iovlen > 1:
                        self.gso_messages += 1
                start = self._snext[sent - 1]
            elif err == EAGAIN or err == EWOULDBLOCK or err == ENOBUFS:
                return start
            elif self._smsgs[0].msg_hdr.msg_iovlen > 1 and (
                    err == EIO or err == EINVAL or err == ENOPROTOOPT or err == EOPNOTSUPP):
                self.gso = False  # the OS or the route refuses UDP GSO: send one by one
            else:
                # The first message failed (peer gone, unreachable...): its datagrams are
                # lost, as on any network. Count them and go on with the rest.
                self.send_errors += self._snext[0] - start
                self.last_send_error = OSError(err, os.strerror(err))
                start = self._snext[0]
        return start
