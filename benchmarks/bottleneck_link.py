"""A real bottleneck: two hosts (network namespaces) and a router between them, its ends shaped by tbf.

    with Bottleneck(rate_mbit=50, queue_ms=10) as link:
        receiver = link.start("b", "safe_recv", port=7000, seconds=4)
        sender = link.start("a", "safe_send", dest=f"{link.addr_b}:7000", seconds=3)
        print(sender.result(), receiver.result(), link.qdisc("a"))

The link is ``tc qdisc add dev <veth> root tbf rate R burst 32kb latency Q`` on both of the
router's ends (the queue holds ``Q`` of traffic at rate ``R``; tbf counts each packet's
Ethernet, IP and UDP or TCP headers). Needs root, ``ip`` and ``tc``: :func:`unavailable` says
why not otherwise. Namespaces get unique names and are deleted on exit, also on failure
(deleting a namespace deletes its veth ends and their qdiscs).

Each flow runs as its own process inside a namespace (``ip netns exec``), running this file as
a script with the same interpreter: ``python bottleneck_link.py ROLE JSON`` prints one JSON
object when done. Roles (every one bounded by ``seconds`` and a drain time):

- ``safe_send`` / ``dealer_send``: a SafeDealer (Dealer) connects to ``dest`` and sends
  ``size``-byte one-part messages for ``seconds`` (``start_at``: a wall-clock start time), as
  fast as ``send_hwm`` lets it, then drains; reports its counters, every 100 ms its peer's
  path state (``Counters.paths``), ``busy`` and ``waiting``: CPU seconds run and waited for
  (runnable, no core free) per second of the sending time (1.0: a whole core). Options go in
  ``options``.
- ``safe_recv`` / ``dealer_recv``: binds ``port`` and counts delivered messages and payload
  bytes in 100 ms bins of wall-clock time (``bins``; ``epoch`` is bin 0's start), until idle for
  ``idle`` seconds after the first message or ``seconds`` pass; reports its counters,
  ``busy`` and ``waiting`` (per second from the first delivery to the last).
- ``tcp_send`` / ``tcp_recv``: the same over one TCP connection (``send`` of 64 KiB blocks),
  with the congestion control ``cc`` (``"cubic"``, Linux's default; ``"bbr"``, ``"reno"``).

Importing this module runs nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

BIN = 0.1  #: seconds per bin of the receivers' delivery record
TBF_BURST = "32kb"


def unavailable() -> str | None:
    """Why a bottleneck cannot be built here (a reason to skip), or None when it can."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces, veth and tc need root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` (iproute2) is not installed"
    probe = f"nbmq-probe-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _run(*args: str) -> str:
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


class Flow:
    """One process of a flow inside a namespace; :meth:`result` waits for its JSON."""

    def __init__(self, proc: subprocess.Popen[str], timeout: float) -> None:
        self.proc = proc
        self.timeout = timeout

    def result(self) -> dict[str, Any]:
        """The role's report (a dict). RuntimeError: the process failed or overran its time."""
        try:
            out, err = self.proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            raise RuntimeError(f"flow overran {self.timeout:.0f} s: {err[-2000:]}") from None
        if self.proc.returncode != 0:
            raise RuntimeError(f"flow failed ({self.proc.returncode}): {err[-2000:]}")
        return json.loads(out.strip().splitlines()[-1])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


