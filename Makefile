# mqlite: `make demo` builds everything and runs the demo; `make test` runs every test.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python
CARGO ?= cargo
PROFILE_DIR := target/release
DEMO_DIR := demo-data
# The Kafka-compatible broker that the Kafka backend's tests start and
# stop (tansu, built from crates.io once into cargo's bin directory).
# Built without optimisation (TANSU_OPT_LEVEL): about 5 minutes on 2
# cores where an optimised build takes 12, and the tests take as long
# against either (tansu waits on the network, not the CPU).
TANSU ?= $(or $(shell command -v tansu 2>/dev/null),$(or $(CARGO_HOME),$(HOME)/.cargo)/bin/tansu)
TANSU_OPT_LEVEL ?= 0
# The crate version (Cargo.toml) and the SONAME's major number.
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
SOMAJOR := $(firstword $(subst ., ,$(VERSION)))

.PHONY: all test demo bench bench-smoke soak fuzz venv venv-test venv-bench ext ffi rust-test kafka-test c-test py-test \
	readme-test install-test install uninstall lint fmt header clean

all: ext ffi

# A local virtualenv. `venv` holds only the build tool (maturin): all that
# `make demo` needs. `make test` adds the test tools and the bench peers
# (tests/python/test_bench_scripts.py runs bench/peers.py and
# bench/report.py end to end); `make bench` adds the bench peers alone.
# Each set is reinstalled when its requirements file changes.
$(VENV)/.ready:
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q "maturin>=1.9,<2"
	touch $@

$(VENV)/.ready-test: $(VENV)/.ready tests/python/requirements.txt bench/requirements.txt
	$(VPY) -m pip install -q -r tests/python/requirements.txt -r bench/requirements.txt
	touch $@

$(VENV)/.ready-bench: $(VENV)/.ready bench/requirements.txt
	$(VPY) -m pip install -q -r bench/requirements.txt
	touch $@

venv: $(VENV)/.ready
venv-test: $(VENV)/.ready-test
venv-bench: $(VENV)/.ready-bench

# The Python extension, installed into the virtualenv.
ext: venv
	VIRTUAL_ENV=$(abspath $(VENV)) PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/maturin develop --release -q

# The C library: target/release/libmqlite.{so,a}.
# ffi/build.rs gives the shared library its SONAME, libmqlite.so.$(SOMAJOR),
# and links that name to libmqlite.so in $(PROFILE_DIR) so programs linked
# there run; the second line makes sure the link exists.
ffi:
	$(CARGO) build --release -p mqlite-ffi
	test -e $(PROFILE_DIR)/libmqlite.so.$(SOMAJOR) || ln -sfn libmqlite.so $(PROFILE_DIR)/libmqlite.so.$(SOMAJOR)

# `make install PREFIX=/usr/local` (DESTDIR for staging): include/mqlite.h,
# lib/libmqlite.so.$(VERSION) (SONAME libmqlite.so.$(SOMAJOR)) with its
# libmqlite.so.$(SOMAJOR) and libmqlite.so links, lib/libmqlite.a, and
# lib/pkgconfig/mqlite.pc (generated from ffi/mqlite.pc.in).
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
DESTDIR ?=
install: ffi
	install -d $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(LIBDIR)/pkgconfig
	install -m 644 include/mqlite.h $(DESTDIR)$(INCLUDEDIR)/mqlite.h
	install -m 755 $(PROFILE_DIR)/libmqlite.so $(DESTDIR)$(LIBDIR)/libmqlite.so.$(VERSION)
	ln -sfn libmqlite.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libmqlite.so.$(SOMAJOR)
	ln -sfn libmqlite.so.$(SOMAJOR) $(DESTDIR)$(LIBDIR)/libmqlite.so
	install -m 644 $(PROFILE_DIR)/libmqlite.a $(DESTDIR)$(LIBDIR)/libmqlite.a
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' \
		-e 's|@VERSION@|$(VERSION)|g' ffi/mqlite.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/mqlite.pc
	chmod 644 $(DESTDIR)$(LIBDIR)/pkgconfig/mqlite.pc
	@echo "installed mqlite $(VERSION) into $(DESTDIR)$(PREFIX)"

uninstall:
	rm -f $(DESTDIR)$(INCLUDEDIR)/mqlite.h $(DESTDIR)$(LIBDIR)/libmqlite.so.$(VERSION) \
		$(DESTDIR)$(LIBDIR)/libmqlite.so.$(SOMAJOR) $(DESTDIR)$(LIBDIR)/libmqlite.so \
		$(DESTDIR)$(LIBDIR)/libmqlite.a $(DESTDIR)$(LIBDIR)/pkgconfig/mqlite.pc

# The workspace builds the core with its `kafka` feature (the CLI, the C
# library and the Python module use it): the Kafka backend's tests run
# here, against the broker they start.
rust-test: $(TANSU)
	MQLITE_TANSU=$(TANSU) MQLITE_KAFKA_REQUIRED=1 $(CARGO) test --workspace

