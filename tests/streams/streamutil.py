"""Helpers for the stream tests: an rqueue server subprocess on an OS-chosen loopback port."""

from __future__ import annotations

import asyncio
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class ServerProcess:
    def __init__(self, *args: str) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nbmq.transports.rqueue_server",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--stats-interval",
                "0",
                "--log-level",
                "WARNING",
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=ROOT,
        )
        line = self._readline(timeout=15.0)
        if not line.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError(f"server did not start: {line!r} {self.proc.stderr.read()!r}")
        self.host, port = line.split()[-1].rsplit(":", 1)
        self.port = int(port)

    def _readline(self, timeout: float) -> str:
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if sel.select(max(0.0, deadline - time.monotonic())):
                return self.proc.stdout.readline().decode()
        return ""

    def rss(self) -> int:
        """Resident set size of the server process, bytes."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return self.proc.returncode, err.decode(errors="replace")


def run(coro, timeout: float = 15.0):
    """Run a coroutine on a fresh loop, bounded in time."""
    return asyncio.run(asyncio.wait_for(coro, timeout))
