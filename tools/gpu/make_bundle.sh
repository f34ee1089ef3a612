#!/usr/bin/env bash
# Builds the CUDA binaries here (icecache, backend_cuda_tests, cuda_ops_bench, and selection_bench
# for the host-side index build) and packs them with the non-system shared libraries they need
# into one archive, for a GPU machine that has the CUDA driver and cuBLAS but not this project's
# build dependencies:
#   tools/gpu/make_bundle.sh [build-dir] [archive]     (default build-cuda, .carry/gpu-bundle.tar.xz)
# tools/gpu/check_and_bench.sh --bundle <archive> then runs them there.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build-cuda}
ARCHIVE=${2:-$ROOT/.carry/gpu-bundle.tar.xz}
JOBS=${JOBS:-2}

cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DICECACHE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="90-real;90-virtual" >/dev/null
ninja -C "$BUILD" -j"$JOBS" icecache_cli backend_cuda_tests cuda_ops_bench selection_bench

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/lib"
cp "$BUILD/icecache" "$BUILD/tests/backend_cuda_tests" "$BUILD/bench/cuda_ops_bench" \
  "$BUILD/bench/selection_bench" "$STAGE/bin/"
strip --strip-unneeded "$STAGE/bin/"* || true
# Shared libraries outside the C/C++ runtime and the CUDA driver/toolkit (found there).
for bin in "$STAGE"/bin/*; do
  ldd "$bin" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
    libcuda.so*|libcublas*|libcudart*) ;;
    *) cp -L "$lib" "$STAGE/lib/" ;;
  esac
done
mkdir -p "$(dirname "$ARCHIVE")"
tar -C "$STAGE" -cf - bin lib | xz -T"$JOBS" -6 >"$ARCHIVE"
echo "bundle: $ARCHIVE ($(du -h "$ARCHIVE" | cut -f1)): $(ls "$STAGE/bin" "$STAGE/lib" | tr '\n' ' ')"
