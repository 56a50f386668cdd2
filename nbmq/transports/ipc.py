"""IPC transport: Unix datagram sockets (``ipc:///path``, or ``ipc://@name`` for Linux's
abstract namespace).

The bound side owns the path and removes the file on close. The connecting side binds a
private temporary path of its own (removed on close too) so the bound side can answer it.
A stale socket file left by a dead process is detected (nobody answers on it) and replaced;
a live one is "address already in use".
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import tempfile
import uuid
from typing import Any

from .address import Address
from .udp import DatagramLink, bind_socket, set_buffers

__all__ = ["UnixLink", "open_ipc"]


class UnixLink(DatagramLink):
    """A :class:`~.udp.DatagramLink` over ``AF_UNIX``/``SOCK_DGRAM`` that removes its socket
    file on close."""

    # A Unix datagram sender blocked on a full *peer* queue is not woken by poll() unless the
    # socket is connected; the driver retries pending datagrams on a short timer instead.
    write_waitable = False
    scheme = "ipc"

    def __init__(
        self, sock: socket.socket, path: Any, engine_address: Any, native: bool | None, options: Any = None
    ) -> None:
        super().__init__(sock, engine_address, native, options)
        self.path = path
        self._ino = None
        if isinstance(path, str):
            try:
                self._ino = os.stat(path).st_ino
            except OSError:
                pass

    def close(self) -> None:
        super().close()
        if isinstance(self.path, str) and self._ino is not None:
            try:
                if os.stat(self.path).st_ino == self._ino:  # never remove a successor's file
                    os.unlink(self.path)
            except OSError:
                pass


def _clear_stale(path: str, text: str) -> None:
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise OSError(errno.EEXIST, f"cannot bind {text!r}: {path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        os.unlink(path)  # nobody bound there any more: a leftover of a dead process
        return
    except OSError:
        return
    finally:
        probe.close()
    raise OSError(errno.EADDRINUSE, f"cannot bind {text!r}: address already in use (a live socket)")


def open_ipc(address: Address, bind: bool, options: Any, native: bool | None = None) -> UnixLink:
    """A Unix datagram link bound to ``address`` (``bind``), or bound to a fresh temporary
    path and set up to reach ``address`` (connect)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    set_buffers(sock, options)
    if bind:
        if isinstance(address.sockaddr, str):
            _clear_stale(address.sockaddr, address.text)
        bind_socket(sock, address.sockaddr, address.text)
        return UnixLink(sock, address.sockaddr, None, native, options)
    path = os.path.join(tempfile.gettempdir(), f"nbmq-{os.getpid()}-{uuid.uuid4().hex[:16]}.sock")
    bind_socket(sock, path, address.text)
    return UnixLink(sock, path, address.sockaddr, native, options)
