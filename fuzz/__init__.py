"""Coverage-guided fuzzing of nbmq's decoders (atheris, or a random-mutation fallback).

Every target feeds one input to both twins -- the Cython codec ``nbmq._codec`` and the
pure-Python ``nbmq._codec_py``; for captures the compiled record walker / packet decoder and
their Python paths -- and raises ``Finding`` when the results, error classes, offsets or
reasons differ. Any exception that is not an ``NbmqError`` escapes too: both are findings.

Modules: ``twins`` (loading and comparing the twins), ``framing`` (how a fuzz input is cut
into datagrams / feeds), ``targets`` (the targets and their registry), ``corpus`` (seeds from
the bundled captures), ``mutate`` (the fallback driver), ``run`` (the command line),
``replay`` (run a corpus once, e.g. under AddressSanitizer). docs/fuzzing.md tells how to
run them.
"""
