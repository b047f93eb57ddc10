# Every target sets itself up: a fresh machine needs only Python 3.11 and pip.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench lint clean

# Reinstall only when the dependency list changes; otherwise this costs nothing. Every extra, at
# the exact versions constraints.txt holds, so each build gets what was tested.
$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[all,test]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/gapwatch demo

test: $(STAMP)
	@bash scripts/ensure_test_services.sh
	$(BIN)/python -m pytest -q -x -p no:cacheprovider --durations=20 -n 2 --dist loadfile $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m bench

lint: $(STAMP)
	$(BIN)/ruff check app monitor evals trainer tests bench

clean:
	rm -rf $(VENV) build *.egg-info
