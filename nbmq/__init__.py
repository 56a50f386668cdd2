"""nbmq: fast, fire-and-forget messaging with event-stepped connection awareness.

A wire-compatible Python implementation of nbmq 0.2.0 (UDP), BQSP and rqueue, with a Cython
codec (pure-Python twin as fallback), sans-IO engines, transports, and a Spark pipeline that
turns captures of the traffic into tables.
"""

from typing import TYPE_CHECKING, Any

from . import codec, errors, wire
from .errors import (
    AddressError,
    CaptureError,
    DecodeError,
    FrameTooLarge,
    InteropError,
    NbmqError,
    NoPeer,
    NotSupported,
    OptionError,
    ProtocolError,
    SocketClosed,
    WouldBlock,
)
from .options import SocketOptions
from .wire import FrameKind

if TYPE_CHECKING:
    from .engine.noise import generate_keypair
    from .transports import Dealer, Dish, Radio, SafeDealer, Socket

_SOCKETS = ("Socket", "Dealer", "SafeDealer", "Radio", "Dish")


def __getattr__(name: str) -> Any:
    # The socket classes load the transports on first use (PEP 562): Spark workers and the
    # planner process import nbmq for the codec and capture reading only, and the transports
    # cost ~50 ms of start-up per process there.
    if name == "aio":  # ``import nbmq`` then ``nbmq.aio.Dealer``: loaded on first use, like the sockets
        import importlib

        return importlib.import_module(".aio", __name__)
    if name == "generate_keypair":  # secure mode's keys (loaded on first use, like the sockets)
        from .engine.noise import generate_keypair

        globals()[name] = generate_keypair
        return generate_keypair
    if name in _SOCKETS:
        from . import transports

        value = getattr(transports, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'nbmq' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_SOCKETS) | {"aio", "generate_keypair"})


__version__ = "0.3.0"

__all__ = [
    "__version__",
    "codec",
    "errors",
    "wire",
    "FrameKind",
    "SocketOptions",
    "Socket",
    "Dealer",
    "SafeDealer",
    "Radio",
    "Dish",
    "aio",
    "generate_keypair",
    "AddressError",
    "CaptureError",
    "NbmqError",
    "DecodeError",
    "FrameTooLarge",
    "WouldBlock",
    "NoPeer",
    "SocketClosed",
    "NotSupported",
    "OptionError",
    "InteropError",
    "ProtocolError",
]
