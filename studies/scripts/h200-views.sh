#!/usr/bin/env bash
# On one H200 (16 CPUs): x's row views (space.RowViews). Parts, in order (default: bench tests):
#   bench   the views against the copy of x they replace, on the unaligned layer's best recorded
#           configs in f16 and bf16 (row_views.py), into $OUT/views.tgz
#   tests   the GPU tests (TESTS, default the layouts test, which holds the views cases)
#   unseen  default searches of the layers of UNSEEN (default studies/unseen-views.toml), each
#           export used as an application would (h200x2-unseen.sh on GPU 0, LIMIT seconds each)
set -u
here=$(dirname "$0")
parts=" ${*:-bench tests} "
bash "$here/h200x2-exhaustive.sh" setup || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
if [[ $parts == *" bench "* ]]; then
  mkdir -p /tmp/views
  timeout "${BENCH_TIMEOUT:-300}" python3 "$here/row_views.py" /tmp/views \
    studies/recorded/h200x2-2026-11-30-tiles/variants-unaligned-f16.json --top "${TOP:-6}" --dtypes f16,bf16 \
    --jobs 16 > /tmp/views/bench.log 2>&1
  grep -E "copy .* views" /tmp/views/bench.log
  tar czf "$OUT/views.tgz" -C /tmp/views --exclude=kernels --exclude='*.so' .
fi
if [[ $parts == *" tests "* ]]; then
  timeout "${TESTS_TIMEOUT:-250}" python3 -m pytest -m gpu -q -p no:cacheprovider --timeout 300 \
    ${TESTS:-tests/test_layouts_gpu.py} > "$OUT/gpu-tests.log" 2>&1
  echo "== GPU tests"; tail -15 "$OUT/gpu-tests.log"
fi
if [[ $parts == *" unseen "* ]]; then
  SKIP_SETUP=1 GPUS="0" bash "$here/h200x2-unseen.sh" "${UNSEEN:-studies/unseen-views.toml}"
fi
