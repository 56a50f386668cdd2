"""Which files a data source reads, and how an executor gets their bytes.

What a PySpark user passes to ``.load(...)``: local paths, ``file://`` URIs, directories
(read recursively, as Spark's ``recursiveFileLookup`` does; names starting with ``.`` or ``_``
are skipped like Spark's ``_SUCCESS`` and ``.crc`` files), glob patterns (``**`` included) and
Hadoop file system URIs (``hdfs://``, ``viewfs://``, ``s3a://``/``s3://``, ``gs://``,
``abfs://``). Compressed captures (``.pcap.gz``, ``.pcapng.gz``) are read too:
``nbmq.capture`` decompresses gzip by its magic bytes.

Local files are memory-mapped by the readers (and large classic pcap files split into byte
ranges). Other URIs are opened on the executors through ``pyarrow.fs`` (bundled with
pyarrow; HDFS needs a Hadoop client on every node: ``JAVA_HOME``, ``HADOOP_HOME`` and
``CLASSPATH=$(hadoop classpath --glob)``, as for any libhdfs user); each such file is one
partition, copied to a temporary file on the executor and memory-mapped (memory stays flat;
remote files are not split into byte ranges). A scheme pyarrow does not know, or a
file system it cannot reach, raises an error naming the path and what is missing.
"""

from __future__ import annotations

import glob
import mmap
import os
import tempfile
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "CAPTURE_SUFFIXES",
    "expand_paths",
    "is_local",
    "local_path",
    "splittable",
    "capture_source",
    "capture_names",
    "file_size",
]

#: File names a directory listing picks up (case-insensitive).
CAPTURE_SUFFIXES = tuple(s + gz for s in (".pcap", ".pcapng", ".cap") for gz in ("", ".gz"))

# Hadoop scheme -> pyarrow.fs scheme (pyarrow knows s3 but not Hadoop's s3a / s3n names)
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "gcs": "gs", "abfss": "abfs"}
_COPY_STEP = 8 << 20  # bytes per read when copying a remote file
_KNOWN = "file, hdfs, viewfs, s3/s3a/s3n, gs/gcs, abfs/abfss"


def _scheme(path: str) -> str:
    if "://" not in path and not path.startswith("file:"):
        return ""
    return urlsplit(path).scheme.lower()


def is_local(path: str) -> bool:
    """True for a plain path or a ``file:`` URI (readable with ``open``)."""
    return _scheme(path) in ("", "file")


def local_path(path: str) -> str:
    """The file system path of a plain path or ``file:`` URI (``file:///a``, ``file:/a``)."""
    return urlsplit(path).path if _scheme(path) == "file" else path


def splittable(path: str) -> bool:
    """True when byte ranges of the file can be read independently (local, not compressed)."""
    return is_local(path) and not path.lower().endswith(".gz")


def _wanted(name: str) -> bool:
    return name.lower().endswith(CAPTURE_SUFFIXES) and not name.startswith((".", "_"))


def _wanted_under(rest: str) -> bool:
    """A capture name under no skipped (``.``/``_``) directory; ``rest`` is relative, "/"-separated."""
    parts = rest.strip("/").split("/")
    return _wanted(parts[-1]) and not any(p.startswith((".", "_")) for p in parts[:-1])


def _filesystem(path: str) -> tuple[Any, str]:
    """``(pyarrow file system, path inside it)`` for a non-local URI.

    Raises:
        ValueError: pyarrow.fs does not know the URI's scheme.
        OSError: the file system cannot be reached (e.g. no Hadoop client for ``hdfs://``).
    """
    import pyarrow as pa
    import pyarrow.fs

    scheme = _scheme(path)
    uri = _SCHEME_ALIASES.get(scheme, scheme) + path[len(scheme) :]
    try:
        return pyarrow.fs.FileSystem.from_uri(uri)  # type: ignore[no-any-return]
    except pa.ArrowInvalid as exc:
        raise ValueError(
            f"nbmq data source: cannot read {path!r}: the scheme {scheme!r} is not supported "
            f"(pyarrow.fs knows {_KNOWN}); give a local path or a Hadoop URI ({exc})"
        ) from None
    except (OSError, pa.ArrowException) as exc:
        hint = (
            "HDFS needs a Hadoop client on the driver and every executor: JAVA_HOME, HADOOP_HOME "
            "and CLASSPATH=$(hadoop classpath --glob) for pyarrow's libhdfs"
            if scheme in ("hdfs", "viewfs")
            else "check the credentials and that pyarrow was built with this file system"
        )
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise OSError(f"nbmq data source: cannot open {path!r} through pyarrow.fs: {first}; {hint}") from None


