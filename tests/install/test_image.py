"""docker/Dockerfile against the installed package. No container engine runs on the CI machine (Debian's
podman there fails in its OCI runtime, crun: setrlimit refused, cgroups in hybrid mode), so the image is
checked statically:
- its runtime stage installs exactly the Debian packages that own the shared libraries the installed binaries
  link (readelf NEEDED, resolved by ldd, owner by dpkg -S), minus those of the debian:12-slim base; every
  other library ldd lists comes with those packages' dependencies; the CUDA libraries (not Debian packages:
  NVIDIA's repository) exactly when linked;
- the builder installs with the same command as this test, and every COPY source exists: the install
  prefix's paths after `cmake --install`, the context's in the checkout and not excluded by .dockerignore."""
import fnmatch
import os
import re
import shutil
import subprocess

import pytest

from conftest import BINARIES, REPO

# Libraries of the base image (debian:12-slim: Priority required), never installed by the Dockerfile.
BASE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g"}
# Installed for what they hold, not for a library: the CA roots of TLS peers.
NON_LIBRARY_PACKAGES = {"ca-certificates"}
# CUDA libraries (the toolkit's, not dpkg's here) and their package in NVIDIA's Debian 12 repository.
CUDA_LIBRARIES = (("libcublasLt.so", "libcublas-"), ("libcublas.so", "libcublas-"),
                  ("libnccl.so", "libnccl2"), ("libcudart.so", "cuda-cudart-"))


def dockerfile():
    with open(os.path.join(REPO, "docker", "Dockerfile")) as f:
        return f.read()


def runtime_stage():
    return dockerfile().split(" AS runtime", 1)[1].replace("\\\n", " ")


def declared_runtime_packages():
    """install_deps.sh --runtime's list (the runtime stage runs it) and the stage's own apt-get installs."""
    assert "install_deps.sh --runtime" in runtime_stage()
    with open(os.path.join(REPO, "scripts", "install_deps.sh")) as f:
        body = re.search(r"^runtime_packages=\((.*?)\)", f.read(), re.M | re.S).group(1)
    debian = set(body.split())
    extra = set()
    for args in re.findall(r"apt-get install ([^&]+)", runtime_stage()):
        extra |= {a for a in args.split() if not a.startswith("-")}
    return debian, extra


def tool(name):
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed")
    return path


def linked_libraries(binary):
    """(NEEDED sonames, {soname: path} of everything ldd resolves)."""
    readelf = subprocess.run([tool("readelf"), "-d", binary], capture_output=True, text=True, timeout=60)
    assert readelf.returncode == 0, readelf.stderr
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", readelf.stdout))
    ldd = subprocess.run([tool("ldd"), binary], capture_output=True, text=True, timeout=60)
    assert ldd.returncode == 0, ldd.stderr
    assert "not found" not in ldd.stdout, ldd.stdout
    resolved = dict(re.findall(r"^\s*(\S+) => (/\S+)", ldd.stdout, re.M))
    return needed, resolved


def owner(path):
    for candidate in (path, os.path.realpath(path)):
        run = subprocess.run([tool("dpkg"), "-S", candidate], capture_output=True, text=True, timeout=60)
        if run.returncode == 0:
            return run.stdout.split(":", 1)[0].strip()
    return None


def cuda_package(soname):
    for prefix, package in CUDA_LIBRARIES:
        if soname.startswith(prefix):
            return package
    return None


def dependency_closure(packages):
    """Installed packages reachable through Depends / Pre-Depends (dpkg's status database)."""
    seen, todo = set(), list(packages)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        q = subprocess.run(["dpkg-query", "-W", "-f=${Depends}, ${Pre-Depends}", p], capture_output=True,
                           text=True, timeout=60)
        if q.returncode != 0:
            continue
        for alternative in q.stdout.split(","):
            name = alternative.split("|")[0].strip().split(" ")[0].split(":")[0]
            if name:
                todo.append(name)
    return seen


