#!/usr/bin/env bash
# On one H200: each named layer's configs measured over their whole knob grid by configs_bench.py,
# so that every call is timed with and without one run-time knob in one run, then the pairs
# (knob_pairs.py). The GPU tests first where TESTS="FILES" names them. A compile cache carried as
# .kcache.tgz (configs_bench.py --build-only) saves the builds. Writes $OUT/pairs.txt, and the
# recordings and logs in $OUT/KNOB.tgz.
#   KNOB=own_copy FREE=pdl,prefetch,views h200-knob-pairs.sh TOML NAME:CONFIG[,CONFIG...] [...]
# BENCH=SCRIPT measures with another script of configs_bench.py's arguments (own_copy_trial.py).
set -u
here=$(dirname "$0")
toml=$1; shift
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD:$here PYTHONUNBUFFERED=1
mkdir -p /tmp/kc "$OUT/$KNOB" && { [ ! -f .kcache.tgz ] || tar xzf .kcache.tgz -C /tmp/kc; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/$KNOB/gpu.txt"
if [ -n "${TESTS:-}" ]; then
  timeout "${TESTS_TIMEOUT:-300}" python3 -m pytest -m gpu -q -p no:cacheprovider $TESTS > "$OUT/gpu-tests.log" 2>&1
  tail -3 "$OUT/gpu-tests.log"
fi
for spec in "$@"; do
  name=${spec%%:*} configs=${spec#*:}
  timeout "${LAYER_TIMEOUT:-150}" python3 "$here/${BENCH:-configs_bench.py}" "$OUT/$KNOB/$KNOB-$name.json" "$toml" "$name" \
    ${configs//,/ } --cache /tmp/kc --jobs "$(nproc)" > "$OUT/$KNOB/$KNOB-$name.log" 2>&1 || echo "$name: exit $?"
done
python3 "$here/knob_pairs.py" "$OUT/$KNOB"/"$KNOB"-*.json --knob "$KNOB" --free "${FREE:-}" | tee "$OUT/pairs.txt"
tar czf "$OUT/$KNOB.tgz" -C "$OUT" "$KNOB" && rm -r "${OUT:?}/$KNOB"
