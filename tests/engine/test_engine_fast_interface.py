"""The compiled engine changes other objects' state only through their methods.

``nbmq/engine/_fast.pyx`` may assign to private attributes (``_name``) of ``self`` only, and
its functions taking ``self`` are methods of the socket classes (installed in
``nbmq/engine/sockets.py``), so such a write is the socket changing its own state. A peer
changes through ``Peer.heard`` / ``Peer.sent``, a send queue through ``SendQueue.took`` /
``SendQueue.window_opened``: the same methods the Python code calls.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbmq.engine

ENGINE_DIR = Path(nbmq.engine.__file__).parent
FAST = ENGINE_DIR / "_fast.pyx"

# ``obj._name = ...``, ``obj._name += ...`` (any augmented operator), not ``==``
PRIVATE_WRITE = re.compile(r"\b(\w+)\.(_\w+)\s*(?:[-+*/%&|^]|//|<<|>>)?=(?!=)")
METHOD_DEF = re.compile(r"^def (\w+)\(self\b", re.MULTILINE)


def _code_lines(text: str) -> list[tuple[int, str]]:
    """(line number, the line without its comment) of every line of ``text``."""
    return [(n, line.split("#", 1)[0]) for n, line in enumerate(text.splitlines(), 1)]


def private_writes(text: str) -> list[str]:
    """Every assignment in ``text`` to a private attribute of an object other than ``self``,
    as ``"line: code"``."""
    found = []
    for n, line in _code_lines(text):
        for match in PRIVATE_WRITE.finditer(line):
            if match.group(1) != "self":
                found.append(f"{n}: {line.strip()}")
    return found


def test_fast_writes_no_private_attribute_of_another_object():
    assert private_writes(FAST.read_text()) == []


def test_the_rule_catches_writes_and_spares_reads():
    code = (
        "peer._last_seen = now\n"
        "sendq._rr += 1\n"
        "last._last_sent=now  # a comment\n"
        "if peer._state == _CONNECTED:\n"
        "self._now = now\n"
        "x = peer._addr\n"
        "# sendq._blocked = False\n"
    )
    assert private_writes(code) == [
        "1: peer._last_seen = now",
        "2: sendq._rr += 1",
        "3: last._last_sent=now",
    ]


def test_fast_functions_taking_self_are_socket_methods():
    methods = set(METHOD_DEF.findall(FAST.read_text()))
    installed = set(re.findall(r"=\s*_fast\.(\w+)", (ENGINE_DIR / "sockets.py").read_text()))
    assert methods
    assert methods <= installed, methods - installed
