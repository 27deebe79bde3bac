# tacit — make install | demo | test | docs | bench | reproduce | lint
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
KERNELS := $(VENV)/.kernels

.PHONY: install demo test docs bench reproduce lint clean

install: $(STAMP) $(KERNELS)

# uv (from PyPI, into the venv) resolves, fetches and installs with a cache and in parallel:
# 8 s here where pip took 30 s, before byte-compiling, which compileall does on every core.
$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt uv
	$(BIN)/uv pip install -q --python $(BIN)/python -c constraints.txt -e '.[test]'
	$(BIN)/python -m compileall -q -j 0 $(VENV)/lib
	touch $(STAMP)

# numba notices that a cached kernel's own file changed, not that a kernel it calls from another
# file did (a limitation its documentation states): after any kernel's file changes, as after a
# pull, every cached kernel goes and compiles again on first use.
$(KERNELS): $(shell grep -rl --include='*.py' 'from numba import' src) | $(STAMP)
	find src -name '*.nbi' -delete -o -name '*.nbc' -delete
	touch $@

# A second run replaces demo-output/ only when asked: make demo FORCE=1.
demo: install
	$(BIN)/tacit demo --out demo-output $(if $(FORCE),--force)

lint: install
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy

# tacit's modules are byte-compiled first, and pytest may keep the tests it rewrote: where
# PYTHONDONTWRITEBYTECODE is set, every command a test starts would compile tacit again (all of
# it imports in 6.0 s uncompiled, 4.4 s compiled), and each pytest process would rewrite every
# test's assertions again (5 of the 12 s it takes to collect). The kernels compile
# (tests/kernel_warmup.py, once until a kernel's module changes) on both cores. Then three jobs
# share the two cores, each printing when all are done: the live tests (collected from the files
# that mark them), which spend much of their time waiting for the apps they run and assert
# nothing that a loaded machine breaks; and, a little lower (nice 5), the unit tests, and lint
# with the documentation build, so that those apps keep their pace (at the same priority the whole took 610 s where it had
# taken 470 s). Not much lower: at nice 10, beside two busy processes of other work, the unit
# tests starved (23% of them in 22 minutes).
# The unit tests go out a whole file at a time, the slowest files first (tests/conftest.py):
# the many short files that come last even out the workers' ends, and no module fixture runs
# in two workers. Three workers on two cores: the service's tests spend much of their time
# waiting for the servers they start.
test: export PYTHONDONTWRITEBYTECODE :=
test: install
	$(BIN)/python -m compileall -q -j 0 src tests
	$(BIN)/python tests/kernel_warmup.py
	nice -n 5 $(MAKE) --no-print-directory lint docs > .lint.log 2>&1 & lint=$$!; \
		$(BIN)/pytest -m live $$(grep -rl --include='*.py' 'mark\.live' tests) > .live.log 2>&1 & \
		live=$$!; \
		nice -n 5 $(BIN)/pytest -n 3 --dist loadfile --no-loadscope-reorder -m 'not live'; \
		unit=$$?; \
		wait $$live; live=$$?; wait $$lint; lint=$$?; cat .live.log .lint.log; \
		[ $$unit = 0 ] && [ $$live = 0 ] && [ $$lint = 0 ]

# The documentation site (mkdocs.yml) into site/, with --strict: a broken link, or a docstring
# the API reference cannot read, fails the build. The command reference is made from the
# commands themselves (docs/hooks/cli_reference.py).
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

bench: install
	@for b in bench/bench_*.py; do $(BIN)/python $$b || exit 1; done

reproduce: install
	$(BIN)/python bench/bench_pirate_reproduction.py --runs 3 --seconds 20 \
		--markdown docs/reproduction/pirate.md
	$(BIN)/python bench/bench_wap5_reproduction.py --markdown docs/reproduction/wap5.md
	$(BIN)/python bench/bench_rda_reproduction.py --markdown docs/reproduction/rda.md
	$(BIN)/python bench/bench_traceweaver.py --markdown docs/reproduction/traceweaver-accuracy.md
	$(BIN)/python bench/bench_traceweaver_ablation.py \
		--markdown docs/reproduction/traceweaver-ablation.md
	$(BIN)/python bench/bench_traceweaver_dynamism.py \
		--markdown docs/reproduction/traceweaver-dynamism.md
	$(BIN)/python bench/bench_traceweaver_confidence.py --markdown docs/reproduction/traceweaver.md
	$(BIN)/python bench/bench_calibration.py --markdown docs/reproduction/calibration.md
	$(BIN)/python bench/bench_tail.py --markdown docs/reproduction/traceweaver-tail.md
	$(BIN)/python bench/bench_abtest.py --requests 100000 \
		--markdown docs/reproduction/traceweaver-abtest.md
	$(BIN)/python bench/bench_ytrace_reproduction.py --markdown docs/reproduction/ytrace.md
	cat docs/reproduction/00-overview.md docs/reproduction/pirate.md docs/reproduction/wap5.md \
		docs/reproduction/rda.md docs/reproduction/traceweaver-accuracy.md \
		docs/reproduction/traceweaver-ablation.md docs/reproduction/traceweaver-dynamism.md \
		docs/reproduction/traceweaver.md docs/reproduction/calibration.md \
		docs/reproduction/traceweaver-tail.md \
		docs/reproduction/traceweaver-abtest.md docs/reproduction/ytrace.md \
		| sed 's#](\([a-z0-9-]*\.png\))#](reproduction/\1)#' > docs/reproduction.md

clean:
	rm -rf $(VENV) demo-output site .pytest_cache .ruff_cache .lint.log
