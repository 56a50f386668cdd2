"""``nbmq perf``: throughput and round-trip latency against any address, as libzmq's
``local_thr``/``remote_thr`` and ``local_lat``/``remote_lat`` measure them.

Four roles, each run on the host (or in the process) that plays it::

    nbmq perf recv HOST:PORT     # bind, receive --count messages: msg/s, MB/s, loss   (local_thr)
    nbmq perf send HOST:PORT     # connect, send --count messages                       (remote_thr)
    nbmq perf echo HOST:PORT     # bind, send every message back                        (local_lat)
    nbmq perf ping HOST:PORT     # connect, ping-pong --count round trips: p50/p99/p99.9 (remote_lat)

``--socket`` picks the pair: ``dealer`` (Dealer to Dealer), ``safedealer`` (acked, resent) or
``radio`` (Radio to Dish; for ``echo``/``ping`` a second Radio/Dish pair carries the replies
back over ``--reply`` HOST:PORT, by default the next port). The sender stamps each message's
index (u64) into its first and last 8 bytes. Binding roles print ``listening on ADDRESS``
first (port 0 = any free port; a radio echo then prints ``replies from ADDRESS``, the
address ``ping --reply`` takes); every role stops within ``--timeout`` seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

__all__ = ["HELP", "DESCRIPTION", "add_arguments", "run", "ROLES", "PAIRS"]

HELP = "measure msg/s, MB/s and round-trip p50/p99/p99.9 against any address (libzmq's *_thr, *_lat)"
DESCRIPTION = (
    "Measure your own hosts as libzmq's local_thr/remote_thr and local_lat/remote_lat do. "
    "Throughput: run `nbmq perf recv ADDR` on one host, then `nbmq perf send ADDR` on the other; "
    "latency: `nbmq perf echo ADDR`, then `nbmq perf ping ADDR`. Binding roles print "
    "'listening on ADDRESS' once bound (port 0 picks a free port)."
)

#: role -> (binds?, what it measures)
ROLES = {
    "recv": (True, "throughput receiver (local_thr)"),
    "send": (False, "throughput sender (remote_thr)"),
    "echo": (True, "latency echo (local_lat; stops after --idle seconds without a message)"),
    "ping": (False, "latency ping-pong (remote_lat)"),
}
#: --socket -> (sending socket class, receiving socket class)
PAIRS = {"dealer": ("Dealer", "Dealer"), "safedealer": ("SafeDealer", "SafeDealer"), "radio": ("Radio", "Dish")}

_STAMP = 8  # bytes of the u64 message index at each end of a message
_ROUND_TIMEOUT = 0.25  # seconds: a round trip not back by then is lost (and tried again)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the role, the address and the measurement options to ``parser``."""
    parser.add_argument("role", choices=list(ROLES), help="; ".join(f"{k}: {v[1]}" for k, v in ROLES.items()))
    parser.add_argument("address", help="HOST:PORT, [V6]:PORT, ipc:///path or inproc://name (bind or connect)")
    parser.add_argument("--socket", choices=list(PAIRS), default="dealer", help="socket pair (default dealer)")
    parser.add_argument("--size", type=int, default=100, help="message size, bytes (default 100)")
    parser.add_argument(
        "--count", type=int, default=100_000, help="messages (send/recv) or round trips (ping/echo); default 100000"
    )
    parser.add_argument(
        "--batch",
        type=int,
        default=0,
        help="throughput: messages per send_many/recv_many call (0, the default: one send()/recv() per message)",
    )
    parser.add_argument(
        "--packed",
        type=int,
        default=0,
        help="messages per send_packed / recv_packed call (one buffer, offsets, lengths); 0 (default): off",
    )
    parser.add_argument("--warmup", type=int, default=1000, help="ping: round trips not counted (default 1000)")
    parser.add_argument(
        "--reply", default=None, help="radio echo/ping: the address replies travel to (default: the next port)"
    )
    parser.add_argument(
        "--idle", type=float, default=2.0, help="recv/echo: stop after this many seconds without a message (default 2)"
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="stop after this many seconds (default 60)")
    parser.add_argument(
        "--busy-poll",
        type=float,
        default=None,
        help="seconds a wait after a send polls the socket before it sleeps (the busy_poll option; "
        "default: the option's, 0.0001; 0 = off)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the text lines")


