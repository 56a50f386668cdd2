"""The pipeline's output directory, replaced whole and only by a run that succeeded.

A run writes every table, ``summary.json`` and ``report.html`` into a *staging directory*
beside ``--out`` (``.<name>.nbmq-<pid>-<token>`` in the same parent, so the final rename stays
on one file system), marks it finished with ``_SUCCESS`` and only then swaps it into place: the
previous output is renamed aside, the staging directory renamed to ``--out``, the previous one
removed. A run that fails or is killed leaves the previous output as it was; a reused ``--out``
never holds a table, report or summary of an earlier run.

Two kinds of place (the pipeline's plan follows the same split, :attr:`Output.local`):

- a local path (no URI scheme): :mod:`os` renames, checked before Spark starts (``--out`` a
  file, or a parent that cannot be written: :class:`OutputError` naming the path);
- a Hadoop-compatible URI (``hdfs://``, ``s3a://``, ``file://``, ...): the same steps through
  the Hadoop ``FileSystem`` of the running session (rename on object stores is a copy, so the
  swap there is not atomic, only ordered: the previous output is removed last).

Staging directories left by a killed run are removed by the next run on the same ``--out``
once their process is gone (local paths; remote ones stay, and are never read as output).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["Output", "OutputError", "SUCCESS", "is_remote"]

#: the marker of a finished output (empty file at the top of ``--out``), as Spark's writers mark a table
SUCCESS = "_SUCCESS"
#: entries that mark a directory as an earlier pipeline output (replaced without asking)
_OURS = (SUCCESS, "summary.json", "frames")
_ASIDE = "-previous"  # suffix of the previous output while the swap runs
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


class OutputError(OSError):
    """``--out`` cannot take the pipeline's output: names the path and the reason."""


