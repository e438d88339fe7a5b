#!/usr/bin/env bash
# On a two-H200 host (32 CPUs): the GPU tests on GPU 0 (12 CPUs) while GPU 1 (20 CPUs) measures
# each suite layer's streaming floor, then the best recorded configs of four layers beside their
# 256-deep-k-tile, four-CTA-cluster and split-K variants. `suite` instead runs the suite benchmark
# on GPU 0 (16 CPUs), beside the variants on GPU 1 (16 CPUs); SUITE_CPUS and SUITE_JOBS give it
# more CPUs where it runs alone.
#   h200x2-floors-and-variants.sh [tests] [floor] [variants] [suite]   (default: the first three)
# Logs and recordings land in $OUT; the variants' in one archive ($OUT keeps at most 8 files).
set -u
here=$(dirname "$0")
parts=" ${*:-tests floor variants} "
bash "$here/h200x2-exhaustive.sh" setup || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
if [[ $parts == *" tests "* ]]; then
  (GPU=0 CPUS=0-11 TESTS_TIMEOUT=${TESTS_TIMEOUT:-570} bash "$here/h200x2-exhaustive.sh" tests) &
fi
cpus=12-31 jobs=20
if [[ $parts == *" suite "* ]]; then
  cpus=16-31 jobs=16
  (
    export CUDA_VISIBLE_DEVICES=0
    n=${SUITE_TRIALS:-12}
    c=${SUITE_CPUS:-0-15} j=${SUITE_JOBS:-16}
    timeout "${BUILD_TIMEOUT:-900}" taskset -c "$c" python3 -m cutsearch build studies/suite.toml --top "$n" --jobs "$j" \
      > /tmp/suite-build.log 2>&1
    timeout "${SUITE_TIMEOUT:-480}" taskset -c "$c" python3 -m cutsearch suite studies/suite.toml --trials "$n" \
      --batch "$n" --jobs "$j" > /tmp/suite.log 2>&1
    tar czf "$OUT/suite-results.tgz" studies/results/suite-* studies/suite-*/journal.log -C /tmp suite.log \
      suite-build.log
    grep -v "━" /tmp/suite.log | tail -24
  ) &
fi
(
  export CUDA_VISIBLE_DEVICES=1
  if [[ $parts == *" floor "* ]]; then
    timeout 150 taskset -c $cpus python3 "$here/stream_floor.py" studies/suite.toml "$OUT/stream-floor.json" \
      > "$OUT/stream-floor.log" 2>&1
    tail -18 "$OUT/stream-floor.log"
  fi
  if [[ $parts == *" variants "* ]]; then
    rec=studies/recorded/h200x2-2026-11-30-exhaustive
    mkdir -p /tmp/variants
    for layer in ${LAYERS:-decode small_batch asr_out mlp_down}; do
      timeout 200 taskset -c $cpus python3 "$here/variants.py" "$rec/exhaustive-$layer-f16.json" \
        "/tmp/variants/variants-$layer-f16.json" --top 4 --jobs $jobs > "/tmp/variants/variants-$layer-f16.log" 2>&1
      echo "== $layer"; head -12 "/tmp/variants/variants-$layer-f16.log"
    done
    tar czf "$OUT/variants.tgz" -C /tmp/variants .
  fi
) &
wait
