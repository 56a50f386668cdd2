"""examples/duplex.py and examples/simplex.py run and exit 0 on their own, within seconds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import nbmq

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.network
@pytest.mark.parametrize("name", ["duplex.py", "simplex.py"])
def test_example_runs(name):
    if not hasattr(nbmq, "Dealer"):
        pytest.skip("nbmq does not re-export the socket classes yet (nbmq/__init__.py)")
    done = subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=20)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "received" in done.stdout
