#!/usr/bin/env bash
# Configures and builds the release tree in build/ (CMake + Ninja).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cmake -S "$ROOT" -B "$ROOT/build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
ninja -C "$ROOT/build" -j"$(nproc)"
