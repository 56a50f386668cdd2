"""Wireshark / tshark Lua dissectors for nbmq (UDP), BQSP and rqueue (TCP), shipped with the package.

``nbmq.lua`` claims UDP datagrams heuristically (version 1, kind 0..5, consistent lengths);
``bqsp.lua`` decodes the TCP port set in its preference ``bqsp.tcp_port`` (BQSP names no port);
``rqueue.lua`` decodes TCP port 6567 (preference ``rqueue.tcp_port``). Both TCP dissectors
reassemble records split over segments (``dissect_tcp_pdus``). Field names follow our tables:
``nbmq.session_id``, ``nbmq.message_id``, ``nbmq.kind``, ``bqsp.queue``, ``rqueue.topic``, ...

::

    from nbmq.wireshark import install
    install()                      # -> [~/.local/lib/wireshark/plugins/nbmq.lua, ...]

or without installing: ``tshark -X lua_script:$(python -c 'import nbmq.wireshark as w;
print(w.LUA_DIR)')/nbmq.lua -r capture.pcap -Y nbmq``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["LUA_DIR", "LUA_FILES", "plugin_dir", "install"]

#: Folder of the shipped ``.lua`` files (inside the installed package).
LUA_DIR = Path(__file__).resolve().parent
#: The dissectors, one protocol each.
LUA_FILES = ("nbmq.lua", "bqsp.lua", "rqueue.lua")


def _from_tshark() -> Path | None:
    """The "Personal Lua Plugins" folder as ``tshark -G folders`` reports it, if tshark runs."""
    tshark = shutil.which("tshark")
    if tshark is None:
        return None
    try:
        out = subprocess.run([tshark, "-G", "folders"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "Personal Lua Plugins" and value.strip():
            return Path(value.strip())
    return None


def plugin_dir() -> Path:
    """The user's personal Wireshark Lua plugin folder (it may not exist yet).

    Returns:
        ``$WIRESHARK_PLUGIN_DIR`` when set; else ``$XDG_CONFIG_HOME/wireshark/plugins`` when
        ``XDG_CONFIG_HOME`` is set (Wireshark's personal configuration folder follows it, and
        Wireshark loads Lua plugins from its ``plugins`` subfolder too); else what
        ``tshark -G folders`` names "Personal Lua Plugins"; else Wireshark's documented
        default: ``%APPDATA%\\Wireshark\\plugins`` on Windows, ``~/.local/lib/wireshark/plugins``
        elsewhere (Wireshark's user guide, "Plugin folders").
    """
    env = os.environ.get("WIRESHARK_PLUGIN_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME")
    if xdg and sys.platform != "win32":
        return Path(xdg).expanduser() / "wireshark" / "plugins"
    found = _from_tshark()
    if found is not None:
        return found
    if sys.platform == "win32":
        return Path(os.environ.get("APPDATA", Path.home() / "AppData" / "Roaming")) / "Wireshark" / "plugins"
    return Path.home() / ".local" / "lib" / "wireshark" / "plugins"


def install(dest: str | os.PathLike[str] | None = None) -> list[Path]:
    """Copy the three dissectors into ``dest`` (default :func:`plugin_dir`), creating it.

    Args:
        dest: target folder; None: the personal Lua plugin folder.

    Returns:
        The paths written (``nbmq.lua``, ``bqsp.lua``, ``rqueue.lua``), replacing older copies.
        Wireshark loads them at its next start (or Analyze > Reload Lua Plugins).

    Raises:
        OSError: the folder cannot be created or a file cannot be written.
    """
    target = Path(dest).expanduser() if dest is not None else plugin_dir()
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for name in LUA_FILES:
        path = target / name
        shutil.copyfile(LUA_DIR / name, path)
        written.append(path)
    return written
