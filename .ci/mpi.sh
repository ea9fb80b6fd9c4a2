#!/usr/bin/env bash
# The MPI step of CI: the mpi transport (feature `mpi` of squall-net, built against the system
# Open MPI) under mpirun at 2 and 4 processes: the transport suite (FIFO, request/reply,
# 1 MiB bulk, message_test 10^5), the runtime's multi-node DSM scenarios, two C apps (sor and
# em3d) directly and through `squall run --launcher mpirun`, and a short `squall bench pingpong --transport mpi`.
# Skipped (successfully) when mpirun is missing. Uses its own target dir so the default
# build's artefacts are not rebuilt with different features.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
    # shellcheck disable=SC1091
    . "$HOME/.cargo/env"
fi
if ! command -v mpirun >/dev/null 2>&1; then
    echo "mpi: mpirun not found; skipping (install openmpi-bin libopenmpi-dev libclang-dev)"
    exit 0
fi
export CARGO_TARGET_DIR="${SQUALL_MPI_TARGET_DIR:-$PWD/target-ci-mpi}"
# Open MPI refuses root without these (CI containers run as root); CMA single-copy needs ptrace
# rights containers often lack.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
fail=0
run() {
    echo "--- $*"
    if ! "$@"; then
        echo "--- FAILED: $*"
        fail=1
    fi
}

run cargo clippy --release -p squall-net -p squall-cli --features squall-net/mpi,squall-cli/mpi \
    --all-targets -- -D warnings
run cargo test --release -p squall-net --features mpi --test multiprocess mpi
run cargo test --release -p squall-net --features mpi --lib -- config backend::mpi
run cargo test --release -p squall-cli --features mpi --test run mpi
SQUALL_DSM_LAUNCHER=mpirun run cargo test --release -p squall --features squall-net/mpi --test dsm

# Two C apps over MPI: libsquall with the mpi transport, sor and em3d linked against it.
run cargo build --release -p squall-capi -p squall-cli -p squall-net \
    --features squall-net/mpi,squall-cli/mpi
lib="$CARGO_TARGET_DIR/release"
mkdir -p "$CARGO_TARGET_DIR/apps"
for a in sor em3d; do
    run cc -std=gnu11 -O2 -Wall -Wextra -Werror -pthread -Iapps/common -Iapps/$a -DAPP_SQUALL \
        -Icrates/capi/include -o "$CARGO_TARGET_DIR/apps/${a}_squall" apps/$a/$a.c \
        -L"$lib" -Wl,-rpath,"$lib" -lsquall -lpthread -ldl -lm
done
check_app() { # $@ = command line; exactly one RESULT line with verified=1
    echo "--- $*"
    local out
    if ! out=$(timeout 300 "$@" 2>&1); then
        printf '%s\n' "$out" | tail -n 20
        echo "--- FAILED (exit status): $*"
        fail=1
        return
    fi
    local results
    results=$(printf '%s\n' "$out" | grep 'RESULT ' || true)
    if [ "$(printf '%s\n' "$results" | grep -c 'RESULT ')" -ne 1 ] ||
        ! printf '%s\n' "$results" | grep -q ' verified=1 '; then
        printf '%s\n' "$out" | tail -n 20
        echo "--- FAILED (no single verified RESULT line): $*"
        fail=1
        return
    fi
    echo "ok   $results"
}
for a in sor em3d; do
    app="$CARGO_TARGET_DIR/apps/${a}_squall"
    for n in 2 4; do
        check_app mpirun -n "$n" --oversubscribe "$app" -s tiny -t 4
        check_app "$lib/squall" run -n "$n" --launcher mpirun "$app" -s tiny -t 4
    done
done

# The bench's JSON line must carry Squall's, the raw (own job and lent MPI) and the floor
# round trip and both ratios for all 4 sizes.
pingpong_ok() {
    local out
    out=$(timeout 600 "$lib/squall" bench pingpong --transport mpi --iters 200 --reps 3 \
        --sizes 8,4096,65536,1m --json) || return 1
    echo "$out"
    local last
    last=$(echo "$out" | tail -n 1)
    for key in squall_rtt_us raw_rtt_us ratio raw_lent_rtt_us ratio_lent floor_rtt_us; do
        if [ "$(echo "$last" | grep -o "\"$key\":[0-9.]*[0-9]" | grep -cv ':0$')" != 4 ]; then
            echo "pingpong: the JSON line lacks 4 positive \"$key\" values: $last"
            return 1
        fi
    done
}
run pingpong_ok
exit "$fail"
