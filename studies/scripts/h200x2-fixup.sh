#!/usr/bin/env bash
# On a two-H200 host (32 CPUs): split-K summed by the GEMM's own epilogue (the fixup). GPU 1, 16
# CPUs: decode's best recorded configs beside their split-K twins, with the reduction kernel and
# with the fixup (variants.py --kinds split-k,fixup). GPU 0, 16 CPUs: the GPU tests (TESTS, default
# the layouts test, which holds the fixup's cases), then the same variants of small_batch.
# Logs and results land in $OUT (one archive).
set -u
here=$(dirname "$0")
bash "$here/h200x2-exhaustive.sh" setup || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p /tmp/fixup
variants() {  # GPU CPUS LAYER
  GPU=$1 CPUS=$2 DIR=/tmp/fixup KINDS=split-k,fixup bash "$here/h200x2-exhaustive.sh" variants "$3"
}
variants 1 16-31 decode &
(
  CUDA_VISIBLE_DEVICES=0 timeout "${TESTS_TIMEOUT:-240}" taskset -c 0-15 python3 -m pytest -m gpu -q \
    -p no:cacheprovider --timeout 300 ${TESTS:-tests/test_layouts_gpu.py} > /tmp/fixup/gpu-tests.log 2>&1
  echo "== GPU tests"; tail -5 /tmp/fixup/gpu-tests.log
  variants 0 0-15 small_batch
) &
wait
tar czf "$OUT/fixup.tgz" -C /tmp/fixup --exclude=kernels --exclude='*.so' .
