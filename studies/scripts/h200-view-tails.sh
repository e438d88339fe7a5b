#!/usr/bin/env bash
# On one H200 (16 CPUs): x's row views with the tail kernel where P does not divide M
# (templates/tail.cuh). Parts, in order (default: tests bench):
#   tests   the GPU tests (TESTS, default the tail kernel's and the layouts', which hold the tail cases)
#   bench   the views and their tail against the copy of x they replace, on the best recorded
#           configs of six layers whose M is not a multiple of P (row_views.py), into $OUT/tails.tgz
set -u
here=$(dirname "$0")
parts=" ${*:-tests bench} "
bash "$here/h200x2-exhaustive.sh" setup || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
if [[ $parts == *" tests "* ]]; then
  timeout "${TESTS_TIMEOUT:-420}" python3 -m pytest -m gpu -q -p no:cacheprovider --timeout 400 --durations 15 \
    ${TESTS:-tests/test_tail.py tests/test_layouts_gpu.py} > "$OUT/gpu-tests.log" 2>&1
  echo "== GPU tests"; tail -25 "$OUT/gpu-tests.log"
fi
if [[ $parts == *" bench "* ]]; then
  mkdir -p /tmp/tails
  r=studies/recorded
  timeout "${BENCH_TIMEOUT:-330}" python3 "$here/row_views.py" /tmp/tails \
    $r/h200-2026-12-01-unseen-direct/all_odd_gelu.json $r/h200-2026-12-04-own-copy/draw3_2.json \
    $r/h200-2026-12-01-unseen-mixed/odd_small.json $r/h200-2026-12-04-random9/draw9_1.json \
    $r/h200-2026-12-01-random/random2.json $r/h200-2026-12-03-heads/headb0.json \
    --top "${TOP:-4}" --jobs 16 > /tmp/tails/bench.log 2>&1
  echo "== bench rc=$?"; grep -E "copy .* views|failed|Error" /tmp/tails/bench.log | head -40
  tar czf "$OUT/tails.tgz" -C /tmp/tails --exclude=kernels --exclude='*.so' .
fi
