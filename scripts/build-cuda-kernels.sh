#!/usr/bin/env bash
# Compiles the CUDA kernels (backends/cuda/kernels/*.cu) into the fatbins the tessera-cuda crate
# embeds (backends/cuda/kernels/bin/<name>.fatbin), with the pinned nvcc 13.0.88, so that
# `cargo build --features cuda` needs no CUDA toolkit.
#
#   scripts/build-cuda-kernels.sh           regenerate the committed fatbins
#   scripts/build-cuda-kernels.sh --check   regenerate into a temporary directory and compare
#                                           with the committed ones (exit 1 on any difference)
#
# nvcc comes from NVIDIA's pip wheels, installed on first use into target/cuda-toolchain (about
# 280 MB, needs gcc as the host preprocessor). NVCC=/path/to/nvcc uses another compiler, but
# only the pinned one reproduces the committed bytes. Its output is byte-reproducible: no line
# info, no debug info, no paths; each file is compiled from inside the kernels directory.
#
# Each fatbin holds SASS for sm_80 (Ampere), sm_89 (Ada) and sm_90a (Hopper) and compute_90 PTX
# that newer GPUs JIT-compile, compressed for size (loading them needs a CUDA 13.0 driver, 580 or
# newer, as 13.0 PTX does anyway).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
kernels="$root/backends/cuda/kernels"
bin="$kernels/bin"
toolchain="$root/target/cuda-toolchain"

check=0
case "${1:-}" in
    "") ;;
    --check) check=1 ;;
    *)
        echo "usage: $0 [--check]" >&2
        exit 2
        ;;
esac

wheels=(
    nvidia-cuda-nvcc==13.0.88
    nvidia-nvvm==13.0.88
    nvidia-cuda-crt==13.0.88
    nvidia-cuda-runtime==13.0.96
    nvidia-cuda-cccl==13.0.85
)

nvcc="${NVCC:-}"
if [[ -z "$nvcc" ]]; then
    nvcc="$toolchain/nvidia/cu13/bin/nvcc"
    if [[ ! -x "$nvcc" ]]; then
        echo "installing nvcc 13.0.88 from pip wheels into ${toolchain#"$root"/}" >&2
        rm -rf "$toolchain"
        python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
            --target "$toolchain" "${wheels[@]}"
    fi
fi
if ! "$nvcc" --version | grep -q "V13.0.88"; then
    echo "warning: $nvcc is not nvcc 13.0.88; its output will not match the committed fatbins" >&2
fi

flags=(
    --fatbin
    -std=c++17
    -O3
    -Werror all-warnings
    -compress-mode=size
    -gencode arch=compute_80,code=sm_80
    -gencode arch=compute_89,code=sm_89
    -gencode arch=compute_90a,code=sm_90a
    -gencode arch=compute_90,code=compute_90
)

out="$bin"
if [[ $check == 1 ]]; then
    out="$(mktemp -d)"
    trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"

cd "$kernels"
sources=(*.cu)
# As many sources compile at once as there are cores (each nvcc is single-threaded; its output
# does not depend on what runs beside it).
parallel="$(nproc 2>/dev/null || echo 1)"
running=0
failed=0
for src in "${sources[@]}"; do
    if ((running >= parallel)); then
        wait -n || failed=1
        running=$((running - 1))
    fi
    "$nvcc" "${flags[@]}" -o "$out/${src%.cu}.fatbin" "$src" &
    running=$((running + 1))
done
while ((running > 0)); do
    wait -n || failed=1
    running=$((running - 1))
done
if [[ $failed == 1 ]]; then
    echo "nvcc failed (above)" >&2
    exit 1
fi

if [[ $check == 0 ]]; then
    # Fatbins whose source is gone.
    for fatbin in "$bin"/*.fatbin; do
        [[ -e "$fatbin" ]] || continue
        name="$(basename "$fatbin" .fatbin)"
        [[ -e "$name.cu" ]] || rm -v "$fatbin"
    done
    ls -l "$bin"
    exit 0
fi

status=0
for src in "${sources[@]}"; do
    name="${src%.cu}"
    if [[ ! -e "$bin/$name.fatbin" ]]; then
        echo "missing: backends/cuda/kernels/bin/$name.fatbin (run scripts/build-cuda-kernels.sh)"
        status=1
    elif ! cmp -s "$out/$name.fatbin" "$bin/$name.fatbin"; then
        echo "differs: backends/cuda/kernels/bin/$name.fatbin is not what $src compiles to (run scripts/build-cuda-kernels.sh)"
        status=1
    fi
done
for fatbin in "$bin"/*.fatbin; do
    [[ -e "$fatbin" ]] || continue
    name="$(basename "$fatbin" .fatbin)"
    if [[ ! -e "$name.cu" ]]; then
        echo "stale: backends/cuda/kernels/bin/$name.fatbin has no source $name.cu"
        status=1
    fi
done
if [[ $status == 0 ]]; then
    echo "the committed fatbins are up to date (${#sources[@]} kernel files)"
fi
exit $status
