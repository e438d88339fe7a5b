#!/usr/bin/env bash
# One call on a two-H200 host (32 CPUs): the suite benchmark on GPU 0, and meanwhile the
# two-GPU scale-out run: one search on GPU 1, then one search plus one worker on GPUs 0 and 1,
# each on a fresh asr_out study in the model's order, over kernels built beforehand (so that the
# run measures the GPUs, not nvcc). Everything lands in $OUT/results.tgz.
set -u
SECS=${SECS:-60}
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 CUTSEARCH_CACHE=/tmp/kc
L="--m 4096 --n 5000 --k 1024"
scale() {  # scale N: a search on GPU N-1 (N=1) or GPUs 0 and 1 (N=2)
  local n=$1 first=$(( $1 == 1 ? 1 : 0 ))
  python3 -m cutsearch search $L --study "scale-$n" --sampler model --trials 96 --timeout "${SECS}s" \
    --gpu $first --jobs 4 > "$OUT/scale-$n-search.log" 2>&1 &
  if [ "$n" = 2 ]; then  # join as soon as the search has created the study
    until grep -qs '"layer"' studies/scale-2/journal.log; do sleep 0.2; done
    python3 -m cutsearch worker --study scale-2 --gpu 1 --sampler model --trials 96 \
      --timeout "${SECS}s" --jobs 4 > "$OUT/scale-2-worker.log" 2>&1 &
  fi
  wait
}
(
  taskset -c 20-31 python3 -m cutsearch throughput $L --kernels 96 --naive 1 --jobs 12 \
    --out "$OUT/throughput-prebuild.json" --keep-cache /tmp/kc > "$OUT/prebuild.log" 2>&1
  taskset -c 20-31 bash -c "$(declare -f scale); L='$L' SECS=$SECS; scale 1"
) &
taskset -c 0-19 python3 -m cutsearch build studies/suite.toml --top 12 --jobs 20 > "$OUT/build.log" 2>&1
taskset -c 0-19 python3 -m cutsearch suite studies/suite.toml --trials 12 --batch 12 --jobs 20 > "$OUT/suite.log" 2>&1
wait
scale 2
for n in 1 2; do python3 -m cutsearch show "scale-$n" > "$OUT/scale-$n-show.log" 2>&1; done
tar czf "$OUT/results.tgz" studies/results studies/suite-*/journal.log studies/scale-*/journal.log 2>/dev/null
grep -v "━" "$OUT/suite.log" | tail -26; tail -n 4 "$OUT"/scale-*-show.log
