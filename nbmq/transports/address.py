"""Socket addresses: parse the text users write into something a transport can bind or dial.

Accepted forms::

    host:port  udp://host:port         IPv4 literal or a host name (resolved once, here)
    *:port     udp://*:port            bind only: every IPv4 interface (0.0.0.0), ZeroMQ's convention
    [v6]:port  udp://[v6]:port         IPv6 literal in brackets, e.g. "[::1]:0"
    ipc:///abs/path  ipc://rel/path    Unix datagram socket; "ipc://@name" is Linux's abstract namespace
    inproc://name                      in-process, no kernel

Port 0 asks the OS for a free port (read the result from ``sock.local_address``); it is for
``bind`` only, as is ``*``: :func:`check_connect` refuses both as a destination.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass
from typing import Any

from ..errors import AddressError

__all__ = ["Address", "parse_address", "format_address", "check_connect"]

SCHEMES = ("udp", "ipc", "inproc")
_UNIX_PATH_MAX = 107  # sizeof(sun_path) - 1 on Linux


@dataclass(frozen=True, slots=True)
class Address:
    """A parsed address.

    Attributes:
        scheme: ``"udp"``, ``"ipc"`` or ``"inproc"``.
        text: the address as the user wrote it.
        family: ``socket.AF_INET``, ``AF_INET6`` or ``AF_UNIX``; 0 for inproc.
        sockaddr: what ``socket.bind`` / ``sendto`` take: ``(host, port)``, ``(host, port, 0, 0)``,
            a path (str), or for an abstract Unix name bytes starting with NUL; the name for inproc.
        wildcard: True when the host was ``*`` (every interface; bind only).
    """

    scheme: str
    text: str
    family: int
    sockaddr: Any
    wildcard: bool = False

    def __str__(self) -> str:
        return format_address(self.family, self.sockaddr, self.scheme)


def _split_scheme(text: str) -> tuple[str, str]:
    if "://" not in text:
        return "udp", text
    scheme, rest = text.split("://", 1)
    scheme = scheme.lower()
    if scheme not in SCHEMES:
        raise AddressError(f"address {text!r}: unknown scheme {scheme!r} (use udp://, ipc:// or inproc://)")
    return scheme, rest


def _parse_port(text: str, port: str) -> int:
    if not port.isdigit():
        raise AddressError(f"address {text!r}: port {port!r} is not a number in 0..65535")
    value = int(port)
    if value > 65535:
        raise AddressError(f"address {text!r}: port {value} is out of range 0..65535")
    return value


def _parse_udp(text: str, rest: str) -> Address:
    if rest.startswith("["):
        host, sep, tail = rest[1:].partition("]")
        if not sep or not tail.startswith(":"):
            raise AddressError(f"address {text!r}: expected '[ipv6]:port'")
        port = _parse_port(text, tail[1:])
        try:
            ipaddress.IPv6Address(host.split("%")[0])
        except ValueError:
            raise AddressError(f"address {text!r}: {host!r} is not an IPv6 address") from None
        info = socket.getaddrinfo(host, port, socket.AF_INET6, socket.SOCK_DGRAM, 0, socket.AI_NUMERICHOST)
        return Address("udp", text, socket.AF_INET6, info[0][4])
    host, sep, port_text = rest.rpartition(":")
    if not sep or not host:
        raise AddressError(f"address {text!r}: expected 'host:port', '[ipv6]:port', 'ipc://path' or 'inproc://name'")
    if ":" in host:
        raise AddressError(f"address {text!r}: write an IPv6 host in brackets, e.g. '[::1]:{port_text}'")
    port = _parse_port(text, port_text)
    if host == "*":  # ZeroMQ's "every interface", not a name to resolve
        return Address("udp", text, socket.AF_INET, ("0.0.0.0", port), True)
    try:
        return Address("udp", text, socket.AF_INET, (str(ipaddress.IPv4Address(host)), port))
    except ValueError:
        pass
    try:
        info = socket.getaddrinfo(host, port, 0, socket.SOCK_DGRAM)
    except socket.gaierror as exc:
        raise AddressError(f"address {text!r}: cannot resolve host {host!r} ({exc.strerror})") from None
    info.sort(key=lambda row: row[0] != socket.AF_INET)  # IPv4 first, as "localhost" users expect
    family, _, _, _, sockaddr = info[0]
    return Address("udp", text, family, sockaddr)


def _parse_ipc(text: str, rest: str) -> Address:
    if not rest:
        raise AddressError(f"address {text!r}: empty ipc path")
    if "\0" in rest:
        raise AddressError(f"address {text!r}: NUL in ipc path")
    if rest.startswith("@"):
        name: Any = b"\0" + os.fsencode(rest[1:])
        size = len(name)
    else:
        name = os.path.abspath(rest)
        size = len(os.fsencode(name))
    if size > _UNIX_PATH_MAX:
        raise AddressError(f"address {text!r}: ipc path longer than {_UNIX_PATH_MAX} bytes")
    return Address("ipc", text, socket.AF_UNIX, name)


def parse_address(text: str) -> Address:
    """Parse an address string.

    Args:
        text: an address in one of the forms of this module's docstring.

    Returns:
        The :class:`Address`. Host names are resolved here, once (IPv4 preferred).

    Raises:
        AddressError: the text is malformed (the message quotes it and says what is wrong),
            or a host name does not resolve.
    """
    if not isinstance(text, str):
        raise AddressError(f"address must be a str like '127.0.0.1:8000', got {type(text).__name__}: {text!r}")
    scheme, rest = _split_scheme(text.strip())
    if scheme == "udp":
        return _parse_udp(text, rest)
    if scheme == "ipc":
        return _parse_ipc(text, rest)
    if not rest or "/" in rest:
        raise AddressError(f"address {text!r}: inproc name must be non-empty and contain no '/'")
    return Address("inproc", text, 0, rest)


def format_address(family: int, sockaddr: Any, scheme: str = "udp") -> str:
    """Write a socket address back as text that :func:`parse_address` reads
    (``"127.0.0.1:8000"``, ``"[::1]:8000"``, ``"ipc:///path"``, ``"inproc://name"``)."""
    if scheme == "inproc":
        return f"inproc://{sockaddr}"
    if family == socket.AF_INET6:
        return f"[{sockaddr[0]}]:{sockaddr[1]}"
    if family == socket.AF_UNIX:
        if isinstance(sockaddr, bytes):
            return "ipc://@" + os.fsdecode(sockaddr[1:])
        return f"ipc://{sockaddr}"
    return f"{sockaddr[0]}:{sockaddr[1]}"


def check_connect(address: Address) -> None:
    """Refuse an address that names no destination: UDP port 0 or the ``*`` wildcard.

    Raises:
        AddressError: the message quotes the address and says why.
    """
    if address.scheme != "udp":
        return
    if address.wildcard:
        raise AddressError(f"address {address.text!r}: '*' (every interface) is for bind, not connect")
    if address.sockaddr[1] == 0:
        raise AddressError(f"address {address.text!r}: cannot connect to port 0 (port 0 is for bind)")
