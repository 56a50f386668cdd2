"""Socket options as socket attributes (pyzmq's habit): ``sock.send_hwm = 10``.

A base class shared by the blocking and the asyncio sockets: one property per option reads
and writes the socket's live options (validated: OptionError on a bad value). The sockets
declare ``__slots__``, so assigning any other unknown name raises AttributeError: a typo
cannot create a stray attribute that configures nothing. Slots cost nothing on the hot path
(a ``__setattr__`` override would cost every assignment).
"""

from __future__ import annotations

from typing import Any

from ..options import OPTION_SPECS

__all__ = ["OptionAttributes"]


class OptionAttributes:
    """Base: every option of :data:`~nbmq.options.OPTION_SPECS` is a property reading and
    writing ``self.options`` (which must be a ``LiveOptions``)."""

    __slots__ = ()


def _option_property(name: str) -> property:
    def get(self: Any) -> Any:
        return getattr(self.options, name)

    def set_(self: Any, value: Any) -> None:
        setattr(self.options, name, value)  # validates, then applies to the running socket

    return property(get, set_, doc=f"Socket option {name!r}: {OPTION_SPECS[name].doc}.")


for _name in OPTION_SPECS:
    setattr(OptionAttributes, _name, _option_property(_name))
del _name