class Bottleneck:
    """Two hosts, namespaces ``a`` and ``b``, and a router between them (namespace ``r``),
    joined by veth pairs; the router's two ends are shaped by tbf.

    The queue is on the router, not on a sending host. Packets in a host's own qdisc still
    count against their socket (TCP small queues bound what a socket keeps there): with tbf
    on the sender's end, TCP CUBIC kept less in flight than its window with data waiting
    (``ss``: 90 segments unacked of a window of 108), its window stayed flat, and two CUBIC
    flows never filled a 100 ms queue. Behind a router the same flows fill it and lose.

    Args:
        rate_mbit: the link rate each way, Mbit/s (10**6 bits/s of whole packets).
        queue_ms: tbf's ``latency``: the most a packet waits in the queue, ms (the queue holds
            ``rate * queue_ms`` bytes).

    Use as a context manager; :meth:`close` deletes the namespaces and ends every flow
    still running. RuntimeError: a command failed (what was built is removed first).
    """

    def __init__(self, rate_mbit: float, queue_ms: float) -> None:
        self.rate_mbit = rate_mbit
        self.queue_ms = queue_ms
        tag = uuid.uuid4().hex[:8]
        self.ns = {side: f"nbmq-bn-{tag}-{side}" for side in "arb"}
        # each host's end, and the router's end facing it (where what goes to that host queues)
        self.dev = {"a": f"bna{tag}", "b": f"bnb{tag}", "ra": f"bnra{tag}", "rb": f"bnrb{tag}"}
        self.addr_a, self.addr_b = "10.77.0.1", "10.77.0.6"
        self.flows: list[Flow] = []
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    @property
    def rate_bytes(self) -> float:
        """The link rate, bytes per second."""
        return self.rate_mbit * 1e6 / 8

    @property
    def queue_bytes(self) -> float:
        """What tbf's queue holds, bytes."""
        return self.rate_bytes * self.queue_ms / 1000

    def _build(self) -> None:
        ns, dev = self.ns, self.dev
        for name in ns.values():
            _run("ip", "netns", "add", name)
            _run("ip", "-n", name, "link", "set", "dev", "lo", "up")
        for host, router_end in (("a", "ra"), ("b", "rb")):
            _run(
                "ip",
                "link",
                "add",
                dev[host],
                "netns",
                ns[host],
                "type",
                "veth",
                "peer",
                "name",
                dev[router_end],
                "netns",
                ns["r"],
            )
        # a: 10.77.0.1/30 via the router's 10.77.0.2; b: 10.77.0.6/30 via 10.77.0.5
        for name, device, addr in (
            (ns["a"], dev["a"], "10.77.0.1/30"),
            (ns["r"], dev["ra"], "10.77.0.2/30"),
            (ns["r"], dev["rb"], "10.77.0.5/30"),
            (ns["b"], dev["b"], "10.77.0.6/30"),
        ):
            _run("ip", "-n", name, "addr", "add", addr, "dev", device)
            _run("ip", "-n", name, "link", "set", "dev", device, "up")
        _run("ip", "-n", ns["a"], "route", "add", "default", "via", "10.77.0.2")
        _run("ip", "-n", ns["b"], "route", "add", "default", "via", "10.77.0.5")
        _run("ip", "netns", "exec", ns["r"], "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
        for router_end in ("ra", "rb"):
            _run(
                "ip", "netns", "exec", ns["r"], "tc", "qdisc", "add", "dev", dev[router_end], "root", "tbf",
                "rate", f"{self.rate_mbit}mbit", "burst", TBF_BURST, "latency", f"{self.queue_ms}ms",
            )  # fmt: skip

    def start(self, side: str, role: str, pythonpath: str | None = None, cpu: int | None = None, **args: Any) -> Flow:
        """Run ``role`` (see the module docstring) in namespace ``side`` ("a" or "b") with
        ``args`` (JSON-able); returns its :class:`Flow` (bounded by ``seconds`` + 30 s).
        ``pythonpath``: a source tree whose ``nbmq`` the flow imports instead (a baseline);
        ``cpu``: the core to pin the process to (``taskset``), None: wherever the kernel
        schedules it."""
        cmd = [] if cpu is None else ["taskset", "-c", str(cpu)]
        cmd += [
            "ip",
            "netns",
            "exec",
            self.ns[side],
            sys.executable,
            str(Path(__file__).resolve()),
            role,
            json.dumps(args),
        ]
        env = dict(os.environ)
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        flow = Flow(proc, float(args.get("seconds", 5)) + 30.0)
        self.flows.append(flow)
        return flow

    def qdisc(self, side: str) -> dict[str, int]:
        """The counters of the router's tbf that what ``side`` ("a" or "b") sends queues in:
        ``bytes``, ``packets`` sent, ``dropped``, ``overlimits`` (``tc -s qdisc``)."""
        toward = "rb" if side == "a" else "ra"
        text = _run("ip", "netns", "exec", self.ns["r"], "tc", "-s", "qdisc", "show", "dev", self.dev[toward])
        match = re.search(r"Sent (\d+) bytes (\d+) pkt \(dropped (\d+), overlimits (\d+)", text)
        if match is None:
            raise RuntimeError(f"cannot read tc statistics: {text!r}")
        sent, packets, dropped, over = (int(g) for g in match.groups())
        return {"bytes": sent, "packets": packets, "dropped": dropped, "overlimits": over}

    def close(self) -> None:
        """End the flows still running and delete the namespaces (idempotent)."""
        for flow in self.flows:
            flow.kill()
        for ns in self.ns.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    def __enter__(self) -> Bottleneck:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --- the roles, run inside a namespace ---------------------------------------------------------
def _cpu_clock() -> tuple[float, float]:
    """Seconds this process's main thread ran on a CPU and waited for one while runnable
    (``/proc/self/schedstat``; ``(process_time(), 0.0)`` where there is none)."""
    try:
        with open("/proc/self/schedstat") as f:
            ran, waited = f.read().split()[:2]
        return int(ran) / 1e9, int(waited) / 1e9
    except (OSError, ValueError):
        return time.process_time(), 0.0


def _cpu_use(since: tuple[float, float], seconds: float) -> dict[str, float]:
    """``busy`` and ``waiting``: CPU seconds run and waited for per second of ``seconds``."""
    ran, waited = _cpu_clock()
    seconds = max(seconds, 1e-9)
    return {"busy": (ran - since[0]) / seconds, "waiting": (waited - since[1]) / seconds}


def _wait_until(start_at: float | None) -> None:
    if start_at is not None:
        time.sleep(max(0.0, start_at - time.time()))


def _send_role(kind: str, a: dict[str, Any]) -> dict[str, Any]:
    import nbmq.transports as nt
    from nbmq.errors import WouldBlock

    # a short queue of our own: what a run leaves queued is drained within its drain time
    options = dict(peer_heartbeat_ivl=0.2, peer_keepalive=5.0, reconnect_wait=0.1, linger=0.0, send_hwm=16)
    options.update(a.get("options", {}))
    sock = getattr(nt, kind).connect(a["dest"], **options)
    try:
        if not sock.wait_connected(timeout=5.0):
            raise RuntimeError(f"no connection to {a['dest']}")
        _wait_until(a.get("start_at"))
        payload = os.urandom(int(a["size"]))
        began = time.time()
        cpu0 = _cpu_clock()
        end = time.monotonic() + float(a["seconds"])
        paths: list[dict[str, Any]] = []
        next_sample = time.monotonic() + BIN
        sent = 0
        while (now := time.monotonic()) < end:
            try:
                sock.send(payload, timeout=min(BIN, end - now))
                sent += 1
            except WouldBlock:
                pass
            if now >= next_sample:
                next_sample = now + BIN
                for path in getattr(sock.counters, "paths", {}).values():
                    paths.append({"t": time.time() - began, **path.as_dict()})
        cpu = _cpu_use(cpu0, time.time() - began)
        # what is still queued (or held by pacing) gets ``drain`` seconds; the rest is dropped
        # and counted (DropReason.CLOSED)
        sock.close(linger=float(a.get("drain", 5.0)))
        return {
            "sent": sent,
            "began": began,
            "send_errors": sock.transport_send_errors,
            "counters": sock.counters.as_dict(),
            "paths": paths,
            **cpu,
        }
    finally:
        sock.close(linger=0.0)


def _recv_role(kind: str, a: dict[str, Any]) -> dict[str, Any]:
    import nbmq.transports as nt
    from nbmq.errors import WouldBlock

    options = dict(peer_heartbeat_ivl=0.2, peer_keepalive=5.0, rcvbuf=4 << 20, recv_hwm=10_000)
    options.update(a.get("options", {}))
    sock = getattr(nt, kind).bind(f"0.0.0.0:{a['port']}", **options)
    try:
        return _count_bins(
            lambda timeout: len(sock.recv(timeout=timeout)[0]), WouldBlock, a, lambda: sock.counters.as_dict()
        )
    finally:
        sock.close(linger=0.0)


def _count_bins(read: Any, idle_error: type[BaseException], a: dict[str, Any], counters: Any) -> dict[str, Any]:
    """Call ``read(timeout)`` (payload bytes of one delivery) until idle or out of time;
    bin the bytes and deliveries by wall-clock time."""
    epoch = float(a.get("epoch", time.time()))
    idle = float(a.get("idle", 3.0))
    end = time.monotonic() + float(a["seconds"])
    bins: list[int] = []
    counts: list[int] = []
    first = last = None
    cpu0 = _cpu_clock()
    while time.monotonic() < end:
        try:
            n = read(idle if first is not None else 0.2)
        except idle_error:
            if first is not None:
                break
            continue
        t = last = time.time()
        if first is None:
            first, cpu0 = t, _cpu_clock()
        i = max(0, int((t - epoch) / BIN))
        while len(bins) <= i:
            bins.append(0)
            counts.append(0)
        bins[i] += n
        counts[i] += 1
    return {
        "epoch": epoch,
        "bins": bins,
        "counts": counts,
        "delivered": sum(counts),
        "bytes": sum(bins),
        "counters": counters(),
        **_cpu_use(cpu0, last - first if last is not None and first is not None else 0.0),
    }


def _tcp_send(a: dict[str, Any]) -> dict[str, Any]:
    import socket

    host, port = a["dest"].rsplit(":", 1)
    deadline = time.monotonic() + 5.0
    while True:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # the congestion control chosen before the handshake (Linux's default is cubic; this
        # machine's may be another)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, a.get("cc", "cubic").encode())
        sock.settimeout(1.0)
        try:
            sock.connect((host, int(port)))
            break
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    _wait_until(a.get("start_at"))
    block = os.urandom(64 * 1024)
    sent = 0
    end = time.monotonic() + float(a["seconds"])
    sock.settimeout(0.5)
    while time.monotonic() < end:
        try:
            sent += sock.send(block)
        except TimeoutError:
            continue
    sock.close()
    return {"sent_bytes": sent}


def _tcp_recv(a: dict[str, Any]) -> dict[str, Any]:
    import socket

    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", int(a["port"])))
    server.listen(1)
    server.settimeout(float(a["seconds"]))
    conn, _ = server.accept()
    closed = False

    def read(timeout: float) -> int:
        nonlocal closed
        if closed:
            raise TimeoutError
        conn.settimeout(timeout)
        n = len(conn.recv(1 << 20))
        if n == 0:
            closed = True
            raise TimeoutError
        return n

    try:
        return _count_bins(read, TimeoutError, a, lambda: {})
    finally:
        conn.close()
        server.close()


ROLES = {
    "safe_send": lambda a: _send_role("SafeDealer", a),
    "dealer_send": lambda a: _send_role("Dealer", a),
    "safe_recv": lambda a: _recv_role("SafeDealer", a),
    "dealer_recv": lambda a: _recv_role("Dealer", a),
    "tcp_send": _tcp_send,
    "tcp_recv": _tcp_recv,
}


if __name__ == "__main__":
    print(json.dumps(ROLES[sys.argv[1]](json.loads(sys.argv[2]))))
