#!/usr/bin/env bash
# Writes constraints.txt from an environment in which the whole test suite passed: the exact
# versions that `make` and CI install, so every build gets what was tested.
#   scripts/freeze_constraints.sh [PYTHON]     (default: .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
python="${1:-.venv/bin/python}"
{
  echo "# The exact versions the test suite passed with; pyproject.toml declares the ranges."
  echo "# Regenerate with scripts/freeze_constraints.sh after changing a dependency."
  # torch freezes as 2.13.0+cpu. The constraint names the release alone, torch==2.13.0, which the
  # CPU wheel satisfies and which pip prefers to a plain 2.13.0 (a local label sorts above it).
  # pip itself is left to the environment; setuptools (a dependency of torch) is pinned with the rest.
  "$python" -m pip freeze --all --exclude-editable | grep -v -e "^#" -e "^pip==" | sed -E 's/^(torch==[0-9.]+)\+cpu$/\1/'
} > constraints.txt
