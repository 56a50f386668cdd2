"""Recognising a capture: classic pcap file header, pcapng section header, or neither."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ...errors import CaptureError

__all__ = [
    "PcapHeader",
    "detect_format",
    "parse_pcap_header",
    "PCAP_FILE_HEADER_LEN",
    "PCAPNG_SHB_TYPE",
    "STANDARD_MAX_SNAPLEN",
]

PCAP_FILE_HEADER_LEN = 24
PCAPNG_SHB_TYPE = 0x0A0D0D0A
# Wireshark's WTAP_MAX_PACKET_SIZE_STANDARD: records up to this size are always accepted,
# whatever the file's snaplen says (some writers put a too-small snaplen in the header).
STANDARD_MAX_SNAPLEN = 262144
_HARD_MAX_RECORD = 64 << 20  # never trust a larger incl_len, whatever the snaplen

# magic -> (nanosecond timestamps, Kuznetzov "modified" 24-byte record headers)
_PCAP_MAGICS = {0xA1B2C3D4: (False, False), 0xA1B23C4D: (True, False), 0xA1B2CD34: (False, True)}


@dataclass(frozen=True, slots=True)
class PcapHeader:
    """The 24-byte file header of a classic pcap file.

    Attributes:
        byte_order: ``"<"`` or ``">"``, the byte order of every header field in the file.
        nanosecond: True when the second field of record timestamps counts nanoseconds.
        modified: True for the Kuznetzov "modified pcap" format (24-byte record headers).
        version: (major, minor) format version as written (not checked).
        snaplen: snapshot length from the header (bytes).
        linktype: link-layer type (lower 16 bits of the LinkType field).
    """

    byte_order: str
    nanosecond: bool
    modified: bool
    version: tuple[int, int]
    snaplen: int
    linktype: int

    @property
    def record_header_len(self) -> int:
        """Size of each record header in bytes (16, or 24 for modified pcap)."""
        return 24 if self.modified else 16

    @property
    def frac_per_second(self) -> int:
        """Units of the timestamp fraction field per second (1e6 or 1e9)."""
        return 1_000_000_000 if self.nanosecond else 1_000_000

    @property
    def ns_per_frac(self) -> int:
        """Nanoseconds per unit of the timestamp fraction field (1000 or 1)."""
        return 1 if self.nanosecond else 1000

    @property
    def max_incl_len(self) -> int:
        """Largest ``incl_len`` accepted as a record length (bytes); larger means corruption."""
        return min(max(self.snaplen, STANDARD_MAX_SNAPLEN), _HARD_MAX_RECORD)


def detect_format(buf: object, size: int) -> str:
    """Tell a classic pcap from a pcapng capture by the first four bytes.

    Args:
        buf: the capture's bytes (anything ``struct.unpack_from`` accepts).
        size: number of bytes in ``buf``.

    Returns:
        ``"pcap"`` or ``"pcapng"``.

    Raises:
        CaptureError: fewer than 4 bytes, or a magic number of neither format.
    """
    if size < 4:
        raise CaptureError(f"not a capture: {size} bytes, too short for a magic number")
    (le,) = struct.unpack_from("<I", buf, 0)  # type: ignore[call-overload]
    (be,) = struct.unpack_from(">I", buf, 0)  # type: ignore[call-overload]
    if le in _PCAP_MAGICS or be in _PCAP_MAGICS:
        return "pcap"
    if le == PCAPNG_SHB_TYPE:  # palindromic, same in both byte orders
        return "pcapng"
    raise CaptureError(f"not a pcap or pcapng capture (magic 0x{be:08x})")


def parse_pcap_header(buf: object, size: int) -> PcapHeader:
    """Parse the 24-byte classic pcap file header.

    Args:
        buf: the capture's bytes (anything ``struct.unpack_from`` accepts).
        size: number of bytes in ``buf``.

    Returns:
        The parsed header.

    Raises:
        CaptureError: not a classic pcap magic, or fewer than 24 bytes.
    """
    if size < 4:
        raise CaptureError("not a capture: too short for a magic number")
    for order in ("<", ">"):
        (magic,) = struct.unpack_from(order + "I", buf, 0)  # type: ignore[call-overload]
        if magic in _PCAP_MAGICS:
            break
    else:
        raise CaptureError("not a classic pcap file (unknown magic number)")
    if size < PCAP_FILE_HEADER_LEN:
        raise CaptureError(f"truncated pcap file header ({size} of {PCAP_FILE_HEADER_LEN} bytes)")
    nano, modified = _PCAP_MAGICS[magic]
    major, minor, _zone, _sigfigs, snaplen, network = struct.unpack_from(  # type: ignore[call-overload]
        order + "HHiIII", buf, 4
    )
    return PcapHeader(
        byte_order=order,
        nanosecond=nano,
        modified=modified,
        version=(major, minor),
        snaplen=snaplen,
        linktype=network & 0xFFFF,  # upper bits carry FCS length info, not the type
    )
