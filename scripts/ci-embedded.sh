#!/usr/bin/env bash
# The embedded path, end to end. Run from anywhere; CI calls it from the repository root.
#
# 1. installs the rustup targets it needs (thumbv7em-none-eabihf, thumbv7m-none-eabi);
# 2. builds tessera-core, tessera-alloc, tessera-cpu and edge-digits for thumbv7em-none-eabihf
#    (a bare-metal target has no `std`: the build fails if anything in their dependency tree
#    uses it), edge-digits also with its `defmt` feature;
# 3. builds the Cortex-M3 firmware (examples/edge-digits/firmware, thumbv7m-none-eabi), with
#    and without defmt, and prints its section sizes;
# 4. if qemu-system-arm is installed or installable (apt-get), runs the firmware on qemu's
#    lm3s6965evb machine (64 KiB RAM, 256 KiB flash) with semihosting, under a timeout, and
#    checks its accuracy lines: one per weight file, each within half a point of the training
#    script's accuracy for the same weights. The defmt build runs too: its text goes to
#    stderr and its defmt frames to stdout, decoded with defmt-print when that is installed
#    (`cargo install defmt-print`).
#
# Environment: EMBEDDED_QEMU=0 skips step 4; EMBEDDED_QEMU=1 makes a missing qemu an error
# (by default it is skipped with a note); QEMU_TIMEOUT (seconds, default 300);
# EMBEDDED_DEFMT_PRINT=1 installs defmt-print if it is missing (about 5 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
FIRMWARE="$ROOT/examples/edge-digits/firmware"
ELF="$FIRMWARE/target/thumbv7m-none-eabi/release/digits-firmware"
ELF_DEFMT="$FIRMWARE/target/defmt/thumbv7m-none-eabi/release/digits-firmware"
export CARGO_TERM_COLOR=never

step() { printf '\n=== %s\n' "$*"; }

step "embedded: rustup targets"
rustup target add thumbv7em-none-eabihf thumbv7m-none-eabi >/dev/null
rustup target list --installed | grep -E '^thumbv7'

step "embedded: core, alloc, cpu and edge-digits for thumbv7em-none-eabihf (no std in the tree)"
cargo build --release --target thumbv7em-none-eabihf \
    -p tessera-core -p tessera-alloc -p tessera-cpu -p edge-digits
cargo build --release --target thumbv7em-none-eabihf -p tessera-alloc --features critical-section
DEFMT_LOG=info cargo build --release --target thumbv7em-none-eabihf -p edge-digits --features defmt

step "embedded: firmware (thumbv7m-none-eabi, Cortex-M3)"
(cd "$FIRMWARE" && cargo build --release --target-dir target)
(cd "$FIRMWARE" && DEFMT_LOG=info cargo build --release --features defmt --target-dir target/defmt)

step "embedded: firmware size"
size_tool=""
if command -v llvm-size >/dev/null; then
    size_tool=llvm-size
else
    sysroot_bin="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin"
    if [ ! -x "$sysroot_bin/llvm-size" ]; then
        rustup component add llvm-tools >/dev/null 2>&1 || true
    fi
    [ -x "$sysroot_bin/llvm-size" ] && size_tool="$sysroot_bin/llvm-size"
fi
if [ -n "$size_tool" ]; then
    "$size_tool" -A "$ELF" | grep -E '^(section|\.vector_table|\.text|\.rodata|\.data|\.bss|\.uninit) '
    "$size_tool" "$ELF"
else
    echo "no llvm-size (apt llvm or rustup component llvm-tools): sizes not printed"
fi

step "embedded: firmware under qemu-system-arm (lm3s6965evb)"
if [ "${EMBEDDED_QEMU:-}" = "0" ]; then
    echo "skipped (EMBEDDED_QEMU=0)"
    exit 0
fi
if ! command -v qemu-system-arm >/dev/null; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-system-arm) >/dev/null 2>&1 || true
    fi
fi
if ! command -v qemu-system-arm >/dev/null; then
    if [ "${EMBEDDED_QEMU:-}" = "1" ]; then
        echo "qemu-system-arm is not installed and could not be installed" >&2
        exit 1
    fi
    echo "skipped: qemu-system-arm is not installed and could not be installed"
    exit 0
fi
qemu-system-arm --version | head -1

# Runs a firmware ELF; stdout and stderr to the files named; fails on a non-zero exit.
run_firmware() {
    local status=0
    timeout "${QEMU_TIMEOUT:-300}" qemu-system-arm -cpu cortex-m3 -machine lm3s6965evb -nographic \
        -monitor none -serial none -semihosting-config enable=on,target=native -kernel "$1" >"$2" 2>"$3" || status=$?
    if [ "$status" -ne 0 ]; then
        cat "$2" "$3"
        echo "the firmware failed (exit status $status; 124 is the timeout)" >&2
        return 1
    fi
}

# Checks the accuracy lines of a firmware's text output: each model prints "... python
# accuracy P" and then the accuracy line.
check_lines() {
    awk '
        /python accuracy / { python = $NF }
        /^digits: accuracy [0-9.]+ on [0-9]+ images, peak heap [0-9]+ B, [0-9]+ us\/image, device [A-Za-z0-9]+$/ {
            lines++
            diff = $3 - python; if (diff < 0) diff = -diff
            if (python == "" || diff > 0.005) { print "accuracy " $3 " differs from the script'"'"'s " python > "/dev/stderr"; bad++ }
            python = ""
        }
        END {
            if (lines != 2) { print "expected 2 accuracy lines, got " lines > "/dev/stderr"; exit 1 }
            if (bad) exit 1
            print "embedded: " lines " accuracy lines match the training script"
        }
    ' "$1"
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run_firmware "$ELF" "$work/out" "$work/err"
cat "$work/out"
check_lines "$work/out"

step "embedded: defmt firmware under qemu-system-arm"
run_firmware "$ELF_DEFMT" "$work/frames" "$work/text"
grep -v '^Timer with period zero' "$work/text" || true
check_lines "$work/text"
echo "defmt: $(wc -c <"$work/frames") bytes of frames"
if [ "${EMBEDDED_DEFMT_PRINT:-}" = "1" ] && ! command -v defmt-print >/dev/null; then
    cargo install defmt-print --locked >/dev/null 2>&1 || echo "cargo install defmt-print failed"
fi
if command -v defmt-print >/dev/null; then
    defmt-print -e "$ELF_DEFMT" <"$work/frames" | tee "$work/decoded"
    grep -q 'digits: accuracy' "$work/decoded" || { echo "the defmt log has no accuracy line" >&2; exit 1; }
else
    echo "defmt-print is not installed (cargo install defmt-print): frames not decoded"
fi
