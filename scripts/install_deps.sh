#!/usr/bin/env bash
# Installs every build and test dependency of scored from Debian 12 packages, by name.
# The CUDA toolkit (nvcc, cudart, cuBLASLt, NCCL) is not a Debian package: where /usr/local/cuda exists
# the build uses it, otherwise CMake turns SCORED_ENABLE_CUDA off by itself.
# Usage: scripts/install_deps.sh [--runtime]   (run as root, or with sudo available)
#   --runtime: only the shared libraries the built binaries need (for slim runtime images)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates curl openssl
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev nlohmann-json3-dev
  libsentencepiece-dev libpcre2-dev libutf8proc-dev libssl-dev zlib1g-dev libcpp-httplib-dev
  libboost-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev clang-format
  python3 python3-venv python3-pip
  prometheus
)

# Exactly the packages owning the libraries the installed binaries link (readelf NEEDED; libc6, libgcc-s1,
# libstdc++6 come with debian:12-slim), plus the CA roots: tests/install/test_image.py compares this list with
# ldd + dpkg -S of `cmake --install`'s binaries. The CUDA libraries come from NVIDIA's repository
# (docker/Dockerfile).
runtime_packages=(
  ca-certificates libgrpc++1.51 libgrpc29 libprotobuf32 libabsl20220623
  libprometheus-cpp-core1.0 libpcre2-8-0 libutf8proc2 libssl3
)
if [ "${1:-}" = "--runtime" ]; then packages=("${runtime_packages[@]}"); fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "install_deps: all ${#packages[@]} Debian packages present"
  exit 0
fi
echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
