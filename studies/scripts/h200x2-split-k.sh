#!/usr/bin/env bash
# On a two-H200 host (32 CPUs): split-K where it should pay (studies/split-k.toml), one layer per
# GPU, 16 CPUs each (split_k_bench.py). Logs and results land in $OUT (one archive).
set -u
here=$(dirname "$0")
bash "$here/h200x2-exhaustive.sh" setup || exit 1
export PYTHONPATH=/tmp/site:$PWD:$here PYTHONUNBUFFERED=1
mkdir -p /tmp/split
bench() {  # GPU CPUS NAME
  CUDA_VISIBLE_DEVICES=$1 timeout "${BENCH_TIMEOUT:-420}" taskset -c "$2" python3 "$here/split_k_bench.py" \
    studies/split-k.toml "$3" "/tmp/split/split-k-$3.json" --top "${TOP:-6}" --jobs 16 > "/tmp/split/split-k-$3.log" 2>&1
  echo "== $3"; head -40 "/tmp/split/split-k-$3.log"
}
bench 0 0-15 narrow_long_k &
bench 1 16-31 decode_long_k &
wait
tar czf "$OUT/split-k.tgz" -C /tmp/split --exclude=kernels --exclude='*.so' .
