#!/usr/bin/env bash
# On a two-H200 host (32 CPUs): the per-call copy. GPU 0: the copy alone (copy_bench.py) and the
# GPU tests (TESTS: their files, default the copy's). GPU 1, 16 CPUs: the unaligned layer's best
# recorded configs rebuilt with each setting of a copy switch (SWITCH: copy-unroll, the 16-byte
# vectors a thread; copy-prefetch, W pulled into L2 during the copy) and timed inside the call
# (rebuilt.py). Logs and results land in $OUT (one archive).
set -u
here=$(dirname "$0")
switch=${SWITCH:-copy-unroll}
bash "$here/h200x2-exhaustive.sh" setup || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p /tmp/copy
(
  CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 python3 "$here/copy_bench.py" /tmp/copy/copy-bench.json \
    > /tmp/copy/copy-bench.log 2>&1
  CUDA_VISIBLE_DEVICES=0 timeout "${TESTS_TIMEOUT:-300}" taskset -c 0-15 python3 -m pytest -m gpu -q -p no:cacheprovider \
    --timeout 300 ${TESTS:-tests/test_copy.py} > /tmp/copy/gpu-tests.log 2>&1
  echo "== copy alone"; grep -A3 '"cutsearch copy' /tmp/copy/copy-bench.json | grep median; tail -3 /tmp/copy/gpu-tests.log
) &
(
  CUDA_VISIBLE_DEVICES=1 timeout "${REBUILT_TIMEOUT:-400}" taskset -c 16-31 python3 "$here/rebuilt.py" \
    "${RECORDING:-studies/recorded/h200x2-2026-11-30-tiles/variants-unaligned-f16.json}" /tmp/copy/in-call "$switch" \
    --top "${TOP:-4}" --jobs 16 > "/tmp/copy/$switch.log" 2>&1
  echo "== $switch in the call"; grep -v "^    " "/tmp/copy/$switch.log" | tail -20
) &
wait
tar czf "$OUT/copy.tgz" -C /tmp/copy --exclude=kernels --exclude='*.so' .
