"""The compiled codec is really the one in use when it is expected (yarl test_quoting_c_loaded)."""

import os

import pytest


@pytest.mark.skipif(
    os.environ.get("NBMQ_REQUIRE_EXTENSIONS", "") in ("", "0"),
    reason="the Cython codec is only required when NBMQ_REQUIRE_EXTENSIONS=1",
)
def test_cython_codec_selected():
    from nbmq import codec

    assert codec.IMPLEMENTATION == "cython"
    assert codec.parse_frame.__module__ != "nbmq._codec_py.frames"


def test_no_extensions_selects_the_twin(monkeypatch):
    import importlib

    import nbmq.codec

    monkeypatch.setenv("NBMQ_NO_EXTENSIONS", "1")
    try:
        fresh = importlib.reload(nbmq.codec)
        assert fresh.IMPLEMENTATION == "python"
        assert fresh.parse_frame.__module__ == "nbmq._codec_py.frames"
    finally:
        monkeypatch.undo()
        importlib.reload(nbmq.codec)
