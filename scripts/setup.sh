#!/usr/bin/env bash
# README command 1: install what is missing, build, fetch the default model, run the
# long-context demo (a question answered from a ~4K-token document the program writes).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
bash "$ROOT/scripts/deps.sh"
bash "$ROOT/scripts/build.sh"
bash "$ROOT/scripts/fetch_model.sh"
"$ROOT/build/icecache" demo -m default "$@"
