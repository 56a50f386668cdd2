"""Open the link an address names: UDP, Unix datagram (IPC) or in-process.

Every link has the same duck type: ``fileno()``, ``receive(engine, now, budget)``,
``transmit(datagrams) -> bool``, ``has_pending``, ``write_waitable``, ``local_address``,
``engine_address`` (where a connecting engine dials), ``send_errors`` and ``close()``.
"""

from __future__ import annotations

from typing import Any

from ..wire import MAX_DATAGRAM_SIZE
from .address import check_connect, parse_address
from .inproc import InprocLink
from .ipc import open_ipc
from .udp import open_udp, path_datagram_size

__all__ = ["open_link", "read_grain"]


def open_link(address: str, bind: bool, options: Any, native: bool | None = None) -> Any:
    """The link for ``address`` (see :mod:`.address`), bound or set up to connect.

    Args:
        options: the socket's SocketOptions; in secure mode a ``max_datagram_size`` of None
            ("from the path") is set here, for the engine built next (:func:`.udp.path_datagram_size`).
        native: None picks the recvmmsg batch I/O when built; False forces the portable one.

    Raises:
        AddressError: malformed address, an inproc name already bound, or a connect to UDP
            port 0 or ``*``.
        OSError: the address is in use or cannot be bound (the message names it).
    """
    parsed = parse_address(address)
    if not bind:
        check_connect(parsed)
    if parsed.scheme == "udp":
        link = open_udp(parsed, bind, options, native)
    elif parsed.scheme == "ipc":
        link = open_ipc(parsed, bind, options, native)
    else:
        capacity = max(64, options.rcvbuf // 512) if options.rcvbuf else 4096  # datagrams
        link = InprocLink(parsed.sockaddr, bind, capacity)
    if options.secret_key is not None and options.max_datagram_size is None:
        # "from the path", for the secure engine built next (a plain one never bundles): UDP asks
        # the kernel's route; Unix and in-process datagrams have no MTU
        udp = parsed.scheme == "udp"
        options.max_datagram_size = (
            path_datagram_size(parsed.family, parsed.sockaddr, bind) if udp else MAX_DATAGRAM_SIZE
        )
    return link


def read_grain(link: Any) -> int:
    """Datagrams a receive queue must have room for before one read of ``link`` can take
    anything: 64 under UDP GRO (a coalesced run is read whole or left in the kernel, see
    ``_batch.recv``), else 1. A bounded read (``recv_hwm``, liveness) below it reads nothing."""
    io = getattr(link, "io", None)
    return io.capacity // io.batch if io is not None and io.gro else 1