def _expand_remote(path: str) -> list[str]:
    import pyarrow.fs

    fs, inner = _filesystem(path)
    info = fs.get_file_info(inner)
    if info.type == pyarrow.fs.FileType.File:
        return [path]
    if info.type == pyarrow.fs.FileType.Directory:
        found = fs.get_file_info(pyarrow.fs.FileSelector(inner, recursive=True))
        root, base = inner.rstrip("/"), path.rstrip("/")
        # listed paths are the directory's inner path plus the rest: keep the user's URI prefix
        rests = (f.path[len(root) :] for f in found if f.type == pyarrow.fs.FileType.File and f.path.startswith(root))
        return sorted(base + r for r in rests if _wanted_under(r))
    raise FileNotFoundError(f"nbmq data source: no such capture {path!r}")


def _expand_local(path: str) -> list[str]:
    if os.path.isdir(path):
        found = []
        for root, dirs, files in os.walk(path):
            dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
            found.extend(os.path.join(root, f) for f in files if _wanted(f))
        return sorted(found)
    if os.path.exists(path):
        return [path]
    if glob.has_magic(path):
        matched = sorted(p for p in glob.glob(path, recursive=True) if os.path.isfile(p))
        if not matched:
            raise FileNotFoundError(f"nbmq data source: no file matches {path!r}")
        return matched
    raise FileNotFoundError(f"nbmq data source: no such capture {path!r}")


def expand_paths(paths: Sequence[str]) -> list[str]:
    """Files named by ``paths``: files as given, directories' captures (recursive, sorted), globs.

    Local files come back as absolute paths, other URIs as URIs; duplicates are dropped.

    Args:
        paths: local paths, ``file:`` URIs, directories, glob patterns or Hadoop URIs.

    Returns:
        The capture files, in order (each directory's sorted).

    Raises:
        FileNotFoundError: a path matches nothing (the message names it).
        ValueError: a URI scheme that ``pyarrow.fs`` does not know (named, with the known ones).
        OSError: a URI's file system cannot be reached (named, with what is missing).
    """
    out: list[str] = []
    for path in paths:
        if is_local(path):
            out.extend(os.path.abspath(p) for p in _expand_local(local_path(path)))
        else:
            out.extend(_expand_remote(path))
    return list(dict.fromkeys(out))  # first occurrence of each, in order


def capture_names(paths: Sequence[str]) -> dict[str, str]:
    """The ``capture`` column's value for each file: its name, or as many trailing path
    components as tell it apart from the other files read with it.

    ``a/x.pcap`` and ``b/x.pcap`` read together are ``a/x.pcap`` and ``b/x.pcap``, not both
    ``x.pcap``: the messages and sessions tables key on ``capture``, so two captures must never
    share a value (their messages would merge). A file read alone keeps its bare name.

    Args:
        paths: the expanded files (``expand_paths``): local paths or URIs.

    Returns:
        ``{path: name}``, names distinct (``/``-separated components).
    """
    parts = {p: [c for c in urlsplit(p).path.replace(os.sep, "/").split("/") if c] or [p] for p in paths}
    depth = dict.fromkeys(paths, 1)
    while True:
        names = {p: "/".join(parts[p][-depth[p] :]) for p in paths}
        seen: dict[str, list[str]] = {}
        for p, name in names.items():
            seen.setdefault(name, []).append(p)
        clashes = [p for group in seen.values() if len(group) > 1 for p in group if depth[p] < len(parts[p])]
        if not clashes:
            return names
        for p in clashes:
            depth[p] += 1


def file_size(path: str) -> int:
    """Size of a file in bytes (as stored: compressed for ``.gz``).

    Raises:
        OSError / ValueError: as ``expand_paths`` for a URI; OSError for a missing local file.
    """
    if is_local(path):
        return os.path.getsize(local_path(path))
    fs, inner = _filesystem(path)
    return int(fs.get_file_info(inner).size)


def capture_source(path: str) -> str | memoryview:
    """What to hand to ``nbmq.capture`` readers for ``path``: a local path, or a URI's bytes.

    Runs on the executors. A local path is returned as it is (the readers memory-map it). A
    URI is copied through ``pyarrow.fs`` in 8 MiB steps into an unlinked temporary file, and a
    read-only map of that file is returned: memory stays flat in the file's size (the map is
    released with the last view of it).

    Returns:
        The local path (str), or a memoryview (format ``B``) of the URI's bytes.

    Raises:
        OSError / ValueError: as ``expand_paths`` (the message names the path).
    """
    if is_local(path):
        return local_path(path)
    fs, inner = _filesystem(path)
    with fs.open_input_stream(inner, compression=None) as f, tempfile.TemporaryFile(prefix="nbmq-remote-") as out:
        while True:  # gzip: nbmq.capture's job
            chunk = f.read(_COPY_STEP)
            if not chunk:
                break
            out.write(chunk)
        out.flush()
        if not out.tell():
            return memoryview(b"")
        return memoryview(mmap.mmap(out.fileno(), 0, access=mmap.ACCESS_READ))
