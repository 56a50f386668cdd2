"""IP addresses as text, converted once per distinct address rather than once per packet."""

from __future__ import annotations

import os
import socket

import numpy as np

__all__ = ["addresses_to_text", "address_table"]

if os.environ.get("NBMQ_NO_EXTENSIONS", "") in ("", "0"):
    try:
        from ._decode import factorize_addresses as _factorize
    except ImportError:  # not built: np.unique does it
        _factorize = None
else:
    _factorize = None


def address_table(
    family: np.ndarray, src: np.ndarray, dst: np.ndarray, compiled: bool | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct addresses of a batch as text, and each row's source and destination codes.

    Args:
        family: uint8 (n,), 4 or 6 per row.
        src, dst: uint8 (n, 16), the packed addresses (IPv4 in the first 4 bytes).
        compiled: use the compiled hash table (``nbmq.capture.datagrams._decode``; True requires it),
            numpy's sort-based ``np.unique`` (False), or the first when built (None). Codes may
            differ between the two; the text each row gets does not.

    Returns:
        ``(texts, src_code, dst_code)``: object (k,) array of ``str`` (one per distinct
        address, shared by both columns), int32 (n,) and int32 (n,) indexes into it.
    """
    n = int(family.shape[0])
    if compiled is None:
        compiled = _factorize is not None
    elif compiled and _factorize is None:
        raise RuntimeError("nbmq.capture.datagrams._decode is not built")
    if compiled:
        src_code, dst_code, ufam, uaddr = _factorize(
            np.ascontiguousarray(family, np.uint8), np.ascontiguousarray(src, np.uint8),
            np.ascontiguousarray(dst, np.uint8),
        )
    else:
        keys = np.empty((2 * n, 17), np.uint8)
        keys[:n, 0] = family
        keys[n:, 0] = family
        keys[:n, 1:] = src
        keys[n:, 1:] = dst
        uniq, inverse = np.unique(keys.view("V17").ravel(), return_inverse=True)
        inverse = inverse.ravel().astype(np.int32)
        src_code, dst_code = inverse[:n], inverse[n:]
        both = np.frombuffer(uniq.tobytes(), np.uint8).reshape(-1, 17)
        ufam, uaddr = both[:, 0], both[:, 1:]
    return addresses_to_text(ufam, uaddr), src_code, dst_code


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
