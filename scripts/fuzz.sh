#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ for SECONDS each, one after the other,
# on stable Rust without a sanitizer (`-s none`), and prints each target's
# executions and any crash. Not part of the test suite; CI does not run it.
#
#   scripts/fuzz.sh 120            # every target, 120 s each
#   scripts/fuzz.sh 60 classify    # only the named targets
#
# The targets are the [[bin]]s of fuzz/Cargo.toml (`cargo fuzz list`):
# openai_request, anthropic_request, responses_request (request parsers and
# their render round trip), gemini_request (a Gemini client's body, the same),
# upstream_sse, responses_stream, gemini_stream (upstream event
# streams through the decoders and back through the encoders), classify,
# config_yaml, bedrock_eventstream (Bedrock's binary event stream through the
# framing and the Converse/InvokeModel decoders).
#
# The committed seeds in fuzz/corpus/TARGET are read; the corpus a run grows
# is kept in fuzz/target/corpus/TARGET (gitignored), crashes in
# fuzz/artifacts/TARGET (gitignored). Exit status 1 when any target crashed.
set -uo pipefail
cd "$(dirname "$0")/.."

SECONDS_EACH="${1:?usage: scripts/fuzz.sh SECONDS [TARGET...]}"
shift
CARGO_FUZZ_VERSION=0.13.2

if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
  echo "installing cargo-fuzz $CARGO_FUZZ_VERSION"
  cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked || exit 2
fi

if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(cargo fuzz list)
fi

status=0
summary=()
for t in "${targets[@]}"; do
  grown="$PWD/fuzz/target/corpus/$t"
  mkdir -p "$grown" "fuzz/corpus/$t"
  log="fuzz/target/fuzz-$t.log"
  echo "== $t: ${SECONDS_EACH}s (log: $log)"
  # Build first so the time limit is spent fuzzing, not compiling.
  if ! cargo fuzz build -s none "$t"; then
    summary+=("$t: BUILD FAILED")
    status=1
    continue
  fi
  cargo fuzz run -s none "$t" "$grown" "$PWD/fuzz/corpus/$t" -- \
    -max_total_time="$SECONDS_EACH" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  if [ "$rc" -ne 0 ]; then
    status=1
    summary+=("$t: CRASH after ${execs:-?} execs (exit $rc)")
    grep -E 'panicked at|^thread|SUMMARY|Test unit written to|artifact_prefix' "$log" | head -20
  else
    summary+=("$t: ${execs:-?} execs, ${rate:-?} exec/s, no crash")
  fi
done

echo
echo "== summary (${SECONDS_EACH}s per target)"
printf '%s\n' "${summary[@]}"
exit "$status"
