# The two quick-start commands (README): `make demo` and `make test`.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip

.PHONY: deps build demo test bench clean

deps:
	$(PIP) install -q --disable-pip-version-check -r requirements-dev.txt

build: deps
	$(PYTHON) setup.py -q build_ext --inplace

demo: build
	bash tools/system-deps.sh java
	$(PYTHON) -m kwire demo $(ARGS)

test: build
	bash tools/system-deps.sh
	KWIRE_REQUIRE_EXTENSION=1 $(PYTHON) -m pytest -q -p no:cacheprovider tests

bench: build
	$(PYTHON) -m pytest -q bench --benchmark-only

clean:
	rm -rf build kwire/*.so kwire/_codec.c