def run(args: argparse.Namespace) -> int:
    """Play ``args.role``; print the figures. Returns 0, 1 when nothing was measured (no peer
    or no message within the timeouts), 2 on bad options."""
    problem = _check(args)
    if problem:
        print(f"nbmq perf: {problem}", file=sys.stderr)
        return 2
    result = {"recv": _recv, "send": _send, "echo": _echo, "ping": _ping}[args.role](args)
    _print(result, args.json)
    return 0 if result.get("ok") else 1


def _check(args: argparse.Namespace) -> str:
    if args.size < 0:
        return f"--size must be >= 0, got {args.size}"
    if args.count < 1:
        return f"--count must be >= 1, got {args.count}"
    if args.batch < 0 or args.packed < 0:
        return "--batch and --packed must be >= 0"
    if args.warmup < 0:
        return f"--warmup must be >= 0, got {args.warmup}"
    if args.idle <= 0 or args.timeout <= 0:
        return "--idle and --timeout must be > 0"
    if args.busy_poll is not None:
        from nbmq.errors import OptionError
        from nbmq.options import SocketOptions

        try:
            SocketOptions(busy_poll=args.busy_poll)
        except OptionError as exc:
            return f"--busy-poll: {exc}"
    return ""


def _open(kind: str, address: str, bind: bool, args: argparse.Namespace, **options: Any) -> Any:
    import nbmq

    if args.busy_poll is not None:
        options["busy_poll"] = args.busy_poll
    cls = getattr(nbmq, kind)
    return cls.bind(address, **options) if bind else cls.connect(address, **options)


def _announce(sock: Any) -> None:
    print(f"listening on {sock.local_address}", flush=True)


def _message(size: int) -> bytearray:
    return bytearray(b"x" * size)


def _stamp(msg: bytearray, index: int) -> bytes:
    """``msg`` with ``index`` (u64 little-endian) in its first and last 8 bytes, as bytes."""
    if len(msg) >= _STAMP:
        raw = index.to_bytes(_STAMP, "little")
        msg[:_STAMP] = raw
        msg[-_STAMP:] = raw
    return bytes(msg)


def _packed(msg: bytearray, start: int, stop: int) -> tuple[Any, Any, Any]:
    """Messages ``start..stop-1`` stamped (as :func:`_stamp`) into one uint8 buffer, with their
    int64 offsets and lengths: the ``send_packed`` form."""
    import numpy as np

    count, size = stop - start, len(msg)
    data = np.tile(np.frombuffer(bytes(msg), dtype=np.uint8), (count, 1))
    if size >= _STAMP:
        index = np.arange(start, stop, dtype="<u8").view(np.uint8).reshape(count, _STAMP)
        data[:, :_STAMP] = index
        data[:, -_STAMP:] = index
    return data.reshape(-1), np.arange(count, dtype=np.int64) * size, np.full(count, size, dtype=np.int64)


def _loss(sock: Any) -> dict[str, int]:
    counters = sock.counters
    return {"kernel_drops": int(counters.kernel_drops), "dropped": int(counters.dropped_total)}


def _reply_address(args: argparse.Namespace) -> str:
    """The radio replies' address: ``--reply``, else the next port on the same host (port 0:
    any free port, announced by the echo role as ``replies from ADDRESS``)."""
    if args.reply:
        return str(args.reply)
    head, _, port = args.address.rpartition(":")
    if not port.isdigit():
        raise SystemExit(f"nbmq perf: --socket radio needs --reply ADDRESS beside {args.address}")
    return f"{head}:{int(port) + 1 if int(port) else 0}"


