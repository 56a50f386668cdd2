"""BQSP over asyncio streams: a request/response client and a concurrent server.

The client lives in :mod:`nbmq.transports.bqsp_client` (:class:`BqspClient`), the server in
:mod:`nbmq.transports.bqsp_server` (:class:`BqspServer`, :func:`serve_bqsp`); this module gathers
their public names.
"""

from __future__ import annotations

from .bqsp_client import BqspClient
from .bqsp_server import BqspServer, Handler, serve_bqsp

__all__ = ["BqspClient", "BqspServer", "serve_bqsp", "Handler"]
