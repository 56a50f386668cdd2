"""Kernel datagram links: UDP (IPv4, IPv6) here, Unix datagram in :mod:`.ipc`.

A link owns one non-blocking ``SOCK_DGRAM`` socket and its :class:`~.batch.BatchIO`. It feeds
received datagrams to an engine as memoryviews of the batch buffer (the engine copies what it
keeps) and writes the engine's output, keeping what the OS refuses (EAGAIN) pending until the
socket is writable again. No protocol logic lives here.
"""

from __future__ import annotations

import errno
import socket
from typing import Any

from ..errors import AddressError
from .address import Address, format_address
from .batch import batch_io

__all__ = ["DatagramLink", "open_udp", "set_buffers", "bind_socket"]


def set_buffers(sock: socket.socket, options: Any) -> None:
    """Ask the OS for ``options.sndbuf`` / ``options.rcvbuf`` bytes (0 keeps the default)."""
    for opt, size in ((socket.SO_SNDBUF, options.sndbuf), (socket.SO_RCVBUF, options.rcvbuf)):
        if size:
            try:
                sock.setsockopt(socket.SOL_SOCKET, opt, size)
            except OSError:  # the OS caps it; keep what it allows
                pass


def bind_socket(sock: socket.socket, sockaddr: Any, text: str) -> None:
    """``sock.bind(sockaddr)`` with an error that names the address."""
    try:
        sock.bind(sockaddr)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise OSError(exc.errno, f"cannot bind {text!r}: address already in use (port taken)") from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise AddressError(f"cannot bind {text!r}: no such local address") from None
        raise OSError(exc.errno, f"cannot bind {text!r}: {exc.strerror}") from None


class DatagramLink:
    """One non-blocking datagram socket plus its batch I/O.

    Attributes:
        sock: the socket (owned; closed by :meth:`close`).
        engine_address: where a connecting engine sends ``Connect`` (None when bound).
        write_waitable: True when the socket reports writability honestly (UDP); False for
            Unix datagram sockets, where the driver retries pending output on a short timer.
        pending: datagrams the OS refused so far, oldest first.
    """

    write_waitable = True
    scheme = "udp"

    def __init__(self, sock: socket.socket, engine_address: Any = None, native: bool | None = None) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.family = sock.family
        self.engine_address = engine_address
        self.io = batch_io(sock, native=native)
        self.pending: list[tuple[Any, Any]] = []
        self.has_pending = False  # True while the OS refused output (EAGAIN): wait, retry
        self._start = 0

    @property
    def local_address(self) -> str:
        return format_address(self.family, self.sock.getsockname(), self.scheme)

    @property
    def send_errors(self) -> int:
        return self.io.send_errors

    def fileno(self) -> int:
        return self.sock.fileno()

    def set_buffers(self, options: Any) -> None:
        set_buffers(self.sock, options)

    def receive(self, engine: Any, now: float, budget: int) -> int:
        """Read up to ``budget`` datagrams (in batches) and feed each to
        ``engine.receive_datagram`` as a view of the batch buffer. Returns how many."""
        io = self.io
        view, batch = io.view, io.batch
        feed = engine.receive_datagram
        total = 0
        while total < budget:
            n, offsets, lengths, addrs = io.recv()
            if not n:
                break
            for offset, length, addr in zip(offsets[:n].tolist(), lengths[:n].tolist(), addrs):
                feed(view[offset : offset + length], addr, now)
            total += n
            if n < batch:
                break
        return total

    def transmit(self, datagrams: list[tuple[Any, Any]]) -> bool:
        """Send what is pending, then ``datagrams`` (``(data, addr)`` pairs). Returns True when
        nothing is left pending (False: wait until writable and call again with ``[]``)."""
        if self.has_pending:
            self.pending.extend(datagrams)
            out, start = self.pending, self._start
        else:
            out, start = datagrams, 0
            if not out:
                return True
        done = self.io.send(out, start)
        if done >= len(out):
            self.pending, self._start, self.has_pending = [], 0, False
            return True
        if out is not self.pending:
            out = list(out)
        if done > 4096:
            del out[:done]
            done = 0
        self.pending, self._start, self.has_pending = out, done, True
        return False

    def close(self) -> None:
        self.sock.close()


def open_udp(address: Address, bind: bool, options: Any, native: bool | None = None) -> DatagramLink:
    """A UDP link bound to ``address`` (``bind``) or to an OS-chosen port of the same family,
    set up to reach ``address`` (connect)."""
    sock = socket.socket(address.family, socket.SOCK_DGRAM)
    set_buffers(sock, options)
    if bind:
        bind_socket(sock, address.sockaddr, address.text)
        return DatagramLink(sock, None, native)
    wildcard = ("::", 0) if address.family == socket.AF_INET6 else ("0.0.0.0", 0)
    bind_socket(sock, wildcard, address.text)
    return DatagramLink(sock, address.sockaddr, native)
