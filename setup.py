"""Builds the Cython extensions. ``NBMQ_NO_EXTENSIONS=1`` builds none (pure-Python install);
otherwise a failed compile fails the install loudly (msgpack #481: no silent fallback)."""

import os
import sys

from setuptools import setup

# (module, sources, Linux only)
EXTENSIONS = [
    ("nbmq._codec", ["nbmq/_codec.pyx"], False),
    ("nbmq.transports._batch", ["nbmq/transports/_batch.pyx"], True),
    ("nbmq.transports._socket", ["nbmq/transports/_socket.pyx"], False),
    ("nbmq.engine._queue_state", ["nbmq/engine/_queue_state.pyx"], False),
    ("nbmq.engine._fast", ["nbmq/engine/_fast.pyx"], False),
    ("nbmq.capture.files._records", ["nbmq/capture/files/_records.pyx"], False),
    ("nbmq.capture.datagrams._decode", ["nbmq/capture/datagrams/_decode.pyx"], False),
    ("nbmq.spark._reassemble", ["nbmq/spark/_reassemble.pyx"], False),
    ("nbmq.engine._seal", ["nbmq/engine/_seal.pyx"], False),
]
#: C libraries a module links (secure mode's ChaCha20-Poly1305: OpenSSL's libcrypto)
LIBRARIES = {"nbmq.engine._seal": ["crypto"]}


def extensions():
    if os.environ.get("NBMQ_NO_EXTENSIONS", "") not in ("", "0"):
        return []
    import numpy
    from Cython.Build import cythonize
    from setuptools import Extension

    # Stripped, unless a sanitizer build (fuzz/asan.py) wants the symbols for its reports.
    sanitized = "-fsanitize" in os.environ.get("CFLAGS", "") + os.environ.get("LDFLAGS", "")
    modules = [
        Extension(
            name,
            sources,
            include_dirs=[numpy.get_include()],
            libraries=LIBRARIES.get(name, []),
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_2_0_API_VERSION")],
            # NBMQ_OPTIMIZE: the sanitized build (fuzz/asan.py) compiles at -O1, in half the time
            extra_compile_args=[os.environ.get("NBMQ_OPTIMIZE", "-O3")],
            extra_link_args=[] if sanitized or sys.platform == "darwin" else ["-s"],
        )
        for name, sources, linux_only in EXTENSIONS
        if os.path.exists(sources[0]) and (not linux_only or sys.platform.startswith("linux"))
    ]
    return cythonize(
        modules,
        compiler_directives={"language_level": 3, "embedsignature": True},
        include_path=["nbmq"],
    )


setup(ext_modules=extensions())
