# The two commands of the README. Each creates .venv when missing and installs what it needs
# from PyPI (the versions of the embedded MPI are pinned in pyproject.toml, extra "embedded").
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# meson-python runs meson and ninja from PATH; mpirun children find the venv's tools too
export PATH := $(abspath $(BIN)):$(PATH)
SOURCES := $(shell find dpmpi cext -type f -name '*.py' -o -type f -name '*.c' -o -type f -name '*.h' -o -type f -name '*.pyi') meson.build pyproject.toml

.PHONY: demo docs test test-long test-logic test-mpi test-faults test-peer test-peer-mpi bench bench-quick peer clean

# (the venv's own pip, not upgraded: upgrading took 2 s of every fresh `make test`, and the pip
# that venv installs, 23.2 with Python 3.11, builds and installs dpmpi as it is)
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Build tools first (the package is built without isolation, against them), then dpmpi with
# its dependencies. pip rebuilds a local package every time, so this reruns on source changes.
# (pip compiles every module at install, ~5 s: without it each rank compiles numpy again when the
# environment sets PYTHONDONTWRITEBYTECODE, as this machine's does: a fresh make test took 50 s more)
$(VENV)/.installed: $(SOURCES) | $(BIN)/python
	$(BIN)/pip install -q "meson-python>=0.15" "meson>=1.1" ninja "cffi>=1.15"
	$(BIN)/pip install -q --no-build-isolation ".[embedded,test]"
	touch $@

demo: $(VENV)/.installed
	$(BIN)/python examples/demo_driver.py

# The logic tier waits more than it computes (a core idle about half its time), so the peer and
# MPI tiers run beside it, one after the other (~20 s in all here instead of ~38 s), each tier's
# output kept in one piece; the fault tiers (which use both cores) after them.
test: $(VENV)/.installed
	$(MAKE) --no-print-directory -j2 --output-sync=target test-logic test-peer-mpi
	$(MAKE) --no-print-directory test-faults

test-peer-mpi:
	$(MAKE) --no-print-directory test-peer test-mpi

# Tier 1: pure logic, and tier 3: fault and hot-swap tests (each a dpmpi-run child with a hard
# timeout; test_cluster.py: node failures on a simulated 2-node cluster of namespaces, ~15 s,
# skipped without root).
test-logic:
	$(BIN)/pytest -q -n $(JOBS) -m "not long" tests/test_logic.py tests/test_config.py tests/test_architecture.py tests/test_build.py tests/test_snapshot_local.py tests/test_late_local.py tests/test_chaos_logic.py tests/test_watcher_local.py tests/test_docs.py tests/test_bench_cli.py tests/test_gpu_logic.py tests/test_placement.py tests/test_run_nodes.py tests/test_setup_loss.py
# Two pytest processes share each of these tiers (pytest-xdist; JOBS=1 for one): the fault jobs
# leave a core idle about a third of the time. tests/test_watcher.py runs alone after the others:
# its tests assert how soon a death is noticed, which another job's load would blur.
JOBS ?= 2
SHARED_FAULT_TESTS := tests/test_faults.py tests/test_cprograms.py tests/test_hotswap.py tests/test_snapshot.py tests/test_workloads.py tests/test_chaos_smoke.py tests/test_gpu_fake.py tests/test_cluster.py
FAULT_TESTS := $(SHARED_FAULT_TESTS) tests/test_watcher.py
test-faults:
	$(BIN)/pytest -q -n $(JOBS) -m "not long" $(SHARED_FAULT_TESTS)
	$(BIN)/pytest -q -m "not long" tests/test_watcher.py

# The fault tests left out of make test for its time budget (e.g. a node going silent: ~14 s)
test-long: $(VENV)/.installed
	$(BIN)/pytest -q -m long $(FAULT_TESTS) tests/test_logic.py

# Tier 2: fault-free MPI tests under pytest-mpi at 1, 2 and 4 ranks. Launched by dpmpi-run,
# whose exit code is exact (mpirun --with-ft ulfm returns 0 even when ranks die, e.g. when
# pytest-timeout ends a hung rank). The program is the pytest script, not `python -m pytest`,
# which would import ./dpmpi, the uncompiled source tree.
test-mpi:
	@for n in 1 2 4; do \
	  echo "== fault-free MPI tests on $$n rank(s)"; \
	  timeout 600 $(BIN)/dpmpi-run -n $$n -- $(BIN)/pytest -q --color=no -p no:cacheprovider --with-mpi --only-mpi tests/test_mpi.py \
	    > .test-mpi-$$n.log 2>&1; rc=$$?; \
	  grep -a -E "(passed|failed|error|dpmpi-run)" .test-mpi-$$n.log; \
	  if [ $$rc -ne 0 ]; then cat .test-mpi-$$n.log; exit $$rc; fi; \
	done

# Tier 4, peers (~11 s): ten modules of mpi4py's own test suite (test_ulfm, test_comm, test_p2p_obj,
# test_cco_obj, ...) under plain mpirun --with-ft ulfm and under dpmpi-run at 2 and 4 ranks; fails
# when any test's outcome differs between the two on any rank, or a job hangs. The whole suite:
# `make peer`.
test-peer:
	$(BIN)/python bench/peer_mpi4py.py --quick

# docs/configuration.md is generated from dpmpi/config.py (tests/test_config.py checks it)
docs: $(VENV)/.installed
	cd / && $(abspath $(BIN))/python -c 'import sys, dpmpi.config as c; sys.stdout.write(c.markdown())' > $(CURDIR)/docs/configuration.md

bench: $(VENV)/.installed
	$(BIN)/python bench/stress_kill.py

# The bench suite, short (minutes here): every dpmpi-bench subcommand but the watcher's, then
# bench/results/report.md with its plots (PNG; skipped, and said so, without matplotlib: pip
# install ".[bench]"). The long series: dpmpi-bench all, or one subcommand (dpmpi-bench --help).
bench-quick: $(VENV)/.installed
	$(BIN)/dpmpi-bench all --quick

# Peer tier (a bench: tens of minutes here): mpi4py 4.1.2's own test suite (tests/peer/mpi4py)
# under plain mpirun --with-ft ulfm and under dpmpi-run at 1, 2 and 4 ranks, compared test by
# test; non-zero exit when an outcome differs or a job hangs. bench/results/peer_mpi4py.json.
peer: $(VENV)/.installed
	$(BIN)/python bench/peer_mpi4py.py

clean:
	rm -rf build .test-mpi-*.log bench/results
