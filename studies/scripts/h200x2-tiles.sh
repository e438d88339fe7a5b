#!/usr/bin/env bash
# On a two-H200 host (32 CPUs): the best recorded configs of two layers whose tiles fill the SMs
# badly, measured beside their twins with a CTA tile N between the powers of two (96, 160, 192,
# 224): the unaligned layer on GPU 1, the unseen odd-N layer (4000x333x2048, bias + ReLU) on
# GPU 0, 16 CPUs each. Logs and results land in $OUT (one archive).
set -u
here=$(dirname "$0")
bash "$here/h200x2-exhaustive.sh" setup || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p /tmp/tiles
run() {  # GPU CPUS RECORDING NAME
  CUDA_VISIBLE_DEVICES=$1 timeout "${VARIANTS_TIMEOUT:-400}" taskset -c "$2" python3 "$here/variants.py" "$3" \
    "/tmp/tiles/variants-$4.json" --top "${TOP:-8}" --kinds tiles --jobs 16 > "/tmp/tiles/variants-$4.log" 2>&1
  echo "== $4"; head -40 "/tmp/tiles/variants-$4.log"
}
run 1 16-31 studies/recorded/h200-2026-11-30-unaligned/default-unaligned-f16.json unaligned-f16 &
run 0 0-15 studies/recorded/h200x2-2026-11-30-staged/odd_n_relu.json odd_n_relu &
wait
tar czf "$OUT/tiles.tgz" -C /tmp/tiles --exclude=kernels --exclude='*.so' .
