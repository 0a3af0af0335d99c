# mqlite: `make demo` builds everything and runs the demo; `make test` runs every test.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python
CARGO ?= cargo
PROFILE_DIR := target/release
DEMO_DIR := demo-data

.PHONY: all test demo bench bench-smoke soak fuzz venv ext ffi rust-test c-test py-test lint fmt header clean

all: ext ffi

# A local virtualenv with the build and test tools.
# Reinstalled when a requirements file changes.
$(VENV)/.ready: tests/python/requirements.txt bench/requirements.txt
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q "maturin>=1.9,<2" -r tests/python/requirements.txt -r bench/requirements.txt
	touch $@

venv: $(VENV)/.ready

# The Python extension, installed into the virtualenv.
ext: venv
	VIRTUAL_ENV=$(abspath $(VENV)) PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/maturin develop --release -q

# The C library: target/release/libmqlite.{so,a}.
ffi:
	$(CARGO) build --release -p mqlite-ffi

rust-test:
	$(CARGO) test --workspace

# The C tests in two passes: under valgrind, and built with
# -fsanitize=address,undefined (LeakSanitizer on). MQLITE_VALGRIND=0 or
# MQLITE_CTEST_SANITIZE=0 skips one. Needs $(PYTHON) for the generated tests.
c-test: ffi
	PYTHON=$(PYTHON) bash tests/c/run.sh $(PROFILE_DIR)

py-test: ext
	$(VPY) -m pytest -q tests/python

# The Rust peer bench's own tests, then the bench at a tiny size, only to
# prove it runs (no speed is asserted; its own workspace, so `rust-test`
# does not build the peers).
bench-smoke:
	$(CARGO) test --release -q --manifest-path bench/rust-peers/Cargo.toml
	$(CARGO) run --release -q --manifest-path bench/rust-peers/Cargo.toml -- --quick --out target/bench/rust-peers-quick.json

test: rust-test c-test py-test bench-smoke
	@echo "all tests passed"

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) fmt --manifest-path bench/rust-peers/Cargo.toml -- --check
	$(CARGO) fmt --manifest-path fuzz/Cargo.toml -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# Regenerates include/mqlite.h (the test suite fails while it is stale).
header:
	MQLITE_UPDATE_HEADER=1 $(CARGO) test -p mqlite-ffi --test header

demo: ext ffi
	rm -rf $(DEMO_DIR)
	$(VPY) examples/demo.py $(DEMO_DIR)
	mkdir -p target/demo
	cc -std=c11 -Wall -Werror -Iinclude examples/demo.c -o target/demo/demo -L$(PROFILE_DIR) -lmqlite -Wl,-rpath,$(abspath $(PROFILE_DIR))
	target/demo/demo $(DEMO_DIR)
	$(VPY) examples/demo.py $(DEMO_DIR) --verify
	$(CARGO) build --release -q -p mqlite-cli
	@echo "--- mqlite topics / groups / group describe billing (the mqlite CLI) ---"
	$(PROFILE_DIR)/mqlite --dir $(DEMO_DIR) topics
	$(PROFILE_DIR)/mqlite --dir $(DEMO_DIR) groups
	$(PROFILE_DIR)/mqlite --dir $(DEMO_DIR) group describe billing

# The peer comparison (bench/peers.py, bench/rust-peers) ends in docs/benchmarks.md and .png.
bench: ext
	$(CARGO) bench -p mqlite --bench log
	$(VPY) bench/python_rates.py
	command -v redis-server >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; } \
		|| echo "could not install redis-server: bench/peers.py will skip the Redis rows"
	$(VPY) bench/peers.py
	$(CARGO) run --release --manifest-path bench/rust-peers/Cargo.toml -- --out target/bench/rust-peers.json
	$(VPY) bench/report.py

# Long fault-injection runs (not part of `make test`, which runs short
# versions): kill -9 cycles across durability levels and producer kinds,
# simulated power loss, and the concurrency stress. CYCLES=N, POWER_CYCLES=N,
# STRESS_SECS=N size them.
CYCLES ?= 1000
POWER_CYCLES ?= 300
STRESS_SECS ?= 120
soak:
	MQLITE_CRASH_CYCLES=$(CYCLES) $(CARGO) run --release -q -p mqlite --example crash_soak
	MQLITE_POWER_CYCLES=$(POWER_CYCLES) $(CARGO) test --release -q -p mqlite --test power_loss -- --nocapture acks_all
	MQLITE_STRESS_SECS=$(STRESS_SECS) $(CARGO) test --release -q -p mqlite --test stress -- --nocapture

# Every cargo-fuzz target for FUZZ_SECONDS each (needs a nightly toolchain;
# see fuzz/run.sh).
FUZZ_SECONDS ?= 300
fuzz:
	bash fuzz/run.sh $(FUZZ_SECONDS)

clean:
	rm -rf target $(VENV) $(DEMO_DIR)
