#!/usr/bin/env bash
# The Python client's declared dependency floors hold: a fresh temporary venv gets exactly the minimums
# client/python/pyproject.toml declares (grpcio, grpcio-health-checking, protobuf at their ">=" versions),
# then the client itself (--no-deps), and imports it with its generated stubs (which check the grpcio and
# protobuf versions at import). Needs PyPI, like scripts/setup_python.sh, which runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# "name==floor" for every ">=" of [project] dependencies.
mapfile -t pins < <("$python" - <<'PY'
import re
text = open("client/python/pyproject.toml").read()
deps = re.search(r"^dependencies = \[(.*?)\]", text, re.M | re.S).group(1)
for name, floor in re.findall(r'"([A-Za-z0-9_.-]+)>=([0-9][0-9.]*)"', deps):
    print(f"{name}=={floor}")
PY
)
[ "${#pins[@]}" -gt 0 ] || { echo "check_python_floors: no floors found in client/python/pyproject.toml" >&2; exit 1; }
echo "check_python_floors: ${pins[*]}"
"$python" -m venv "$tmp/venv"
pip=("$tmp/venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" "${pins[@]}"
# Built from a copy, so that the build's outputs stay out of the source tree.
mkdir -p "$tmp/src/client"
cp -rL client/python "$tmp/src/client/python"
cp -r proto "$tmp/src/proto"
rm -rf "$tmp/src/client/python/src/scored_client/_gen" "$tmp/src/client/python/build"
"${pip[@]}" --no-deps "$tmp/src/client/python"
"$tmp/venv/bin/python" -m pip check --disable-pip-version-check
(cd "$tmp" && "$tmp/venv/bin/python" -c '
import grpc, google.protobuf
import scored_client, scored_client.aio
from scored_client._gen.scored.v1 import scorer_pb2, scorer_pb2_grpc
print(f"check_python_floors: scored_client imports with grpcio {grpc.__version__}, "
      f"protobuf {google.protobuf.__version__}")
')
