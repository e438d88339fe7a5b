#!/usr/bin/env bash
# On a two-H200 host (32 CPUs): the GPU tests on GPU 0 (12 CPUs), while GPU 1 (20 CPUs) measures
# the unaligned layer's best recorded nosmem configs beside their staged-epilogue twins, then
# searches the unaligned layer of the suite (f16 and bf16) from empty studies, with the staged
# epilogue in the space. Logs and results land in $OUT (at most 8 files: archives).
#   h200x2-staged.sh [tests] [variants] [suite]   (default: all three)
set -u
here=$(dirname "$0")
parts=" ${*:-tests variants suite} "
bash "$here/h200x2-exhaustive.sh" setup || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
if [[ $parts == *" tests "* ]]; then
  (GPU=0 CPUS=0-11 TESTS_TIMEOUT=${TESTS_TIMEOUT:-560} bash "$here/h200x2-exhaustive.sh" tests ${TESTS:-}) &
fi
(
  export CUDA_VISIBLE_DEVICES=1
  mkdir -p /tmp/staged
  if [[ $parts == *" variants "* ]]; then
    timeout "${VARIANTS_TIMEOUT:-200}" taskset -c 12-31 python3 "$here/variants.py" \
      studies/recorded/h200-2026-11-30-unaligned/default-unaligned-f16.json /tmp/staged/variants-unaligned-f16.json \
      --top "${TOP:-6}" --kinds staged --jobs 20 > /tmp/staged/variants-unaligned-f16.log 2>&1
    echo "== variants"; head -20 /tmp/staged/variants-unaligned-f16.log
  fi
  if [[ $parts == *" suite "* ]]; then
    n=${SUITE_TRIALS:-24}
    timeout "${SUITE_TIMEOUT:-300}" taskset -c 12-31 python3 -m cutsearch suite studies/suite.toml --only unaligned-f16,unaligned-bf16 \
      --trials "$n" --batch "$n" --jobs 20 --studies-dir /tmp/staged/studies > /tmp/staged/suite.log 2>&1
    echo "== suite"; grep -v "━" /tmp/staged/suite.log | tail -12
  fi
  tar czf "$OUT/staged.tgz" -C /tmp/staged --exclude=kernels --exclude='*.so' .
) &
wait
