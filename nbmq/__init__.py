"""nbmq: fast, fire-and-forget messaging with event-stepped connection awareness.

A wire-compatible Python implementation of nbmq 0.2.0 (UDP), BQSP and rqueue, with a Cython
codec (pure-Python twin as fallback), sans-IO engines, transports, and a Spark pipeline that
turns captures of the traffic into tables.
"""

from . import codec, errors, wire
from .errors import (
    AddressError,
    CaptureError,
    DecodeError,
    FrameTooLarge,
    NbmqError,
    NoPeer,
    NotSupported,
    OptionError,
    ProtocolError,
    WouldBlock,
)
from .options import SocketOptions
from .transports import Dealer, Dish, Radio, SafeDealer, Socket
from .wire import FrameKind

__version__ = "0.1.0"

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
    "AddressError",
    "CaptureError",
    "NbmqError",
    "DecodeError",
    "FrameTooLarge",
    "WouldBlock",
    "NoPeer",
    "NotSupported",
    "OptionError",
    "ProtocolError",
]
