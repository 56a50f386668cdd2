"""The Noise Protocol Framework's ``Noise_IK_25519_ChaChaPoly_BLAKE2s``, sans-IO.

Source: The Noise Protocol Framework, revision 34 (sections 5 "Processing rules", 7.5 "IK",
11.3 "Rekey", 12 "DH, cipher and hash functions"), checked against the cacophony test vectors
(``tests/data/noise_vectors.json``). No cryptography of our own: X25519 and ChaCha20-Poly1305
come from the ``cryptography`` package, BLAKE2s and HMAC from the standard library. This module
only sequences them as the specification says.

IK suits a pinned server key: the initiator (the connecting socket) knows the responder's
static public key before it starts, so the handshake is one round trip::

    <- s
    ...
    -> e, es, s, ss
    <- e, ee, se

After it, :meth:`HandshakeState.split` gives the two transport :class:`CipherState`\\ s. The
engine carries an explicit nonce per frame (datagrams are lost and reordered), so transport
frames use :meth:`CipherState.encrypt_at` / :meth:`CipherState.decrypt_at` rather than the
implicit counter of ``encrypt_with_ad``.
"""

from __future__ import annotations

import hashlib
import hmac
import struct

from ..errors import NbmqError

try:
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
except ImportError:  # the optional extra is missing: secure mode says so when asked for
    _CRYPTO_ERROR: str | None = "secure mode needs the 'cryptography' package: pip install 'nbmq[secure]'"

    class InvalidTag(Exception):  # type: ignore[no-redef]
        """Stands in for cryptography's, which nothing can raise without it."""

else:
    _CRYPTO_ERROR = None

__all__ = [
    "PROTOCOL_NAME",
    "KEY_SIZE",
    "TAG_SIZE",
    "MAX_NONCE",
    "HandshakeError",
    "InvalidTag",
    "CipherState",
    "HandshakeState",
    "generate_keypair",
    "public_key",
    "require_crypto",
]

PROTOCOL_NAME = b"Noise_IK_25519_ChaChaPoly_BLAKE2s"
KEY_SIZE = 32  # X25519 keys and ChaCha20-Poly1305 keys, bytes
TAG_SIZE = 16  # Poly1305 tag, bytes
HASH_SIZE = 32  # BLAKE2s digest, bytes
#: Nonce 2**64 - 1 is reserved for REKEY (Noise section 5.1).
MAX_NONCE = 0xFFFFFFFFFFFFFFFF
_NONCE = struct.Struct("<4xQ")  # ChaChaPoly: 32 bits of zeros, then the 64-bit nonce little-endian
_ZEROS = bytes(KEY_SIZE)


class HandshakeError(NbmqError):
    """A handshake message did not verify (wrong key, forged, truncated or replayed bytes)."""


def require_crypto() -> None:
    """Raise :class:`~nbmq.errors.NbmqError` naming the ``secure`` extra when ``cryptography`` is
    not installed; return quietly otherwise."""
    if _CRYPTO_ERROR is not None:
        raise NbmqError(_CRYPTO_ERROR)


def generate_keypair() -> tuple[bytes, bytes]:
    """A new X25519 key pair from the OS's random source (as pyzmq's ``curve_keypair``).

    Returns:
        ``(public_key, secret_key)``, 32 raw bytes each. Give ``secret_key`` to the socket that
        owns it and ``public_key`` to its peers (a client's ``server_public_key``, a server's
        ``allowed_public_keys``).

    Raises:
        NbmqError: ``cryptography`` is not installed (the ``secure`` extra).
    """
    require_crypto()
    secret = X25519PrivateKey.generate()
    return secret.public_key().public_bytes_raw(), secret.private_bytes_raw()


def public_key(secret_key: bytes) -> bytes:
    """The 32-byte X25519 public key of a 32-byte secret key.

    Raises:
        ValueError: ``secret_key`` is not 32 bytes. NbmqError: ``cryptography`` is missing.
    """
    require_crypto()
    if len(secret_key) != KEY_SIZE:
        raise ValueError(f"secret_key must be {KEY_SIZE} bytes, got {len(secret_key)}")
    return X25519PrivateKey.from_private_bytes(bytes(secret_key)).public_key().public_bytes_raw()


def _hash(data: bytes) -> bytes:
    return hashlib.blake2s(data).digest()


def _hmac(key: bytes, data: bytes) -> bytes:
    return hmac.digest(key, data, hashlib.blake2s)


def _hkdf(chaining_key: bytes, ikm: bytes) -> tuple[bytes, bytes]:
    """Noise's HKDF with two outputs (section 4.3)."""
    temp = _hmac(chaining_key, ikm)
    out1 = _hmac(temp, b"\x01")
    return out1, _hmac(temp, out1 + b"\x02")


def _dh(secret: X25519PrivateKey, public: bytes) -> bytes:
    return secret.exchange(X25519PublicKey.from_public_bytes(public))


