"""TLS and access rules on the TCP servers, over loopback: rqueue (in process and as
``nbmq rqueue-server``) and BQSP. Each refusal is asserted with what it counts."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
from streamutil import ROOT, run

from nbmq import testing
from nbmq.errors import AccessDenied
from nbmq.streams.rqueue import AccessRules
from nbmq.transports.bqsp_client import BqspClient
from nbmq.transports.bqsp_server import serve_bqsp
from nbmq.transports.rqueue_aio import RqueueClient
from nbmq.transports.rqueue_server import serve
from nbmq.transports.tls import server_context

trustme = pytest.importorskip("trustme", reason="trustme (the test extra) makes the certificates")
pytestmark = pytest.mark.network

TOKEN, SENSOR_TOKEN = "dashboard-token", "sensor-token"
ACL = f"""
[clients.sensor-1]
certificate = "sensor-1"
token_sha256 = "{hashlib.sha256(SENSOR_TOKEN.encode()).hexdigest()}"
publish = ["sensors/sensor-1/"]

[clients.dashboard]
certificate = "dashboard"
token_sha256 = "{hashlib.sha256(TOKEN.encode()).hexdigest()}"
subscribe = ["sensors/"]
"""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1, client certificates for sensor-1 and dashboard,
    and a second CA nobody trusts, as PEM files."""
    d = tmp_path_factory.mktemp("pki")
    ca, rogue = trustme.CA(), trustme.CA()
    files = {"ca": d / "ca.pem", "rogue": d / "rogue.pem", "server": d / "server.pem"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    rogue.cert_pem.write_to_path(str(files["rogue"]))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(files["server"]))
    for name in ("sensor-1", "dashboard"):
        files[name] = d / f"{name}.pem"
        leaf = ca.issue_cert(f"{name}.example", common_name=name)
        leaf.private_key_and_cert_chain_pem.write_to_path(str(files[name]))
    files["acl"] = d / "acl.toml"
    files["acl"].write_text(ACL)
    return files


def client_context(pki: dict[str, Path], cert: str | None = None, ca: str = "ca") -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki[ca]))
    if cert is not None:
        context.load_cert_chain(str(pki[cert]))
    return context


def test_mutual_tls_with_access_rules_in_process(pki: dict[str, Path], caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        server = await serve(
            "127.0.0.1",
            0,
            ssl=server_context(pki["server"], client_ca=pki["ca"]),
            access=AccessRules.load(pki["acl"]),
            tls_handshake_timeout=5.0,
        )
        host, port = server.address
        try:
            dash = await RqueueClient.connect(host, port, ssl=client_context(pki, "dashboard"))
            sensor = await RqueueClient.connect(host, port, ssl=client_context(pki, "sensor-1"))
            await dash.subscribe("sensors/sensor-1/t")
            await sensor.notify("sensors/sensor-2/t", b"not its prefix")
            with pytest.raises(AccessDenied) as denied:
                await asyncio.wait_for(sensor.recv(), 5)
            assert denied.value.topic == b"sensors/sensor-2/t"
            await sensor.notify("sensors/sensor-1/t", b"21.5")
            assert await asyncio.wait_for(dash.recv(), 5) == (b"sensors/sensor-1/t", b"21.5")

            # refused handshakes: no client certificate; a CA the client does not trust; plain TCP
            for context in (client_context(pki), client_context(pki, "sensor-1", ca="rogue")):
                with pytest.raises((ssl.SSLError, ConnectionError)):
                    c = await RqueueClient.connect(host, port, ssl=context)
                    await asyncio.wait_for(c.recv(), 5)  # TLS 1.3: the refusal arrives after connect
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(b"\x00\x05\x01hello")  # an rqueue SUBSCRIBE, not a ClientHello
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
            stats = server.stats()
            assert stats["tls_failures"] == 3
            assert (stats["authenticated"], stats["denied"], stats["delivered"]) == (2, 1, 1)
            await dash.close()
            await sensor.close()
        finally:
            server.close()
            await server.wait_closed()

    with caplog.at_level(logging.WARNING, logger="nbmq.streams.rqueue"):
        run(main(), timeout=30)
    failures = [r for r in caplog.records if "TLS handshake with" in r.getMessage()]
    assert len(failures) == 1, "logged once per peer host"
    assert failures[0].exc_info is None


def test_rqueue_server_command_serves_tls_and_rules(pki: dict[str, Path]) -> None:
    """``nbmq rqueue-server --tls-cert --acl``, clients proving themselves with tokens: an
    ACL-denied subscription is never served, an allowed one is."""
    server = testing.rqueue_server("--tls-cert", str(pki["server"]), "--acl", str(pki["acl"]))
    try:

        async def main() -> None:
            ctx = client_context(pki)
            sensor = await RqueueClient.connect(server.host, server.port, ssl=ctx, token=SENSOR_TOKEN)
            dash = await RqueueClient.connect(server.host, server.port, ssl=ctx, token=TOKEN)
            await sensor.subscribe("sensors/sensor-1/t")  # sensor-1 may publish there, not read
            await dash.subscribe("sensors/sensor-1/t")
            with pytest.raises(AccessDenied):
                await asyncio.wait_for(sensor.recv(), 5)
            await sensor.notify("sensors/sensor-1/t", b"1")
            assert await asyncio.wait_for(dash.recv(), 5) == (b"sensors/sensor-1/t", b"1")
            await sensor.notify("sensors/sensor-1/t", b"2")
            assert await asyncio.wait_for(dash.recv(), 5) == (b"sensors/sensor-1/t", b"2")
            assert sensor.queued == 0 and sensor.denied_by_server == 1
            await sensor.close()
            await dash.close()

        run(main(), timeout=30)
    finally:
        code, _, err = server.stop()
    assert code == 0, err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tls-key", "k.pem"], "--tls-key and --tls-client-ca need --tls-cert"),
        (["--tls-cert", "missing.pem"], "No such file"),
        (["--acl", "missing.toml"], "missing.toml"),
    ],
)
def test_rqueue_server_command_refuses_bad_security_options(args: list[str], message: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nbmq.cli", "rqueue-server", "--port", "0", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_bqsp_over_tls(pki: dict[str, Path]) -> None:
    async def main() -> None:
        server = await serve_bqsp(lambda p: bytes(p.data)[::-1], "127.0.0.1", 0, ssl=server_context(pki["server"]))
        try:
            client = await BqspClient.connect("127.0.0.1", server.port, ssl=client_context(pki))
            reply = await client.request(b"hello", timeout=5)
            assert bytes(reply.data) == b"olleh"
            await client.close()
            with pytest.raises(ssl.SSLCertVerificationError):
                await BqspClient.connect("127.0.0.1", server.port, ssl=client_context(pki, ca="rogue"))
            for _ in range(50):  # the server sees the client's alert a moment later
                if server.tls_failures:
                    break
                await asyncio.sleep(0.05)
            assert server.tls_failures == 1
        finally:
            server.close()
            await server.wait_closed()

    run(main(), timeout=30)
