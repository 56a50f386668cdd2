"""One policy chooses compiled or Python code for every extension, and the compiled codec is really
the one in use when it is expected (yarl test_quoting_c_loaded)."""

import os

import pytest


@pytest.mark.skipif(
    os.environ.get("NBMQ_REQUIRE_EXTENSIONS", "") in ("", "0"),
    reason="the Cython codec is only required when NBMQ_REQUIRE_EXTENSIONS=1",
)
def test_cython_codec_selected():
    from nbmq import codec

    assert codec.COMPILED
    assert codec.parse_frame.__module__ != "nbmq._codec_py.frames"


def test_no_extensions_selects_the_twin(monkeypatch):
    import importlib

    import nbmq.codec

    monkeypatch.setenv("NBMQ_NO_EXTENSIONS", "1")
    try:
        fresh = importlib.reload(nbmq.codec)
        assert not fresh.COMPILED
        assert fresh.parse_frame.__module__ == "nbmq._codec_py.frames"
    finally:
        monkeypatch.undo()
        importlib.reload(nbmq.codec)


#: Every module that chooses between an extension and its twin, and how it says which runs.
_CHOOSERS = {
    "nbmq.codec": "COMPILED",
    "nbmq.transports.batch": "COMPILED",
    "nbmq.transports.socket": "COMPILED",
    "nbmq.engine.queues": "COMPILED",
    "nbmq.capture.files.records": "COMPILED",
    "nbmq.capture.datagrams.decode_fast": "COMPILED",
    "nbmq.capture.datagrams.ack_hashes": "COMPILED",
    "nbmq.spark.messages": "COMPILED",
}


def _flags(env: dict[str, str]) -> dict[str, object]:
    import json
    import subprocess
    import sys

    code = (
        "import importlib, json\n"
        f"names = {_CHOOSERS!r}\n"
        "out = {m: getattr(importlib.import_module(m), a) for m, a in names.items()}\n"
        "import nbmq.engine.sockets as s; out['nbmq.engine._fast'] = s._fast is not None\n"
        "print(json.dumps(out))"
    )
    full = {k: v for k, v in os.environ.items() if not k.startswith("NBMQ_")}
    result = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-c", code],
        env={**full, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


def test_no_extensions_is_honoured_by_every_module():
    pytest.importorskip("pyspark")
    flags = _flags({"NBMQ_NO_EXTENSIONS": "1"})
    assert set(flags) == set(_CHOOSERS) | {"nbmq.engine._fast"}
    assert not any(flags.values()), flags


@pytest.mark.skipif(
    os.environ.get("NBMQ_REQUIRE_EXTENSIONS", "") in ("", "0"),
    reason="every extension is only required to be built when NBMQ_REQUIRE_EXTENSIONS=1",
)
def test_built_extensions_are_used_by_every_module():
    pytest.importorskip("pyspark")
    import sys

    flags = _flags({"NBMQ_REQUIRE_EXTENSIONS": "1"})
    if not sys.platform.startswith("linux"):
        flags.pop("nbmq.transports.batch")
    assert all(flags.values()), flags


def test_a_missing_extension_warns_once_or_fails_when_required(monkeypatch):
    from nbmq import extensions

    monkeypatch.delenv("NBMQ_NO_EXTENSIONS", raising=False)
    monkeypatch.delenv("NBMQ_REQUIRE_EXTENSIONS", raising=False)
    with pytest.warns(RuntimeWarning, match="nbmq._never_built is not built"):
        assert extensions.load("nbmq._never_built") is None
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert extensions.load("nbmq._never_built") is None  # once per module
        assert extensions.load("nbmq.engine._fast", needs="nbmq._never_built") is None
    monkeypatch.setenv("NBMQ_REQUIRE_EXTENSIONS", "1")
    with pytest.raises(ImportError):
        extensions.load("nbmq._never_built")
    monkeypatch.setenv("NBMQ_NO_EXTENSIONS", "1")
    assert extensions.load("nbmq._codec") is None  # asked for the twins: silent, even when required
