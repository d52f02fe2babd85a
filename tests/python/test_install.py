"""`cmake --install` of the build tree into a temporary prefix, as docker/Dockerfile and a packager do: the
binaries land in bin/ and run (--version, --help), the systemd unit and the deploy files in share/scored,
README and LICENSE in share/doc/scored; every path the Dockerfile copies from the install prefix exists;
.dockerignore keeps build trees and venvs out of the image's context. Before: there were no install()
rules, `cmake --install` installed nothing and exited 0, and the Dockerfile's COPY of the prefix failed."""
import os
import re
import shutil
import subprocess

import pytest

from conftest import BUILD, REPO

BINARIES = ("scored", "scored-ppl", "scored-load")


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    cmake = os.environ.get("CMAKE_COMMAND") or shutil.which("cmake")
    assert cmake, "cmake not found (ctest sets CMAKE_COMMAND)"
    out = tmp_path_factory.mktemp("install") / "prefix"
    run = subprocess.run([cmake, "--install", BUILD, "--prefix", str(out), "--component", "runtime"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    return str(out)


def run_binary(path, *args):
    return subprocess.run([path, *args], capture_output=True, text=True, timeout=60)


def test_binaries_installed_and_run(prefix):
    for name in BINARIES:
        installed = os.path.join(prefix, "bin", name)
        assert os.access(installed, os.X_OK), installed
        version = run_binary(installed, "--version")
        assert version.returncode == 0, version.stderr
        assert re.fullmatch(rf"{re.escape(name)} \d+\.\d+\.\d+( \(git [0-9a-f]+(-dirty)?\))?\n", version.stdout)
        help_run = run_binary(installed, "--help")
        assert help_run.returncode == 0 and "No flags matched" not in help_run.stdout
        assert ("--model" if name == "scored" else "--server") in help_run.stdout
    # The installed daemon is the built one.
    built = run_binary(os.path.join(BUILD, "server", "scored"), "--version")
    assert run_binary(os.path.join(prefix, "bin", "scored"), "--version").stdout == built.stdout


def test_deploy_files_and_docs_installed(prefix):
    share = os.path.join(prefix, "share")
    for rel in ("kubernetes/deployment.yaml", "kubernetes/statefulset-multihost.yaml",
                "prometheus/prometheus.yml", "grafana/scored-dashboard.json"):
        with open(os.path.join(REPO, "deploy", rel), "rb") as want, \
                open(os.path.join(share, "scored", rel), "rb") as got:
            assert got.read() == want.read(), rel
    with open(os.path.join(share, "scored", "systemd", "scored.service")) as f:
        unit = f.read()
    # ExecStart names the install prefix's scored (staging goes through DESTDIR, as the Dockerfile does).
    exec_start = re.search(r"^ExecStart=(\S+) ", unit, re.M).group(1)
    assert exec_start == os.path.join(prefix, "bin", "scored")
    assert "Type=notify" in unit
    for doc in ("README.md", "LICENSE"):
        assert os.path.exists(os.path.join(share, "doc", "scored", doc)), doc


def test_dockerfile_copies_only_what_the_install_puts_there(prefix):
    with open(os.path.join(REPO, "docker", "Dockerfile")) as f:
        text = f.read()
    assert re.search(r"DESTDIR=/opt/scored cmake --install build --component runtime", text)
    sources = re.findall(r"^COPY --from=builder /opt/scored/usr/local/(\S*) ", text, re.M)
    assert sources, "the runtime stage copies nothing from the install prefix"
    for rel in sources:
        assert os.path.exists(os.path.join(prefix, rel)), f"COPY --from=builder /opt/scored/usr/local/{rel}"
    assert "bin/" in sources and "share/" in sources


def needed_libraries(path):
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf is not installed")
    run = subprocess.run([readelf, "-d", path], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", run.stdout))


def test_dockerfile_installs_the_cuda_libraries_scored_links(prefix):
    needed = needed_libraries(os.path.join(prefix, "bin", "scored"))
    if not any(lib.startswith("libcublasLt.so") for lib in needed):
        pytest.skip("a build without CUDA: the image's CUDA libraries are not checked")
    with open(os.path.join(REPO, "docker", "Dockerfile")) as f:
        runtime = f.read().split(" AS runtime", 1)[1]
    installs = " ".join(re.findall(r"apt-get install ([^&]+)", runtime.replace("\\\n", " ")))
    # Each CUDA library's Debian package (NVIDIA's repository) is installed exactly when scored needs it.
    for prefix_of_lib, package in (("libcublasLt.so", "libcublas-"), ("libnccl.so", "libnccl2"),
                                   ("libcudart.so", "cuda-cudart-")):
        linked = any(lib.startswith(prefix_of_lib) for lib in needed)
        assert linked == (package in installs), (prefix_of_lib, package, sorted(needed))


def test_dockerignore_keeps_build_outputs_out():
    with open(os.path.join(REPO, ".dockerignore")) as f:
        patterns = {line.strip() for line in f if line.strip() and not line.startswith("#")}
    for want in (".git", "build*/", ".venv*"):
        assert want in patterns, want
    # Nothing the Dockerfile copies from the context is excluded.
    with open(os.path.join(REPO, "docker", "Dockerfile")) as f:
        context_sources = re.findall(r"^COPY (?!--from)(\S+) ", f.read(), re.M)
    for src in context_sources:
        assert src == "." or os.path.exists(os.path.join(REPO, src)), src
