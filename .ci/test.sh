#!/usr/bin/env bash
# THE test command: the README's "run all tests" and CI both run exactly this.
# Release build (the multi-process tests measure time: a node killed mid-run must end the job
# within 5 s), every crate's unit, property and multi-process tests.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
    # shellcheck disable=SC1091
    . "$HOME/.cargo/env"
fi
exec cargo test --workspace --release --no-fail-fast "$@"