class CipherState:
    """A ChaCha20-Poly1305 key and a nonce counter (Noise section 5.1).

    Args:
        key: 32 bytes, or None for "no key yet" (encrypt and decrypt then pass data through,
            as the specification says for the first handshake tokens).
    """

    __slots__ = ("key", "nonce", "_aead")

    def __init__(self, key: bytes | None = None) -> None:
        self.key = key
        self.nonce = 0
        self._aead = None if key is None else ChaCha20Poly1305(key)

    def encrypt_with_ad(self, ad: bytes, plaintext: bytes) -> bytes:
        """Encrypt under the implicit nonce, then advance it. Returns ciphertext + 16-byte tag."""
        if self._aead is None:
            return bytes(plaintext)
        out = self.encrypt_at(self.nonce, ad, plaintext)
        self.nonce += 1
        return out

    def decrypt_with_ad(self, ad: bytes, ciphertext: bytes) -> bytes:
        """Decrypt under the implicit nonce, then advance it.

        Raises:
            HandshakeError: the tag does not verify (the nonce is then not advanced).
        """
        if self._aead is None:
            return bytes(ciphertext)
        try:
            out = self.decrypt_at(self.nonce, ad, ciphertext)
        except InvalidTag:
            raise HandshakeError("authentication tag did not verify") from None
        self.nonce += 1
        return out

    def encrypt_at(self, nonce: int, ad: bytes, plaintext: bytes | memoryview) -> bytes:
        """Encrypt with an explicit nonce (0 .. 2**64 - 2; the caller never repeats one).
        Returns ``len(plaintext) + 16`` bytes."""
        return self._aead.encrypt(_NONCE.pack(nonce), plaintext, ad)  # type: ignore[union-attr]

    def decrypt_at(self, nonce: int, ad: bytes, ciphertext: bytes | memoryview) -> bytes:
        """Decrypt with an explicit nonce.

        Raises:
            cryptography.exceptions.InvalidTag: the frame was altered, or sealed under another
            key, nonce or associated data.
        """
        return self._aead.decrypt(_NONCE.pack(nonce), ciphertext, ad)  # type: ignore[union-attr]

    def rekeyed(self) -> CipherState:
        """The CipherState of the next key: ``REKEY(k)``, the first 32 bytes of
        ``ENCRYPT(k, 2**64 - 1, "", zeros)`` (Noise section 11.3); its nonce starts at 0."""
        return CipherState(self.encrypt_at(MAX_NONCE, b"", _ZEROS)[:KEY_SIZE])


class _SymmetricState:
    """Noise section 5.2: the chaining key ``ck``, the handshake hash ``h`` and a CipherState."""

    __slots__ = ("ck", "h", "cipher")

    def __init__(self, protocol_name: bytes) -> None:
        h = protocol_name.ljust(HASH_SIZE, b"\0") if len(protocol_name) <= HASH_SIZE else _hash(protocol_name)
        self.h = h
        self.ck = h
        self.cipher = CipherState()

    def mix_key(self, ikm: bytes) -> None:
        self.ck, temp = _hkdf(self.ck, ikm)
        self.cipher = CipherState(temp)

    def mix_hash(self, data: bytes) -> None:
        self.h = _hash(self.h + data)

    def encrypt_and_hash(self, plaintext: bytes) -> bytes:
        out = self.cipher.encrypt_with_ad(self.h, plaintext)
        self.mix_hash(out)
        return out

    def decrypt_and_hash(self, ciphertext: bytes) -> bytes:
        out = self.cipher.decrypt_with_ad(self.h, ciphertext)
        self.mix_hash(ciphertext)
        return out

    def split(self) -> tuple[CipherState, CipherState]:
        k1, k2 = _hkdf(self.ck, b"")
        return CipherState(k1), CipherState(k2)


