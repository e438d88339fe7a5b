#!/usr/bin/env bash
# One device session on the H200 host: install the carried wheels (and a carried compile cache),
# then run the GPU tests and/or the suite benchmark, keeping every log and result under $OUT.
#   studies/scripts/gpu-session.sh tests [PYTEST ARGS...]
#   studies/scripts/gpu-session.sh suite [SUITE ARGS...]
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 CUTSEARCH_CACHE=${CUTSEARCH_CACHE:-/tmp/kc}
if [ -f .kcache.tgz ] && [ ! -d "$CUTSEARCH_CACHE" ]; then
  mkdir -p "$CUTSEARCH_CACHE" && tar xzf .kcache.tgz -C "$CUTSEARCH_CACHE"
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
what=$1; shift
case "$what" in
  tests) python3 -m pytest -m gpu -q -p no:cacheprovider --timeout 300 "$@" tests > "$OUT/gpu-tests.log" 2>&1
         tail -25 "$OUT/gpu-tests.log" ;;
  suite) python3 -m cutsearch build studies/suite.toml --top "${TOP:-8}" --jobs "$(nproc)" > "$OUT/build.log" 2>&1
         tail -1 "$OUT/build.log"
         python3 -m cutsearch suite studies/suite.toml "$@" > "$OUT/suite.log" 2>&1
         grep -v "━" "$OUT/suite.log" | tail -32 ;;
esac
