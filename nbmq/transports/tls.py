"""TLS for the asyncio TCP servers (rqueue, BQSP): the handshake, its failures counted, the peer's name.

The servers accept plain TCP and upgrade each connection with ``loop.start_tls`` instead of
passing ``ssl=`` to ``create_server``: asyncio drops a failed server-side handshake without a
word (logged only in debug mode), and a server exposed to a network must count them and say
once per peer why it refused it. Contexts come from the standard library's :mod:`ssl`
(:func:`server_context` builds the one ``nbmq rqueue-server --tls-cert/--tls-key/--tls-client-ca``
uses).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["TlsAcceptor", "server_context", "peer_common_name", "DEFAULT_HANDSHAKE_TIMEOUT"]

#: Seconds a client has to finish its TLS handshake.
DEFAULT_HANDSHAKE_TIMEOUT = 10.0
_LOGGED_PEERS = 1024  # peers whose failure was logged, remembered so each is logged once


def server_context(
    cert: str | Path, key: str | Path | None = None, client_ca: str | Path | None = None
) -> ssl.SSLContext:
    """A server-side TLS context (TLS 1.2 or newer, the standard library's defaults).

    Args:
        cert: PEM file with the server's certificate chain.
        key: PEM file with its private key (None: it is in ``cert``).
        client_ca: PEM file of the CAs that sign client certificates. Given, every client must
            present a certificate they signed (mutual TLS); its subject commonName is the
            client's identity for access rules.

    Raises:
        OSError: a file cannot be read. ssl.SSLError: a file is not a usable certificate or key.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert), None if key is None else str(key))
    if client_ca is not None:
        context.load_verify_locations(cafile=str(client_ca))
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def peer_common_name(transport: asyncio.BaseTransport) -> str | None:
    """The subject commonName of the verified certificate the peer of a TLS ``transport``
    presented, or None (no TLS, no certificate, or no commonName)."""
    cert = transport.get_extra_info("peercert")
    if not cert:
        return None
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


class TlsAcceptor:
    """Server-side TLS handshakes for an ``asyncio.Protocol`` server.

    Args:
        context: the server's :class:`ssl.SSLContext`.
        log: where the failures are logged (WARNING, one line, no traceback).
        handshake_timeout: seconds a client has to finish the handshake.

    Attributes:
        failures: handshakes that failed or timed out (int).
    """

    def __init__(
        self, context: ssl.SSLContext, log: logging.Logger, handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT
    ) -> None:
        if handshake_timeout <= 0:
            raise ValueError("handshake_timeout must be positive")
        self.context = context
        self.handshake_timeout = handshake_timeout
        self.failures = 0
        self._log = log
        self._logged: OrderedDict[Any, None] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()

    def start(
        self,
        transport: asyncio.Transport,
        protocol: asyncio.Protocol,
        on_ready: Callable[[asyncio.Transport], None],
    ) -> None:
        """Begin the handshake on a freshly accepted plain ``transport`` (call it from
        ``protocol.connection_made``; nothing is read until it ends). On success ``on_ready`` gets
        the TLS transport, which ``protocol`` must use from then on; on failure the connection is
        aborted (``protocol.connection_lost`` follows), counted and logged once per peer host."""
        transport.pause_reading()  # nothing reaches the protocol before TLS is in place
        task = asyncio.get_running_loop().create_task(self._handshake(transport, protocol, on_ready))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handshake(
        self,
        transport: asyncio.Transport,
        protocol: asyncio.Protocol,
        on_ready: Callable[[asyncio.Transport], None],
    ) -> None:
        loop = asyncio.get_running_loop()
        pending = _Pending(protocol)
        try:
            tls = await loop.start_tls(
                transport,
                pending,
                self.context,
                server_side=True,
                ssl_handshake_timeout=self.handshake_timeout,
            )
        except (OSError, asyncio.TimeoutError, ConnectionError) as exc:
            self._failed(transport, exc)
            pending.release()
            return
        if tls is None:  # the connection closed during the handshake
            self._failed(transport, ConnectionError("closed during the TLS handshake"))
            pending.release()
            return
        on_ready(tls)
        tls.set_protocol(protocol)
        pending.release()

    def _failed(self, transport: asyncio.Transport, exc: BaseException) -> None:
        self.failures += 1
        peer = transport.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) else peer
        if host not in self._logged:
            self._logged[host] = None
            if len(self._logged) > _LOGGED_PEERS:
                self._logged.popitem(last=False)
            reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
            self._log.warning(
                "TLS handshake with %s failed: %s (further failures from it are only counted)", host, reason
            )
        transport.abort()

    def close(self) -> None:
        """Cancel the handshakes under way."""
        for task in list(self._tasks):
            task.cancel()


class _Pending(asyncio.Protocol):
    """Holds what TLS delivers between the handshake's end and ``on_ready``: asyncio hands the
    first application bytes to the protocol before the awaiting task resumes."""

    def __init__(self, app: asyncio.Protocol) -> None:
        self.app = app
        self.released = False
        self.data: list[bytes] = []
        self.eof = False
        self.lost: tuple[Exception | None] | None = None

    def data_received(self, data: bytes) -> None:
        if self.released:
            self.app.data_received(data)
        else:
            self.data.append(data)

    def eof_received(self) -> bool | None:
        if self.released:
            return self.app.eof_received()
        self.eof = True
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.released:
            self.app.connection_lost(exc)
        else:
            self.lost = (exc,)

    def pause_writing(self) -> None:
        self.app.pause_writing()

    def resume_writing(self) -> None:
        self.app.resume_writing()

    def release(self) -> None:
        """Hand everything held to the application protocol, in order; forward from now on."""
        self.released = True
        data, self.data = self.data, []
        for chunk in data:
            self.app.data_received(chunk)
        if self.eof:
            self.app.eof_received()
        if self.lost is not None:
            self.app.connection_lost(self.lost[0])
