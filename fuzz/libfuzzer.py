"""Run one target under atheris (libFuzzer, coverage-guided): ``python -m fuzz.libfuzzer TARGET
[libFuzzer flags and corpus folders]``.

nbmq's Python modules are instrumented for coverage (the pure-Python twin mirrors the Cython
one branch for branch, so its coverage guides both); the compiled extensions are run, not
instrumented. A finding -- an exception out of the target -- makes libFuzzer write the input
to ``-artifact_prefix`` and exit non-zero.
"""

from __future__ import annotations

import sys


def main() -> None:
    """Entry point; see the module docstring."""
    import atheris

    name, flags = sys.argv[1], sys.argv[2:]
    from .targets import load

    with atheris.instrument_imports(include=["nbmq", "fuzz"]):
        target = load(name)

    def one_input(data: bytes) -> None:
        target(data)

    atheris.Setup([sys.argv[0], *flags], one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
