"""The rqueue pub/sub server: :class:`nbmq.streams.rqueue.RqueueBroker` on asyncio (uvloop when installed).

Command line (the ``nbmq rqueue-server`` subcommand calls :func:`main`)::

    python -m nbmq.transports.rqueue_server --host 127.0.0.1 --port 6567
    python -m nbmq.transports.rqueue_server --port 0     # OS-chosen port

Once bound it prints ``listening on HOST:PORT`` to stdout (flushed), so a parent process can read
the port. Connects, disconnects, slow consumers and protocol errors are logged (logger
``nbmq.streams.rqueue``), and the counters every ``--stats-interval`` seconds and at exit. SIGINT and
SIGTERM stop it cleanly (exit status 0).

``--threads`` is accepted for compatibility with the reference server's command line and
ignored: the broker's subscription table lives in one event loop, which is also what keeps every
subscriber's notifications in order.

Hostile or broken clients: a client that starts a message and does not finish it within
``--read-timeout`` seconds (default 30) is closed, so stalled clients cannot pin buffers and
descriptors; ``--idle-timeout`` (off by default) closes a client with no traffic either way for
that long; at most ``--max-connections`` (default 10,000) clients are served at once, and one
more is closed on accept and counted (``refused``).

Slow consumers: each client's outgoing buffer is bounded by ``--max-buffer`` bytes (asyncio's
write-buffer high-water mark; the low-water mark is a quarter of it). When a client's buffer
reaches the bound the ``--slow-consumer`` policy applies: ``drop`` (default) drops the
notifications meant for that client, and counts them, until its buffer drains below the low-water
mark; ``disconnect`` closes it. Either way a subscriber that never reads holds at most
``max_buffer`` plus one read's share (256 KiB) of the server's memory, and publishers and other
subscribers are never slowed down by it. ``--drop-notices`` enables our extension: a client
subscribed to ``$nbmq/dropped`` is told how many notifications it missed (see
:class:`~nbmq.streams.rqueue.RqueueBroker`).

Who may connect and what they may do: by default anyone who reaches the port may subscribe to
and publish on any topic (as the reference server). ``--tls-cert``/``--tls-key`` serve TLS
(failed handshakes are counted in ``tls_failures`` and logged once per peer host);
``--tls-client-ca`` requires a client certificate signed by that CA (mutual TLS); ``--acl FILE``
applies :class:`~nbmq.streams.rqueue_access.AccessRules` (identities from client certificates or
tokens, topic prefixes each may publish on and subscribe to).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import ssl
import sys
import time
from collections.abc import Sequence
from typing import Any

from ..events import Denied
from ..streams.rqueue import ClientError, ClientGone, RqueueBroker, SlowConsumer
from ..streams.rqueue_access import AccessRules
from ..wire import RQUEUE_MAX_PAYLOAD, RQUEUE_SERVER_MAX_PAYLOAD
from .tls import DEFAULT_HANDSHAKE_TIMEOUT, TlsAcceptor, peer_common_name, server_context

__all__ = [
    "RqueueServer",
    "serve",
    "run",
    "main",
    "run_args",
    "build_parser",
    "DEFAULT_PORT",
    "DEFAULT_MAX_BUFFER",
    "DEFAULT_READ_TIMEOUT",
    "DEFAULT_MAX_CONNECTIONS",
]

log = logging.getLogger("nbmq.streams.rqueue")
DEFAULT_PORT = 6567
DEFAULT_MAX_BUFFER = 4 * 1024 * 1024
DEFAULT_READ_TIMEOUT = 30.0  # seconds; a 2 KB message takes milliseconds on any working link
DEFAULT_MAX_CONNECTIONS = 10_000


class _ClientProtocol(asyncio.Protocol):
    __slots__ = ("server", "transport", "peer", "last_active", "read_timer", "idle_timer")

    def __init__(self, server: RqueueServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.peer: Any = None
        self.last_active = 0.0  # loop time of the last byte read from or written to it
        self.read_timer: asyncio.TimerHandle | None = None  # armed while a message is unfinished
        self.idle_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.peer = transport.get_extra_info("peername")
        server = self.server
        if server.max_connections and len(server._protocols) >= server.max_connections:
            server.refused += 1  # before the broker sees it: costs no state, no log line each
            transport.abort()
            return
        server._protocols.add(self)
        if server.tls is not None:
            server.tls.start(transport, self, self._established)  # type: ignore[arg-type]
        else:
            self._established(transport)  # type: ignore[arg-type]

    def _established(self, transport: asyncio.Transport) -> None:
        """The connection is ready (after the TLS handshake when the server has TLS)."""
        self.transport = transport
        server = self.server
        high = server.max_buffer
        transport.set_write_buffer_limits(high=high, low=high // 4)
        certificate = peer_common_name(transport) if server.tls is not None else None
        server.broker.connection_made(self, certificate)
        identity = server.broker.identity(self)
        log.info("client connected: %s%s", _fmt(self.peer), f" as {identity}" if identity else "")
        if server.idle_timeout:
            loop = asyncio.get_running_loop()
            self.last_active = loop.time()
            self.idle_timer = loop.call_at(self.last_active + server.idle_timeout, self._idle_check)
        server._flush()

    def data_received(self, data: bytes) -> None:
        server = self.server
        broker = server.broker
        broker.receive_data(self, data)
        if server.idle_timeout:
            self.last_active = server._loop_time()
        if server.read_timeout:
            # a message started and not finished must finish within read_timeout of its start
            if broker.buffered(self):
                if self.read_timer is None:
                    self.read_timer = asyncio.get_running_loop().call_later(
                        server.read_timeout, self._timed_out, "read timeout"
                    )
            elif self.read_timer is not None:
                self.read_timer.cancel()
                self.read_timer = None
        server._flush()

    def _timed_out(self, reason: str) -> None:
        self._cancel_timers()
        self.server.broker.disconnect(self, reason)
        self.server._flush()

    def _idle_check(self) -> None:
        idle = self.server.idle_timeout
        loop = asyncio.get_running_loop()
        due = self.last_active + idle
        if loop.time() >= due:
            self._timed_out("idle timeout")
        else:  # active since the timer was armed: wait for the rest (one timer per client)
            self.idle_timer = loop.call_at(due, self._idle_check)

    def _cancel_timers(self) -> None:
        for timer in (self.read_timer, self.idle_timer):
            if timer is not None:
                timer.cancel()
        self.read_timer = self.idle_timer = None

    def eof_received(self) -> bool:
        self.server.broker.receive_data(self, b"")
        self.server._flush()
        return False

    def pause_writing(self) -> None:
        # called from inside transport.write() during _flush: that flush handles the outcome
        self.server.broker.pause_writing(self)

    def resume_writing(self) -> None:
        self.server.broker.resume_writing(self)
        self.server._flush()  # a drop notice may be queued (asyncio lets us write from here)

    def connection_lost(self, exc: Exception | None) -> None:
        server = self.server
        self._cancel_timers()
        if self not in server._protocols:
            return  # refused (max_connections): the broker never knew it
        server._protocols.discard(self)
        server.broker.connection_lost(self)
        server._flush()


def _fmt(peer: Any) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)


class RqueueServer:
    """A running rqueue server (see :func:`serve`).

    Attributes:
        broker: the :class:`~nbmq.streams.rqueue.RqueueBroker` (its ``stats()`` are most counters).
        max_buffer: per-client outgoing buffer bound, bytes.
        read_timeout, idle_timeout, max_connections: as given to :func:`serve` (0: off).
        refused: connections closed at once because ``max_connections`` were open (int).
        tls: the :class:`~nbmq.transports.tls.TlsAcceptor` (None without TLS); its ``failures``
            are in :meth:`stats` as ``tls_failures``.
    """

    def __init__(
        self,
        broker: RqueueBroker,
        max_buffer: int,
        read_timeout: float = 0.0,
        idle_timeout: float = 0.0,
        max_connections: int = 0,
        tls: TlsAcceptor | None = None,
    ) -> None:
        self.broker = broker
        self.tls = tls
        self.max_buffer = max_buffer
        self.read_timeout = read_timeout
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections
        self.refused = 0
        self._loop_time = time.monotonic  # serve() sets the loop's clock, which timers use
        self._protocols: set[_ClientProtocol] = set()
        self._server: asyncio.AbstractServer | None = None
        self._stats_task: asyncio.Task[None] | None = None

    @property
    def sockets(self) -> tuple[Any, ...]:
        return tuple(self._server.sockets) if self._server is not None else ()

    @property
    def address(self) -> tuple[str, int]:
        """The bound ``(host, port)``."""
        name = self.sockets[0].getsockname()
        return name[0], name[1]

    def _flush(self) -> None:
        """Write what the broker queued, close whom it says, log its events (STYLE 3 rule 3)."""
        broker = self.broker
        out = broker.data_to_send()
        if out and self.idle_timeout:
            now = self._loop_time()
            for proto, _ in out:
                proto.last_active = now
        for proto, data in out:
            proto.transport.write(data)
        for proto in broker.connections_to_close():
            if proto.transport is not None:
                proto.transport.abort()
        event = broker.next_event()
        while event is not None:
            kind = type(event)
            if kind is ClientGone:
                log.info("client disconnected: %s (%s)", _fmt(event.conn.peer), event.reason)
            elif kind is ClientError:
                log.warning("client %s broke the protocol, closing it: %s", _fmt(event.conn.peer), event.error)
            elif kind is Denied:
                log.info(
                    "denied %s %s to %s",
                    "subscribe to" if event.message_type == 1 else "publish on",
                    event.topic,
                    event.identity or f"anonymous client {_fmt(event.conn.peer)}",
                )
            elif kind is SlowConsumer:
                log.warning(
                    "slow consumer %s: write buffer over %d bytes, policy %s",
                    _fmt(event.conn.peer),
                    self.max_buffer,
                    event.policy,
                )
            event = broker.next_event()

    def stats(self) -> dict[str, int]:
        """The broker's counters (:meth:`~nbmq.streams.rqueue.RqueueBroker.stats`), ``refused`` and
        ``tls_failures``."""
        tls_failures = self.tls.failures if self.tls is not None else 0
        return {**self.broker.stats(), "refused": self.refused, "tls_failures": tls_failures}

    def log_stats(self) -> None:
        """Log the counters at INFO."""
        log.info("stats %s", " ".join(f"{k}={v}" for k, v in self.stats().items()))

    async def _stats_loop(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            self.log_stats()

    def close(self) -> None:
        """Stop listening and abort every client connection."""
        if self._stats_task is not None:
            self._stats_task.cancel()
        if self._server is not None:
            self._server.close()
        if self.tls is not None:
            self.tls.close()
        for proto in list(self._protocols):
            if proto.transport is not None:
                proto.transport.abort()

    async def wait_closed(self) -> None:
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> RqueueServer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
        await self.wait_closed()


async def serve(
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    max_payload: int = RQUEUE_SERVER_MAX_PAYLOAD,
    max_buffer: int = DEFAULT_MAX_BUFFER,
    slow_consumer: str = "drop",
    stats_interval: float = 0.0,
    read_timeout: float = DEFAULT_READ_TIMEOUT,
    idle_timeout: float = 0.0,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    drop_notices: bool = False,
    ssl: ssl.SSLContext | None = None,
    tls_handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
    access: AccessRules | None = None,
    **kwargs: Any,
) -> RqueueServer:
    """Start an rqueue server on the running loop and return it (listening).

    Args:
        host, port: where to listen (port 0: the OS picks; read ``server.address``).
        max_payload: largest payload accepted from a client, bytes (default 2048).
        max_buffer: per-client outgoing buffer bound, bytes (default 4 MiB).
        slow_consumer: ``"drop"`` or ``"disconnect"`` (see the module docstring).
        stats_interval: seconds between counter log lines; 0 for none.
        read_timeout: seconds a client may take to finish a message it started (default 30);
            then it is closed (``ClientGone`` reason "read timeout"). 0 turns it off.
        idle_timeout: seconds without a byte read from or written to a client before it is
            closed ("idle timeout"). Default 0, off: rqueue has no keepalive, so a quiet
            subscriber looks exactly like a dead one.
        max_connections: clients served at once (default 10,000); one more is closed as soon as
            it is accepted and counted (``refused``). 0: no bound.
        drop_notices: enable our drop-notice extension (see :class:`~nbmq.streams.rqueue.RqueueBroker`).
        ssl: serve TLS with this context (:func:`~nbmq.transports.tls.server_context`); None: plain TCP.
        tls_handshake_timeout: seconds a client has to finish its TLS handshake.
        access: :class:`~nbmq.streams.rqueue_access.AccessRules`; None (default): every client may
            subscribe to and publish on every topic.
        kwargs: passed to ``loop.create_server``.

    Raises:
        OSError: the address cannot be bound. ValueError: bad options.
    """
    if max_buffer < 1:
        raise ValueError("max_buffer must be at least 1 byte")
    if read_timeout < 0 or idle_timeout < 0 or max_connections < 0:
        raise ValueError("read_timeout, idle_timeout and max_connections must be at least 0")
    tls = TlsAcceptor(ssl, log, tls_handshake_timeout) if ssl is not None else None
    server = RqueueServer(
        RqueueBroker(max_payload, slow_consumer, drop_notices, access),
        max_buffer,
        read_timeout,
        idle_timeout,
        max_connections,
        tls,
    )
    loop = asyncio.get_running_loop()
    server._loop_time = loop.time
    server._server = await loop.create_server(lambda: _ClientProtocol(server), host, port, **kwargs)
    if stats_interval > 0:
        server._stats_task = loop.create_task(server._stats_loop(stats_interval))
    return server


async def _main_async(host: str, port: int, announce: bool, **options: Any) -> None:
    server = await serve(host, port, **options)
    bound_host, bound_port = server.address
    log.info("rqueue server listening on %s:%d", bound_host, bound_port)
    if announce:
        print(f"listening on {bound_host}:{bound_port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # not the main thread, or not Unix
            pass
    try:
        await stop.wait()
    finally:
        log.info("rqueue server stopping")
        server.close()
        await server.wait_closed()
        server.log_stats()


def run(
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    threads: int | None = None,
    use_uvloop: bool = True,
    announce: bool = True,
    **options: Any,
) -> None:
    """Run the server until SIGINT or SIGTERM (blocking).

    Args:
        host, port: where to listen.
        threads: ignored (compatibility with the reference's ``--threads``).
        use_uvloop: use uvloop when it is installed.
        announce: print ``listening on HOST:PORT`` to stdout once bound.
        options: as for :func:`serve`.
    """
    if threads not in (None, 1):
        log.info("--threads %s ignored: the server runs one event loop", threads)
    if use_uvloop:
        try:
            import uvloop  # type: ignore[import-not-found]
        except ImportError:
            uvloop = None
        if uvloop is not None:
            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    asyncio.run(_main_async(host, port, announce, **options))


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """Add the server's options to ``parser`` (a new one when None) and return it."""
    if parser is None:
        parser = argparse.ArgumentParser(prog="nbmq rqueue-server", description="rqueue pub/sub server")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="TCP port; 0 picks one (default 6567)")
    parser.add_argument(
        "--threads", type=int, default=None, help="accepted for compatibility with the reference server; ignored"
    )
    parser.add_argument(
        "--max-payload",
        type=int,
        default=RQUEUE_SERVER_MAX_PAYLOAD,
        help=f"largest payload accepted, bytes (default 2048, at most {RQUEUE_MAX_PAYLOAD})",
    )
    parser.add_argument(
        "--max-buffer",
        type=int,
        default=DEFAULT_MAX_BUFFER,
        help="per-client outgoing buffer bound, bytes (default 4 MiB)",
    )
    parser.add_argument(
        "--slow-consumer",
        choices=("drop", "disconnect"),
        default="drop",
        help="what to do with a client whose buffer is full (default drop)",
    )
    parser.add_argument(
        "--read-timeout",
        type=float,
        default=DEFAULT_READ_TIMEOUT,
        help="seconds a client may take to finish a message it started; 0 disables (default 30)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=0.0,
        help="close a client after this many seconds without traffic either way; "
        "0 disables (default 0: rqueue has no keepalive)",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=DEFAULT_MAX_CONNECTIONS,
        help="clients served at once; more are closed on accept; 0 disables (default 10000)",
    )
    parser.add_argument(
        "--drop-notices",
        action="store_true",
        help="nbmq extension: tell clients subscribed to $nbmq/dropped how many "
        "notifications they missed while slow (default off)",
    )
    parser.add_argument("--tls-cert", metavar="PEM", help="serve TLS with this certificate chain (PEM)")
    parser.add_argument("--tls-key", metavar="PEM", help="the certificate's private key (PEM; default: in --tls-cert)")
    parser.add_argument(
        "--tls-client-ca",
        metavar="PEM",
        help="require client certificates signed by these CAs (mutual TLS; needs --tls-cert)",
    )
    parser.add_argument(
        "--acl",
        metavar="FILE",
        help="access rules (TOML): who may publish and subscribe where; default: everyone, everywhere",
    )
    parser.add_argument(
        "--stats-interval", type=float, default=10.0, help="seconds between counter log lines; 0 disables (default 10)"
    )
    parser.add_argument("--no-uvloop", action="store_true", help="use the default asyncio loop")
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``nbmq rqueue-server`` and ``python -m nbmq.transports.rqueue_server``.

    Returns:
        the exit status (0 after SIGINT/SIGTERM, 2 on bad options, 1 when binding fails).
    """
    return run_args(build_parser().parse_args(argv))


def run_args(args: argparse.Namespace) -> int:
    """Run the server for the options of :func:`build_parser` (``nbmq rqueue-server``).

    Returns:
        the exit status, as :func:`main`.
    """
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=args.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    try:
        security = _security_options(args)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        print(f"nbmq rqueue-server: {exc}", file=sys.stderr)
        return 2
    try:
        run(
            args.host,
            args.port,
            threads=args.threads,
            use_uvloop=not args.no_uvloop,
            max_payload=args.max_payload,
            max_buffer=args.max_buffer,
            slow_consumer=args.slow_consumer,
            stats_interval=args.stats_interval,
            read_timeout=args.read_timeout,
            idle_timeout=args.idle_timeout,
            max_connections=args.max_connections,
            drop_notices=args.drop_notices,
            **security,
        )
    except OSError as exc:
        log.error("cannot listen on %s:%s: %s", args.host, args.port, exc)
        return 1
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    return 0


def _security_options(args: argparse.Namespace) -> dict[str, Any]:
    """``ssl`` and ``access`` for :func:`serve` from the command line's TLS and ACL options.

    Raises:
        ValueError: a TLS option without ``--tls-cert``, or bad access rules. OSError or
            ssl.SSLError: a file cannot be read or used.
    """
    options: dict[str, Any] = {}
    if args.tls_cert is None and (args.tls_key or args.tls_client_ca):
        raise ValueError("--tls-key and --tls-client-ca need --tls-cert")
    if args.tls_cert is not None:
        try:
            options["ssl"] = server_context(args.tls_cert, args.tls_key, args.tls_client_ca)
        except ssl.SSLError as exc:
            raise ValueError(f"cannot use {args.tls_cert} / {args.tls_key or args.tls_cert}: {exc.reason}") from None
    if args.acl is not None:
        options["access"] = AccessRules.load(args.acl)
    return options


if __name__ == "__main__":
    sys.exit(main())
