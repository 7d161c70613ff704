# The two quick-start commands (README): `make demo` and `make test`.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip

.PHONY: deps build demo test bench bench-report clean

deps:
	$(PIP) install -q --disable-pip-version-check -r requirements-dev.txt

build: deps
	$(PYTHON) setup.py -q build_ext --inplace

demo: build
	bash tools/system-deps.sh java
	$(PYTHON) -m kwire demo $(ARGS)

test: build
	bash tools/system-deps.sh
	$(PYTHON) -m kwire.embedded.kafka
	$(PYTHON) -m kwire.embedded.spark_kafka
	KWIRE_REQUIRE_EXTENSION=1 $(PYTHON) -m pytest -q -p no:cacheprovider tests

# The benchmark suite (bench/; sizes from KWIRE_BENCH_* variables, see bench/harness.py):
# microbenchmarks -> bench/results/micro.json, end-to-end and scaling runs ->
# bench/results/e2e-*.json and scaling.json; then the report (docs/bench/, README table).
bench: build
	mkdir -p bench/results
	$(PYTHON) -m pytest -q -p no:cacheprovider bench --benchmark-json=bench/results/micro.json
	$(PYTHON) tools/bench_report.py

# Regenerate docs/bench/ and the README's Benchmarks table from bench/results/*.json.
bench-report:
	$(PYTHON) tools/bench_report.py

clean:
	rm -rf build kwire/*.so kwire/_codec.c