# The C tests in two passes: under valgrind, and built with
# -fsanitize=address,undefined (LeakSanitizer on). MQLITE_VALGRIND=0 or
# MQLITE_CTEST_SANITIZE=0 skips one. Needs $(PYTHON) for the generated tests.
c-test: ffi $(TANSU)
	MQLITE_TANSU=$(TANSU) MQLITE_KAFKA_REQUIRED=1 PYTHON=$(PYTHON) bash tests/c/run.sh $(PROFILE_DIR)

# PYTEST_ARGS="-k name" selects tests.
PYTEST_ARGS ?=
py-test: ext venv-test $(TANSU)
	MQLITE_TANSU=$(TANSU) MQLITE_KAFKA_REQUIRED=1 $(VPY) -m pytest -q tests/python $(PYTEST_ARGS)
	$(VPY) tests/python/persistqueue_compat/run.py -q

# The README's quick-start blocks (Python, Rust, C), each run twice on the
# same data directory (tests/readme/run_readme.py).
readme-test: ext ffi
	$(VPY) tests/readme/run_readme.py

# `make install` into a temporary prefix, then C programs built against it
# with pkg-config, shared and static; checks the SONAME (tests/install/run.sh).
install-test: ffi
	bash tests/install/run.sh

# Quick proof that every bench runs and that its figures reach the page
# (no speed is asserted): the Rust peer bench's own tests, then at a tiny
# size and two interleaved runs the Rust peer bench and the engine bench
# (its JSON output included), bench/report.py over their JSON (without the
# chart), then bench/check_claims.py's own tests and its check that every
# figure quoted in README.md and docs/benchmarks.md is one the committed
# JSON in bench/results/ shows. The Rust peers have their own workspace,
# so `rust-test` does not build them; bench/peers.py runs in py-test
# (tests/python/test_bench_scripts.py).
SMOKE_DIR := target/bench/smoke
bench-smoke:
	$(CARGO) test --release -q --manifest-path bench/rust-peers/Cargo.toml
	rm -rf $(SMOKE_DIR) && mkdir -p $(SMOKE_DIR)
	$(CARGO) run --release -q --manifest-path bench/rust-peers/Cargo.toml -- --quick --runs 2 \
		--only "acks=1: mqlite send|one-record batches|acks=all: raw write" --out $(SMOKE_DIR)/rust-peers.json
	MQLITE_BENCH_SCALE=0.002 MQLITE_BENCH_RUNS=2 MQLITE_BENCH_JSON=$(abspath $(SMOKE_DIR))/engine-log.json \
		MQLITE_BENCH_FILTER="touched pages|log append, 1 per batch, prefaulted|log read+CRC|Consumer::poll_batch|P=1 " \
		$(CARGO) bench -q -p mqlite --bench log >/dev/null
	$(PYTHON) -c 'import json, sys; d = json.load(open(sys.argv[1])); r = d["rows"]; m = r[0]["msgs_per_s"]; \
		assert d["runs"] == 2 and all(len(x["secs"]) == 2 for x in r) and m["min"] <= m["median"] <= m["max"], d; \
		assert d["git"]["commit"] and d["load_avg"]["end"] is not None and d["machine"]["cores"] >= 1, d' \
		$(SMOKE_DIR)/engine-log.json
	$(PYTHON) bench/report.py --dir $(SMOKE_DIR) --out $(SMOKE_DIR)/benchmarks.md --no-chart
	grep -q "log append, 1 per batch, prefaulted (100 B)" $(SMOKE_DIR)/benchmarks.md
	grep -q "consume 100 B, one-record batches" $(SMOKE_DIR)/benchmarks.md
	$(PYTHON) bench/test_check_claims.py
	$(PYTHON) bench/check_claims.py

$(TANSU):
	CARGO_PROFILE_RELEASE_OPT_LEVEL=$(TANSU_OPT_LEVEL) CARGO_PROFILE_RELEASE_DEBUG=0 \
		CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256 \
		$(CARGO) install tansu --version 0.6.0 --locked --features dynostore

# The Kafka backend's tests alone (`make test` runs them in rust-test,
# py-test and c-test).
kafka-test: $(TANSU)
	MQLITE_TANSU=$(TANSU) MQLITE_KAFKA_REQUIRED=1 $(CARGO) test -p mqlite --features kafka --test kafka --test kafka_mirror --test kafka_broker --test kafka_transactions --test kafka_named
	MQLITE_TANSU=$(TANSU) MQLITE_KAFKA_REQUIRED=1 $(CARGO) test -p mqlite-cli --test mirror

test: rust-test c-test py-test readme-test install-test bench-smoke
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

