#!/usr/bin/env bash
# One call on a two-H200 host (32 CPUs): the GPU tests on GPU 0 (12 CPUs) while GPU 1 (20 CPUs)
# measures the unaligned layer's top configs in the model's order, then runs the suite benchmark.
# Logs, recordings and the suite's results land in $OUT.
#   TOP: how many of the unaligned layer's configs (default 40; 0: none); SUITE_TRIALS (default 12);
#   BUILD_TIMEOUT and SUITE_TIMEOUT (seconds) bound the suite's two steps.
set -u
here=$(dirname "$0")
bash "$here/h200x2-exhaustive.sh" setup || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
(GPU=0 CPUS=0-11 TESTS_TIMEOUT=560 bash "$here/h200x2-exhaustive.sh" tests) &
(
  export CUDA_VISIBLE_DEVICES=1
  if [ "${TOP:-40}" != 0 ]; then
    GPU=1 CPUS=12-31 TRIALS=${TOP:-40} TIMEOUT=150 bash "$here/h200x2-exhaustive.sh" record unaligned
  fi
  n=${SUITE_TRIALS:-12}
  timeout "${BUILD_TIMEOUT:-900}" taskset -c 12-31 python3 -m cutsearch build studies/suite.toml --top "$n" \
    --jobs 20 > "$OUT/suite-build.log" 2>&1
  timeout "${SUITE_TIMEOUT:-900}" taskset -c 12-31 python3 -m cutsearch suite studies/suite.toml --trials "$n" \
    --batch "$n" --jobs 20 > "$OUT/suite.log" 2>&1
  tar czf "$OUT/suite-results.tgz" studies/results/suite-* studies/suite-*/journal.log 2>/dev/null
  grep -v "━" "$OUT/suite.log" | tail -26
) &
wait
