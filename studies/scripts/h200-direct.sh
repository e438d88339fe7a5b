#!/usr/bin/env bash
# On one H200 (16 CPUs): the direct epilogue (templates/epilogue.cuh). Parts, in order (default:
# bench tests):
#   bench   the direct epilogue beside the nosmem or staged one it would replace, on the TOP
#           (default 4) best recorded configs of the unaligned layer in f16 and bf16 and of the
#           odd-N layer with ReLU (direct_epilogue.py), into $OUT/direct.tgz
#   tests   the GPU tests (TESTS, default the layouts test, which holds the direct cases)
set -u
here=$(dirname "$0")
parts=" ${*:-bench tests} "
bash "$here/h200x2-exhaustive.sh" setup || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
if [[ $parts == *" bench "* ]]; then
  rec=studies/recorded/h200x2-2026-11-30-tiles
  mkdir -p /tmp/direct/unaligned /tmp/direct/odd_n
  timeout "${BENCH_TIMEOUT:-300}" python3 "$here/direct_epilogue.py" /tmp/direct/unaligned \
    "$rec/variants-unaligned-f16.json" --top "${TOP:-4}" --dtypes f16,bf16 --jobs 16 > /tmp/direct/unaligned.log 2>&1
  timeout "${BENCH_TIMEOUT:-300}" python3 "$here/direct_epilogue.py" /tmp/direct/odd_n \
    "$rec/variants-odd_n_relu.json" --top "${TOP_ODD_N:-2}" --jobs 16 > /tmp/direct/odd_n.log 2>&1
  grep -h -- "-> direct" /tmp/direct/*.log
  tar czf "$OUT/direct.tgz" -C /tmp/direct --exclude=kernels --exclude='*.so' .
fi
if [[ $parts == *" tests "* ]]; then
  timeout "${TESTS_TIMEOUT:-250}" python3 -m pytest -m gpu -q -p no:cacheprovider --timeout 300 \
    ${TESTS:-tests/test_layouts_gpu.py} > "$OUT/gpu-tests.log" 2>&1
  echo "== GPU tests"; tail -15 "$OUT/gpu-tests.log"
fi
