"""IP addresses as text, converted once per distinct address rather than once per packet."""

from __future__ import annotations

import socket

import numpy as np

__all__ = ["addresses_to_text"]


def addresses_to_text(family: np.ndarray, addr: np.ndarray) -> np.ndarray:
    """Format packed addresses as text.

    A capture has few distinct addresses, so rows are de-duplicated with ``np.unique`` (on a
    uint32 key for IPv4, on the 16 raw bytes for IPv6) and ``socket.inet_ntop`` runs once per
    distinct address; rows share the resulting ``str`` objects.

    Args:
        family: uint8 (n,), 4 or 6 per row.
        addr: uint8 (n, 16), the address bytes (IPv4 in the first 4).

    Returns:
        object (n,) array of ``str``: dotted quad for IPv4, RFC 5952 text for IPv6.
    """
    out = np.empty(family.shape[0], object)
    v6 = family == 6
    r4 = np.flatnonzero(~v6)
    if r4.size:
        key = np.ascontiguousarray(addr[r4, :4]).view(">u4").ravel()
        uniq, inverse = np.unique(key, return_inverse=True)
        texts = np.array([socket.inet_ntop(socket.AF_INET, int(k).to_bytes(4, "big")) for k in uniq], object)
        out[r4] = texts[inverse.ravel()]
    r6 = np.flatnonzero(v6)
    if r6.size:
        key6 = np.ascontiguousarray(addr[r6]).view("V16").ravel()
        uniq6, inverse6 = np.unique(key6, return_inverse=True)
        texts6 = np.array([socket.inet_ntop(socket.AF_INET6, bytes(k)) for k in uniq6.tolist()], object)
        out[r6] = texts6[inverse6.ravel()]
    return out
