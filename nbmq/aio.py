"""asyncio nbmq sockets: ``await nbmq.aio.Dealer.bind("127.0.0.1:0")``, ``await sock.recv()``,
``await sock.send(parts)`` (waits while at ``send_hwm``). See :mod:`nbmq.transports.aio`."""

from .transports.aio import Dealer, Dish, Radio, SafeDealer, Socket

__all__ = ["Socket", "Dealer", "SafeDealer", "Radio", "Dish"]
