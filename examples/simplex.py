"""The seed's simplex example with nbmq's Python API: a Radio broadcasts, a Dish receives.
Control frames still flow both ways (handshake, heartbeats). Exits after about two seconds.

    python examples/simplex.py [address]     # default 127.0.0.1:0 (any free port)
"""

import sys
import threading
import time

import nbmq
from nbmq.errors import WouldBlock

RUN_FOR = 2.0
OPTIONS = dict(peer_heartbeat_ivl=0.1, peer_keepalive=1.0, reconnect_wait=0.5)


def broadcast(radio) -> None:
    end = time.monotonic() + RUN_FOR
    n = 0
    while time.monotonic() < end:
        try:
            radio.send([b"hello", str(n).encode()])  # to every connected Dish; none: dropped
            n += 1
        except WouldBlock:
            pass
        radio.tick()
        time.sleep(0.01)


def receive(dish, got: list) -> None:
    end = time.monotonic() + RUN_FOR
    while time.monotonic() < end:
        try:
            got.append(dish.recv(timeout=0.05))  # waits up to 50 ms, ticking meanwhile
        except WouldBlock:
            pass


def main() -> None:
    address = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:0"
    got: list = []
    with nbmq.Radio.bind(address, **OPTIONS) as radio, nbmq.Dish.connect(radio.local_address, **OPTIONS) as dish:
        print(f"radio bound to {radio.local_address}")
        threads = [
            threading.Thread(target=broadcast, args=(radio,)),
            threading.Thread(target=receive, args=(dish, got)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if got:
        print(f"dish: received {len(got)} broadcasts, the last one {[bytes(p) for p in got[-1]]}")
    sys.exit(0 if got else 1)


if __name__ == "__main__":
    main()
