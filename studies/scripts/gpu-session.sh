#!/usr/bin/env bash
# One device session on the H200 host: install the carried wheels, then run the GPU tests and
# the suite benchmark, keeping every log and result under $OUT.
#   studies/scripts/gpu-session.sh [tests] [suite ARGS...]
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 CUTSEARCH_CACHE=/tmp/kc
if [ -f .kcache.tgz ]; then mkdir -p /tmp/kc && tar xzf .kcache.tgz -C /tmp/kc --strip-components=1; fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
what=${1:-tests}; shift || true
case "$what" in
  tests) python3 -m pytest -m gpu -q -p no:cacheprovider tests 2>&1 | tail -40 | tee "$OUT/gpu-tests.log" ;;
  suite) python3 -m cutsearch build studies/suite.toml --top "${TOP:-6}" --jobs "$(nproc)" > "$OUT/build.log" 2>&1
         tail -1 "$OUT/build.log"
         python3 -m cutsearch suite studies/suite.toml "$@" 2>&1 | grep -v "━" | tail -60 | tee "$OUT/suite.log"
         cp studies/results/suite-*.json "$OUT/" 2>/dev/null ;;
esac
