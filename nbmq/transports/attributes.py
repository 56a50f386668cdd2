"""Socket options as socket attributes (pyzmq's habit): ``sock.send_hwm = 10``.

A mixin shared by the blocking and the asyncio sockets. An option name reads and writes the
socket's live options (validated: OptionError on a bad value); any other unknown name is
refused with AttributeError, so a typo cannot create a stray attribute that configures nothing.
"""

from __future__ import annotations

from typing import Any

from ..options import OPTION_SPECS

__all__ = ["OptionAttributes"]


class OptionAttributes:
    """Mixin: options as attributes; assignment to unknown attributes raises AttributeError.

    A subclass lists its public instance attributes in ``_ATTRS``; names starting with ``_``,
    and names the class defines (properties, methods, class attributes), pass through.
    """

    _ATTRS: frozenset[str] = frozenset()

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails.
        if name in OPTION_SPECS and "options" in self.__dict__:
            return getattr(self.options, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in OPTION_SPECS:
            setattr(self.options, name, value)  # validates, then applies (LiveOptions)
        elif name[:1] == "_" or name in self._ATTRS or hasattr(type(self), name):
            object.__setattr__(self, name, value)
        else:
            raise AttributeError(
                f"{type(self).__name__} has no attribute or socket option {name!r} "
                f"(options: {', '.join(OPTION_SPECS)})"
            )
