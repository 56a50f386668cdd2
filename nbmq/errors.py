"""The whole nbmq exception hierarchy.

::

    NbmqError(Exception)
    |-- DecodeError(NbmqError, ValueError)      bytes that do not decode: .offset, .reason
    |   `-- FrameTooLarge(DecodeError)          a (claimed) size past a configured cap
    |-- WouldBlock(NbmqError, BlockingIOError)  high-water mark reached / nothing to receive
    |   `-- NoPeer(WouldBlock)                  at send_hwm with no connected peer to drain it
    |-- SocketClosed(NbmqError)                 send / recv / tick / poll on a closed socket
    |-- NotSupported(NbmqError, TypeError)      recv on Radio, send on Dish
    |-- OptionError(NbmqError, ValueError)      an unknown option or a value out of range
    |-- CaptureError(NbmqError, ValueError)     a file that is not a pcap / pcapng capture
    |-- AddressError(NbmqError, ValueError)     a malformed or unusable socket address
    `-- ProtocolError(NbmqError)                a stream peer broke the protocol (BQSP, rqueue)

Both codec twins raise the same class with the same ``offset`` and ``reason`` for the same input
(STYLE.md section 5; checked by the differential tests).
"""

from __future__ import annotations

import errno as _errno

__all__ = [
    "NbmqError",
    "DecodeError",
    "FrameTooLarge",
    "WouldBlock",
    "NoPeer",
    "SocketClosed",
    "NotSupported",
    "OptionError",
    "InteropError",
    "CaptureError",
    "AddressError",
    "ProtocolError",
    "AccessDenied",
]


class NbmqError(Exception):
    """Base class of every error nbmq raises on purpose."""


class DecodeError(NbmqError, ValueError):
    """Bytes that do not decode.

    Attributes:
        offset: byte offset, from the start of the datagram or stream buffer handed to the
            decoder, of the field that is wrong (int).
        reason: a short, stable, human-readable reason (str), e.g. ``"wrong version"``.
    """

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"{reason} (at byte {offset})")
        self.offset = offset
        self.reason = reason

    def __reduce__(self) -> tuple[type[DecodeError], tuple[int, str]]:  # pickles across Spark workers
        return (type(self), (self.offset, self.reason))

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.offset == other.offset and self.reason == other.reason

    __hash__ = Exception.__hash__


class FrameTooLarge(DecodeError):
    """A frame, packet or message whose (claimed) size is past a configured cap.

    Raised before anything of that size is allocated.
    """


class WouldBlock(NbmqError, BlockingIOError):
    """The operation would block: the high-water mark is reached, or nothing is ready.

    The role of pyzmq's ``zmq.Again``: retry after ``tick()`` or when the transport is readable.
    ``errno`` is ``errno.EAGAIN`` (as ``zmq.Again`` and ``BlockingIOError`` from the OS);
    ``str()`` is the message alone. ``WouldBlock(message)`` or ``WouldBlock(errno, message)``.
    """

    def __init__(self, *args: object) -> None:
        if len(args) == 2 and isinstance(args[0], int):  # (errno, message): also how it unpickles
            super().__init__(*args)
        else:
            super().__init__(_errno.EAGAIN, str(args[0]) if args else "would block")

    def __str__(self) -> str:
        return str(self.strerror)


class NoPeer(WouldBlock):
    """``send`` found ``send_hwm`` messages held and no connected peer to take them: the
    queue cannot drain until a peer connects. Raised by the sockets (``nbmq.Dealer`` and
    friends, blocking and asyncio) instead of a plain :class:`WouldBlock` in that case, so
    ``except WouldBlock`` still catches it."""


class SocketClosed(NbmqError):
    """``send``, ``recv``, ``tick``, ``poll``, ``flush`` or ``wait_connected`` on a closed
    socket (blocking or asyncio), or a call that was waiting when the socket was closed."""


class NotSupported(NbmqError, TypeError):
    """The socket type does not support this operation (``recv`` on Radio, ``send`` on Dish)."""


class OptionError(NbmqError, ValueError):
    """An unknown socket option, or a value of the wrong type or out of range.

    The message always names the option.
    """


class InteropError(NbmqError, ValueError):
    """A message the Rust reference would lose, refused by ``send`` under
    ``reference_compat=True``: an empty part or an empty message (the reference emits no
    frame for an empty part, so its receiver never completes the message)."""


class CaptureError(NbmqError, ValueError):
    """A file or buffer that is not a readable pcap / pcapng capture at all.

    Raised by ``nbmq.capture`` for an unknown magic number, or a capture too short to hold
    its file header. Damage *inside* a capture is not raised: it is counted in the result.
    """


class AddressError(NbmqError, ValueError):
    """A malformed socket address (``host:port``, ``[v6]:port``, ``ipc://path``,
    ``inproc://name``), or one that cannot be used (unknown inproc name, name already bound).

    The message always quotes the address.
    """


class ProtocolError(NbmqError):
    """A stream peer broke the protocol (BQSP, rqueue); the connection is unusable afterwards."""


class AccessDenied(NbmqError, PermissionError):
    """A server's access rules refused a message (an rqueue SUBSCRIBE or NOTIFICATION).

    Attributes:
        message_type: the refused message's rqueue type (int).
        topic: its topic (bytes).
    """

    def __init__(self, message_type: int, topic: bytes) -> None:
        action = "subscribe to" if message_type == 1 else "publish on"
        super().__init__(f"the server refused to let this client {action} {topic!r}")
        self.message_type = message_type
        self.topic = topic
