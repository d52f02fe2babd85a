#!/usr/bin/env bash
# Fetches the demo/test assets from their public sources, for machines without ../shared/data:
#   - WikiText-2 raw (Merity et al. 2016): wikitext-2-raw-v1.zip as mirrored by the ggml-org/ci dataset
#     on Hugging Face (the copy llama.cpp's perplexity scripts use); wiki.test.raw is checked by sha256.
#   - stories260K (Karpathy, MIT): stories260K.bin + tok512.model from the karpathy/tinyllamas model repo on
#     Hugging Face, converted to a Hugging Face Llama folder by scripts/convert_llama2c.py.
# Usage: scripts/fetch_assets.sh OUT_DIR      (then SCORED_DATA=OUT_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: fetch_assets.sh OUT_DIR}
mkdir -p "$out/wikitext-2-raw" "$out/stories260K" "$out/stories260K-hf"
hf=https://huggingface.co

if [ ! -f "$out/wikitext-2-raw/wiki.test.raw" ]; then
  curl -fL --retry 3 -o "$out/wikitext-2-raw-v1.zip" "$hf/datasets/ggml-org/ci/resolve/main/wikitext-2-raw-v1.zip"
  python3 -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
[open(sys.argv[2] + '/' + n.split('/')[-1], 'wb').write(z.read(n)) for n in z.namelist() if n.endswith(('test.raw', 'valid.raw'))]" \
    "$out/wikitext-2-raw-v1.zip" "$out/wikitext-2-raw"
  rm -f "$out/wikitext-2-raw-v1.zip"
fi
echo "173c87a53759e0201f33e0ccf978e510c2042d7f2cb78229d9a50d79b9e7dd08  $out/wikitext-2-raw/wiki.test.raw" | sha256sum -c -

for f in stories260K.bin tok512.model; do
  [ -f "$out/stories260K/$f" ] || curl -fL --retry 3 -o "$out/stories260K/$f" "$hf/karpathy/tinyllamas/resolve/main/stories260K/$f"
done
scripts/setup_python.sh
.venv/bin/python scripts/convert_llama2c.py "$out/stories260K/stories260K.bin" "$out/stories260K/tok512.model" \
  "$out/stories260K-hf"
echo "fetch_assets: assets in $out"
