#!/usr/bin/env bash
# The suite benchmark's unaligned layer alone, from empty studies, with the suite's budget (12
# trials in one batch, 16 CPUs), and the GPU tests (TESTS, default the layouts test). On a
# two-H200 host (32 CPUs) the two run at once, the suite on GPU 1; on a one-H200 host (16 CPUs)
# one after the other. Logs and results land in $OUT (one archive).
set -u
here=$(dirname "$0")
bash "$here/h200x2-exhaustive.sh" setup || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p /tmp/us-suite
touch /tmp/us-suite/.start
tests() {
  GPU=0 CPUS=0-15 TESTS_TIMEOUT=${TESTS_TIMEOUT:-400} bash "$here/h200x2-exhaustive.sh" tests \
    ${TESTS:-tests/test_layouts_gpu.py}
}
suite() {  # GPU CPUS
  CUDA_VISIBLE_DEVICES=$1 timeout "${SUITE_TIMEOUT:-420}" taskset -c "$2" python3 -m cutsearch suite studies/suite.toml \
    --only unaligned-f16,unaligned-bf16 --trials 12 --batch 12 --jobs 16 > /tmp/us-suite/suite.log 2>&1
  find studies/results -name "suite-*" -newer /tmp/us-suite/.start -exec cp {} /tmp/us-suite/ \;
  for f in studies/suite-unaligned-*/journal.log; do cp "$f" "/tmp/us-suite/$(basename "$(dirname "$f")").journal.log"; done
  grep -v "━" /tmp/us-suite/suite.log | tail -16
}
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  tests & suite 1 16-31 & wait
else
  tests; suite 0 0-15
fi
cp "$OUT/gpu-tests.log" /tmp/us-suite/ 2>/dev/null
tar czf "$OUT/unaligned-suite.tgz" -C /tmp/us-suite .
