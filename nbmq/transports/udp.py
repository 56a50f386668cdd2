"""Kernel datagram links: UDP (IPv4, IPv6) here, Unix datagram in :mod:`.ipc`.

A link owns one non-blocking ``SOCK_DGRAM`` socket and its :class:`~.batch.BatchIO`. It feeds
received datagrams to an engine as memoryviews of the batch buffer (the engine copies what it
keeps) and writes the engine's output, keeping what the OS refuses (EAGAIN) pending until the
socket is writable again. No protocol logic lives here.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct
import sys
import time
import warnings
from typing import Any

from ..errors import AddressError
from ..wire import ETHERNET_DATAGRAM_SIZE, MAX_DATAGRAM_SIZE
from .address import Address, format_address
from .batch import BatchIO, batch_io
from .pacing import Pacer

__all__ = ["DatagramLink", "DatagramLossWarning", "open_udp", "path_datagram_size", "set_buffers", "bind_socket"]

#: Linux's SO_MEMINFO: nine u32, the last (SK_MEMINFO_DROPS) the socket's receive drops so far.
_SO_MEMINFO = 55 if sys.platform.startswith("linux") else None
_MEMINFO = struct.Struct("9I")


#: Warn once a Dealer's kernel drops pass this share of the datagrams it received.
LOSS_WARNING_SHARE = 0.01


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _user_stacklevel() -> int:
    """The ``stacklevel`` of the first caller outside the nbmq package, so that a warning names
    the user's line (``recv``, ``poll``, ...) rather than nbmq's internals."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


