#!/usr/bin/env bash
# One device session on the H200 host: install the carried wheels (and carried compile caches),
# then run the GPU tests, the suite benchmark, the compile-throughput benchmark or the two-GPU
# scale-out run, keeping every log and result under $OUT.
#   studies/scripts/gpu-session.sh tests [PYTEST ARGS...]
#   studies/scripts/gpu-session.sh suite [SUITE ARGS...]
#   studies/scripts/gpu-session.sh throughput [THROUGHPUT ARGS...]   (on CPUs $CPUS, default all)
#   studies/scripts/gpu-session.sh scale SECONDS                      (needs two GPUs)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 CUTSEARCH_CACHE=${CUTSEARCH_CACHE:-/tmp/kc}
if [ -f .kcache.tgz ] && [ ! -d "$CUTSEARCH_CACHE" ]; then
  mkdir -p "$CUTSEARCH_CACHE" && tar xzf .kcache.tgz -C "$CUTSEARCH_CACHE"
fi
# Kernels the test files build, made beforehand without a GPU (studies/scripts/test-kernels.sh).
export CUTSEARCH_TEST_KERNELS=${CUTSEARCH_TEST_KERNELS:-/tmp/tk}
mkdir -p "$CUTSEARCH_TEST_KERNELS" && { [ ! -f .tkernels.txz ] || python3 -c \
  'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' .tkernels.txz "$CUTSEARCH_TEST_KERNELS"; }
if [ -f "$CUTSEARCH_TEST_KERNELS/toolchain.json" ]; then  # a pack built by another toolchain is missed: say so
  python3 studies/scripts/toolchain_id.py > "$OUT/toolchain.json"
  cmp -s "$OUT/toolchain.json" "$CUTSEARCH_TEST_KERNELS/toolchain.json" || {
    echo "the carried test kernels were built by another toolchain, so they are compiled again:"
    diff "$CUTSEARCH_TEST_KERNELS/toolchain.json" "$OUT/toolchain.json" | tee "$OUT/toolchain.diff"; }
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
what=$1; shift
case "$what" in
  tests) # --durations: where a device call's minutes go, to split the files across calls
         python3 -m pytest -m gpu -q -p no:cacheprovider --timeout 300 --durations 15 "$@" > "$OUT/gpu-tests.log" 2>&1
         tail -25 "$OUT/gpu-tests.log" ;;
  suite) python3 -m cutsearch build studies/suite.toml --top "${TOP:-8}" --jobs "$(nproc)" > "$OUT/build.log" 2>&1
         tail -1 "$OUT/build.log"
         python3 -m cutsearch suite studies/suite.toml "$@" > "$OUT/suite.log" 2>&1
         grep -v "━" "$OUT/suite.log" | tail -32 ;;
  throughput) taskset -c "${CPUS:-0-$(($(nproc) - 1))}" python3 -m cutsearch throughput "$@" > "$OUT/throughput.log" 2>&1
         tail -30 "$OUT/throughput.log" ;;
  scale) # One search on GPU 0, then a search on GPU 0 joined by a worker on GPU 1, each on a
         # fresh study of asr_out, in the model's order (kernels built by `throughput` are cached).
         secs=$1
         for n in 1 2; do
           python3 -m cutsearch search --m 4096 --n 5000 --k 1024 --study "scale-$n" --sampler model \
             --trials 128 --timeout "${secs}s" --gpu 0 --jobs $(($(nproc) / n)) > "$OUT/scale-$n-gpu0.log" 2>&1 &
           if [ "$n" = 2 ]; then
             sleep 10
             python3 -m cutsearch worker --study scale-2 --gpu 1 --sampler model --trials 128 \
               --timeout "$((secs - 10))s" --jobs $(($(nproc) / 2)) > "$OUT/scale-2-gpu1.log" 2>&1 &
           fi
           wait
           python3 -m cutsearch show "scale-$n" > "$OUT/scale-$n-show.log" 2>&1
           cp "studies/results/scale-$n.json" "$OUT/" 2>/dev/null
         done
         tail -n 12 "$OUT"/scale-*-show.log ;;
esac