# Every bench, each row run BENCH_RUNS times interleaved with the others,
# every run's figures kept as JSON in BENCH_OUT (committed: the figures
# quoted in README.md and docs/ come from there), then docs/benchmarks.md
# and .png rendered from that directory: each bench of core/Cargo.toml
# (engine-<name>.json), bench/python_rates.py, bench/kafka_python.py,
# bench/peers.py and bench/rust-peers. BENCH_SCALE scales the engine benches' message counts
# and BENCH_N is the peer suites' messages per row (defaults: full size).
# MQLITE_BENCH_MACHINE=quiet (or shared) records what you know of the
# machine beside its load average.
BENCH_OUT ?= bench/results/$(shell date -u +%Y-%m-%d)
BENCH_RUNS ?= 3
BENCH_SCALE ?= 1
BENCH_N ?= 1000000
# The bench binaries of core/Cargo.toml (each `[[bench]]` followed by its name).
BENCH_ENGINE := $(shell sed -n '/^\[\[bench\]\]/{n;s/^name *= *"\(.*\)"/\1/p;}' core/Cargo.toml)
# The Kafka benches (the kafka feature; they start tansu themselves and
# measure nothing without it): core/benches/kafka.rs and
# bench/kafka_python.py (python-kafka.json).
BENCH_KAFKA := kafka
bench: ext venv-bench
	mkdir -p $(BENCH_OUT)
	for b in $(BENCH_ENGINE); do \
		MQLITE_BENCH_RUNS=$(BENCH_RUNS) MQLITE_BENCH_SCALE=$(BENCH_SCALE) \
			MQLITE_BENCH_JSON=$(abspath $(BENCH_OUT))/engine-$$b.json $(CARGO) bench -p mqlite \
			$$(case " $(BENCH_KAFKA) " in *" $$b "*) echo --features kafka;; esac) --bench $$b \
			| tee $(BENCH_OUT)/engine-$$b.txt; \
		if test -e $(BENCH_OUT)/engine-$$b.json; then rm $(BENCH_OUT)/engine-$$b.txt; \
		else echo "note: the $$b bench wrote no JSON (MQLITE_BENCH_JSON): its printed tables are kept"; fi; \
	done
	MQLITE_BENCH_RUNS=$(BENCH_RUNS) MQLITE_BENCH_JSON=$(BENCH_OUT)/python-rates.json \
		$(VPY) bench/python_rates.py $(BENCH_N)
	MQLITE_BENCH_RUNS=$(BENCH_RUNS) MQLITE_BENCH_JSON=$(BENCH_OUT)/python-kafka.json \
		$(VPY) bench/kafka_python.py
	command -v redis-server >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; } \
		|| echo "could not install redis-server: bench/peers.py will skip the Redis rows"
	$(VPY) bench/peers.py --runs $(BENCH_RUNS) --n $(BENCH_N) --out $(BENCH_OUT)/python-peers.json
	$(CARGO) run --release --manifest-path bench/rust-peers/Cargo.toml -- --runs $(BENCH_RUNS) --n $(BENCH_N) \
		--out $(BENCH_OUT)/rust-peers.json
	$(VPY) bench/report.py --dir $(BENCH_OUT)

# Long fault-injection runs (not part of `make test`, which runs short
# versions): kill -9 cycles across durability levels and producer kinds,
# simulated power loss, the concurrency stress, and shared mode's
# multi-process tests at full length (MQLITE_SOAK=1: 60 s of kill -9 in the
# group storm and the writer-kill test, a million appends in the wake-up
# test; the writer storm for 60 s with one writer process and 3 minutes
# with several, 200 concurrent topic creations, 100 power losses with
# writer processes). CYCLES=N, POWER_CYCLES=N, STRESS_SECS=N size them.
CYCLES ?= 1000
POWER_CYCLES ?= 300
STRESS_SECS ?= 120
soak:
	MQLITE_CRASH_CYCLES=$(CYCLES) $(CARGO) run --release -q -p mqlite --example crash_soak
	MQLITE_POWER_CYCLES=$(POWER_CYCLES) $(CARGO) test --release -q -p mqlite --test power_loss -- --nocapture acks_all
	MQLITE_STRESS_SECS=$(STRESS_SECS) $(CARGO) test --release -q -p mqlite --test stress -- --nocapture
	MQLITE_SOAK=1 $(CARGO) test --release -q -p mqlite --test shared_mode --test shared_mode_groups \
		--test shared_mode_writer -- --nocapture
	MQLITE_SOAK=1 $(CARGO) test --release -q -p mqlite --test shared_mode_writers \
		--test shared_mode_writers_topics --test shared_mode_writers_power -- --nocapture

# Every cargo-fuzz target for FUZZ_SECONDS each (needs a nightly toolchain;
# see fuzz/run.sh).
FUZZ_SECONDS ?= 300
fuzz:
	bash fuzz/run.sh $(FUZZ_SECONDS)

clean:
	rm -rf target $(VENV) $(DEMO_DIR)
