#!/usr/bin/env bash
# Installs libkernel_replay for C and C++ tools (Linux):
#
#   scripts/install.sh PREFIX
#
# builds `cargo build --release -p replay-ffi` and copies into PREFIX:
#   lib/libkernel_replay.so                         the shared library (SONAME libkernel_replay.so)
#   lib/libkernel_replay.a                          the static archive
#   include/kernel_replay.h                         the header, and beside it the backends'
#   include/kernel_replay_cuda.h, kernel_replay_hsa.h   entry points (CUDA injection, HSA tool)
#   lib/cmake/kernel_replay/kernel_replayConfig.cmake, kernel_replayConfigVersion.cmake
#                                                   find_package(kernel_replay) ->
#                                                   kernel_replay::kernel_replay
#   lib/pkgconfig/kernel_replay.pc                  pkg-config --cflags --libs kernel_replay
#
# Then, from CMake:  cmake -DCMAKE_PREFIX_PATH=PREFIX ...
# or pkg-config:     PKG_CONFIG_PATH=PREFIX/lib/pkgconfig pkg-config --cflags --libs kernel_replay
#
# The templates live in crates/replay-ffi/cmake/ and crates/replay-ffi/pkgconfig/. Honours
# CARGO_TARGET_DIR; extra cargo flags may be given in KREPLAY_CARGO_FLAGS (e.g. "--features cuda").
set -euo pipefail

usage() {
  echo "usage: $0 PREFIX" >&2
  exit 2
}
[ $# -eq 1 ] || usage
[ -n "$1" ] || usage

root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
prefix=$(cd "$1" && pwd)

case "$(uname -s)" in
  Linux) ;;
  *) echo "$0: only Linux is supported (the library is a Linux .so)" >&2; exit 1 ;;
esac

cd "$root"
# shellcheck disable=SC2086 # KREPLAY_CARGO_FLAGS is a list of flags.
cargo build --release -p replay-ffi ${KREPLAY_CARGO_FLAGS:-}

target_dir=${CARGO_TARGET_DIR:-$root/target}
case "$target_dir" in
  /*) ;;
  *) target_dir=$root/$target_dir ;;
esac
built=$target_dir/release
for f in libkernel_replay.so libkernel_replay.a; do
  [ -f "$built/$f" ] || { echo "$0: $built/$f was not built" >&2; exit 1; }
done

# The version is the header's (a test keeps it equal to the crate's).
header=include/kernel_replay.h
ver() { sed -n "s/^#define KREPLAY_VERSION_$1 \([0-9][0-9]*\).*/\1/p" "$header"; }
major=$(ver MAJOR)
minor=$(ver MINOR)
patch=$(ver PATCH)
[ -n "$major" ] && [ -n "$minor" ] && [ -n "$patch" ] || {
  echo "$0: no KREPLAY_VERSION_* in $header" >&2
  exit 1
}
version=$major.$minor.$patch

# What a program linking the static archive needs besides it: rustc's
# `--print native-static-libs` for Linux / glibc.
static_libs="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"
static_libs_cmake="gcc_s;util;rt;m;dl"

install -d "$prefix/lib" "$prefix/include" "$prefix/lib/cmake/kernel_replay" \
  "$prefix/lib/pkgconfig"
install -m 0755 "$built/libkernel_replay.so" "$prefix/lib/libkernel_replay.so"
install -m 0644 "$built/libkernel_replay.a" "$prefix/lib/libkernel_replay.a"
for h in include/kernel_replay.h include/kernel_replay_cuda.h include/kernel_replay_hsa.h; do
  install -m 0644 "$h" "$prefix/include/$(basename "$h")"
done

# Substitutes @NAME@ placeholders; values contain no '|'.
render() {
  sed -e "s|@KREPLAY_VERSION@|$version|g" \
    -e "s|@KREPLAY_VERSION_MAJOR@|$major|g" \
    -e "s|@KREPLAY_VERSION_MINOR@|$minor|g" \
    -e "s|@KREPLAY_STATIC_LIBS@|$static_libs|g" \
    -e "s|@KREPLAY_STATIC_LIBS_CMAKE@|$static_libs_cmake|g" \
    -e "s|@PREFIX@|$prefix|g" \
    "$1" >"$2"
  chmod 0644 "$2"
}
case "$prefix" in
  *'|'*) echo "$0: PREFIX may not contain '|'" >&2; exit 1 ;;
esac
render crates/replay-ffi/cmake/kernel_replayConfig.cmake.in \
  "$prefix/lib/cmake/kernel_replay/kernel_replayConfig.cmake"
render crates/replay-ffi/cmake/kernel_replayConfigVersion.cmake.in \
  "$prefix/lib/cmake/kernel_replay/kernel_replayConfigVersion.cmake"
render crates/replay-ffi/pkgconfig/kernel_replay.pc.in "$prefix/lib/pkgconfig/kernel_replay.pc"

echo "installed kernel_replay $version into $prefix:"
echo "  $prefix/lib/libkernel_replay.so"
echo "  $prefix/lib/libkernel_replay.a"
echo "  $prefix/include/kernel_replay.h, kernel_replay_cuda.h, kernel_replay_hsa.h"
echo "  $prefix/lib/cmake/kernel_replay/kernel_replayConfig.cmake (find_package(kernel_replay))"
echo "  $prefix/lib/pkgconfig/kernel_replay.pc"
