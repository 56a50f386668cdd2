"""Transports: the only code that touches the OS (UDP, Unix-datagram IPC, inproc, asyncio).

``Dealer``, ``SafeDealer``, ``Radio`` and ``Dish`` here are the blocking sockets users hold
(``nbmq.Dealer.bind("0.0.0.0:8000")``); :mod:`nbmq.aio` has the asyncio flavour.
"""

from .address import Address, format_address, parse_address
from .socket import Dealer, Dish, Radio, SafeDealer, Socket

__all__ = [
    "Socket",
    "Dealer",
    "SafeDealer",
    "Radio",
    "Dish",
    "Address",
    "parse_address",
    "format_address",
]