def is_remote(out_dir: str | Path) -> bool:
    """True when ``out_dir`` is a URI (``scheme://...``): written through Hadoop's FileSystem."""
    return bool(_SCHEME.match(str(out_dir)))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Output:
    """The staging directory of one run and its swap into ``out_dir``.

    Args:
        out_dir: the output directory the user named (local path or URI).

    Attributes:
        final: ``out_dir`` as text (absolute for local paths).
        staging: where the run writes (a sibling of ``final``).
        local: False for a URI.

    Raises:
        OutputError: (local paths, at :meth:`prepare`) ``out_dir`` exists and is not a
            directory, is a non-empty directory that is not an earlier pipeline output, or its
            parent cannot be created or written.
    """

    def __init__(self, out_dir: str | Path) -> None:
        self.local = not is_remote(out_dir)
        text = str(out_dir).rstrip("/") or "/"
        self.final = str(Path(text).absolute()) if self.local else text
        parent, _, name = self.final.rpartition("/")
        if not name:
            raise OutputError(f"output directory {str(out_dir)!r} has no name to write beside")
        self._parent, self._name = parent, name
        self._prefix = f".{name}.nbmq-"
        self.staging = f"{parent}/{self._prefix}{os.getpid()}-{secrets.token_hex(4)}"

    def path(self, name: str) -> str:
        """Where the run writes ``name`` (a table or a file) inside the staging directory."""
        return f"{self.staging}/{name}"

    def final_path(self, name: str) -> str:
        """Where ``name`` will be once the run succeeded."""
        return f"{self.final}/{name}"

    # -- local checks, before Spark starts ------------------------------------------------------

    def prepare(self) -> None:
        """Check ``out_dir`` and create the staging directory (local paths; URIs: nothing here,
        :meth:`prepare_remote` runs once the session is up).

        Raises:
            OutputError: see the class.
        """
        if not self.local:
            return
        final = Path(self.final)
        if final.exists() or final.is_symlink():
            if not final.is_dir():
                raise OutputError(f"output directory {self.final!r} exists and is not a directory")
            if any(final.iterdir()) and not any((final / n).exists() for n in _OURS):
                raise OutputError(
                    f"output directory {self.final!r} holds files that are not a pipeline output "
                    f"(it would be replaced); name a new or empty directory"
                )
        try:
            Path(self._parent).mkdir(parents=True, exist_ok=True)
            self._remove_stale()
            Path(self.staging).mkdir()
        except OSError as exc:
            raise OutputError(f"output directory {self.final!r} cannot be written: {exc.strerror or exc}") from exc

    def _remove_stale(self) -> None:
        """Remove staging directories of this ``out_dir`` whose process is gone; a previous
        output that such a process had moved aside is put back when ``out_dir`` is missing (the
        process died between the swap's two renames)."""
        for entry in sorted(Path(self._parent).glob(self._prefix + "*")):
            pid = entry.name[len(self._prefix) :].split("-", 1)[0]
            if not pid.isdigit() or _pid_alive(int(pid)):
                continue
            if entry.name.endswith(_ASIDE) and not os.path.lexists(self.final):
                os.rename(entry, self.final)
            else:
                shutil.rmtree(entry, ignore_errors=True)

    # -- through Hadoop's FileSystem (URIs) ------------------------------------------------------

    def _fs(self, spark: SparkSession, path: str) -> tuple[Any, Any]:
        jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
        p = jvm.org.apache.hadoop.fs.Path(path)
        return p.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), p  # type: ignore[attr-defined]

    def prepare_remote(self, spark: SparkSession) -> None:
        """Create the staging directory of a URI ``out_dir`` (no-op for local paths).

        Raises:
            OutputError: ``out_dir`` exists and is not a directory, or the store refused.
        """
        if self.local:
            return
        fs, final = self._fs(spark, self.final)
        if fs.exists(final) and not fs.getFileStatus(final).isDirectory():
            raise OutputError(f"output directory {self.final!r} exists and is not a directory")
        fs_s, staging = self._fs(spark, self.staging)
        if not fs_s.mkdirs(staging):
            raise OutputError(f"output directory {self.final!r} cannot be written: mkdirs({self.staging!r}) failed")

    def write_bytes(self, spark: SparkSession | None, name: str, data: bytes) -> str:
        """Write ``data`` to ``name`` in the staging directory; return its final path."""
        if self.local:
            Path(self.path(name)).write_bytes(data)
        else:
            fs, p = self._fs(spark, self.path(name))  # type: ignore[arg-type]
            stream = fs.create(p, True)
            try:
                stream.write(bytearray(data))
            finally:
                stream.close()
        return self.final_path(name)

    # -- the end of a run ------------------------------------------------------------------------

    def commit(self, spark: SparkSession | None) -> None:
        """Mark the staging directory finished (``_SUCCESS``) and swap it into ``out_dir``."""
        self.write_bytes(spark, SUCCESS, b"")
        aside = f"{self._parent}/{self._prefix}{os.getpid()}-{secrets.token_hex(4)}{_ASIDE}"
        if self.local:
            had = os.path.lexists(self.final)
            if had:
                os.rename(self.final, aside)
            os.rename(self.staging, self.final)
            if had:
                shutil.rmtree(aside, ignore_errors=True)
            return
        fs, final = self._fs(spark, self.final)  # type: ignore[arg-type]
        _, staging = self._fs(spark, self.staging)  # type: ignore[arg-type]
        _, previous = self._fs(spark, aside)  # type: ignore[arg-type]
        had = fs.exists(final)
        if had and not fs.rename(final, previous):
            raise OutputError(f"could not move the previous output {self.final!r} aside")
        if not fs.rename(staging, final):
            if had:
                fs.rename(previous, final)
            raise OutputError(f"could not move the new output into {self.final!r}")
        if had:
            fs.delete(previous, True)

    def abandon(self, spark: SparkSession | None) -> None:
        """Remove the staging directory after a failed run (best effort; ``out_dir`` untouched)."""
        if self.local:
            shutil.rmtree(self.staging, ignore_errors=True)
            return
        if spark is None:
            return
        try:
            fs, staging = self._fs(spark, self.staging)
            fs.delete(staging, True)
        except Exception:  # noqa: BLE001 -- the run's own error is the one to report
            pass
