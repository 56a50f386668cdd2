# Two commands do everything on a fresh machine (Python 3.11, gcc, Java 17):
#   make run    set up .venv, then run the main job: `nbmq pipeline` on the bundled captures
#   make test   set up .venv, lint (ruff, mypy), then run the whole test suite with the Cython codec, then again
#               with the pure-Python twin, then a short fuzz run, then the corpus and a shorter
#               fuzz run on every compiled module built with ASan+UBSan (build/asan/)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SOURCES := pyproject.toml setup.py $(wildcard nbmq/*.pxd nbmq/*.pyx nbmq/_cython/*.pxi nbmq/transports/*.pyx nbmq/engine/*.pyx nbmq/engine/*.pxd nbmq/capture/*/*.pyx nbmq/spark/*.pyx)

.PHONY: run test install bench clean fuzz asan test-tools lint

# Fuzzing (fuzz/, docs/fuzzing.md): every target compares both twins (capture_split: byte
# ranges against the whole read; engine_twins: the compiled engine against the Python one).
FUZZ_TARGETS ?= parse_frame parse_frames reassembler bqsp_decoder rqueue_decoder capture_twins capture_split ack_hashes reassemble_groups engine_twins secure_frames
FUZZ_SECONDS ?= 300
# random-mutation seconds per target on the ASan/UBSan build (make asan; make test runs ASAN_TEST_SECONDS,
# and replays the grown corpus newest first for at most ASAN_REPLAY_SECONDS a target: its time stays bounded)
ASAN_SECONDS ?= 20
ASAN_TEST_SECONDS ?= 4
ASAN_REPLAY_SECONDS ?=

$(STAMP): $(SOURCES)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip 'setuptools>=77'
	$(PY) -m pip install --quiet -e '.[spark,test]'
	-@$(MAKE) --no-print-directory test-tools
	touch $(STAMP)

# tshark (the Lua dissectors' differential test) and chromium (the report's browser test):
# installed with apt only when missing and we are root with apt-get; never fails the set-up
# (without them those tests skip and say why).
test-tools:
	@if command -v tshark >/dev/null && command -v chromium >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
		echo "note: tshark/chromium missing and apt unavailable: their tests will skip"; exit 0; fi; \
	echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null; \
	export DEBIAN_FRONTEND=noninteractive; \
	(apt-get -o DPkg::Lock::Timeout=600 update -q && apt-get -o DPkg::Lock::Timeout=600 install -y -q \
		--no-install-recommends tshark chromium fonts-dejavu-core) >/dev/null 2>&1 \
		|| echo "note: could not install tshark/chromium: their tests will skip"

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/nbmq pipeline --out out

# ruff (pyproject's rules and format) over the tree, mypy --strict over the typed packages
LINTED := nbmq tests benchmarks fuzz examples setup.py
lint: $(STAMP)
	$(PY) -m ruff check $(LINTED)
	$(PY) -m ruff format --check $(LINTED)
	$(PY) -m mypy

test: $(STAMP) test-tools lint
	NBMQ_REQUIRE_EXTENSIONS=1 $(PY) -m pytest -q
	NBMQ_NO_EXTENSIONS=1 $(PY) -m pytest -q -m "not spark"
	NBMQ_REQUIRE_EXTENSIONS=1 $(PY) -m fuzz.run --seconds 60 --targets $(FUZZ_TARGETS)
	$(MAKE) --no-print-directory asan ASAN_SECONDS=$(ASAN_TEST_SECONDS) ASAN_REPLAY_SECONDS=10

fuzz: $(STAMP)
	NBMQ_REQUIRE_EXTENSIONS=1 $(PY) -m fuzz.run --per-target $(FUZZ_SECONDS) --targets $(FUZZ_TARGETS)

asan: $(STAMP)
	$(PY) -m pip install --quiet 'Cython>=3,<4' 'setuptools>=77'   # the rebuild runs outside pip's build isolation
	$(PY) -m fuzz.asan --seconds $(ASAN_SECONDS) $(if $(ASAN_REPLAY_SECONDS),--replay-seconds $(ASAN_REPLAY_SECONDS)) --targets $(FUZZ_TARGETS)

bench: $(STAMP)
	$(PY) -m pytest benchmarks -q

clean:
	rm -rf $(VENV) build *.egg-info nbmq/*.so nbmq/*.c nbmq/transports/*.so nbmq/transports/*.c nbmq/capture/*.so nbmq/capture/*.c nbmq/capture/*/*.so nbmq/capture/*/*.c nbmq/engine/*.so nbmq/engine/*.c out
