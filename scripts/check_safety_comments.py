#!/usr/bin/env python3
"""Lists every `unsafe` block and `unsafe impl` in the repository's Rust files without a
`// SAFETY:` comment right above it, and fails if there is one.

"Right above": on the lines just before it (other comment lines and attributes may come in
between), or just before the statement it continues (`let x =` then `unsafe { ... }` on the
next line), or on its own line. Clippy's `undocumented_unsafe_blocks` checks the same in the
code it compiles; this also covers code for other targets (NEON) and the crates outside the
workspace (fuzz/, the firmware). Run from anywhere inside the repository.
"""
import re
import subprocess
import sys

root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True).stdout.strip()
files = subprocess.run(["git", "ls-files", "*.rs"], capture_output=True, text=True, check=True, cwd=root).stdout.split()

UNSAFE = re.compile(r"\bunsafe\s*(\{|impl\b|$)")
CONTINUED = re.compile(r"(=|\(|=>)$")


def code_of(line):
    """The line without string literals and its `//` comment."""
    return re.sub(r'"([^"\\]|\\.)*"', '""', line).split("//")[0]


missing = []
for path in files:
    with open(f"{root}/{path}", encoding="utf-8") as f:
        lines = f.read().split("\n")
    for i, line in enumerate(lines):
        if not UNSAFE.search(code_of(line)) or "// SAFETY:" in line:
            continue
        j, documented = i - 1, False
        while j >= 0:
            above = lines[j].strip()
            if above.startswith("// SAFETY:"):
                documented = True
                break
            if above.startswith("//") or above.startswith("#[") or CONTINUED.search(code_of(above).rstrip()):
                j -= 1
                continue
            break
        if not documented:
            missing.append(f"{path}:{i + 1}: {line.strip()}")

for m in missing:
    print(m)
if missing:
    print(f"{len(missing)} unsafe blocks or impls without a `// SAFETY:` comment right above them", file=sys.stderr)
    sys.exit(1)
