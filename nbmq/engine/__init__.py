"""Sans-IO nbmq engines: connection layer -> queueing layer -> messaging layer.

Nothing here touches the OS, a clock or global randomness: time is the ``now`` argument (float
seconds, any monotonic clock) and randomness is an injected ``random.Random``. Transports
(``nbmq.transports``) and the simulator (``nbmq.testing``) drive these engines.

Public names: the socket engines :class:`Dealer`, :class:`SafeDealer`, :class:`Radio`,
:class:`Dish`; their parts :class:`Connection`, :class:`SendQueue`, :class:`RecvQueue`,
:class:`PushResult`; :class:`Peer`, :class:`PeerState`, :class:`Counters`.
"""

from .connection import Connection, Role
from .counters import Counters
from .peers import Peer, PeerState, addr_text
from .queues import PushResult, RecvQueue, SendQueue
from .sockets import Dealer, Dish, Radio, SafeDealer, Socket

__all__ = [
    "Connection",
    "Role",
    "Counters",
    "Peer",
    "PeerState",
    "addr_text",
    "PushResult",
    "RecvQueue",
    "SendQueue",
    "Socket",
    "Dealer",
    "SafeDealer",
    "Radio",
    "Dish",
]
