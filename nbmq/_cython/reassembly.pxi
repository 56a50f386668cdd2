# Reassembly: data frames back into messages, each chunk copied once (twin:
# _codec_py/reassembly.py). Received byte ranges of a part live in a C array of
# (start, end) pairs, sorted, disjoint and merged, as the twin's two lists.

MESSAGE_OVERHEAD = 256
MESSAGE_RESERVATION = 1024 * 1024

cdef int64_t OVERHEAD = 256
cdef int64_t RESERVATION = 1024 * 1024
cdef int64_t RANGE_CHARGE = 8192
cdef Py_ssize_t RECENT_COMPLETIONS = 1024
cdef int64_t NO_PEER_CAP = 0x7FFFFFFFFFFFFFFF

import mmap as _mmap

_PAGE_MAP = _mmap.MAP_PRIVATE | _mmap.MAP_ANONYMOUS | 0x4000  # MAP_NORESERVE (Linux)


def _lazy_buffer(size):
    """A uint8 array on an anonymous map: pages are committed as they are written."""
    try:
        area = _mmap.mmap(-1, size, flags=_PAGE_MAP)
    except (OSError, OverflowError, ValueError):
        area = _mmap.mmap(-1, size)
    return np.frombuffer(area, dtype=np.uint8)

cdef enum:
    INLINE_RANGES = 8


@cython.final
@cython.no_gc
cdef class _Part:
    cdef object data            # uint8 ndarray of the part, owned
    cdef unsigned char* ptr
    cdef int64_t size
    cdef int64_t received
    cdef bint done
    cdef uint32_t* r            # ranges: r[2i] = start, r[2i + 1] = end
    cdef Py_ssize_t n
    cdef Py_ssize_t cap
    cdef uint32_t inline_r[2 * INLINE_RANGES]

    def __dealloc__(self):
        if self.r != NULL and self.r != self.inline_r:
            PyMem_Free(self.r)


cdef _Part _new_part(int64_t size, bint lazy):
    cdef _Part part = _Part.__new__(_Part)
    cdef cnp.npy_intp dims[1]
    dims[0] = <cnp.npy_intp>size
    cdef cnp.ndarray data
    if lazy and size:
        data = _lazy_buffer(size)
    else:
        data = cnp.PyArray_EMPTY(1, dims, cnp.NPY_UINT8, 0)
    part.data = data
    part.ptr = <unsigned char*>cnp.PyArray_DATA(data)
    part.size = size
    part.r = part.inline_r
    part.cap = INLINE_RANGES
    return part


cdef int _insert_range(_Part part, Py_ssize_t i, uint32_t start, uint32_t end) except -1:
    cdef uint32_t* grown
    cdef Py_ssize_t cap
    if part.n == part.cap:
        cap = part.cap * 2
        if part.r == part.inline_r:
            grown = <uint32_t*>PyMem_Malloc(cap * 2 * sizeof(uint32_t))
            if grown != NULL:
                memcpy(grown, part.r, part.n * 2 * sizeof(uint32_t))
        else:
            grown = <uint32_t*>PyMem_Realloc(part.r, cap * 2 * sizeof(uint32_t))
        if grown == NULL:
            raise MemoryError()
        part.r = grown
        part.cap = cap
    memmove(part.r + 2 * (i + 1), part.r + 2 * i, (part.n - i) * 2 * sizeof(uint32_t))
    part.r[2 * i] = start
    part.r[2 * i + 1] = end
    part.n += 1
    return 0


@cython.final
@cython.no_gc
cdef class _Owner:
    cdef object key
    cdef int64_t used
    cdef Py_ssize_t count       # its incomplete messages
    # Its messages, oldest first: an intrusive list of borrowed pointers (the Reassembler's
    # _messages dict holds them), so no dict work per message and no reference cycle.
    cdef void* head
    cdef void* tail


@cython.final
@cython.no_gc
cdef class _Message:
    cdef int64_t part_count
    cdef int64_t message_size
    cdef int64_t sizes_seen
    cdef int64_t parts_done
    cdef int64_t parts_seen
    cdef double first_seen
    cdef list parts
    cdef bint lazy
    cdef int64_t received       # lazy: bytes received plus RANGE_CHARGE per range opened
    cdef int64_t charge
    cdef _Owner owner
    cdef object key
    cdef void* prev             # neighbours in owner's list (borrowed)
    cdef void* next


