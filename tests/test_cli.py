"""The ``nbmq`` command line: real options and ``--help`` for every
subcommand, ``--version``, ``nbmq pipeline``'s default ``--out`` and its errors, ``nbmq decode``
on bad paths and on BQSP / rqueue captures, and the subcommand-module contract of ``nbmq.cli``."""

from __future__ import annotations

import ast
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nbmq import __version__, cli
from nbmq.examples import CAPTURE_DIR
from nbmq.examples.streams import stream_captures, streams_manifest_path

ROOT = Path(__file__).resolve().parents[1]


def _env(pure_python: bool = False) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.pop("NBMQ_NO_EXTENSIONS", None)
    if pure_python:
        env["NBMQ_NO_EXTENSIONS"] = "1"
    return env


def _nbmq(*args: str, pure_python: bool = False, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nbmq.cli", *args],
        capture_output=True,
        text=True,
        env=_env(pure_python),
        timeout=timeout,
        cwd=ROOT,
    )


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exc:
        cli.main([*argv, "--help"])
    assert exc.value.code == 0
    return capsys.readouterr().out


# -- the subcommand table ----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_command_module_contract(name: str) -> None:
    """HELP, add_arguments, run; only the standard library imported at the module's top level."""
    module = importlib.import_module(cli.COMMANDS[name])
    assert isinstance(module.HELP, str) and module.HELP
    assert callable(module.add_arguments) and callable(module.run)
    tree = ast.parse(Path(module.__file__).read_text())
    for node in tree.body:  # top level only: function bodies may import their layer
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{name}: relative import at top level (line {node.lineno})"
            names = [node.module or ""]
        else:
            continue
        for full in names:
            top = full.split(".")[0]
            assert top == "__future__" or top in sys.stdlib_module_names, (
                f"{cli.COMMANDS[name]} imports {full} at its top level (line {node.lineno})"
            )


def test_top_level_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    out = _help(capsys)
    assert "``" not in out and "The ``nbmq`` command" not in out
    for name in cli.COMMANDS:
        assert name in out
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"nbmq {__version__}"


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_subcommand_has_help(capsys: pytest.CaptureFixture[str], name: str) -> None:
    out = _help(capsys, name)
    assert out.startswith(f"usage: nbmq {name}")


