#!/usr/bin/env bash
# Builds tessera's CPU backend as plugins, one per processor level, and installs them under
# the names the loader looks for: libtessera-cpu-<variant>.so (.dylib on macOS).
#
#   scripts/build-cpu-plugins.sh [DEST]        (default: target/plugins)
#
# Cargo cannot build one crate with several target-cpu settings at once, so each variant is
# a separate build with its own RUSTFLAGS into its own target directory. The builds name the
# host with --target, so that RUSTFLAGS reach the plugin's crates but not the build scripts,
# which run here (an x86-64-v4 build script would stop with SIGILL without AVX-512). At run
# time each plugin scores itself by the processor features it finds; the loader picks the
# best one.
set -euo pipefail
cd "$(dirname "$0")/.."
dest="${1:-target/plugins}"
mkdir -p "$dest"
host=$(rustc -vV | sed -n 's/^host: //p')

case "$(uname -m)" in
  x86_64|amd64)
    variants=("x86-64|-C target-cpu=x86-64" "x86-64-v3|-C target-cpu=x86-64-v3" "x86-64-v4|-C target-cpu=x86-64-v4") ;;
  aarch64|arm64)
    variants=("armv8.0|-C target-cpu=generic" "armv8.2-dotprod|-C target-cpu=generic -C target-feature=+dotprod") ;;
  *)
    variants=("generic|") ;;
esac
case "$(uname -s)" in
  Darwin) ext=dylib ;;
  *) ext=so ;;
esac

for v in "${variants[@]}"; do
  name="${v%%|*}"
  flags="${v#*|}"
  echo "building the CPU plugin for $name ($flags)"
  RUSTFLAGS="$flags" cargo build --release -p tessera-cpu-plugin --target "$host" \
    --target-dir "target/plugin-variants/release-$name"
  cp "target/plugin-variants/release-$name/$host/release/libtessera_cpu_plugin.$ext" "$dest/libtessera-cpu-$name.$ext"
done
ls -l "$dest"
