#!/bin/sh
# Install Squall's C library, headers, SPLASH-2 macros and pkg-config files under PREFIX:
#   PREFIX/lib/libsquall.so, libsquall.a
#   PREFIX/include/squall.h, squall.hpp, crl.h, shmem.h, squall/pthread.h, squall/atomic.h, squall/dsmip.hpp
#   PREFIX/share/squall/c.m4.squall, squall-globals.ld, squall-pthread.ld
#   PREFIX/lib/pkgconfig/squall.pc, squall-pthread.pc, squall-openmp.pc, squall-crl.pc, squall-shmem.pc
#   PREFIX/lib/squall-openmp/libgomp.so (a linker script naming libsquall.so: under
#   squall-openmp, gcc -fopenmp's -lgomp finds Squall's OpenMP runtime, not the system's)
#
# usage: crates/capi/install.sh PREFIX [LIBDIR]
#   LIBDIR: where cargo put libsquall.so (default: $SQUALL_LIBDIR, else
#   ${CARGO_TARGET_DIR:-<repo>/target}/release). Build it first: cargo build --release -p squall-capi
# Then: PKG_CONFIG_PATH=PREFIX/lib/pkgconfig cc prog.c $(pkg-config --cflags --libs squall)
#   or, in CMake: find_package(Squall REQUIRED) + target_link_libraries(app Squall::pthread),
#   configured with -DCMAKE_PREFIX_PATH=PREFIX. The CMake package is
#   PREFIX/lib/cmake/Squall/SquallConfig.cmake, SquallConfigVersion.cmake, SquallTargets.cmake:
#   one imported target per .pc file installed here, made from it by cmake/pc-to-cmake.awk
#   (squall.pc -> Squall::squall, squall-X.pc -> Squall::X).
set -eu

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 PREFIX [LIBDIR]" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
prefix=$1
libdir=${2:-${SQUALL_LIBDIR:-${CARGO_TARGET_DIR:-$repo/target}/release}}
version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$repo/Cargo.toml" | head -n 1)

if [ ! -f "$libdir/libsquall.so" ]; then
    echo "install.sh: $libdir/libsquall.so not found: run cargo build --release -p squall-capi first (or pass LIBDIR)" >&2
    exit 1
fi
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)

mkdir -p "$prefix/lib/pkgconfig" "$prefix/include/squall" "$prefix/share/squall"
# Copy to a temporary name and rename, so a program running from this prefix is never cut.
cp "$libdir/libsquall.so" "$prefix/lib/.libsquall.so.tmp" && mv -f "$prefix/lib/.libsquall.so.tmp" "$prefix/lib/libsquall.so"
if [ -f "$libdir/libsquall.a" ]; then
    cp "$libdir/libsquall.a" "$prefix/lib/libsquall.a"
fi
cp "$here/include/squall.h" "$here/include/squall.hpp" "$here/include/crl.h" "$here/include/shmem.h" "$prefix/include/"
cp "$here/include/squall/pthread.h" "$here/include/squall/atomic.h" "$here/include/squall/dsmip.hpp" "$prefix/include/squall/"
cp "$here/c.m4.squall" "$here/squall-globals.ld" "$here/squall-pthread.ld" "$prefix/share/squall/"
mkdir -p "$prefix/lib/squall-openmp"
printf '/* squall-openmp: gcc -fopenmp links -lgomp; this makes it Squall'"'"'s OpenMP runtime */\nINPUT(%s)\n' \
    "$prefix/lib/libsquall.so" > "$prefix/lib/squall-openmp/libgomp.so"
for pc in squall squall-pthread squall-openmp squall-crl squall-shmem; do
    sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" "$here/$pc.pc.in" > "$prefix/lib/pkgconfig/$pc.pc"
done

# The CMake package: a target per pkg-config file installed above (any squall*.pc.in here), so
# each target carries exactly what its .pc carries. squall.pc goes first: the others require it.
cmake_dir="$prefix/lib/cmake/Squall"
mkdir -p "$cmake_dir"
targets="$cmake_dir/.SquallTargets.cmake.tmp"
{
    echo "# Made by crates/capi/install.sh from the pkg-config files in lib/pkgconfig; do not edit."
    echo "# _SQUALL_PREFIX is set by SquallConfig.cmake."
    for pc_in in "$here/squall.pc.in" "$here"/squall-*.pc.in; do
        [ -f "$pc_in" ] || continue
        pc=$(basename "$pc_in" .pc.in)
        case $pc in
            squall) target=Squall::squall ;;
            *) target="Squall::${pc#squall-}" ;;
        esac
        if [ ! -f "$prefix/lib/pkgconfig/$pc.pc" ]; then
            echo "install.sh: $pc.pc.in is not installed as lib/pkgconfig/$pc.pc: add it to the pkg-config loop" >&2
            exit 1
        fi
        awk -v target="$target" -v prefix="$prefix" -f "$here/cmake/pc-to-cmake.awk" "$prefix/lib/pkgconfig/$pc.pc"
    done
} > "$targets"
mv -f "$targets" "$cmake_dir/SquallTargets.cmake"
cp "$here/cmake/SquallConfig.cmake" "$cmake_dir/"
sed -e "s|@VERSION@|$version|g" "$here/cmake/SquallConfigVersion.cmake.in" > "$cmake_dir/SquallConfigVersion.cmake"
echo "installed squall $version under $prefix"
