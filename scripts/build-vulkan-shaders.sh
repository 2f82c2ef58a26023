#!/usr/bin/env bash
# Compiles backends/vulkan/shaders/*.comp into the committed SPIR-V under
# backends/vulkan/shaders/bin with the pinned glslang of the shader-gen tool;
# `--check` only compares and fails when a binary differs from its source.
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo run --quiet --release --locked \
    --manifest-path backends/vulkan/shader-gen/Cargo.toml \
    --target-dir "${CARGO_TARGET_DIR:-target}/shader-gen" -- "$@" "$PWD/backends/vulkan/shaders"