def test_unknown_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["decode", "--no-such-option"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --no-such-option" in capsys.readouterr().err


# -- rqueue-server -------------------------------------------------------------------------------


def test_rqueue_server_options_parse(capsys: pytest.CaptureFixture[str]) -> None:
    out = _help(capsys, "rqueue-server")
    for option in ("--host", "--port", "--threads", "--max-buffer", "--slow-consumer"):
        assert option in out
    args = cli.build_parser().parse_args(["rqueue-server", "--host", "127.0.0.1", "--port", "0"])
    assert (args.host, args.port) == ("127.0.0.1", 0)


@pytest.mark.network
def test_rqueue_server_runs_and_stops_on_sigterm() -> None:
    """``nbmq rqueue-server --host 127.0.0.1 --port 0`` binds, announces the port, exits 0 on SIGTERM."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nbmq.cli",
            "rqueue-server",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--no-uvloop",
            "--stats-interval",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=ROOT,
    )
    try:
        line = proc.stdout.readline()  # the server flushes this line once bound
        assert line.startswith("listening on 127.0.0.1:"), (line, proc.stderr.read() if proc.poll() else "")
        port = int(line.rsplit(":", 1)[1])
        assert port > 0
        # the line comes before the loop installs its signal handlers: a client's "connected"
        # log line shows the loop is running (and the port really serves)
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            deadline = time.monotonic() + 20
            log = ""
            while "client connected" not in log:
                left = deadline - time.monotonic()
                assert left > 0 and select.select([proc.stderr], [], [], left)[0], f"no connect log: {log}"
                chunk = os.read(proc.stderr.fileno(), 65536)  # the fd: no buffering to hide lines
                assert chunk, f"the server exited: {log}"
                log += chunk.decode(errors="replace")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        proc.stdout.close()
        proc.stderr.close()


# -- pipeline (argument handling only: no Spark starts in these tests) --------------------------


def test_pipeline_out_defaults_to_out() -> None:
    args = cli.build_parser().parse_args(["pipeline"])
    assert args.out == "out" and args.captures == []


def test_pipeline_out_naming_a_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("pyspark")
    target = tmp_path / "a-file"
    target.write_text("")
    started = time.monotonic()
    assert cli.main(["pipeline", "--out", str(target), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "not a directory" in err and str(target) in err
    assert time.monotonic() - started < 60  # refused before any Spark session


def test_pipeline_missing_capture_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("pyspark")
    missing = tmp_path / "nope.pcap"
    assert cli.main(["pipeline", str(missing), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert str(missing) in capsys.readouterr().err


def test_pipeline_names_the_missing_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import nbmq.cli.pipeline as spark_cli

    monkeypatch.setattr(spark_cli, "missing_extra", lambda: ["pyspark", "pyarrow"])
    assert cli.main(["pipeline", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "pip install 'nbmq[spark]'" in err and "pyspark, pyarrow" in err


def test_pipeline_exit_status_says_when_the_report_failed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Tables written but no report.html: exit 1 (the reason is on stderr and in summary.json)."""
    from nbmq.cli import pipeline as pipeline_cli
    from nbmq.spark import pipeline

    if pipeline_cli.missing_extra():
        pytest.skip("the spark extra is not installed")
    outcomes = iter([{"tables": {}}, {"tables": {}, "report_error": "ValueError: boom"}])
    monkeypatch.setattr(pipeline, "run", lambda *a, **k: next(outcomes))
    argv = ["pipeline", "--out", str(tmp_path / "out")]
    assert cli.main(argv) == 0
    assert cli.main(argv) == 1


def test_pipeline_module_does_not_import_its_cli() -> None:
    tree = ast.parse((ROOT / "nbmq" / "spark" / "pipeline.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "cli" not in imported and "nbmq.cli.pipeline" not in imported


# -- decode ----------------------------------------------------------------------------------------


def _manifest_rqueue_messages() -> int:
    manifest = json.loads(streams_manifest_path().read_text())
    conns = manifest["captures"]["rqueue.pcap"]["connections"]
    return sum(len(c["c2s"]) + len(c["s2c"]) for c in conns)


def test_decode_bundled_counts_udp_and_tcp(codec) -> None:
    """Both twins: every bundled capture has a line; rqueue.pcap's messages match the manifest."""
    pure = codec.__name__ == "nbmq._codec_py"
    result = _nbmq("decode", pure_python=pure)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"codec: {'python' if pure else 'cython'}"
    by_name = {Path(line.split(": ", 1)[0]).name: line for line in lines[1:]}
    assert set(by_name) >= {"dealer.pcap", "radio_dish.pcap", "safe_dealer.pcap", "rqueue.pcap", "bqsp.pcap"}
    assert " 0 malformed" in by_name["dealer.pcap"] and "data " in by_name["dealer.pcap"]
    expected = _manifest_rqueue_messages()
    assert f"rqueue (TCP port 6567): {expected} messages, 0 error rows" in by_name["rqueue.pcap"]
    assert "bqsp (TCP port 7701): " in by_name["bqsp.pcap"] and "0 error rows" in by_name["bqsp.pcap"]
    assert "Traceback" not in result.stderr


def test_decode_reports_bad_paths_and_goes_on(tmp_path: Path) -> None:
    not_capture = tmp_path / "notes.txt"
    not_capture.write_text("hello, not a capture")
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    good = CAPTURE_DIR / "dealer.pcap"
    missing = tmp_path / "missing.pcap"
    result = _nbmq("decode", str(missing), str(empty_dir), str(not_capture), str(good))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    errors = result.stderr.splitlines()
    assert len(errors) == 3
    for path, line in zip((missing, empty_dir, not_capture), errors):
        assert line.startswith(f"{path}: error: ")
    assert f"{good}: 6538 datagrams" in result.stdout  # read after the three failures


def test_decode_directory_and_ports(tmp_path: Path) -> None:
    """A directory stands for its captures; BQSP is decoded only on a port it is given."""
    streams_dir = stream_captures()[0].parent
    plain = _nbmq("decode", str(streams_dir))
    assert plain.returncode == 0, plain.stderr
    bqsp_line = next(line for line in plain.stdout.splitlines() if "bqsp.pcap" in line)
    assert "TCP traffic on other ports" in bqsp_line
    ported = _nbmq("decode", str(streams_dir), "--bqsp-port", "7701", "--rqueue-port", "1")
    bqsp_line = next(line for line in ported.stdout.splitlines() if "bqsp.pcap" in line)
    assert "bqsp (TCP port 7701): " in bqsp_line
    rqueue_line = next(line for line in ported.stdout.splitlines() if "rqueue.pcap" in line)
    assert "rqueue (" not in rqueue_line  # nothing on port 1


def test_decode_damaged_capture_is_counted_not_raised(tmp_path: Path) -> None:
    """A capture cut mid-record: its line says what was lost; no traceback, exit 0."""
    rqueue = next(p for p in stream_captures() if p.name == "rqueue.pcap")
    data = rqueue.read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[: len(data) * 2 // 3])
    result = _nbmq("decode", str(cut))
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith(str(cut)))
    assert "rqueue (TCP port 6567): " in line
    messages = int(line.split("rqueue (TCP port 6567): ")[1].split(" messages")[0])
    assert 0 < messages < _manifest_rqueue_messages()
    assert "damaged records" in line or " 0 error rows" not in line


def test_decode_counts_secure_frames_as_decoded(codec) -> None:
    """Secure mode's capture: every frame decodes (headers in clear), none is malformed."""
    secure = Path(__file__).resolve().parent / "data" / "secure_safe_dealer.pcap"
    result = _nbmq("decode", str(secure), pure_python=codec.__name__ == "nbmq._codec_py")
    assert result.returncode == 0, result.stderr
    assert f"{secure}: 25 datagrams, 0 malformed, 25 secure; data 8, " in result.stdout
    plain = _nbmq("decode", str(CAPTURE_DIR / "dealer.pcap"))
    assert " secure" not in plain.stdout
