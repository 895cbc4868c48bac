#!/usr/bin/env bash
# Runs fuzz targets one after another, each for at most RUNS executions or SECONDS seconds (the first reached),
# and prints one table row per target: executions, seconds, coverage (libFuzzer's `cov:`, edges) and the crash
# artifacts it left. New inputs go to work/<target>/ (not committed); the committed corpus is read, never written.
# A target with a dictionary (dicts/<target>.dict) is given it.
#
#   fuzz/campaign.sh                      # every target, 1 000 000 runs or 900 s each
#   SECONDS_EACH=60 fuzz/campaign.sh trace_csv proto_reassembly
#
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`). One target at a time: one core.
set -euo pipefail
cd "$(dirname "$0")"

RUNS=${RUNS:-1000000}
SECONDS_EACH=${SECONDS_EACH:-900}
# No sanitizer: the targets are safe Rust, whose bounds and overflow checks (-a: debug assertions) are the
# detectors; AddressSanitizer would halve the executions for no finding it alone could make.
FLAGS=(--sanitizer none --debug-assertions)

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(ls fuzz_targets | sed 's/\.rs$//')
fi

cargo +nightly fuzz build "${FLAGS[@]}"
mkdir -p logs
printf '| target | executions | seconds | edges (cov) | crashes |\n|---|---|---|---|---|\n'
# How many of a target's artifacts match any of the patterns. libFuzzer names a crash, leak, timeout or
# out-of-memory input by its kind; a `slow-unit-` input (one run over 10 s) is no crash, and is counted apart.
findings() {
  local target=$1
  shift
  local pattern count=0
  for pattern in "$@"; do
    count=$(( count + $(find "artifacts/$target" -maxdepth 1 -type f -name "$pattern" | wc -l) ))
  done
  echo "$count"
}

for target in "${targets[@]}"; do
  mkdir -p "work/$target" "artifacts/$target"
  before=$(findings "$target" 'crash-*' 'leak-*' 'timeout-*' 'oom-*')
  slow_before=$(findings "$target" 'slow-unit-*')
  dict=()
  if [ -f "dicts/$target.dict" ]; then
    dict=(-dict="dicts/$target.dict")
  fi
  start=$(date +%s)
  # A crash ends the run with a non-zero status; the table still records it.
  cargo +nightly fuzz run "${FLAGS[@]}" "$target" "work/$target" "corpus/$target" -- \
    -runs="$RUNS" -max_total_time="$SECONDS_EACH" -print_final_stats=1 -timeout=30 "${dict[@]}" \
    > "logs/$target.log" 2>&1 || true
  # libFuzzer's own count of seconds (the wall time also holds the build); a crashed run has only the wall time.
  # A figure missing from the log is no reason to stop: under `pipefail` a grep that finds nothing would end the
  # script (`set -e`) before the crashed target's row and the targets after it, hence `|| true`.
  took=$(grep -o 'Done [0-9]* runs in [0-9]*' "logs/$target.log" | grep -o '[0-9]*$' | tail -1 || true)
  took=${took:-"≤$(( $(date +%s) - start ))"}
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "logs/$target.log" | grep -o '[0-9]*$' | tail -1 || true)
  cov=$(grep -o 'cov: [0-9]*' "logs/$target.log" | tail -1 | grep -o '[0-9]*' || true)
  crashes=$(( $(findings "$target" 'crash-*' 'leak-*' 'timeout-*' 'oom-*') - before ))
  slow=$(( $(findings "$target" 'slow-unit-*') - slow_before ))
  if [ "$slow" -gt 0 ]; then
    crashes="$crashes ($slow slow unit)"
  fi
  printf '| %s | %s | %s | %s | %s |\n' "$target" "${execs:-?}" "$took" "${cov:-?}" "$crashes"
done
