# Two commands on a fresh machine (Python >= 3.11):
#   make parkinsons   set up .venv and run the Parkinsons scenario (all protocols) -> results/parkinsons/
#   make test         set up .venv (+ Mosquitto for the MQTT tests) and run the whole test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: parkinsons test check docs mosquitto benchmarks clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	@# bytecode for the editable sources now, so node processes need not compile them where
	@# PYTHONDONTWRITEBYTECODE is set (about 60 ms per process; Python recompiles edited files)
	$(BIN)/python -m compileall -q p2pem
	touch $(STAMP)

parkinsons: $(STAMP)
	$(BIN)/p2pem simulate scenarios/parkinsons.toml --out results/parkinsons

# The MQTT tests run against a real broker; install Debian's mosquitto when it is missing.
mosquitto:
	@if command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing mosquitto (apt-get)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mosquitto >/dev/null; \
	elif command -v sudo >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then \
		echo "installing mosquitto (sudo apt-get)"; \
		sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mosquitto >/dev/null; \
	else echo "warning: mosquitto is not installed and cannot be installed here: the MQTT tests will be skipped"; fi

test: $(STAMP) mosquitto
	$(BIN)/python -m pytest -q

# Static checks: ruff (real mistakes, see [tool.ruff]), mypy (the package ships py.typed) and the architecture contracts of
# [tool.importlinter] (the math imports no transport or crypto; only the MQTT link imports
# aiomqtt; only p2pem.deploy.crypto imports cryptography).
check: $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[test,dev]"
	$(BIN)/ruff check p2pem tests sim
	$(BIN)/mypy p2pem
	$(BIN)/lint-imports
	$(MAKE) docs

# API reference from the docstrings, with the README's quick start and scenario guide (mkdocs.yml);
# strict: a broken reference, link or docstring fails the build.  Output in build/site/.
docs: $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[docs]"
	$(BIN)/mkdocs build --strict

benchmarks: $(STAMP)
	for b in sim/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) results .pytest_cache
