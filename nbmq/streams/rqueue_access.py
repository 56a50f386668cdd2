"""Access rules for the rqueue broker: who may publish and subscribe to which topics.

Seed 004 has no authentication: any client may subscribe to and publish on any topic. This is
an nbmq extension, off unless the broker is given :class:`AccessRules` (``nbmq rqueue-server
--acl FILE``). A client's identity comes from one of two places:

- its TLS client certificate: the subject's commonName (the driver reads it from the TLS
  session and passes it to ``RqueueBroker.connection_made``);
- a token it sends once after connecting: a NOTIFICATION on :data:`AUTH_TOPIC` whose content is
  the token (``RqueueClientConnection.authenticate``). The rules hold only the token's SHA-256,
  never the token.

A client with no identity gets the ``[anonymous]`` grant (nothing, unless the file says so).
Topics match by prefix: ``"sensors/"`` covers ``sensors/t1``; ``""`` covers every topic.

The rules file is TOML::

    [anonymous]                   # optional: clients that did not identify
    subscribe = ["public/"]

    [clients.sensor-1]
    certificate = "sensor-1"      # a TLS client certificate whose subject commonName is this
    publish = ["sensors/sensor-1/"]

    [clients.dashboard]
    token_sha256 = "5e88...d1542d8"   # hex SHA-256 of the token the client sends
    subscribe = ["sensors/", "alerts/"]
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib

__all__ = ["AccessRules", "Grant", "AUTH_TOPIC", "DENIED_TOPIC", "encode_denial", "decode_denial"]

#: A client sends its token as the content of one NOTIFICATION on this topic. The broker never
#: forwards it (with or without rules), so a token never reaches a subscriber.
AUTH_TOPIC = b"$nbmq/auth"
#: The broker tells a client that it refused one of its messages with a NOTIFICATION on this topic
#: whose content is :func:`encode_denial`'s. The broker never forwards a client's publish here.
DENIED_TOPIC = b"$nbmq/denied"

_KEYS = {"certificate", "token_sha256", "publish", "subscribe"}


def encode_denial(message_type: int, topic: bytes) -> bytes:
    """A denial notice's content: the refused message's rqueue type (1 byte: 1 SUBSCRIBE,
    7 NOTIFICATION), then the topic's bytes."""
    return bytes((message_type,)) + topic


def decode_denial(content: bytes | bytearray | memoryview) -> tuple[int, bytes] | None:
    """``(message_type, topic)`` from a denial notice's content, or None when it is empty."""
    raw = bytes(content)
    return (raw[0], raw[1:]) if raw else None


@dataclass(frozen=True, slots=True)
class Grant:
    """The topic prefixes one identity may publish on and subscribe to (tuples of bytes)."""

    publish: tuple[bytes, ...] = ()
    subscribe: tuple[bytes, ...] = ()

    def may_publish(self, topic: bytes) -> bool:
        """True when ``topic`` starts with one of the publish prefixes."""
        return topic.startswith(self.publish) if self.publish else False

    def may_subscribe(self, topic: bytes) -> bool:
        """True when ``topic`` starts with one of the subscribe prefixes."""
        return topic.startswith(self.subscribe) if self.subscribe else False


NOTHING = Grant()


