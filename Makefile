# mqlite: `make demo` builds everything and runs the demo; `make test` runs every test.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python
CARGO ?= cargo
PROFILE_DIR := target/release
DEMO_DIR := demo-data

.PHONY: all test demo bench venv ext ffi rust-test c-test py-test lint fmt header clean

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

c-test: ffi
	bash tests/c/run.sh $(PROFILE_DIR)

py-test: ext
	$(VPY) -m pytest -q tests/python

test: rust-test c-test py-test
	@echo "all tests passed"

lint:
	$(CARGO) fmt --all -- --check
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
	@echo "--- mqlite topics / group describe billing (the mqlite CLI) ---"
	$(PROFILE_DIR)/mqlite --dir $(DEMO_DIR) topics
	$(PROFILE_DIR)/mqlite --dir $(DEMO_DIR) group describe billing

bench: ext
	$(CARGO) bench -p mqlite --bench log
	$(VPY) bench/python_rates.py

clean:
	rm -rf target $(VENV) $(DEMO_DIR)
