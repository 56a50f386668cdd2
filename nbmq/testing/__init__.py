"""Tools for testing applications built on nbmq.

- :mod:`nbmq.testing.network`: a deterministic network simulator (virtual time, seeded faults) that
  joins sans-IO engines, for tests that must not depend on a real network or a clock.
- :mod:`nbmq.testing.servers`: the rqueue broker (or any server that prints ``listening on
  HOST:PORT``) started as a subprocess on an OS-chosen loopback port, stopped with SIGTERM.
"""

from .network import Link, LivelockError, Network, Node, connected_pair
from .servers import ServerProcess, rqueue_server

__all__ = ["Link", "Node", "Network", "LivelockError", "connected_pair", "ServerProcess", "rqueue_server"]