def _recv(args: argparse.Namespace) -> dict[str, Any]:
    from nbmq.errors import WouldBlock

    kind = PAIRS[args.socket][1]
    sock = _open(kind, args.address, True, args)
    _announce(sock)
    count, received, nbytes, head, head_bytes = args.count, 0, 0, 0, 0
    first = last = 0.0
    end = time.monotonic() + args.timeout
    recv, recv_many, recv_packed = sock.recv, sock.recv_many, sock.recv_packed
    clock = time.monotonic
    try:
        # the user loop: wait for a message, then drain what is ready; the clock is read per burst
        while received < count and last < end:
            wait = args.idle if received else max(0.0, end - clock())
            try:
                if args.packed:
                    lengths = recv_packed(min(args.packed, count - received), timeout=wait)[2]
                    got, size = lengths.size, int(lengths.sum())
                elif args.batch:
                    batch = recv_many(min(args.batch, count - received), timeout=wait)
                    got, size = len(batch), sum(len(part) for message in batch for part in message)
                else:
                    message = recv(timeout=wait)
                    got, size = 1, sum(map(len, message))
                    if not received:  # the first message starts the clock, as local_thr's does: a
                        # sender done before we woke is then timed by the drain after it
                        first, head, head_bytes = clock(), 1, size
                    while got < count - received:  # drain
                        try:
                            message = recv()
                        except WouldBlock:
                            break
                        got += 1
                        size += sum(map(len, message))
            except WouldBlock:
                break
            last = clock()
            if not received and not head:  # the first batch starts the clock: the rate counts those after it
                first, head, head_bytes = last, got, size
            received += got
            nbytes += size
        loss = _loss(sock)
    finally:
        sock.close(linger=0)
    span = last - first
    rate = (received - head) / span if span > 0 else 0.0
    nbytes -= head_bytes
    return {
        "role": "recv",
        "socket": args.socket,
        "size": args.size,
        "count": count,
        "received": received,
        "lost": count - received,
        "seconds": span,
        "msg_per_s": rate,
        "mb_per_s": nbytes / span / 1e6 if span > 0 else 0.0,
        **loss,
        "ok": received > 0,
    }


def _send(args: argparse.Namespace) -> dict[str, Any]:
    from nbmq.errors import WouldBlock

    kind = PAIRS[args.socket][0]
    sock = _open(kind, args.address, False, args)
    count, sent = args.count, 0
    linger = min(args.timeout, 30.0) if args.socket == "safedealer" else 0.0  # SafeDealer: its last acks
    try:
        if not sock.wait_connected(min(args.timeout, 10.0)):
            return {"role": "send", "socket": args.socket, "error": f"no peer at {args.address}", "ok": False}
        msg = _message(args.size)
        end = time.monotonic() + args.timeout
        start = time.monotonic()
        send = sock.send
        while sent < count and time.monotonic() < end:
            if args.packed:
                batch_end = min(count, sent + args.packed)
                data, offsets, lengths = _packed(msg, sent, batch_end)
                while sent < batch_end and time.monotonic() < end:
                    try:
                        sent += sock.send_packed(data, offsets[sent - batch_end :], lengths[sent - batch_end :], 1.0)
                    except WouldBlock:
                        pass
            elif args.batch:
                batch_end = min(count, sent + args.batch)
                messages = [_stamp(msg, index) for index in range(sent, batch_end)]
                pending = iter(messages)  # send_many takes what fits under send_hwm; the rest waits
                while sent < batch_end and time.monotonic() < end:
                    try:
                        sent += sock.send_many(pending, timeout=1.0)
                    except WouldBlock:
                        pass
            else:
                try:
                    send(_stamp(msg, sent), timeout=1.0)
                except WouldBlock:
                    continue
                sent += 1
        sock.flush()
        queued = time.monotonic() - start
    finally:
        sock.close(linger=linger if sent else 0)
    rate = sent / queued if queued > 0 else 0.0
    return {
        "role": "send",
        "socket": args.socket,
        "size": args.size,
        "count": count,
        "sent": sent,
        "seconds": queued,
        "msg_per_s": rate,
        "mb_per_s": rate * args.size / 1e6,
        "ok": sent > 0,
    }


def _latency_sockets(args: argparse.Namespace, bind: bool) -> tuple[Any, Any]:
    """(socket to receive on, socket to send on): one Dealer/SafeDealer, or a Dish and a Radio."""
    if args.socket != "radio":
        sock = _open(PAIRS[args.socket][0], args.address, bind, args)
        return sock, sock
    reply = _reply_address(args)
    if bind:  # echo: Dish at ADDRESS, Radio at the reply address
        return _open("Dish", args.address, True, args), _open("Radio", reply, True, args)
    # the bound Radio counts a Dish as connected once it hears from it after the handshake:
    # heartbeats every 0.1 s make that the first round's loss at most
    return _open("Dish", reply, False, args, peer_heartbeat_ivl=0.1), _open("Radio", args.address, False, args)


def _recv_stepping(inbox: Any, outbox: Any, timeout: float) -> Any:
    """``inbox.recv(timeout)``; when replies leave through another socket (Radio), that one is
    stepped at least every 50 ms meanwhile, so it answers handshakes and heartbeats."""
    if outbox is inbox:
        return inbox.recv(timeout=timeout)
    from nbmq.errors import WouldBlock

    until = time.monotonic() + timeout
    while True:
        outbox.tick()
        try:
            return inbox.recv(timeout=max(0.0, min(0.05, until - time.monotonic())))
        except WouldBlock:
            if time.monotonic() >= until:
                raise


