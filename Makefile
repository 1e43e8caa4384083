# Two entry points for a fresh clone:
#   make demo   set up .venv, then check and fix a bundled training script
#   make test   set up .venv with the test extra, then run the test suite (all CPUs)
#   make test-fast  the same without the tests marked slow
#   make bench  time amplint check/fix on the installed torch package, next to ruff
#   make realcode  check and fix a copy of the installed torch package; prove nothing broke
#   make ecosystem  check and fix real training code from pinned public repositories
#                   (tests/ecosystem/corpus.toml; clones read from ECOSYSTEM_CLONES)
#   make fuzz   a long run of the fuzz tests: generated programs, mutated fixtures, notebooks
#               of wrong types, codec cookies (CI runs a few hundred of each)
#   make trigger-audit  prove on every file of the ecosystem clones and of torch that
#               the triggers (the prefilter) drop no finding (~5 min on 2 CPUs)
#   make shapes generate training scripts from real code's idioms (tests/shapes/), hold every
#               check and fix to every oracle, update parity included (N=300; CI runs 300)
#   make verify-gpu  amplint verify on the bundled GPU examples, a float16 overflow it must fail, a
#                    sigmoid GAN it must decline and runnable-corpus scripts: docs/verify.md's table (needs CUDA)
#   make verify-gpu-corpus  export the runnable-corpus rows of verify-gpu from the clones (no CUDA needed)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# An FP32 training loop (AMP001) and a torch-1.x AMP script (AMP201).
DEMO_SCRIPTS := fixtures/fp32_steps/nested_loops.py fixtures/deprecated_amp/legacy_train.py
DEMO_DIR := build/demo

.PHONY: demo test test-fast bench realcode ecosystem trigger-audit fuzz shapes verify-gpu verify-gpu-corpus clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The test extra pins torch==2.13.0, the CPU build that installs offline here.
# The published schemas the output-format tests validate against, fetched once
# into the environment from the registry that publishes them (tests/published.py).
$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[test]"
	$(BIN)/python -m tests.published
	touch $@

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

demo: $(VENV)/.installed
	@echo "== amplint check $(DEMO_SCRIPTS)"
	$(BIN)/amplint check $(DEMO_SCRIPTS) || test $$? -eq 1  # 1 means: findings
	@echo "== amplint fix $(DEMO_SCRIPTS) (a diff; nothing is written)"
	$(BIN)/amplint fix $(DEMO_SCRIPTS) || test $$? -eq 1  # 1 means: fixes to show
	@echo "== amplint fix --apply on copies in $(DEMO_DIR)"
	rm -rf $(DEMO_DIR) && mkdir -p $(DEMO_DIR) && cp $(DEMO_SCRIPTS) $(DEMO_DIR)/
	$(BIN)/amplint fix --apply $(DEMO_DIR)
	$(BIN)/amplint check $(DEMO_DIR)

# Every test, on every CPU (pytest-xdist); a file's tests stay in one worker,
# so its module fixtures (a built wheel, a hook repository) are made once.
test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -n auto --dist loadfile

# Leaves out the tests marked slow (training runs, wheel, hooks): for quick rounds.
test-fast: $(VENV)/.installed-test
	$(BIN)/python -m pytest -n auto --dist loadfile -m "not slow"

# Not a test: prints a table for docs/performance.md.
bench: $(VENV)/.installed-test
	-$(BIN)/python -m pip install --quiet ruff==0.17.6  # optional: the row to compare with
	$(BIN)/python tests/bench.py

realcode: $(VENV)/.installed-test
	$(BIN)/python -m tests.realcode

# Clones of the pinned repositories, never committed: <owner>+<name>/repo (as the
# team's fetch tool leaves them), <owner>/<name> or <name>; a missing one is skipped.
ECOSYSTEM_CLONES ?= ../.mirror
ecosystem: $(VENV)/.installed-test
	AMPLINT_ECOSYSTEM_CLONES=$(ECOSYSTEM_CLONES) $(BIN)/python -m tests.ecosystem $(ECOSYSTEM_ARGS)

trigger-audit: $(VENV)/.installed-test
	$(BIN)/python -m tests.trigger_audit --clones $(ECOSYSTEM_CLONES)

FUZZ_EXAMPLES ?= 20000
fuzz: $(VENV)/.installed-test
	AMPLINT_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -p no:cacheprovider tests/test_fuzz.py

N ?= 300
SEED ?= 0
shapes: $(VENV)/.installed-test
	$(BIN)/python -m tests.shapes -n $(N) --seed $(SEED)

# The runnable corpus's GPU rows need their trees, exported where the clones
# are; on a GPU machine without them, carry build/verify-gpu-corpus there.
VERIFY_GPU_CORPUS := build/verify-gpu-corpus
verify-gpu: $(VENV)/.installed-test $(VERIFY_GPU_CORPUS)/.exported
	$(BIN)/python tests/verify_table.py --corpus $(VERIFY_GPU_CORPUS)

verify-gpu-corpus: $(VERIFY_GPU_CORPUS)/.exported

$(VERIFY_GPU_CORPUS)/.exported: $(VENV)/.installed-test
	$(BIN)/python -m tests.ecosystem_runnable --export $(VERIFY_GPU_CORPUS) \
	  $(foreach name,$(shell $(BIN)/python -c "from tests.verify_table import CORPUS_ROWS; print(*sorted({row[0] for row in CORPUS_ROWS}))"),--only $(name))
	touch $@

clean:
	rm -rf $(VENV) build dist .pytest_cache
