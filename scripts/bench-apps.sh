#!/bin/sh
# Build what the application benchmark needs and run it, regenerating docs/results.md:
#   1. the C library and the squall command (cargo, release),
#   2. every app's _seq, _native and _squall binary (make -C apps SQUALL=1),
#   3. squall bench apps --results-md docs/results.md [your arguments].
#
# usage: scripts/bench-apps.sh [squall bench apps arguments...]
#   e.g. scripts/bench-apps.sh --size small --nodes 1,2,4 --reps 3
# Plots need DejaVu Sans: apt-get install fonts-dejavu-core (or pass --no-plots).
set -eu

repo=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
cd "$repo"
cargo build --release -p squall-capi -p squall-cli
make -C apps SQUALL=1 SQUALL_LIBDIR="$target/release"
exec "$target/release/squall" bench apps --results-md docs/results.md "$@"
