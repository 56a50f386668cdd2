"""Address parsing and the errors users see for bad addresses, options and busy ports."""

from __future__ import annotations

import socket

import pytest

from nbmq.errors import AddressError, OptionError
from nbmq.transports import Dealer, parse_address


@pytest.mark.parametrize(
    "text, scheme, family, sockaddr",
    [
        ("127.0.0.1:8000", "udp", socket.AF_INET, ("127.0.0.1", 8000)),
        ("udp://0.0.0.0:0", "udp", socket.AF_INET, ("0.0.0.0", 0)),
        ("[::1]:9", "udp", socket.AF_INET6, ("::1", 9, 0, 0)),
        ("udp://[::]:0", "udp", socket.AF_INET6, ("::", 0, 0, 0)),
        ("localhost:7", "udp", socket.AF_INET, ("127.0.0.1", 7)),
        ("ipc:///tmp/x.sock", "ipc", socket.AF_UNIX, "/tmp/x.sock"),
        ("ipc://@abstract", "ipc", socket.AF_UNIX, b"\0abstract"),
        ("inproc://name", "inproc", 0, "name"),
    ],
)
def test_parse(text, scheme, family, sockaddr):
    address = parse_address(text)
    assert (address.scheme, address.family, address.sockaddr) == (scheme, family, sockaddr)
    assert parse_address(str(address)) == address.__class__(scheme, str(address), family, sockaddr)


@pytest.mark.parametrize(
    "text, words",
    [
        ("127.0.0.1", "host:port"),
        ("127.0.0.1:", "port ''"),
        ("127.0.0.1:http", "port 'http'"),
        ("127.0.0.1:70000", "out of range"),
        ("::1:80", "brackets"),
        ("[::1]80", "[ipv6]:port"),
        ("[1.2.3.4]:80", "not an IPv6"),
        ("tcp://1.2.3.4:80", "unknown scheme 'tcp'"),
        ("ipc://", "empty ipc path"),
        ("ipc:///" + "x" * 200, "longer than"),
        ("inproc://", "inproc name"),
        ("nonexistent.invalid:80", "cannot resolve"),
        (8000, "must be a str"),
    ],
)
def test_malformed_address_names_it(text, words):
    with pytest.raises(AddressError, match=None) as info:
        parse_address(text)
    message = str(info.value)
    assert words in message and repr(text) in message


@pytest.mark.network
def test_bind_errors_are_clear(tmp_path):
    with pytest.raises(AddressError, match="'127.0.0.1'"):
        Dealer.bind("127.0.0.1")
    with pytest.raises(OptionError, match="send_hwmm"):
        Dealer.bind("127.0.0.1:0", send_hwmm=5)
    with pytest.raises(OptionError, match="send_hwm"):
        Dealer.bind("127.0.0.1:0", send_hwm=0)
    with pytest.raises(OptionError, match="peer_keepalive"):
        Dealer.connect("127.0.0.1:9", peer_keepalive=-1.0)
    with Dealer.bind("127.0.0.1:0") as first:
        with pytest.raises(OSError, match="already in use") as info:
            Dealer.bind(first.local_address)
        assert first.local_address in str(info.value)
        with pytest.raises(OptionError, match="recv_hwm"):
            first.options.recv_hwm = "lots"
        with pytest.raises(OptionError, match="nope"):
            first.options.nope = 1
    path = tmp_path / "live.sock"
    with Dealer.bind(f"ipc://{path}"):
        with pytest.raises(OSError, match="already in use"):
            Dealer.bind(f"ipc://{path}")
    with Dealer.bind("inproc://taken-name"):
        with pytest.raises(AddressError, match="already bound"):
            Dealer.bind("inproc://taken-name")


@pytest.mark.network
def test_stale_ipc_file_is_replaced(tmp_path):
    path = str(tmp_path / "stale.sock")
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(path)
    dead.close()  # the file stays, nobody listens: what a killed process leaves
    with Dealer.bind(f"ipc://{path}") as sock:
        assert sock.local_address == f"ipc://{path}"
