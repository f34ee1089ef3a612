#!/usr/bin/env bash
# Installs the Debian 12 packages IceCache builds and tests with (only what is missing).
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config git unzip python3 python3-pip
      libopenblas-dev nlohmann-json3-dev libcli11-dev libfmt-dev libpcre2-dev libutf8proc-dev
      libgtest-dev libgmock-dev libbenchmark-dev clang clang-format clang-tidy)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PKGS[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
