#!/usr/bin/env bash
# On one H200: x's one row read in place where M = 1 and K needs padding (the `views` knob with a
# single view, the kernel's K cut where x ends), against the copy of x it replaces. The layout
# tests first (TESTS="FILES"; they include the new cases), then each named layer's configs measured
# over their knob grid by configs_bench.py, so every call is timed with x copied and with x read in
# place in one run. A compile cache carried as .kcache.tgz (configs_bench.py --build-only) saves
# the builds. Writes $OUT/one-row-NAME.json and prints the pairs (knob_pairs.py).
#   h200-one-row.sh TOML NAME CONFIG [CONFIG ...]
set -u
here=$(dirname "$0")
toml=$1 name=$2; shift 2
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD:$here PYTHONUNBUFFERED=1
mkdir -p /tmp/kc && { [ ! -f .kcache.tgz ] || tar xzf .kcache.tgz -C /tmp/kc; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
if [ -n "${TESTS:-}" ]; then
  timeout "${TESTS_TIMEOUT:-300}" python3 -m pytest -m gpu -q -p no:cacheprovider $TESTS > "$OUT/gpu-tests.log" 2>&1
  tail -3 "$OUT/gpu-tests.log"
fi
timeout "${LAYER_TIMEOUT:-150}" python3 "$here/configs_bench.py" "$OUT/one-row-$name.json" "$toml" "$name" "$@" \
  --cache /tmp/kc --jobs 16 > "$OUT/one-row-$name.log" 2>&1 || echo "$name: exit $?"
python3 "$here/knob_pairs.py" "$OUT/one-row-$name.json" --knob views --free pdl,prefetch
