#!/usr/bin/env bash
# One call on a two-H200 host (32 CPUs): the GPU tests on GPU 0 (12 CPUs) while GPU 1 (20 CPUs)
# measures each suite layer's streaming floor, the best recorded configs of three layers beside
# their 256-deep-k-tile and four-CTA-cluster variants, and split-K on small_batch.
# Logs and recordings land in $OUT.
set -u
here=$(dirname "$0")
bash "$here/h200x2-exhaustive.sh" setup || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
(GPU=0 CPUS=0-11 TESTS_TIMEOUT=${TESTS_TIMEOUT:-570} bash "$here/h200x2-exhaustive.sh" tests) &
(
  export CUDA_VISIBLE_DEVICES=1
  rec=studies/recorded/h200x2-2026-11-30-exhaustive
  timeout 150 taskset -c 12-31 python3 "$here/stream_floor.py" studies/suite.toml "$OUT/stream-floor.json" \
    > "$OUT/stream-floor.log" 2>&1
  tail -12 "$OUT/stream-floor.log"
  for layer in ${LAYERS:-decode small_batch asr_out}; do
    timeout 200 taskset -c 12-31 python3 "$here/variants.py" "$rec/exhaustive-$layer-f16.json" \
      "$OUT/variants-$layer-f16.json" --top 4 --jobs 20 > "$OUT/variants-$layer-f16.log" 2>&1
    echo "== $layer"; head -8 "$OUT/variants-$layer-f16.log"
  done
  GPU=1 CPUS=12-31 TRIALS=24 SPLIT_K=1 TIMEOUT=120 bash "$here/h200x2-exhaustive.sh" record small_batch
) &
wait
