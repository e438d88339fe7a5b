#!/usr/bin/env bash
# On a two-H200 host (32 CPUs): CUTLASS's non-persistent warp-specialized kernel (the ws schedule,
# a grid of all the tiles) beside the persistent configs it would replace. GPU 0, 16 CPUs: the
# best recorded configs of decode, then of asr_out, each beside its ws twin (variants.py --kinds
# ws). GPU 1, 16 CPUs: the same for small_batch, then the GPU tests (TESTS, default the layouts
# test, which holds the ws cases). Logs and results land in $OUT (one archive).
set -u
here=$(dirname "$0")
bash "$here/h200x2-exhaustive.sh" setup || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
variants() {  # GPU CPUS LAYER; each branch starts with one, which makes /tmp/ws
  GPU=$1 CPUS=$2 DIR=/tmp/ws KINDS=ws TOP=${TOP:-6} VARIANTS_TIMEOUT=${VARIANTS_TIMEOUT:-300} \
    bash "$here/h200x2-exhaustive.sh" variants "$3"
}
(variants 0 0-15 decode; variants 0 0-15 asr_out) &
(
  variants 1 16-31 small_batch
  CUDA_VISIBLE_DEVICES=1 timeout "${TESTS_TIMEOUT:-240}" taskset -c 16-31 python3 -m pytest -m gpu -q \
    -p no:cacheprovider --timeout 300 ${TESTS:-tests/test_layouts_gpu.py} > /tmp/ws/gpu-tests.log 2>&1
  echo "== GPU tests"; tail -5 /tmp/ws/gpu-tests.log
) &
wait
tar czf "$OUT/ws.tgz" -C /tmp/ws --exclude=kernels --exclude='*.so' .
