# Sourced by the GPU run scripts (after log.sh): bench_run JSONL NAME BATCH ARGS... runs
# `icecache bench --batch BATCH ARGS...` (ARGS include --json) under $TIMEOUT and appends to JSONL
# one {"bench": NAME, "batch": BATCH, "ok": bool, "rc": N, ...result} per result row (several for
# --kv-policies), or one row with "error" (the last line of stderr) when it failed. Returns the
# run's exit status. Uses BIN, OUT, TIMEOUT and step().
bench_run() {
  local jsonl=$1 name=$2 batch=$3
  shift 3
  step "$name (batch $batch)"
  timeout "$TIMEOUT" "$BIN" bench --batch "$batch" "$@" >"$OUT/tmp.json" 2>"$OUT/tmp.err"
  local rc=$?
  tail -n 30 "$OUT/tmp.err"
  python3 - "$OUT/tmp.json" "$OUT/tmp.err" "$name" "$batch" "$rc" >>"$jsonl" <<'PY'
import json, sys
path, err, name, batch, rc = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
rows = json.load(open(path))["results"] if rc == 0 else []
lines = [l.strip() for l in open(err, errors="replace") if l.strip()]
error = {} if rc == 0 else {"error": lines[-1] if lines else ""}
for r in rows or [{}]:
    print(json.dumps({"bench": name, "batch": batch, "ok": rc == 0, "rc": rc, **error, **r}))
PY
  return $rc
}
