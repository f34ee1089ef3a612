#!/usr/bin/env bash
# README command 2: the whole test suite. Installs what is missing, builds, fetches the default
# model, then runs: the unit and integration tests (ctest); the core, parser, loader, tokenizer,
# CPU backend, index, engine and eval tests (the eval ones run the CLI built the same way) again
# under AddressSanitizer + UndefinedBehaviorSanitizer; the core, index and engine tests under
# ThreadSanitizer; the libFuzzer targets for a bounded time; and the clang-tidy (with Clang's
# thread-safety analysis) and clang-format checks.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
FUZZ_SECONDS="${ICECACHE_FUZZ_SECONDS:-60}"
cd "$ROOT"

bash scripts/deps.sh
bash scripts/build.sh
bash scripts/fetch_model.sh

echo "== unit and integration tests"
ctest --test-dir build --output-on-failure -j"$(nproc)"

echo "== core, parsers, loaders, tokenizers, CPU backend, indexes, engine and eval under ASan + UBSan"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DICECACHE_SANITIZE=address,undefined -DICECACHE_BUILD_BENCH=OFF -DICECACHE_CUDA=OFF >/dev/null
ASAN_TESTS="core_tests formats_tests tokenizer_tests model_tests backend_tests index_tests engine_tests
  eval_tests"
ninja -C build-asan -j"$(nproc)" $ASAN_TESTS
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
for t in $ASAN_TESTS; do
  ./build-asan/tests/$t --gtest_brief=1
done

echo "== indexes and engine under ThreadSanitizer (background layout, index updates, pools)"
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DICECACHE_SANITIZE=thread -DICECACHE_BUILD_BENCH=OFF -DICECACHE_CUDA=OFF >/dev/null
ninja -C build-tsan -j"$(nproc)" core_tests index_tests engine_tests
# Without address-space randomization where the kernel allows it (ThreadSanitizer's fixed shadow
# layout can clash with a randomized one); a report fails the stage (exit code 66).
NOASLR=()
if setarch "$(uname -m)" -R true 2>/dev/null; then NOASLR=(setarch "$(uname -m)" -R); fi
for t in core_tests index_tests engine_tests; do
  "${NOASLR[@]}" ./build-tsan/tests/$t --gtest_brief=1
done

echo "== fuzzing (${FUZZ_SECONDS}s per target)"
bash scripts/fuzz.sh "$FUZZ_SECONDS"

echo "== clang-tidy over src/ (bugprone, performance, some readability; thread safety)"
bash scripts/tidy.sh build

echo "== clang-format"
files=$(git ls-files '*.h' '*.cc' '*.cu' '*.cuh')
clang-format --dry-run -Werror $files

echo "== all test stages passed"