class AccessRules:
    """Identities and their grants for :class:`~nbmq.streams.rqueue_broker.RqueueBroker`.

    Args:
        grants: identity name -> :class:`Grant`.
        certificates: a TLS client certificate's subject commonName -> identity name.
        token_digests: SHA-256 digest (32 bytes) of a token -> identity name.
        anonymous: the grant of a client with no identity (default: nothing).

    Raises:
        ValueError: a certificate or token maps to an identity without a grant, or a digest is not
            32 bytes.

    Build one from a file with :meth:`load` (TOML, see the module docstring) or from a mapping
    with :meth:`from_mapping`.
    """

    def __init__(
        self,
        grants: Mapping[str, Grant],
        certificates: Mapping[str, str] | None = None,
        token_digests: Mapping[bytes, str] | None = None,
        anonymous: Grant = NOTHING,
    ) -> None:
        self.grants = dict(grants)
        self.certificates = dict(certificates or {})
        self.token_digests = dict(token_digests or {})
        self.anonymous = anonymous
        for name in (*self.certificates.values(), *self.token_digests.values()):
            if name not in self.grants:
                raise ValueError(f"identity {name!r} has no grant")
        for digest in self.token_digests:
            if len(digest) != 32:
                raise ValueError("a token digest is 32 bytes (SHA-256)")

    @classmethod
    def load(cls, path: str | Path) -> AccessRules:
        """The rules in the TOML file at ``path``.

        Raises:
            OSError: the file cannot be read.
            ValueError: it is not TOML, or a key or value is wrong (the message names the file and
                the key).
        """
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{path}: not TOML: {exc}") from None
        try:
            return cls.from_mapping(data)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> AccessRules:
        """The rules in a mapping shaped like the TOML file (``anonymous`` and ``clients`` tables).

        Raises:
            ValueError: an unknown key, a value of the wrong type, a client with neither
                ``certificate`` nor ``token_sha256``, or a certificate or token given twice.
        """
        unknown = set(data) - {"anonymous", "clients"}
        if unknown:
            raise ValueError(f"unknown table {sorted(unknown)[0]!r} (expected anonymous, clients)")
        anonymous = _grant("anonymous", data.get("anonymous", {}), {"publish", "subscribe"})
        clients = data.get("clients", {})
        if not isinstance(clients, Mapping):
            raise ValueError("clients must be a table")
        grants: dict[str, Grant] = {}
        certificates: dict[str, str] = {}
        digests: dict[bytes, str] = {}
        for name, entry in clients.items():
            where = f"clients.{name}"
            grants[name] = _grant(where, entry, _KEYS)
            cert, token = entry.get("certificate"), entry.get("token_sha256")
            if cert is None and token is None:
                raise ValueError(f"{where}: give certificate or token_sha256 (how the client is known)")
            if cert is not None:
                if not isinstance(cert, str) or not cert:
                    raise ValueError(f"{where}.certificate must be a non-empty string")
                if cert in certificates:
                    raise ValueError(f"{where}.certificate {cert!r} is given twice")
                certificates[cert] = name
            if token is not None:
                try:
                    digest = bytes.fromhex(token) if isinstance(token, str) else b""
                except ValueError:
                    digest = b""
                if len(digest) != 32:
                    raise ValueError(f"{where}.token_sha256 must be 64 hex digits")
                if digest in digests:
                    raise ValueError(f"{where}.token_sha256 is given twice")
                digests[digest] = name
        return cls(grants, certificates, digests, anonymous)

    def identify_certificate(self, common_name: str | None) -> str | None:
        """The identity of a TLS client certificate's subject commonName, or None."""
        return self.certificates.get(common_name) if common_name is not None else None

    def identify_token(self, token: bytes | bytearray | memoryview) -> str | None:
        """The identity a token proves, or None (compared by its SHA-256)."""
        return self.token_digests.get(hashlib.sha256(token).digest())

    def grant(self, identity: str | None) -> Grant:
        """What ``identity`` may do (the anonymous grant for None)."""
        return self.anonymous if identity is None else self.grants.get(identity, NOTHING)


def _grant(where: str, entry: Any, allowed: set[str]) -> Grant:
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where} must be a table")
    unknown = set(entry) - allowed
    if unknown:
        raise ValueError(f"{where}: unknown key {sorted(unknown)[0]!r}")
    return Grant(_prefixes(where, "publish", entry), _prefixes(where, "subscribe", entry))


def _prefixes(where: str, key: str, entry: Mapping[str, Any]) -> tuple[bytes, ...]:
    value: Iterable[Any] = entry.get(key, ())
    if isinstance(value, str) or not all(isinstance(p, str) for p in value):
        raise ValueError(f"{where}.{key} must be a list of topic prefixes (strings)")
    prefixes = tuple(p.encode("utf-8") for p in value)
    if any(len(p) > 255 for p in prefixes):
        raise ValueError(f"{where}.{key}: a topic prefix is at most 255 bytes")
    return prefixes
