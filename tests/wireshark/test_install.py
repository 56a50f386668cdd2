"""``nbmq wireshark install`` (the subcommand module's run) and the plugin folder rule."""

from __future__ import annotations

import argparse
from pathlib import Path

from nbmq.cli import wireshark as command
from nbmq.wireshark import LUA_DIR, LUA_FILES, install, plugin_dir


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_install_copies_the_dissectors_and_prints_where(tmp_path, capsys):
    dest = tmp_path / "plugins" / "deeper"
    assert command.run(_args("install", "--dest", str(dest))) == 0
    out = capsys.readouterr().out
    for name in LUA_FILES:
        assert (dest / name).read_bytes() == (LUA_DIR / name).read_bytes()
        assert str(dest / name) in out


def test_install_defaults_to_the_plugin_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("WIRESHARK_PLUGIN_DIR", str(tmp_path / "wsp"))
    assert plugin_dir() == tmp_path / "wsp"
    assert install() == [tmp_path / "wsp" / n for n in LUA_FILES]


def test_install_honours_xdg_config_home_and_wireshark_loads_it_there(tmp_path, monkeypatch):
    """With XDG_CONFIG_HOME set (and no WIRESHARK_PLUGIN_DIR), the console script installs under
    $XDG_CONFIG_HOME/wireshark/plugins, and tshark run with that environment loads the dissectors."""
    import os
    import shutil
    import subprocess
    import sys

    monkeypatch.delenv("WIRESHARK_PLUGIN_DIR", raising=False)
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "HOME": str(tmp_path / "home")}
    env.pop("WIRESHARK_PLUGIN_DIR", None)
    proc = subprocess.run(
        [sys.executable, "-m", "nbmq.cli", "wireshark", "install"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    where = tmp_path / "config" / "wireshark" / "plugins"
    assert sorted(p.name for p in where.iterdir()) == sorted(LUA_FILES)
    assert not (tmp_path / "home").exists() or not any((tmp_path / "home").rglob("*.lua"))
    tshark = shutil.which("tshark")
    if tshark is None:
        print("tshark is not installed: the load check is skipped (apt-get install tshark)")
        return
    listed = subprocess.run([tshark, "-G", "protocols"], env=env, capture_output=True, text=True, timeout=60).stdout
    assert "\tnbmq\n" in listed and "\tbqsp\n" in listed


def test_unwritable_destination_is_exit_1(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert command.run(_args("install", "--dest", str(blocker / "sub"))) == 1
    assert "nbmq wireshark install" in capsys.readouterr().err


def test_path_and_usage(capsys):
    assert command.run(_args("path")) == 0
    assert capsys.readouterr().out.strip() == str(LUA_DIR)
    assert command.run(_args()) == 2


def test_top_level_imports_are_stdlib_only():
    import ast

    tree = ast.parse((Path(command.__file__)).read_text())
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = {a.name.split(".")[0] for n in top for a in n.names if isinstance(n, ast.Import)}
    names |= {n.module.split(".")[0] for n in top if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= {"__future__", "argparse", "sys"}
