"""Batch datagram I/O: the portable fallback (``recvfrom_into`` / ``sendto``) and the selector.

On Linux the Cython module :mod:`nbmq.transports._batch` does the same with one ``recvmmsg`` /
``sendmmsg`` syscall per batch. :func:`batch_io` picks it, or this module's :class:`BatchIO`
where :func:`nbmq.extensions.load` gives the twin (``COMPILED`` says which). Both classes have the same
constructor, attributes and methods, and deliver the same datagrams (tests/transports).
"""

from __future__ import annotations

import errno
import socket
import sys
from typing import Any

import numpy as np

from .. import extensions

__all__ = ["BatchIO", "batch_io", "COMPILED"]

_AGAIN = (errno.EAGAIN, errno.EWOULDBLOCK, errno.ENOBUFS)
#: Linux's SO_RXQ_OVFL (the socket module does not name it): each datagram then carries the
#: socket's running count of datagrams the kernel dropped for want of receive buffer.
SO_RXQ_OVFL = getattr(socket, "SO_RXQ_OVFL", 40 if sys.platform.startswith("linux") else None)
_OVFL_SPACE = socket.CMSG_SPACE(4) if hasattr(socket, "CMSG_SPACE") else 0


class BatchIO:
    """Batched datagram I/O on one non-blocking ``SOCK_DGRAM`` socket (UDP v4/v6 or Unix).

    Received datagrams land in one preallocated buffer: datagram ``i`` of a ``recv`` is
    ``view[offsets[i] : offsets[i] + lengths[i]]``. A datagram longer than ``slot`` is cut to
    ``slot`` bytes (the codec then rejects it: nbmq datagrams are at most 500 bytes).

    Args:
        sock: a non-blocking datagram socket; this object does not own or close it.
        batch: receive messages per ``recv`` call, 1..64.
        slot: bytes reserved per receive message, 1..65536.
        gso, gro: accepted for parity with the Linux class (UDP segmentation offload on send,
            coalesced receive); always off here.

    Raises:
        ValueError: ``batch`` or ``slot`` out of range.

    Attributes:
        buffer: the receive buffer, a uint8 numpy array of shape ``(batch * slot,)``.
        view: a ``memoryview`` (format ``B``) of ``buffer``.
        capacity: most datagrams one ``recv`` returns (``batch``; ``batch * 64`` with GRO).
        offsets: int64 array ``(capacity,)``: where each datagram of the last ``recv`` starts.
        lengths: int32 array ``(capacity,)``: the size of each datagram of the last ``recv``.
        addrs: the source addresses of the last ``recv``, as the ``socket`` module spells them.
        send_errors: datagrams dropped by ``send`` because the OS refused them (not EAGAIN).
        last_send_error: the ``OSError`` of the last such drop, or None.
        rxq_ovfl: True when the OS reports its receive-buffer drops (Linux ``SO_RXQ_OVFL``).
        kernel_drops: receive-buffer entries the kernel dropped on this socket because its
            receive buffer was full, as last reported (int, cumulative). An entry is one
            datagram, or under GRO one coalesced run of up to 64 (the kernel counts the run
            once). The kernel reports the count with the next datagram it delivers, so a drop
            becomes visible on the next ``recv`` that reads something.
        largest_run: datagrams in the largest coalesced run read so far (int >= 1; 1 until
            GRO coalesced a run): the senders' GSO run, what an entry the kernel dropped in a
            burst most likely held.
    """

    gso = False
    gro = False
    gso_messages = 0
    gro_messages = 0
    largest_run = 1

    def __init__(
        self, sock: socket.socket, batch: int = 64, slot: int = 512, gso: bool | None = None, gro: bool | None = None
    ) -> None:
        if not 1 <= batch <= 64:
            raise ValueError(f"batch must be 1..64, got {batch}")
        if not 1 <= slot <= 65536:  # a slot holds any UDP datagram (as the compiled twin checks)
            raise ValueError(f"slot must be 1..65536, got {slot}")
        self.sock = sock
        self.batch = batch
        self.slot = slot
        self.buffer = np.zeros(batch * slot, dtype=np.uint8)
        self.view = memoryview(self.buffer).cast("B")
        self.capacity = batch
        self.offsets = np.arange(batch, dtype=np.int64) * slot
        self.lengths = np.zeros(batch, dtype=np.intc)
        self.addrs: list[Any] = []
        self.send_errors = 0
        self.last_send_error: OSError | None = None
        self._slots = [self.view[i * slot : (i + 1) * slot] for i in range(batch)]
        self.kernel_drops = 0
        self._ovfl_last = 0
        self.rxq_ovfl = False
        if SO_RXQ_OVFL is not None and _OVFL_SPACE:
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_RXQ_OVFL, 1)
                self.rxq_ovfl = True
            except OSError:
                pass

    def recv(self, limit: int = -1) -> tuple[int, np.ndarray, np.ndarray, list[Any]]:
        """Read what is waiting, up to ``batch`` receive messages and at most ``limit``
        datagrams (negative: ``capacity``), without blocking.

        Returns:
            ``(n, offsets, lengths, addrs)``: how many datagrams were read (0 when none was
            waiting), the ``offsets`` and ``lengths`` arrays (first ``n`` valid) and the ``n``
            source addresses. The datagrams stay valid until the next ``recv``, which
            overwrites them.

        Raises:
            OSError: an error other than EAGAIN / EINTR from the OS.
        """
        lengths = self.lengths
        addrs: list[Any] = []
        n = 0
        slots = self._slots if limit < 0 or limit >= self.batch else self._slots[:limit]
        if self.rxq_ovfl:
            recvmsg_into = self.sock.recvmsg_into
            ovfl = -1
            for buf in slots:
                try:
                    size, anc, _, addr = recvmsg_into((buf,), _OVFL_SPACE)
                except (BlockingIOError, InterruptedError):
                    break
                if anc:
                    ovfl = int.from_bytes(anc[0][2][:4], sys.byteorder)
                lengths[n] = size
                addrs.append(addr)
                n += 1
            if ovfl >= 0:
                new = (ovfl - self._ovfl_last) & 0xFFFFFFFF  # the kernel's running u32 count
                if new < 0x80000000:
                    self.kernel_drops += new
                    self._ovfl_last = ovfl
        else:
            recv_into = self.sock.recvfrom_into
            for buf in slots:
                try:
                    size, addr = recv_into(buf)
                except (BlockingIOError, InterruptedError):
                    break
                lengths[n] = size
                addrs.append(addr)
                n += 1
        self.addrs = addrs
        return n, self.offsets, lengths, addrs

    def send(self, datagrams: list[tuple[Any, Any]], start: int = 0) -> int:
        """Send ``datagrams[start:]``, ``(data, addr)`` pairs, without blocking.

        A datagram the OS refuses for good (peer gone, unreachable) is dropped and counted in
        ``send_errors``, as the network would lose it.

        Returns:
            The index of the first datagram not sent because the socket buffer is full
            (EAGAIN); ``len(datagrams)`` when every one went. Retry from there when writable.
        """
        sendto = self.sock.sendto
        total = len(datagrams)
        while start < total:
            data, addr = datagrams[start]
            try:
                sendto(data, addr)
            except InterruptedError:
                continue
            except OSError as exc:
                if exc.errno in _AGAIN:
                    return start
                self.send_errors += 1
                self.last_send_error = exc
            start += 1
        return start


_compiled = extensions.load("nbmq.transports._batch", linux_only=True)
_NativeBatchIO = None if _compiled is None else _compiled.BatchIO
#: True when :func:`batch_io` gives the ``recvmmsg`` / ``sendmmsg`` BatchIO by default.
COMPILED = _compiled is not None


def batch_io(
    sock: socket.socket,
    batch: int = 64,
    slot: int = 512,
    native: bool | None = None,
    gso: bool | None = None,
    gro: bool | None = None,
) -> Any:
    """A :class:`BatchIO` for ``sock``: the ``recvmmsg`` one when built and allowed
    (``native`` None or True), else the portable one. ``native=True`` without the extension
    raises ImportError. ``gso``/``gro`` (native UDP only; None = on) as in ``_batch``."""
    if native is None:
        native = COMPILED
    if native:
        if _NativeBatchIO is None:
            raise ImportError("nbmq.transports._batch is not built (Linux only)")
        return _NativeBatchIO(sock, batch, slot, gso, gro)
    return BatchIO(sock, batch, slot)