def test_runtime_packages_are_exactly_those_of_the_linked_libraries(prefix):
    debian_declared, extra_declared = declared_runtime_packages()
    direct, every = set(), set()
    cuda_linked = set()
    for name in BINARIES:
        needed, resolved = linked_libraries(os.path.join(prefix, "bin", name))
        if any(lib.startswith(("libasan.so", "libubsan.so")) for lib in needed):
            pytest.skip("a sanitizer build (scripts/sanitize.sh) links runtimes no image ships")
        for soname, path in resolved.items():
            package = cuda_package(soname) if cuda_package(soname) else owner(path)
            assert package, f"{name}: {soname} ({path}) belongs to no Debian package"
            if cuda_package(soname):
                if soname in needed:
                    cuda_linked.add(package)
                continue
            every.add(package)
            if soname in needed:
                direct.add(package)
    want = direct - BASE_PACKAGES
    got = debian_declared - NON_LIBRARY_PACKAGES
    assert got == want, f"install_deps.sh --runtime: lacks {sorted(want - got)}, extra {sorted(got - want)}"
    # Libraries that only the linked libraries link come with their packages' dependencies.
    assert every - BASE_PACKAGES <= dependency_closure(want), sorted(every - dependency_closure(want))
    # CUDA: each NVIDIA package installed exactly when a binary links its library (cudart is static). The
    # image builds with SCORED_ENABLE_CUDA=ON: a CPU-only build has nothing to compare.
    if not cuda_linked:
        return
    for _, package in CUDA_LIBRARIES:
        linked = package in cuda_linked
        assert linked == any(p.startswith(package) for p in extra_declared), (package, sorted(extra_declared))
    others = {p for p in extra_declared if not any(p.startswith(c) for _, c in CUDA_LIBRARIES)}
    assert not others, f"the runtime stage installs packages of no linked library: {sorted(others)}"


def test_builder_installs_what_the_runtime_stage_copies(prefix):
    text = dockerfile()
    assert re.search(r"DESTDIR=/opt/scored cmake --install build --component runtime", text)
    sources = re.findall(r"^COPY --from=builder /opt/scored/usr/local/(\S*) ", text, re.M)
    assert "bin/" in sources and "share/" in sources, sources
    for rel in sources:
        assert os.path.exists(os.path.join(prefix, rel)), f"COPY --from=builder /opt/scored/usr/local/{rel}"
    for name in BINARIES:
        assert os.path.exists(os.path.join(prefix, "bin", name))
    # The entry point is an installed binary.
    entry = re.search(r'^ENTRYPOINT \["/usr/local/bin/([^"]+)"\]', text, re.M).group(1)
    assert entry in BINARIES


def dockerignore_patterns():
    with open(os.path.join(REPO, ".dockerignore")) as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


def test_dockerignore_excludes_outputs_and_keeps_copied_sources():
    patterns = dockerignore_patterns()
    for want in (".git", "build*/", ".venv*"):
        assert want in patterns, want
    context_sources = re.findall(r"^COPY (?!--from)(\S+) ", dockerfile(), re.M)
    assert context_sources, "the Dockerfile copies nothing from the context"
    for src in context_sources:
        if src == ".":
            continue
        assert os.path.exists(os.path.join(REPO, src)), src
        for pattern in patterns:
            assert not fnmatch.fnmatch(src, pattern.rstrip("/")), (src, pattern)
    # The sources the builder needs are not excluded.
    for needed in ("CMakeLists.txt", "cmake", "engine", "server", "client", "proto", "scripts", "deploy"):
        for pattern in patterns:
            assert not fnmatch.fnmatch(needed, pattern.rstrip("/")), (needed, pattern)


def test_runtime_user_is_numeric_and_matches_kubernetes():
    """USER by uid:gid (a non-root check needs no /etc/passwd), the ids deploy/kubernetes runs as."""
    users = re.findall(r"^USER\s+(\S+)", runtime_stage(), re.M)
    assert users == ["10001:10001"], users
    for manifest in ("deployment.yaml", "statefulset-multihost.yaml"):
        with open(os.path.join(REPO, "deploy", "kubernetes", manifest)) as f:
            text = f.read()
        assert "runAsUser: 10001" in text and "runAsGroup: 10001" in text, manifest
