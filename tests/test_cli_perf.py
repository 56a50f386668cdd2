"""``nbmq perf`` as users run it: the console script, a binding role in one process and a
connecting role in another, over loopback, every wait bounded."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.network


def _command() -> list[str]:
    script = Path(sys.executable).parent / "nbmq"
    if script.exists():
        return [str(script)]
    found = shutil.which("nbmq")
    return [found] if found else [sys.executable, "-m", "nbmq.cli"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def _start(*args: str) -> tuple[subprocess.Popen[str], list[str]]:
    """Start a binding role; returns it and the addresses it announced (listening, replies)."""
    proc = subprocess.Popen(
        [*_command(), "perf", *args, "--json", "--timeout", "30"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=ROOT,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("listening on "), (line, proc.stderr.read() if proc.poll() is not None else "")
    addresses = [line.split()[-1]]
    if args[0] == "echo" and "radio" in args:
        addresses.append(proc.stdout.readline().split()[-1])
    return proc, addresses


def _run(*args: str) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run(
        [*_command(), "perf", *args, "--json", "--timeout", "30"],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=60,
    )
    out = done.stdout.strip().splitlines()
    return done.returncode, (json.loads(out[-1]) if out else {}), done.stderr


def _finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("socket_pair", ["dealer", "safedealer", "radio"])
def test_throughput_roles_report_rate_and_loss(socket_pair: str) -> None:
    receiver, (address,) = _start("recv", "127.0.0.1:0", "--socket", socket_pair, "--count", "3000", "--idle", "3")
    code, sent, err = _run("send", address, "--socket", socket_pair, "--count", "3000", "--batch", "100")
    assert code == 0, err
    assert sent["sent"] == 3000 and sent["msg_per_s"] > 0
    got = _finish(receiver)
    assert got["received"] + got["lost"] == 3000
    assert got["msg_per_s"] > 0 and got["mb_per_s"] == pytest.approx(got["msg_per_s"] * 100 / 1e6)
    if socket_pair == "safedealer":
        assert got["lost"] == 0
    # loss is never silent: whatever did not arrive the kernel or the socket counted
    assert got["lost"] <= got["kernel_drops"] + got["dropped"]


@pytest.mark.parametrize("socket_pair", ["dealer", "safedealer", "radio"])
def test_latency_roles_report_percentiles(socket_pair: str) -> None:
    echo, addresses = _start("echo", "127.0.0.1:0", "--socket", socket_pair, "--idle", "1")
    extra = ["--reply", addresses[1]] if socket_pair == "radio" else []
    if socket_pair == "dealer":
        extra = ["--busy-poll", "0"]  # (spin off: the plain sleep-and-wake path)
    code, ping, err = _run("ping", addresses[0], "--socket", socket_pair, "--count", "300", "--warmup", "20", *extra)
    assert code == 0, err
    assert ping["rounds"] == 300
    assert 0 < ping["p50_us"] <= ping["p99_us"] <= ping["p999_us"]
    assert _finish(echo)["echoed"] >= 320


def test_text_output_names_the_units() -> None:
    receiver, (address,) = _start("recv", "127.0.0.1:0", "--count", "500")
    done = subprocess.run(
        [*_command(), "perf", "send", address, "--count", "500"],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "[msg/s]" in done.stdout and "[MB/s]" in done.stdout
    _finish(receiver)


def test_no_peer_exits_1_within_the_timeout() -> None:
    done = subprocess.run(
        [*_command(), "perf", "ping", "127.0.0.1:9", "--timeout", "1"],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 1
    assert "no peer at 127.0.0.1:9" in done.stderr


@pytest.mark.parametrize(
    "option", [["--count", "0"], ["--size", "-1"], ["--idle", "0"], ["--busy-poll", "-1"], ["--busy-poll", "1"]]
)
def test_bad_option_exits_2(option: list[str]) -> None:
    code, _, err = _run("recv", "127.0.0.1:0", *option)
    assert code == 2 and option[0] in err


def test_packed_throughput_roles() -> None:
    receiver, (address,) = _start("recv", "127.0.0.1:0", "--socket", "safedealer", "--count", "5000", "--packed", "512")
    code, sent, err = _run("send", address, "--socket", "safedealer", "--count", "5000", "--packed", "1000")
    assert code == 0, err
    assert sent["sent"] == 5000
    got = _finish(receiver)
    assert got["received"] == 5000 and got["lost"] == 0
