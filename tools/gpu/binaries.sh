# Sourced by the GPU run scripts: sets BIN, TESTBIN, OPSBENCH and SELBENCH from a prebuilt bundle
# (make_bundle.sh; BUNDLE set) or by building build-gpu here, and the library path they need.
# Uses ROOT, BUNDLE and the caller's fail().
if [[ -n ${BUNDLE:-} ]]; then
  DEST=/tmp/icecache-gpu
  rm -rf "$DEST" && mkdir -p "$DEST" && tar -C "$DEST" -xJf "$BUNDLE" || { echo "bad bundle"; exit 1; }
  BIN=$DEST/bin/icecache TESTBIN=$DEST/bin/backend_cuda_tests OPSBENCH=$DEST/bin/cuda_ops_bench
  SELBENCH=$DEST/bin/selection_bench
  export LD_LIBRARY_PATH=$DEST/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "prebuilt bundle $BUNDLE"
else
  cmake -S "$ROOT" -B "$ROOT/build-gpu" -G Ninja -DCMAKE_BUILD_TYPE=Release -DICECACHE_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="90-real;90-virtual" &&
    ninja -C "$ROOT/build-gpu" icecache_cli backend_cuda_tests cuda_ops_bench selection_bench ||
    { echo "build failed"; exit 1; }
  BIN=$ROOT/build-gpu/icecache TESTBIN=$ROOT/build-gpu/tests/backend_cuda_tests
  OPSBENCH=$ROOT/build-gpu/bench/cuda_ops_bench SELBENCH=$ROOT/build-gpu/bench/selection_bench
fi
# cuBLASLt of the CUDA 13 toolkit or of the Python wheels.
if ldd "$BIN" | grep -q "libcublasLt.so.13 => not found"; then
  lib=$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
  [[ -n $lib ]] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$lib")
fi
ldd "$BIN" | grep "not found" && fail "missing shared libraries"
export ICECACHE_SOURCE_DIR=$ROOT ICECACHE_MODEL_DIR=$ROOT/.cache/models
