#!/usr/bin/env bash
# Builds the CUDA backend as a plugin and installs it as DIR/libtessera-cuda.so (the name the
# loader looks for). Usage: scripts/build-cuda-plugin.sh DIR
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:?usage: scripts/build-cuda-plugin.sh DIR}"
cargo build --release -p tessera-cuda-plugin
target="${CARGO_TARGET_DIR:-target}"
mkdir -p "$dir"
cp "$target/release/libtessera_cuda_plugin.so" "$dir/libtessera-cuda.so"
echo "installed $dir/libtessera-cuda.so"
