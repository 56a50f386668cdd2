"""Open the link an address names: UDP, Unix datagram (IPC) or in-process.

Every link has the same duck type: ``fileno()``, ``receive(engine, now, budget)``,
``transmit(datagrams) -> bool``, ``has_pending``, ``write_waitable``, ``local_address``,
``engine_address`` (where a connecting engine dials), ``path_datagram_size`` (bytes a datagram
may take on its paths without fragmenting), ``send_errors`` and ``close()``.
"""

from __future__ import annotations

from typing import Any

from .address import check_connect, parse_address
from .inproc import InprocLink
from .ipc import open_ipc
from .udp import open_udp

__all__ = ["open_link", "read_grain"]


def open_link(address: str, bind: bool, options: Any, native: bool | None = None) -> Any:
    """The link for ``address`` (see :mod:`.address`), bound or set up to connect.

    Args:
        options: the socket's SocketOptions; a ``max_datagram_size`` of None ("from the path")
            is set here to the link's ``path_datagram_size``, for the engine built next.
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
    if options.max_datagram_size is None:  # "from the path": the engine built next bundles to it
        options.max_datagram_size = link.path_datagram_size
    return link


def read_grain(link: Any) -> int:
    """Datagrams a receive queue must have room for before one read of ``link`` can take
    anything: 64 under UDP GRO (a coalesced run is read whole or left in the kernel, see
    ``_batch.recv``), else 1. A bounded read (``recv_hwm``, liveness) below it reads nothing."""
    io = getattr(link, "io", None)
    return io.capacity // io.batch if io is not None and io.gro else 1
