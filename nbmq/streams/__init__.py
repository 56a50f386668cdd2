"""Sans-IO engines of the two stream protocols: BQSP (seed 002) and rqueue (seed 004).

- :mod:`nbmq.streams.bqsp`: :class:`~nbmq.streams.bqsp.BqspConnection`, one end of a BQSP byte
  stream (either end: the protocol is symmetric).
- :mod:`nbmq.streams.rqueue`: the public rqueue names; the client engine in
  :mod:`~nbmq.streams.rqueue_client`, the broker in :mod:`~nbmq.streams.rqueue_broker`, the topic
  rule in :mod:`~nbmq.streams.rqueue_topics`.
- :mod:`nbmq.streams.receiver`: the receive side the client engines share.

Like :mod:`nbmq.engine`, nothing here touches the OS or a clock; the TCP drivers live in
:mod:`nbmq.transports`.
"""