def _close_all(*socks: Any) -> None:
    for sock in dict.fromkeys(socks):  # (one socket when both roles share it)
        sock.close(linger=0.5)


def _echo(args: argparse.Namespace) -> dict[str, Any]:
    from nbmq.errors import WouldBlock

    inbox, outbox = _latency_sockets(args, True)
    _announce(inbox)
    if outbox is not inbox:
        print(f"replies from {outbox.local_address}", flush=True)
    echoed = 0
    end = time.monotonic() + args.timeout
    try:
        while time.monotonic() < end:  # until idle: a ping that lost a round sends it again
            wait = args.idle if echoed else max(0.0, end - time.monotonic())
            try:
                message = _recv_stepping(inbox, outbox, wait)
            except WouldBlock:
                break
            try:
                outbox.send(message, flush=True)
            except WouldBlock:  # Radio without a Dish yet: the ping side resends after its timeout
                continue
            echoed += 1
    finally:
        _close_all(inbox, outbox)
    return {"role": "echo", "socket": args.socket, "echoed": echoed, "ok": echoed > 0}


def _ping(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    from nbmq.errors import WouldBlock

    inbox, outbox = _latency_sockets(args, False)
    rounds = args.count + args.warmup
    times = np.zeros(rounds, dtype=np.int64)  # round trips, ns
    done = lost = 0
    end = time.monotonic() + args.timeout
    clock = time.perf_counter_ns
    try:
        for sock in dict.fromkeys((outbox, inbox)):
            if not sock.wait_connected(min(args.timeout, 10.0)):
                return {"role": "ping", "socket": args.socket, "error": f"no peer at {args.address}", "ok": False}
        msg = _message(args.size)
        send, recv = outbox.send, inbox.recv
        while done < rounds and time.monotonic() < end:
            data = _stamp(msg, done)
            start = clock()
            send(data, flush=True)
            try:
                recv(timeout=_ROUND_TIMEOUT)
            except WouldBlock:  # lost (Dealer, Radio): counted, the round is tried again
                lost += 1
                continue
            times[done] = clock() - start
            done += 1
            if outbox is not inbox:
                outbox.tick()  # (outside the timed span) heartbeats of the Radio's peer
    finally:
        _close_all(inbox, outbox)
    measured = times[args.warmup : done] / 1e3  # microseconds
    result: dict[str, Any] = {
        "role": "ping",
        "socket": args.socket,
        "size": args.size,
        "rounds": int(measured.size),
        "lost": lost,
        "ok": measured.size > 0,
    }
    if measured.size:
        p50, p99, p999 = np.percentile(measured, [50, 99, 99.9])
        result.update(
            mean_us=float(measured.mean()),
            p50_us=float(p50),
            p99_us=float(p99),
            p999_us=float(p999),
            msg_per_s=float(1e6 / measured.mean()),
        )
    return result


def _print(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(result), flush=True)
        return
    if "error" in result:
        print(f"nbmq perf {result['role']}: {result['error']}", file=sys.stderr)
        return
    role = result["role"]
    lines = [f"socket: {result['socket']}"]
    if role in ("recv", "send"):
        done = result["received"] if role == "recv" else result["sent"]
        lines += [
            f"message size: {result['size']} [B]",
            f"message count: {result['count']}",
            f"messages {'received' if role == 'recv' else 'sent'}: {done}",
            f"mean throughput: {result['msg_per_s']:.0f} [msg/s]",
            f"mean throughput: {result['mb_per_s']:.3f} [MB/s]",
        ]
        if role == "recv":
            lines.append(
                f"lost: {result['lost']} (kernel receive-buffer drops: {result['kernel_drops']}, "
                f"socket drops: {result['dropped']})"
            )
    elif role == "ping":
        lines += [f"message size: {result['size']} [B]", f"round trips: {result['rounds']}", f"lost: {result['lost']}"]
        if result["rounds"]:
            lines += [
                f"round trip mean: {result['mean_us']:.1f} [us]",
                f"round trip p50: {result['p50_us']:.1f} [us]",
                f"round trip p99: {result['p99_us']:.1f} [us]",
                f"round trip p99.9: {result['p999_us']:.1f} [us]",
            ]
    else:
        lines.append(f"messages echoed: {result['echoed']}")
    print("\n".join(lines), flush=True)
