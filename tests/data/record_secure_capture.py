"""Record ``secure_safe_dealer.pcap``: a secure SafeDealer pair on 127.0.0.1, captured by dumpcap.

    sudo .venv/bin/python tests/data/record_secure_capture.py tests/data/secure_safe_dealer.pcap
    sudo .venv/bin/python tests/data/record_secure_capture.py tests/data/secure_bundles.pcap 1472

The second form records ``secure_bundles.pcap``: the same traffic with ``max_datagram_size``
1472 on both sockets, so the frames of one flush to one peer go as sealed bundles (version
0x82: the two-part message's four data frames in one datagram, Acks together).

The real UDP transport on loopback (GSO off, so each frame is its own datagram as on a real
link), heartbeats every 0.2 s: the handshake, three 14-byte messages, one of two parts (1280 and
11 bytes: four data frames), a 5-byte reply, their Acks, heartbeats and the client's
Disconnected. Fresh keys each run, so the bytes differ from run to run; the frame layout does
not. Needs dumpcap (Wireshark) and the right to capture on ``lo``.
"""

from __future__ import annotations

import subprocess
import sys
import time

import nbmq

PORT = 47811


def main(out: str, max_datagram_size: int = 0) -> None:
    cap = subprocess.Popen(
        ["dumpcap", "-q", "-i", "lo", "-f", f"udp port {PORT}", "-P", "-w", out],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    time.sleep(1.5)  # dumpcap is capturing
    server_public, server_secret = nbmq.generate_keypair()
    client_public, client_secret = nbmq.generate_keypair()
    opts = dict(peer_heartbeat_ivl=0.2, gso=False, max_datagram_size=max_datagram_size)
    server = nbmq.SafeDealer.bind(
        f"127.0.0.1:{PORT}", secret_key=server_secret, allowed_public_keys=[client_public], **opts
    )
    client = nbmq.SafeDealer.connect(
        f"127.0.0.1:{PORT}", secret_key=client_secret, server_public_key=server_public, **opts
    )
    for _ in range(200):
        server.poll(0.01)
        client.poll(0.01)
        if client.connected and server.connected:
            break
    assert client.connected and server.connected
    for i in range(3):
        client.send([b"secure hello %d" % i])
        client.flush()
        server.recv(timeout=2.0)
    client.send([bytes(range(256)) * 5, b"second part"])
    client.flush()
    server.recv(timeout=2.0)
    server.send([b"reply"])
    server.flush()
    client.recv(timeout=2.0)
    deadline = time.monotonic() + 0.6  # heartbeats and the last Acks
    while time.monotonic() < deadline:
        server.poll(0.02)
        client.poll(0.02)
    client.close()
    server.close()
    time.sleep(1.0)  # dumpcap writes the last packets
    cap.terminate()
    cap.wait()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0)
