#!/usr/bin/env bash
# On a two-H200 host (32 CPUs): the per-call copy's block size. GPU 0: the copy alone
# (copy_bench.py) and the copy's GPU tests. GPU 1, 16 CPUs: the unaligned layer's best recorded
# configs with the copy at 1, 2 and 4 16-byte vectors a thread, inside the call
# (rebuilt.py ... copy-unroll). Logs and results land in $OUT (one archive).
set -u
here=$(dirname "$0")
bash "$here/h200x2-exhaustive.sh" setup || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p /tmp/copy
(
  CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 python3 "$here/copy_bench.py" /tmp/copy/copy-bench.json \
    > /tmp/copy/copy-bench.log 2>&1
  CUDA_VISIBLE_DEVICES=0 timeout 300 taskset -c 0-15 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_copy.py \
    > /tmp/copy/gpu-tests-copy.log 2>&1
  echo "== copy alone"; grep -A3 '"cutsearch copy' /tmp/copy/copy-bench.json | grep median; tail -3 /tmp/copy/gpu-tests-copy.log
) &
(
  CUDA_VISIBLE_DEVICES=1 timeout "${UNROLL_TIMEOUT:-400}" taskset -c 16-31 python3 "$here/rebuilt.py" \
    "${RECORDING:-studies/recorded/h200x2-2026-11-30-tiles/variants-unaligned-f16.json}" /tmp/copy/in-call copy-unroll \
    --top "${TOP:-4}" --jobs 16 > /tmp/copy/copy-unroll.log 2>&1
  echo "== copy in the call"; grep -v "^    " /tmp/copy/copy-unroll.log | tail -20
) &
wait
tar czf "$OUT/copy.tgz" -C /tmp/copy --exclude=kernels --exclude='*.so' .