class HandshakeState:
    """One side of an IK handshake (Noise section 5.3 with the IK pattern, section 7.5).

    Args:
        initiator: True for the side that dials (writes message 1), False for the responder.
        static_secret: this side's 32-byte X25519 secret key.
        remote_static: the responder's 32-byte public key (the initiator's pinned
            ``server_public_key``); None on the responder, which learns the initiator's key
            from message 1.
        prologue: bytes both sides bind into the handshake hash (nbmq passes its wire tag).
        ephemeral_secret: a fixed 32-byte ephemeral secret (test vectors only); None draws a
            fresh one from the OS's random source.

    Raises:
        NbmqError: ``cryptography`` is missing. ValueError: a key is not 32 bytes.

    ``write_message`` / ``read_message`` alternate as the pattern says; after the second
    message :meth:`split` gives ``(initiator_to_responder, responder_to_initiator)``.
    """

    __slots__ = ("initiator", "_sym", "_s", "_e", "remote_static", "_re", "_step")

    def __init__(
        self,
        initiator: bool,
        static_secret: bytes,
        remote_static: bytes | None = None,
        prologue: bytes = b"",
        ephemeral_secret: bytes | None = None,
    ) -> None:
        require_crypto()
        for name, key in (
            ("static_secret", static_secret),
            ("remote_static", remote_static),
            ("ephemeral_secret", ephemeral_secret),
        ):
            if key is not None and len(key) != KEY_SIZE:
                raise ValueError(f"{name} must be {KEY_SIZE} bytes, got {len(key)}")
        if initiator and remote_static is None:
            raise ValueError("remote_static (the responder's public key) is required by the initiator")
        self.initiator = initiator
        self._s = X25519PrivateKey.from_private_bytes(bytes(static_secret))
        self._e = (
            X25519PrivateKey.generate()
            if ephemeral_secret is None
            else X25519PrivateKey.from_private_bytes(bytes(ephemeral_secret))
        )
        self.remote_static: bytes | None = None if remote_static is None else bytes(remote_static)
        self._re: bytes | None = None
        self._step = 0
        sym = self._sym = _SymmetricState(PROTOCOL_NAME)
        sym.mix_hash(prologue)
        # pre-message "<- s": the responder's static key
        sym.mix_hash(self.remote_static if initiator else self._s.public_key().public_bytes_raw())  # type: ignore[arg-type]

    @property
    def handshake_hash(self) -> bytes:
        """``h``: 32 bytes that name this handshake (equal on both sides once it is done)."""
        return self._sym.h

    @property
    def ephemeral_public(self) -> bytes:
        """This side's 32-byte ephemeral public key (the first 32 bytes of its message)."""
        return self._e.public_key().public_bytes_raw()

    def write_message(self, payload: bytes = b"") -> bytes:
        """The next handshake message carrying ``payload`` (encrypted once a key is mixed in).

        Message 1 (initiator) is 96 bytes + payload + 16; message 2 (responder) 48 + payload + 16.

        Raises:
            NbmqError: called out of turn.
        """
        sym = self._sym
        if self._step == 0 and self.initiator:  # -> e, es, s, ss
            e_pub = self.ephemeral_public
            sym.mix_hash(e_pub)
            sym.mix_key(_dh(self._e, self.remote_static))  # type: ignore[arg-type]
            s_enc = sym.encrypt_and_hash(self._s.public_key().public_bytes_raw())
            sym.mix_key(_dh(self._s, self.remote_static))  # type: ignore[arg-type]
            out = e_pub + s_enc + sym.encrypt_and_hash(payload)
        elif self._step == 1 and not self.initiator:  # <- e, ee, se
            e_pub = self.ephemeral_public
            sym.mix_hash(e_pub)
            sym.mix_key(_dh(self._e, self._re))  # type: ignore[arg-type]
            sym.mix_key(_dh(self._e, self.remote_static))  # type: ignore[arg-type]
            out = e_pub + sym.encrypt_and_hash(payload)
        else:
            raise NbmqError("write_message out of turn")
        self._step += 1
        return out

    def read_message(self, message: bytes | memoryview) -> bytes:
        """Take the peer's next handshake message; returns its payload.

        Raises:
            HandshakeError: the message is too short, a key in it is not a usable X25519
                point, or a tag did not verify (a wrong or forged key, altered bytes).
            NbmqError: called out of turn.
        """
        sym = self._sym
        message = bytes(message)
        saved = (sym.ck, sym.h, sym.cipher, self._re)
        try:
            if self._step == 0 and not self.initiator:  # -> e, es, s, ss
                if len(message) < KEY_SIZE + KEY_SIZE + 2 * TAG_SIZE:
                    raise HandshakeError("handshake message 1 truncated")
                self._re = message[:KEY_SIZE]
                sym.mix_hash(self._re)
                sym.mix_key(_dh(self._s, self._re))
                rs = sym.decrypt_and_hash(message[KEY_SIZE : 2 * KEY_SIZE + TAG_SIZE])
                sym.mix_key(_dh(self._s, rs))
                payload = sym.decrypt_and_hash(message[2 * KEY_SIZE + TAG_SIZE :])
                self.remote_static = rs
            elif self._step == 1 and self.initiator:  # <- e, ee, se
                if len(message) < KEY_SIZE + TAG_SIZE:
                    raise HandshakeError("handshake message 2 truncated")
                self._re = message[:KEY_SIZE]
                sym.mix_hash(self._re)
                sym.mix_key(_dh(self._e, self._re))
                sym.mix_key(_dh(self._s, self._re))
                payload = sym.decrypt_and_hash(message[KEY_SIZE:])
            else:
                raise NbmqError("read_message out of turn")
        except (HandshakeError, ValueError) as exc:  # ValueError: a low-order point (all-zero secret)
            # a forged message leaves the handshake as it was: the genuine one may still come
            sym.ck, sym.h, sym.cipher, self._re = saved
            if isinstance(exc, HandshakeError):
                raise
            raise HandshakeError(f"unusable key in the handshake: {exc}") from None
        self._step += 1
        return payload

    def split(self) -> tuple[CipherState, CipherState]:
        """``(initiator_to_responder, responder_to_initiator)`` transport ciphers.

        Raises:
            NbmqError: the handshake is not complete.
        """
        if self._step != 2:
            raise NbmqError("split before the handshake is complete")
        return self._sym.split()
