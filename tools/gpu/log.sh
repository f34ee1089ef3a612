# Sourced by the GPU run scripts: everything printed also goes to $OUT/run.log; step() prints a
# timed heading, fail() records a failure in STATUS (the script's exit code) and goes on.
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
START=$(date +%s)
step() { echo; echo "=== $* [$(($(date +%s) - START))s]"; }
STATUS=0
fail() { echo "FAILED: $*"; STATUS=1; }
