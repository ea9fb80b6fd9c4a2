#!/usr/bin/env bash
# Installs what building and testing Squall needs, only when it is missing: a C/C++ toolchain,
# make, pkg-config, m4, cmake, a font for the bench plots, Open MPI and libclang for the mpi
# transport (Debian packages) and a Rust toolchain
# with rustfmt and clippy (rustup).
# Safe to run repeatedly; does nothing when everything is present.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
fi

missing=()
command -v cc >/dev/null 2>&1 || missing+=(build-essential)
command -v make >/dev/null 2>&1 || missing+=(make)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
command -v git >/dev/null 2>&1 || missing+=(git)
command -v m4 >/dev/null 2>&1 || missing+=(m4)                      # SPLASH-2 macros (c.m4.squall)
command -v c++ >/dev/null 2>&1 || missing+=(g++)                    # the C++ API test
command -v cmake >/dev/null 2>&1 || missing+=(cmake)                # the CMake package test
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core)  # bench plots
# The mpi transport (.ci/mpi.sh): mpirun, MPI headers/libraries, libclang for rsmpi's bindgen.
command -v mpirun >/dev/null 2>&1 || missing+=(openmpi-bin)
command -v mpicc >/dev/null 2>&1 || missing+=(libopenmpi-dev)
# Any libclang itself will do (libclang-cpp, which some images carry alone, does not serve
# bindgen); a pattern that matches nothing stays as written and does not exist.
have_libclang=false
for lib in /usr/lib/llvm-*/lib/libclang.so* /usr/lib/llvm-*/lib/libclang-[0-9]*.so* \
    /usr/lib/*/libclang.so* /usr/lib/*/libclang-[0-9]*.so*; do
    if [ -e "$lib" ]; then have_libclang=true; fi
done
$have_libclang || missing+=(libclang-dev)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
    # shellcheck disable=SC1091
    . "$HOME/.cargo/env"
fi
if ! command -v cargo >/dev/null 2>&1; then
    if command -v rustup >/dev/null 2>&1; then
        rustup toolchain install stable --profile minimal -c rustfmt -c clippy
        rustup default stable
    else
        echo "setup: no Rust toolchain found; install rustup (see rustup.rs), then rerun" >&2
        exit 1
    fi
fi
if command -v rustup >/dev/null 2>&1; then
    rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
    rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
fi
echo "setup: $(cargo --version), $(cc --version | head -n1)"
