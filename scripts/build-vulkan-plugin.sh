#!/usr/bin/env bash
# Builds the Vulkan backend as a plugin and installs it as DIR/libtessera-vulkan.so (the name
# the loader looks for). Usage: scripts/build-vulkan-plugin.sh DIR
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:?usage: scripts/build-vulkan-plugin.sh DIR}"
cargo build --release -p tessera-vulkan-plugin
target="${CARGO_TARGET_DIR:-target}"
mkdir -p "$dir"
cp "$target/release/libtessera_vulkan_plugin.so" "$dir/libtessera-vulkan.so"
echo "installed $dir/libtessera-vulkan.so"
