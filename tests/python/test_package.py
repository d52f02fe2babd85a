"""The scored-client package as a user gets it: an sdist built from the repository, a wheel built from that
sdist alone (no repository around it), the wheel's contents and metadata, and the wheel imported and its
console scripts run. Offline: the wheel is unpacked and put on PYTHONPATH of this venv (which holds its
dependencies) instead of being pip-installed into a fresh venv. Before: a wheel built from the sdist failed
("scorer.proto not found"), the declared floors (grpcio>=1.60, protobuf>=5.26) were below what the
generated code checks at import, py.typed, README and LICENSE were missing, and the console scripts of the
extras crashed with ModuleNotFoundError when the extra was absent."""
import email.parser
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

from conftest import REPO

PACKAGE = os.path.join(REPO, "client", "python")
NAME = "scored_client-0.1.0"


def build(hook, source_dir, out_dir):
    """Runs a PEP 517 hook of setuptools (the build backend) in source_dir, without build isolation (offline:
    this venv holds setuptools and grpcio-tools); returns the built file's path."""
    code = f"from setuptools import build_meta; print(build_meta.{hook}({out_dir!r}))"
    run = subprocess.run([sys.executable, "-c", code], cwd=source_dir, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    return os.path.join(out_dir, run.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("package")
    # A copy of the repository's layout (the build writes egg-info and stubs into its source folder).
    repo = tmp / "repo"
    shutil.copytree(PACKAGE, repo / "client" / "python", symlinks=False,
                    ignore=shutil.ignore_patterns("_gen", "*.egg-info", "build", "dist", "__pycache__"))
    shutil.copytree(os.path.join(REPO, "proto"), repo / "proto")
    sdist = build("build_sdist", repo / "client" / "python", str(tmp / "sdist"))
    # The sdist unpacked where no repository is around it.
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp / "unpacked")
    wheel = build("build_wheel", tmp / "unpacked" / NAME, str(tmp / "wheel"))
    site = tmp / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    return {"sdist": sdist, "wheel": wheel, "site": str(site)}


def test_sdist_carries_proto_readme_license_and_py_typed(artifacts):
    with tarfile.open(artifacts["sdist"]) as tar:
        names = set(tar.getnames())
    for f in ("proto/scored/v1/scorer.proto", "README.md", "LICENSE", "PKG-INFO", "setup.py",
              "src/scored_client/py.typed", "src/scored_client/aio.py"):
        assert f"{NAME}/{f}" in names, f
    with open(os.path.join(REPO, "proto", "scored", "v1", "scorer.proto"), "rb") as f:
        assert tar_bytes(artifacts["sdist"], f"{NAME}/proto/scored/v1/scorer.proto") == f.read()
    with open(os.path.join(REPO, "LICENSE"), "rb") as f:
        assert tar_bytes(artifacts["sdist"], f"{NAME}/LICENSE") == f.read()


def tar_bytes(path, member):
    with tarfile.open(path) as tar:
        return tar.extractfile(member).read()


def wheel_text(artifacts, member):
    with zipfile.ZipFile(artifacts["wheel"]) as z:
        return z.read(member).decode()


def test_wheel_from_sdist_has_stubs_and_typing(artifacts):
    with zipfile.ZipFile(artifacts["wheel"]) as z:
        names = set(z.namelist())
    gen = "scored_client/_gen/scored/v1"
    for f in ("scored_client/py.typed", "scored_client/aio.py", f"{gen}/scorer_pb2.py",
              f"{gen}/scorer_pb2.pyi", f"{gen}/scorer_pb2_grpc.py", "scored_client-0.1.0.dist-info/licenses/LICENSE"):
        assert f in names, f
    entry_points = wheel_text(artifacts, "scored_client-0.1.0.dist-info/entry_points.txt")
    assert "scored-lm-eval = scored_client._scripts:lm_eval_main" in entry_points
    assert "scored-plot = scored_client._scripts:plot_main" in entry_points


def test_dependency_floors_are_what_the_generated_code_checks(artifacts):
    stubs = wheel_text(artifacts, "scored_client/_gen/scored/v1/scorer_pb2_grpc.py")
    grpc_floor = re.search(r"GRPC_GENERATED_VERSION = '([0-9.]+)'", stubs).group(1)
    messages = wheel_text(artifacts, "scored_client/_gen/scored/v1/scorer_pb2.py")
    gencode = re.search(r"ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,"
                        r"\s*(\d+),\s*(\d+),\s*(\d+),", messages)
    protobuf_floor = ".".join(gencode.groups())
    metadata = email.parser.Parser().parsestr(wheel_text(artifacts, "scored_client-0.1.0.dist-info/METADATA"))
    requires = [r for r in metadata.get_all("Requires-Dist") if "extra ==" not in r]
    assert sorted(requires) == sorted([f"grpcio>={grpc_floor}", f"grpcio-health-checking>={grpc_floor}",
                                       f"protobuf>={protobuf_floor}"])
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert "AsyncScorerClient" in metadata.get_payload()  # the README is the long description
    # The test venv's pins (scripts/requirements-test.txt, installed by scripts/setup_python.sh) meet them.
    with open(os.path.join(REPO, "scripts", "requirements-test.txt")) as f:
        pins = dict(line.strip().split("==") for line in f if "==" in line)

    def version(v):
        return tuple(int(p) for p in v.split("."))

    assert version(pins["grpcio"]) >= version(grpc_floor)
    assert version(pins["grpcio-health-checking"]) >= version(grpc_floor)
    assert version(pins["protobuf"]) >= version(protobuf_floor)


def run_unpacked(artifacts, code):
    env = dict(os.environ, PYTHONPATH=artifacts["site"])
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


def test_unpacked_wheel_imports(artifacts):
    run = run_unpacked(artifacts, "import scored_client, scored_client.aio; print(scored_client.__file__); "
                                  "print(scored_client.aio.AsyncScorerClient.score.__name__)")
    assert run.returncode == 0, run.stderr
    path, name = run.stdout.split()
    assert path.startswith(artifacts["site"]) and name == "score"


@pytest.mark.parametrize("function,module,extra", [("plot_main", "matplotlib", "plot"),
                                                   ("lm_eval_main", "lm_eval", "lm-eval")])
def test_console_scripts_name_a_missing_extra(artifacts, function, module, extra):
    # The extra's module made unimportable (a None entry in sys.modules), as when it is not installed.
    run = run_unpacked(artifacts, f"import sys; sys.modules[{module!r}] = None; "
                                  f"from scored_client._scripts import {function}; {function}()")
    assert run.returncode == 1, run.stderr
    assert f"pip install 'scored-client[{extra}]'" in run.stderr
    assert "Traceback" not in run.stderr


def test_console_script_runs_with_its_extra(artifacts):
    run = run_unpacked(artifacts, "import sys; sys.argv = ['scored-plot', '--help']; "
                                  "from scored_client._scripts import plot_main; plot_main()")
    assert run.returncode == 0, run.stderr
    assert "--metric" in run.stdout
