"""Servers started as subprocesses for tests and benchmarks.

A server prints ``listening on HOST:PORT`` once it is bound (the rqueue broker does, and so may
any script that wants to be started this way); :class:`ServerProcess` waits for that line,
bounded in time, and stops the process with SIGTERM, killing it if it does not exit in time.
The child imports the same ``nbmq`` as the parent, so a test of a source tree runs that tree's
server.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["ServerProcess", "rqueue_server"]

# The directory holding the nbmq package this process imported.
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]


class ServerProcess:
    """A server subprocess, bound and listening once the constructor returns.

    Args:
        argv: the arguments after the interpreter, e.g. ``["-m", "nbmq.transports.rqueue_server",
            "--port", "0"]``.
        start_timeout: seconds to wait for the ``listening on HOST:PORT`` line.
        cwd: the child's working directory (default: the parent's).

    Attributes:
        host: the address the server printed (str).
        port: its port (int).
        proc: the :class:`subprocess.Popen` object.

    Raises:
        RuntimeError: the server exited or printed something else first, or stayed silent for
            ``start_timeout`` seconds; the message carries what it wrote to stderr.

    The child's stderr goes to a temporary file rather than a pipe, so a server that logs a lot
    never blocks on a pipe nobody reads.
    """

    def __init__(self, argv: list[str], *, start_timeout: float = 20.0, cwd: str | Path | None = None) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(_PACKAGE_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, *argv], stdout=subprocess.PIPE, stderr=self._stderr, env=env, cwd=cwd
        )
        line = self._readline(start_timeout)
        if not line.startswith("listening on "):
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"server did not start: {line!r} {self._read_stderr()!r}")
        host, port = line.split()[-1].rsplit(":", 1)
        self.host, self.port = host, int(port)

    def _readline(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if sel.select(max(0.0, deadline - time.monotonic())):
                    return self.proc.stdout.readline().decode()
        return ""

    def _read_stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def status(self, field: str) -> int:
        """A size field of ``/proc/PID/status`` in bytes: ``"VmRSS"`` now, ``"VmHWM"`` the peak.

        Raises:
            LookupError: the field is not there (not Linux, or the process has exited).
        """
        try:
            lines = Path(f"/proc/{self.proc.pid}/status").read_text().splitlines()
        except OSError as exc:
            raise LookupError(field) from exc
        for line in lines:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        raise LookupError(field)

    def rss(self) -> int:
        """Resident set size of the server process, bytes."""
        return self.status("VmRSS")

    def stop(self, timeout: float = 15.0) -> tuple[int, str, str]:
        """SIGTERM, then SIGKILL after ``timeout`` seconds.

        Returns:
            ``(returncode, stdout, stderr)``: stdout is what the server printed after its
            listening line, stderr everything it wrote there.
        """
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        err = self._read_stderr()
        self._stderr.close()
        return self.proc.returncode, out.decode(errors="replace"), err

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.stop()


def rqueue_server(*flags: str, log_level: str = "WARNING", start_timeout: float = 20.0) -> ServerProcess:
    """Start ``nbmq rqueue-server`` on 127.0.0.1 and an OS-chosen port, statistics off.

    Args:
        flags: more options of the command (``"--max-buffer", "1024"``, ``"--tls-cert", path``).
        log_level: the server's ``--log-level``.
        start_timeout: seconds to wait until it listens.

    Returns:
        The running :class:`ServerProcess`; use it as a context manager or call ``stop()``.
    """
    argv = ["-m", "nbmq.transports.rqueue_server", "--host", "127.0.0.1", "--port", "0"]
    argv += ["--stats-interval", "0", "--log-level", log_level, *flags]
    return ServerProcess(argv, start_timeout=start_timeout)