cdef inline object _owner_of(object key):
    if type(key) is tuple and len(<tuple>key):
        return (<tuple>key)[0]
    return key


cdef class Reassembler:
    """Turns data frames back into messages, copying each chunk once."""

    cdef dict _messages
    cdef dict _owners
    cdef object _evicted_keys
    cdef dict _recent
    cdef object _max_message_size
    cdef object _max_incomplete_bytes
    cdef object _max_peer_incomplete_bytes
    cdef int64_t _max_msg
    cdef int64_t _max_inc
    cdef int64_t _max_peer
    cdef public int64_t incomplete_bytes
    cdef public int64_t evicted
    cdef public int64_t frames
    cdef public int64_t duplicates
    cdef public int64_t rejected
    cdef public int64_t completed
    cdef public int64_t expired
    cdef public int64_t dropped_too_large
    cdef public int64_t malformed
    # The message of the last default key (session_id, message_id) seen: consecutive frames of
    # one message skip the key tuple and the dict lookup. Cleared whenever it leaves the dict.
    cdef _Message _cmsg
    # The owner of the last default-keyed message admitted (its session id): skips the lookup.
    cdef _Owner _cowner
    cdef uint64_t _cowner_sid
    cdef object _ckey
    cdef uint64_t _csid
    cdef uint64_t _cmid
    # ... and the part of its last frame: the next chunk of that part, in order, is appended
    # without touching any Python object (see _append).
    cdef _Part _cpart
    cdef int64_t _cpi
    # Outcome of _add_core: the completed parts, or the error to raise.
    cdef object _done
    cdef Py_ssize_t _eoff
    cdef object _ereason
    cdef bint _elarge

    def __cinit__(self):
        self._messages = {}
        self._owners = {}
        self._evicted_keys = deque(maxlen=4096)
        self._recent = {}
        self._max_peer = NO_PEER_CAP
        self._max_message_size = MAX_MESSAGE_SIZE
        self._max_msg = U32_MAX
        self._max_incomplete_bytes = 64 * 1024 * 1024
        self._max_inc = 64 * 1024 * 1024

    def __init__(self, max_message_size=MAX_MESSAGE_SIZE, max_incomplete_bytes=64 * 1024 * 1024,
                 max_peer_incomplete_bytes=None):
        """Set the caps: largest message, budgets for incomplete messages (bytes)."""
        max_message_size = operator.index(max_message_size)
        max_incomplete_bytes = operator.index(max_incomplete_bytes)
        if max_peer_incomplete_bytes is not None:
            max_peer_incomplete_bytes = operator.index(max_peer_incomplete_bytes)
            if max_peer_incomplete_bytes < 0:
                raise ValueError("max_peer_incomplete_bytes must be >= 0")
        if not 0 <= max_message_size <= MAX_MESSAGE_SIZE:
            raise ValueError("max_message_size must be 0..2**32-1")
        if max_incomplete_bytes < 0:
            raise ValueError("max_incomplete_bytes must be >= 0")
        self.max_message_size = max_message_size
        self.max_incomplete_bytes = max_incomplete_bytes
        self.max_peer_incomplete_bytes = max_peer_incomplete_bytes

    @property
    def max_message_size(self):
        """Largest message_size accepted, bytes."""
        return self._max_message_size

    @max_message_size.setter
    def max_message_size(self, value):
        self._max_msg = _i64(value)
        self._max_message_size = value

    @property
    def max_incomplete_bytes(self):
        """Budget for all incomplete messages together, bytes."""
        return self._max_incomplete_bytes

    @max_incomplete_bytes.setter
    def max_incomplete_bytes(self, value):
        self._max_inc = _i64(value)
        self._max_incomplete_bytes = value

    @property
    def max_peer_incomplete_bytes(self):
        """Budget of one owner (the first item of a key), bytes; None: the socket's only."""
        return self._max_peer_incomplete_bytes

    @max_peer_incomplete_bytes.setter
    def max_peer_incomplete_bytes(self, value):
        self._max_peer = NO_PEER_CAP if value is None else _i64(value)
        self._max_peer_incomplete_bytes = value

    def __len__(self):
        """Number of incomplete messages held."""
        return len(self._messages)

    cdef inline void _forget(self, _Message message):
        if self._cmsg is message:
            self._cmsg = None
            self._ckey = None
            self._cpart = None

    cdef bint _drop(self, object key) except -1:
        found = self._messages.get(key)
        if found is None:
            return False
        self._release(key, <_Message>found)
        return True

    cdef int _release(self, object key, _Message message) except -1:
        del self._messages[key]
        cdef _Owner owner = message.owner
        if message.prev != NULL:
            (<_Message>message.prev).next = message.next
        else:
            owner.head = message.next
        if message.next != NULL:
            (<_Message>message.next).prev = message.prev
        else:
            owner.tail = message.prev
        message.prev = message.next = NULL
        owner.count -= 1
        owner.used -= message.charge
        if owner.count == 0 and len(self._owners) > len(self._messages) + 64:
            self._sweep_owners()
        self.incomplete_bytes -= message.charge
        self._forget(message)
        return 0

    cdef void _sweep_owners(self):
        # idle owners stay for their next message; sweep them once they pile up
        self._owners = {k: o for k, o in self._owners.items() if (<_Owner>o).count}
        self._cowner = None

    cdef _Owner _find_owner(self, object key, bint cacheable, uint64_t sid):
        """The owner entry of key's owner (the cached one when sid matches), None if absent."""
        if cacheable and self._cowner is not None and self._cowner_sid == sid:
            return self._cowner
        found = self._owners.get(_owner_of(key))
        return <_Owner>found if found is not None else None

    cdef _Owner _adopt_owner(self, _Owner owner, object key, bint cacheable, uint64_t sid):
        """owner, or a new entry for key's owner (appended to the owner table); cached."""
        if owner is None:
            owner = _Owner.__new__(_Owner)
            owner.key = _owner_of(key)
            self._owners[owner.key] = owner
        if cacheable:
            self._cowner = owner
            self._cowner_sid = sid
        return owner

    cdef int _evict(self, _Owner owner, _Message current) except -1:
        cdef _Message found = <_Message>owner.head
        if found is current:
            found = <_Message>found.next
        key = found.key
        self._release(key, found)
        self.evicted += 1
        self._evicted_keys.append(key)
        return 0

    cdef object _make_room(self, _Owner owner, int64_t need, _Message current):
        """The twin's _make_room: None when need more bytes fit, else the reason."""
        cdef int64_t own = 0 if current is None else current.charge
        cdef int64_t mine
        cdef _Owner victim, other
        if own + need > self._max_inc:
            return "incomplete-bytes budget exhausted"
        if self._max_peer != NO_PEER_CAP:
            if own + need > self._max_peer:
                return "peer's incomplete-bytes budget exhausted"
            while owner is not None and owner.used + need > self._max_peer:
                self._evict(owner, current)
        while self.incomplete_bytes + need > self._max_inc:
            mine = need if owner is None else owner.used + need
            victim = None
            for found in self._owners.values():
                other = <_Owner>found
                if other is not owner and (victim is None or other.used > victim.used):
                    victim = other
            if victim is not None and victim.used > mine:
                self._evict(victim, current)
            elif owner is not None and owner.count > (current is not None):
                self._evict(owner, current)
            else:
                return "incomplete-bytes budget exhausted"
        return None

    cdef int _reject(self, object key, Py_ssize_t offset, str reason) except -2:
        self.rejected += 1
        self._drop(key)
        self._eoff = offset
        self._ereason = reason
        self._elarge = False
        return -1

    cdef int _too_large(self, str reason) except -2:
        self.dropped_too_large += 1
        self._eoff = 20
        self._ereason = reason
        self._elarge = True
        return -1

    cdef object _outcome(self, int status):
        if status == 0:
            return None
        if status == 1:
            done = self._done
            self._done = None
            return done
        raise (FrameTooLarge if self._elarge else DecodeError)(self._eoff, self._ereason)

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef int _add_core(self, object key, object found, bint cacheable, uint64_t sid, uint64_t mid,
                       int64_t pc, int64_t pi, int64_t msize, int64_t psize, int64_t coff,
                       const unsigned char* chunk, Py_ssize_t size, double now) except -2:
        """The twin's add() after its argument conversion: 0 pending, 1 complete (parts in
        self._done), -1 refused (error in self._e*)."""
        cdef _Message message
        cdef _Part part
        cdef _Owner owner
        cdef int64_t claim, end
        cdef Py_ssize_t i, lo, hi, mid_i, n
        cdef uint32_t* r
        cdef bint before, after
        cdef cnp.npy_intp dims1[1]
        cdef cnp.ndarray whole
        if pc < 1 or pc > 255:
            return self._reject(key, 18, "part_count not in 1..255")
        if pi < 0 or pi >= pc:
            return self._reject(key, 19, "part_index >= part_count")
        if msize < 0 or msize > U32_MAX:
            return self._reject(key, 20, "message_size not a u32")
        if psize < 0 or psize > U32_MAX:
            return self._reject(key, 24, "part_size not a u32")
        if coff < 0 or coff > U32_MAX:
            return self._reject(key, 30, "chunk_offset not a u32")
        if (found is None and pc == 1 and coff == 0 and size == psize and psize == msize
                and size > 0 and msize <= self._max_msg):
            # One frame is the whole message (the common small message): when its claim fits
            # without evicting anything, it completes at once with no message or ranges. Its
            # owner entry is made (and swept) as the general path would: the owner table's
            # order picks the victim of a later eviction on a tie, as in the twin.
            claim = OVERHEAD + msize
            if (self.incomplete_bytes + claim <= self._max_inc
                    and self.incomplete_bytes + claim <= self._max_peer):
                owner = self._adopt_owner(self._find_owner(key, cacheable, sid), key, cacheable, sid)
                if owner.count == 0 and len(self._owners) > len(self._messages) + 64:
                    self._sweep_owners()
                dims1[0] = <cnp.npy_intp>size
                whole = cnp.PyArray_EMPTY(1, dims1, cnp.NPY_UINT8, 0)
                memcpy(cnp.PyArray_DATA(whole), chunk, size)
                self.frames += 1
                self.completed += 1
                self._done = [whole]
                return 1
        if found is None:
            if msize > self._max_msg:
                return self._too_large("message over max_message_size")
            if psize == 0 and size == 0 and self._recent.get(key) == msize:
                self.duplicates += 1  # a late empty part of a message completed without it
                return 0
            owner = self._find_owner(key, cacheable, sid)
            claim = OVERHEAD + (msize if msize < RESERVATION else RESERVATION)
            if (self.incomplete_bytes + claim > self._max_inc or claim > self._max_peer
                    or (owner is not None and owner.used + claim > self._max_peer)):
                reason = self._make_room(owner, claim, None)  # evictions: the slow path
                if reason is not None:
                    return self._too_large(reason)
                if owner is not None and owner.key not in self._owners:
                    owner = None  # evicting its last message forgot it
            owner = self._adopt_owner(owner, key, cacheable, sid)
            message = _Message.__new__(_Message)
            message.part_count = pc
            message.message_size = msize
            message.first_seen = now
            message.parts = [None] * pc
            message.lazy = msize > RESERVATION
            message.charge = claim
            message.owner = owner
            self._messages[key] = message
            message.key = key
            message.prev = owner.tail
            if owner.tail != NULL:
                (<_Message>owner.tail).next = <void*>message
            else:
                owner.head = <void*>message
            owner.tail = <void*>message
            owner.count += 1
            owner.used += claim
            self.incomplete_bytes += claim
        else:
            message = <_Message>found
            if pc != message.part_count:
                return self._reject(key, 18, "part_count differs from earlier frames")
            if msize != message.message_size:
                return self._reject(key, 20, "message_size differs from earlier frames")
        if cacheable and self._cmsg is not message:
            self._cmsg = message
            self._ckey = key
            self._csid = sid
            self._cmid = mid
            self._cpart = None
        slot = message.parts[pi]
        if slot is None:
            message.sizes_seen += psize
            if message.sizes_seen > message.message_size:
                return self._reject(key, 24, "part sizes exceed message_size")
            try:
                part = _new_part(psize, message.lazy)
            except (OSError, MemoryError, ValueError):  # the OS refused the map
                self._too_large("cannot reserve memory for the message")
                self._drop(key)
                return -1
            message.parts[pi] = part
            message.parts_seen += 1
        else:
            part = <_Part>slot
            if psize != part.size:
                return self._reject(key, 24, "part_size differs from earlier frames")
        if cacheable:
            self._cpart = part
            self._cpi = pi
        end = coff + size
        if end > part.size:
            return self._reject(key, 30, "chunk past its part")
        if size == 0:
            # Only an empty part needs its (single, empty) chunk; anywhere else it carries nothing.
            if part.done or part.size:
                self.duplicates += 1
                return 0
        else:
            r = part.r
            n = part.n
            # i = bisect_right(starts, coff); in-order arrival lands past the last range.
            if n == 0:
                i = 0
            elif coff >= r[2 * (n - 1)]:
                i = n
            else:
                lo = 0
                hi = n
                while lo < hi:
                    mid_i = (lo + hi) >> 1
                    if coff < r[2 * mid_i]:
                        hi = mid_i
                    else:
                        lo = mid_i + 1
                i = lo
            if i and r[2 * i - 1] > coff:
                if end <= r[2 * i - 1] and memcmp(part.ptr + coff, chunk, size) == 0:
                    self.duplicates += 1
                    return 0
                return self._reject(key, 30, "chunk overlaps received bytes differently")
            if i < n and r[2 * i] < end:
                return self._reject(key, 30, "chunk overlaps received bytes differently")
            before = i > 0 and r[2 * i - 1] == coff
            after = i < n and r[2 * i] == end
            if message.lazy and self._grow(key, message, size if before or after
                                           else size + RANGE_CHARGE) < 0:
                return -1
            memmove(part.ptr + coff, chunk, size)
            if before:
                if after:
                    r[2 * i - 1] = r[2 * i + 1]
                    memmove(r + 2 * i, r + 2 * i + 2, (n - i - 1) * 2 * sizeof(uint32_t))
                    part.n -= 1
                else:
                    r[2 * i - 1] = <uint32_t>end
            elif after:
                r[2 * i] = <uint32_t>coff
            else:
                _insert_range(part, i, <uint32_t>coff, <uint32_t>end)
            part.received += size
        self.frames += 1
        if part.received < part.size:
            return 0
        part.done = True
        message.parts_done += 1
        if message.parts_done < message.part_count:
            if message.parts_done < message.parts_seen or message.sizes_seen != message.message_size:
                return 0
            # The received parts add up to message_size: the absent ones are empty (reference).
            if len(self._recent) >= RECENT_COMPLETIONS:
                del self._recent[next(iter(self._recent))]
            self._recent[key] = msize
        elif message.sizes_seen != message.message_size:
            return self._reject(key, 24, "part sizes do not add up to message_size")
        self._release(key, message)
        self.completed += 1
        self._done = [np.empty(0, dtype=np.uint8) if p is None else (<_Part>p).data
                      for p in message.parts]
        return 1

    cdef int _grow(self, object key, _Message message, int64_t more) except -2:
        """Charge a lazy message for more received bytes; drop it if they cannot fit."""
        cdef int64_t grown = message.received + more
        cdef int64_t charge = grown if grown > RESERVATION else RESERVATION
        if charge > message.message_size:
            charge = message.message_size
        charge += OVERHEAD
        cdef int64_t delta = charge - message.charge
        if delta > 0:
            reason = self._make_room(message.owner, delta, message)
            if reason is not None:
                self._too_large(reason)
                self._drop(key)
                return -1
            message.charge = charge
            message.owner.used += delta
            self.incomplete_bytes += delta
        message.received = grown
        return 0

    def add(self, frame, now=0.0, key=None):
        """Add one data frame; the message's parts once complete, else None."""
        cdef double t = float(now)
        cdef bint cacheable = False, hit = False
        cdef uint64_t sid = 0, mid = 0
        cdef const unsigned char* p
        cdef Py_ssize_t size
        cdef bint exact = type(frame) is DataFrame
        cdef int64_t pc, pi, ms, ps, co
        found = None
        if key is None:
            if exact:
                sid_o = (<tuple>frame)[0]
                mid_o = (<tuple>frame)[1]
            else:
                sid_o = frame.session_id
                mid_o = frame.message_id
            if (type(sid_o) is int and type(mid_o) is int and nbmq_index_u64(sid_o, &sid) == 1
                    and nbmq_index_u64(mid_o, &mid) == 1):
                cacheable = True
                if self._cmsg is not None and sid == self._csid and mid == self._cmid:
                    hit = True
                    key = self._ckey
                    found = self._cmsg
            if not hit:
                key = (sid_o, mid_o)
        if exact:
            pc = _i64((<tuple>frame)[2])
            pi = _i64((<tuple>frame)[3])
            ms = _i64((<tuple>frame)[4])
            ps = _i64((<tuple>frame)[5])
            co = _i64((<tuple>frame)[6])
            chunk = (<tuple>frame)[7]
        else:
            pc = _i64(frame.part_count)
            pi = _i64(frame.part_index)
            ms = _i64(frame.message_size)
            ps = _i64(frame.part_size)
            co = _i64(frame.chunk_offset)
            chunk = frame.chunk
        if PyBytes_CheckExact(chunk):
            p = <const unsigned char*>PyBytes_AS_STRING(chunk)
            size = len(<bytes>chunk)
        else:
            chunk = nbmq_byteview(chunk)
            p = nbmq_ptr(chunk)
            size = nbmq_len(chunk)
        if not hit:
            found = self._messages.get(key)
        return self._outcome(self._add_core(key, found, cacheable, sid, mid, pc, pi, ms, ps, co,
                                            p, size, t))

    def add_datagram(self, datagram, now=0.0, key=None):
        """add(parse_frame(datagram), now, key) in one call, without building the frame."""
        cdef const unsigned char* p
        cdef Py_ssize_t n, off
        cdef Hdr h
        cdef int code
        if PyBytes_CheckExact(datagram):
            owner = datagram
            p = <const unsigned char*>PyBytes_AS_STRING(datagram)
            n = len(<bytes>datagram)
        else:
            owner = nbmq_byteview(datagram)
            p = nbmq_ptr(owner)
            n = nbmq_len(owner)
        code = _check(p, n, &h, &off)
        if code:
            self.malformed += 1
            raise _frame_error(code, off)
        if p[1] != 0:
            self.malformed += 1
            raise DecodeError(1, "not a data frame")
        cdef double t = float(now)
        cdef bint cacheable = key is None
        if cacheable and _append(self, &h, p + DATA_HEADER):
            return None
        found = None
        if cacheable:
            if self._cmsg is not None and h.sid == self._csid and h.mid == self._cmid:
                key = self._ckey
                found = self._cmsg
            else:
                key = (PyLong_FromUnsignedLongLong(h.sid), PyLong_FromUnsignedLongLong(h.mid))
                found = self._messages.get(key)
        else:
            found = self._messages.get(key)
        return self._outcome(self._add_core(key, found, cacheable, h.sid, h.mid, h.pc, h.pi,
                                            h.msize, h.psize, h.coff, p + DATA_HEADER, h.csize, t))

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def add_datagrams(self, buffer, offsets, lengths, now=0.0):
        """Add many datagrams laid out as for parse_frames; (key, parts) of each completion."""
        cdef cnp.ndarray offs_a, lens_a
        offs_a, lens_a = _rows(offsets, lengths)
        cdef const unsigned char* base
        cdef Py_ssize_t total
        owner = _bytes_of(buffer, &base, &total)
        cdef double t = float(now)
        cdef const void* offs = cnp.PyArray_DATA(offs_a)
        cdef const void* lens = cnp.PyArray_DATA(lens_a)
        cdef bint onarrow = _narrow(offs_a), lnarrow = _narrow(lens_a)
        cdef const unsigned char* p
        cdef Py_ssize_t i, count = cnp.PyArray_DIM(offs_a, 0), off
        cdef int64_t start, length
        cdef Hdr h
        cdef int status
        cdef list done = []
        for i in range(count):
            start = _at(offs, onarrow, i)
            length = _at(lens, lnarrow, i)
            if start < 0 or length < 0 or <uint64_t>start + <uint64_t>length > <uint64_t>total:
                self.malformed += 1
                continue
            p = base + start
            if _check(p, <Py_ssize_t>length, &h, &off) or p[1] != 0:
                self.malformed += 1
                continue
            if _append(self, &h, p + DATA_HEADER):
                continue
            if self._cmsg is not None and h.sid == self._csid and h.mid == self._cmid:
                key = self._ckey
                found = self._cmsg
            else:
                key = (PyLong_FromUnsignedLongLong(h.sid), PyLong_FromUnsignedLongLong(h.mid))
                found = self._messages.get(key)
            status = self._add_core(key, found, True, h.sid, h.mid, h.pc, h.pi, h.msize, h.psize,
                                    h.coff, p + DATA_HEADER, h.csize, t)
            if status == 1:
                done.append((key, self._done))
                self._done = None
        return done

    def drop(self, key):
        """Forget an incomplete message and release its budget; True if it was held."""
        return self._drop(key)

    def note_owner(self, owner):
        """What add() leaves in the owner table for a message of owner completed by its one
        frame while no message is held (the twin's note_owner): the compiled engine completes
        such messages itself, and the table's order picks the victim of a tie. True when the
        entry stays (a sweep may take it at once)."""
        if owner in self._owners:
            return True
        cdef _Owner found = _Owner.__new__(_Owner)
        found.key = owner
        self._owners[owner] = found
        if len(self._owners) > len(self._messages) + 64:
            self._sweep_owners()
        return owner in self._owners

    def drop_owner(self, owner):
        """Forget every incomplete message charged to owner (the first item of their keys)
        and release its budget; their keys, oldest first (the twin's drop_owner)."""
        cdef void* at
        found = self._owners.get(owner)
        if found is None:
            return []
        keys = []
        at = (<_Owner>found).head
        while at != NULL:
            keys.append((<_Message>at).key)
            at = (<_Message>at).next
        for key in keys:
            self._drop(key)
        return keys

    def take_evicted(self):
        """Keys of the messages evicted since the last call, oldest first; clears them."""
        keys = list(self._evicted_keys)
        self._evicted_keys.clear()
        return keys

    def owner_bytes(self, owner):
        """Bytes charged to owner (the first item of its messages' keys), 0 if none."""
        found = self._owners.get(owner)
        return 0 if found is None else (<_Owner>found).used

    def expire(self, before):
        """Drop every incomplete message first seen before `before` (seconds); their keys."""
        old = [k for k, m in self._messages.items() if (<_Message>m).first_seen < before]
        for key in old:
            self._drop(key)
        self.expired += len(old)
        return old

    def oldest(self):
        """When the oldest incomplete message was first seen (seconds), or None if none."""
        if not self._messages:
            return None
        return min([(<_Message>m).first_seen for m in self._messages.values()])


