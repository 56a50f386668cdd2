"""The compiled modules' one definition of the wire facts (nbmq/_wire.pxd) equals nbmq.wire's."""

from __future__ import annotations

import re
from pathlib import Path

from nbmq import codec, wire

PXD = Path(wire.__file__).with_name("_wire.pxd")
#: name in the .pxd -> the same fact in nbmq.wire
MIRROR = {
    "VERSION": wire.VERSION,
    "DATA_HEADER": wire.DATA_HEADER_SIZE,
    "CONTROL_HEADER": wire.CONTROL_HEADER_SIZE,
    "MAX_FRAME": wire.MAX_FRAME_SIZE,
    "MAX_CHUNK": wire.MAX_CHUNK_SIZE,
    "MAX_PARTS": wire.MAX_PARTS,
    "SECURE_VERSION": wire.SECURE_VERSION,
    "SECURE_COUNTER": wire.SECURE_COUNTER_SIZE,
    "SECURE_OVERHEAD": wire.SECURE_OVERHEAD,
    "BUNDLE_VERSION": wire.BUNDLE_VERSION,
    "BUNDLE_HEAD": wire.BUNDLE_HEAD_SIZE,
    "BUNDLE_ENTRY": wire.BUNDLE_ENTRY_SIZE,
    "MIN_BUNDLE_FRAMES": wire.MIN_BUNDLE_FRAMES,
    "MAX_BUNDLE_FRAMES": wire.MAX_BUNDLE_FRAMES,
    "NBMQ_FNV_BASIS": wire.FNV_OFFSET_BASIS,
    "NBMQ_FNV_MUL": wire.FNV_PRIME,
}


def test_pxd_values_equal_wire_py():
    text = PXD.read_text()
    found = {
        m.group(1): int(m.group(2).rstrip("ULul"), 0)
        for m in re.finditer(r"^\s*(?:#define\s+)?(\w+)\s*=?\s*(0x[0-9A-Fa-f]+U?L*L?|\d+)\b", text, re.M)
    }
    assert {name: found.get(name) for name in MIRROR} == MIRROR


def test_no_compiled_module_defines_them_again():
    """Every .pyx / .pxi takes them from the .pxd: no second FNV constant or frame-size enum."""
    root = PXD.parent
    sources = [*root.rglob("*.pyx"), *root.rglob("*.pxi")]
    assert len(sources) >= 8
    for path in sources:
        text = path.read_text().upper()
        assert "CBF29CE484222325" not in text and "100000001B3" not in text, path
        assert not re.search(r"^\s*(DATA_HEADER|MAX_CHUNK|MAX_FRAME|CONTROL_HEADER)\s*=\s*\d", text, re.M), path


def test_compiled_and_python_hashes_agree():
    data = bytes(range(256)) * 3
    assert codec.fnv1a64(data) == wire_fnv(data)
    assert codec.frame_count([0, 466, 467]) == 1 + 1 + 2


def wire_fnv(data: bytes) -> int:
    h = wire.FNV_OFFSET_BASIS
    for b in data:
        h = ((h ^ b) * wire.FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h