class DatagramLossWarning(RuntimeWarning):
    """A fire-and-forget socket lost more than 1% of what it received in the kernel's
    receive buffer: its peers send faster than it reads. Issued once per socket; the message
    names the options that help (``pace_rate`` on the sender, ``rcvbuf``, SafeDealer)."""


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
        has_pending: True while output waits: refused by the OS (wait until writable) or held
            by pacing (wait until ``paced_until``).
        pacer: the :class:`~.pacing.Pacer` when ``pace_rate`` is set, else None.
    """

    write_waitable = True
    scheme = "udp"

    def __init__(
        self, sock: socket.socket, engine_address: Any = None, native: bool | None = None, options: Any = None
    ) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.family = sock.family
        self.engine_address = engine_address
        gso = gro = None
        if options is not None and sock.family != socket.AF_UNIX:
            # GRO only when a full coalesced read (64 datagrams) fits under recv_hwm.
            gso, gro = options.gso, options.gro and options.recv_hwm >= 64
        # a receive slot holds a whole datagram: a 500-byte frame plain; in secure mode a bundle
        # of sealed frames as large as any peer's path allows
        slot = 512
        if options is not None and options.secret_key is not None:
            slot = MAX_DATAGRAM_SIZE
        self.io = batch_io(sock, slot=slot, native=native, gso=gso, gro=gro)
        self.pending: list[tuple[Any, Any]] = []
        self.has_pending = False
        self._os_pending = False  # True while the OS refused output (EAGAIN): wait, retry
        self._start = 0
        self.pacer: Pacer | None = None
        if options is not None and options.pace_rate:
            self.pacer = Pacer(options.pace_rate, options.pace_burst)
        self._drops_seen = 0  # datagrams, estimated under GRO
        self._entries_seen = 0  # the kernel's own count: datagrams or coalesced runs
        self._loss_warned = False
        self._meminfo = _SO_MEMINFO is not None

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

    def set_gro(self, on: bool) -> None:
        """Turn UDP GRO off (``on=False``) for datagrams queued from now on; GRO cannot be
        turned on after the socket opened (its buffers are sized then)."""
        if not on and self.io.gro:
            try:
                self.sock.setsockopt(socket.IPPROTO_UDP, 104, 0)  # UDP_GRO
            except OSError:
                pass
            self.io.gro = False

    def set_gso(self, on: bool) -> None:
        """Turn UDP GSO on or off for later sends (no effect where it is unavailable)."""
        if not isinstance(self.io, BatchIO) and self.family != socket.AF_UNIX:  # the portable one has none
            self.io.gso = bool(on)

    @property
    def kernel_drops(self) -> int:
        """Datagrams the OS dropped on this socket for want of receive buffer (cumulative),
        as far as reported to the engine (see :meth:`check_kernel_drops`)."""
        return self._drops_seen

    def check_kernel_drops(self, engine: Any) -> None:
        """Ask the kernel now (Linux ``SO_MEMINFO``, one getsockopt) how many datagrams it
        dropped on this socket, and report what is new (:meth:`_report_drops`).

        The batched receive path learns the same count for free from ``SO_RXQ_OVFL`` with
        each datagram, but only from datagrams queued after the drops: the tail of a burst
        shows up here, at the next tick or ``counters`` read."""
        entries = self.io.kernel_drops
        if self._meminfo:
            try:
                raw = self.sock.getsockopt(socket.SOL_SOCKET, _SO_MEMINFO, _MEMINFO.size)
                entries = max(entries, _MEMINFO.unpack(raw)[8])
            except (OSError, struct.error):
                self._meminfo = False
        if entries > self._entries_seen:
            self._report_drops(engine, entries)

    def _report_drops(self, engine: Any, entries: int) -> None:
        """Report the kernel's drops up to ``entries`` (its cumulative count) to
        ``engine.kernel_dropped``, in datagrams, and warn once when a fire-and-forget engine
        lost more than ``LOSS_WARNING_SHARE`` of what it received.

        The kernel counts receive-buffer entries. Without GRO an entry is one datagram: the
        count is exact. Under GRO it is a coalesced run (on loopback, the sender's whole GSO
        message, up to 64 datagrams), whose size is gone with it: each is counted as the
        largest run read so far (``largest_run``: the senders' GSO run). The count is then an
        estimate, at least the entries and at most 64 times them: exact for a sender's full
        runs, high by the shortfall of each short run dropped (the end of a burst)."""
        new = entries - self._entries_seen
        self._entries_seen = entries
        count = new * self.io.largest_run
        self._drops_seen += count
        engine.kernel_dropped(count)
        if not self._loss_warned and not engine.SAFE:
            received = engine.counters.datagrams_in
            if self._drops_seen > LOSS_WARNING_SHARE * received:
                self._loss_warned = True
                warnings.warn(
                    f"{self.local_address}: the kernel dropped {self._drops_seen} datagrams for want of "
                    f"receive buffer, {received} were received: this socket reads slower than its peers "
                    "send. Pace the sender (pace_rate=bytes/s), give the receiver a bigger rcvbuf, or use "
                    "SafeDealer, which resends what is lost.",
                    DatagramLossWarning,
                    stacklevel=_user_stacklevel(),
                )

    def receive(self, engine: Any, now: float, budget: int) -> int:
        """Read at most ``budget`` datagrams (in batches; never more, even from a GRO read)
        and feed them to ``engine.receive_datagrams`` as views of the batch buffer. New
        kernel receive-buffer drops go to ``engine.kernel_dropped``. Returns how many were
        read."""
        io = self.io
        view, batch = io.view, io.batch
        feed = engine.receive_datagrams  # one call per batch: the engine's fast loop
        total = 0
        while total < budget:
            n, offsets, lengths, addrs = io.recv(budget - total)
            if not n:
                break
            feed(view, offsets[:n].tolist(), lengths[:n].tolist(), addrs, now)
            total += n
            if io.kernel_drops > self._entries_seen:  # (this read's run size sizes them)
                self._report_drops(engine, io.kernel_drops)
            if n < batch:
                break
        return total

    def set_pacing(self, rate: int, burst: int) -> None:
        """Pace at ``rate`` bytes/s per peer in bursts of ``burst`` bytes (0 = stop pacing;
        what pacing held goes to the OS at the next :meth:`transmit`)."""
        held = self.pacer.take_all() if self.pacer is not None else []
        self.pacer = Pacer(rate, burst) if rate else None
        if held:
            if self.pacer is not None:
                self.pacer.push(held, time.monotonic())
            else:
                self._os_transmit(held)
        self.has_pending = self._os_pending or (self.pacer is not None and self.pacer.waiting > 0)

    @property
    def paced_until(self) -> float | None:
        """When held output may go (monotonic seconds) if only pacing holds it back; None when
        nothing is paced or the OS refused output (then wait until writable)."""
        if self.pacer is None or self._os_pending or not self.pacer.waiting:
            return None
        return self.pacer.next_release()

    def transmit(self, datagrams: list[tuple[Any, Any]]) -> bool:
        """Send what is pending, then ``datagrams`` (``(data, addr)`` pairs), through the pacer
        when pacing. Returns True when nothing is left pending (False: call again with ``[]``
        when writable, or at ``paced_until``)."""
        pacer = self.pacer
        if pacer is None:
            done = self._os_transmit(datagrams)
        else:
            now = time.monotonic()
            if datagrams:
                pacer.push(datagrams, now)
            done = (not self._os_pending or self._os_transmit([])) and self._os_transmit(pacer.release(now))
            done = done and not pacer.waiting
        self.has_pending = not done
        return done

    def _os_transmit(self, datagrams: list[tuple[Any, Any]]) -> bool:
        if self._os_pending:
            self.pending.extend(datagrams)
            out, start = self.pending, self._start
        else:
            out, start = datagrams, 0
            if not out:
                return True
        done = self.io.send(out, start)
        if done >= len(out):
            self.pending, self._start, self._os_pending = [], 0, False
            return True
        if out is not self.pending:
            out = list(out)
        if done > 4096:
            del out[:done]
            done = 0
        self.pending, self._start, self._os_pending = out, done, True
        return False

    def close(self) -> None:
        self.sock.close()


#: Linux's IP_MTU and IPV6_MTU: a connected socket's route MTU (the socket module lacks them).
_MTU_OPTIONS = {socket.AF_INET: (socket.IPPROTO_IP, 14, 28), socket.AF_INET6: (socket.IPPROTO_IPV6, 24, 48)}


def path_datagram_size(family: int, sockaddr: Any, bind: bool) -> int:
    """Bytes of UDP payload a datagram on this socket's paths may carry without IP fragmentation.

    A connecting socket has one path: the kernel's route to ``sockaddr`` tells its MTU (Linux
    ``IP_MTU``/``IPV6_MTU`` on a connected probe socket; no datagram is sent), less the IP and
    UDP headers (28 bytes over IPv4, 48 over IPv6). A socket bound to a loopback address has only
    loopback paths, measured the same way. Any other bound socket answers peers it cannot know:
    ETHERNET_DATAGRAM_SIZE (1472), as when the kernel cannot say (no route, not Linux).

    Returns:
        bytes, at most MAX_DATAGRAM_SIZE (65507).
    """
    level, option, headers = _MTU_OPTIONS.get(family, (None, None, 0))
    if level is None or not sys.platform.startswith("linux"):
        return ETHERNET_DATAGRAM_SIZE
    if bind:
        try:
            if not ipaddress.ip_address(sockaddr[0].split("%")[0]).is_loopback:
                return ETHERNET_DATAGRAM_SIZE
        except ValueError:
            return ETHERNET_DATAGRAM_SIZE
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(sockaddr)
            mtu = probe.getsockopt(level, option)
    except OSError:
        return ETHERNET_DATAGRAM_SIZE
    return max(0, min(MAX_DATAGRAM_SIZE, mtu - headers))


def open_udp(address: Address, bind: bool, options: Any, native: bool | None = None) -> DatagramLink:
    """A UDP link bound to ``address`` (``bind``) or to an OS-chosen port of the same family,
    set up to reach ``address`` (connect)."""
    sock = socket.socket(address.family, socket.SOCK_DGRAM)
    set_buffers(sock, options)
    if bind:
        bind_socket(sock, address.sockaddr, address.text)
        return DatagramLink(sock, None, native, options)
    wildcard = ("::", 0) if address.family == socket.AF_INET6 else ("0.0.0.0", 0)
    bind_socket(sock, wildcard, address.text)
    return DatagramLink(sock, address.sockaddr, native, options)
