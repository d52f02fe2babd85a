"""Shared fixture: the build tree installed with `cmake --install BUILD --prefix TMP --component runtime`.

Environment (set by tests/install/CMakeLists.txt when run through ctest):
  SCORED_BINARY_DIR  the CMake build folder to install
  SCORED_DATA        offline assets (stories260K-hf, wikitext-2-raw)
  CMAKE_COMMAND      the cmake that configured the build
"""
import os
import shutil
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("SCORED_BINARY_DIR", os.path.join(REPO, "build"))
DATA = os.environ.get("SCORED_DATA", os.path.join(REPO, "..", "shared", "data"))
BINARIES = ("scored", "scored-ppl", "scored-load")


@pytest.fixture(scope="session")
def prefix(tmp_path_factory):
    cmake = os.environ.get("CMAKE_COMMAND") or shutil.which("cmake")
    assert cmake, "cmake not found (ctest sets CMAKE_COMMAND)"
    out = tmp_path_factory.mktemp("install") / "prefix"
    run = subprocess.run([cmake, "--install", BUILD, "--prefix", str(out), "--component", "runtime"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    for name in BINARIES:
        assert os.access(os.path.join(out, "bin", name), os.X_OK), f"{name} not installed in {out}/bin"
    return str(out)