# A module-level function, not a method, so the C compiler can inline it into the loops.
@cython.boundscheck(False)
@cython.wraparound(False)
cdef inline bint _append(Reassembler self, const Hdr* h, const unsigned char* chunk) noexcept:
    """_add_core's common case in C, touching no Python object: a non-empty chunk of the
    cached part that extends its last received range (or is its first chunk) without
    completing it. True when handled; False changes nothing and _add_core takes over."""
    cdef Py_ssize_t n
    cdef int64_t end
    if (self._cpart is None or h.sid != self._csid or h.mid != self._cmid
            or h.pi != self._cpi or h.csize == 0):
        return False
    if (h.pc != self._cmsg.part_count or h.msize != self._cmsg.message_size
            or h.psize != self._cpart.size):
        return False
    end = <int64_t>h.coff + h.csize
    if end >= self._cpart.size:
        return False
    n = self._cpart.n
    if n == 0:
        if self._cmsg.lazy and not _charge_lazy(self, self._cmsg, h.csize + RANGE_CHARGE):
            return False
        self._cpart.r[0] = h.coff
        self._cpart.r[1] = <uint32_t>end
        self._cpart.n = 1
    elif self._cpart.r[2 * n - 1] == h.coff:
        if self._cmsg.lazy and not _charge_lazy(self, self._cmsg, h.csize):
            return False
        self._cpart.r[2 * n - 1] = <uint32_t>end
    else:
        return False
    nbmq_copy(self._cpart.ptr + h.coff, chunk, h.csize)
    self._cpart.received += h.csize
    self.frames += 1
    return True



cdef inline bint _charge_lazy(Reassembler self, _Message m, int64_t more) noexcept:
    """_grow without eviction, for _append: False (nothing changed) when it does not fit."""
    cdef int64_t grown = m.received + more
    cdef int64_t charge = grown if grown > RESERVATION else RESERVATION
    if charge > m.message_size:
        charge = m.message_size
    charge += OVERHEAD
    cdef int64_t delta = charge - m.charge
    if delta > 0:
        if self.incomplete_bytes + delta > self._max_inc or m.owner.used + delta > self._max_peer:
            return False
        m.charge = charge
        m.owner.used += delta
        self.incomplete_bytes += delta
    m.received = grown
    return True
