"""The seed's duplex example with nbmq's Python API: two Dealers, each in its own loop,
sending, draining what arrived and ticking. Exits on its own after about two seconds.

    python examples/duplex.py [address]      # default 127.0.0.1:0 (any free port)
"""

import sys
import threading
import time

import nbmq
from nbmq.errors import WouldBlock

RUN_FOR = 2.0  # seconds each loop runs
OPTIONS = dict(peer_heartbeat_ivl=0.1, peer_keepalive=1.0, reconnect_wait=0.5)


def loop(sock, say: bytes, name: str, counts: dict) -> None:
    end = time.monotonic() + RUN_FOR
    while time.monotonic() < end:
        try:
            sock.send([say])  # fire and forget; WouldBlock only at send_hwm
        except WouldBlock:
            pass
        while True:
            try:
                message = sock.recv()
            except WouldBlock:
                break
            counts[name] += 1
            last = b"".join(bytes(part) for part in message)
        sock.tick()  # heartbeats, keepalive, reconnect: call it every iteration
        time.sleep(0.01)
    if counts[name]:
        print(f"{name}: received {counts[name]} messages, the last one {last!r}")


def main() -> None:
    address = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:0"
    counts = {"server": 0, "client": 0}
    with nbmq.Dealer.bind(address, **OPTIONS) as server, nbmq.Dealer.connect(server.local_address, **OPTIONS) as client:
        print(f"server bound to {server.local_address}")
        threads = [
            threading.Thread(target=loop, args=(server, b"hello", "server", counts)),
            threading.Thread(target=loop, args=(client, b"world", "client", counts)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    sys.exit(0 if counts["server"] and counts["client"] else 1)


if __name__ == "__main__":
    main()
