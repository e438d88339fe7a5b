#!/usr/bin/env bash
# The efficiency benchmark's H200 data, on the two-H200 host. Results and logs go to $OUT.
#   h200x2-exhaustive.sh setup                  install the carried wheels (run once, first)
#   h200x2-exhaustive.sh tests                  the GPU tests
#   h200x2-exhaustive.sh record LAYER...        every config of each layer's default space, in
#                                               the model's order, then its recording (TRIALS=n:
#                                               only the model's first n; SPLIT_K=1: the space
#                                               with split-K, as `--split-k` searches it)
#   h200x2-exhaustive.sh default LAYER...       `cutsearch search` with its default budget from an
#                                               empty compile cache, timed on the wall clock
#   h200x2-exhaustive.sh exported LAYER         export that default search's winner, and run the
#                                               loader and profile GPU tests on the export
#   h200x2-exhaustive.sh variants LAYER         the TOP (default 4) best configs of the layer's
#                                               exhaustive recording beside their variants of
#                                               KINDS (variants.py --kinds), into DIR
# GPU (default 0) and CPUS (default all) say where each runs, so that two can share the host:
# one GPU each, and 16 CPUs for `default`, as on the one-H200 host.
# LAYER is decode, asr_out, unaligned or small_batch: f16 layers of studies/suite.toml.
set -u
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=${GPU:-0}
CPUS=${CPUS:-0-$(($(nproc) - 1))}
what=$1; shift

layer_args() {
  case "$1" in
    decode) echo "--m 16 --n 4096 --k 4096 --bias" ;;
    asr_out) echo "--m 4096 --n 5000 --k 1024 --bias" ;;
    unaligned) echo "--m 3000 --n 1001 --k 999 --bias" ;;
    small_batch) echo "--m 256 --n 1024 --k 1024 --bias" ;;
    *) echo "unknown layer $1" >&2; exit 2 ;;
  esac
}

space_size() {  # M N K: configs in the default space of that f16 layer with bias
  python3 -c "from cutsearch.problem import Layer; from cutsearch.space import Space
print(len(list(Space(Layer(m=$1, n=$2, k=$3, bias=True)))))"
}

case "$what" in
  setup)
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
    nproc >> "$OUT/gpu.txt" ;;
  tests)
    timeout "${TESTS_TIMEOUT:-3000}" taskset -c "$CPUS" python3 -m pytest -m gpu -q -p no:cacheprovider --timeout 300 "$@" \
      > "$OUT/gpu-tests.log" 2>&1
    tail -4 "$OUT/gpu-tests.log" ;;
  record)
    for layer in "$@"; do
      read -r _ m _ n _ k _ <<< "$(layer_args "$layer")"
      size=$(space_size "$m" "$n" "$k")
      study="exhaustive-$layer-f16"
      if [ -n "${TRIALS:-}" ]; then size=$TRIALS; study="model-top$TRIALS-$layer-f16"; fi
      split=""
      if [ -n "${SPLIT_K:-}" ]; then split="--split-k"; study="$study-split-k"; fi
      # Eight trials per CPU at once: units of 8 kernels, the compiler's best throughput. The
      # model's order puts the likely winners first, so a run cut short holds the top of the space.
      taskset -c "$CPUS" python3 -m cutsearch search $(layer_args "$layer") $split --study "$study" \
        --studies-dir /tmp/ex --sampler model --trials "$size" --batch $((8 * $(taskset -c "$CPUS" nproc))) \
        --timeout "${TIMEOUT:-290}s" > "$OUT/$study.log" 2>&1
      python3 -m cutsearch record "$study" --studies-dir /tmp/ex --out "$OUT/$study.json" >> "$OUT/$study.log" 2>&1
      cp "/tmp/ex/$study/journal.log" "$OUT/$study.journal.log" 2>/dev/null
      cp "/tmp/ex/results/$study.json" "$OUT/$study.summary.json" 2>/dev/null
      echo "$layer: space $size"; grep -v "━" "$OUT/$study.log" | tail -14
    done ;;
  default)
    for layer in "$@"; do
      study="default-$layer-f16"
      start=$(date +%s)
      CUTSEARCH_CACHE=/tmp/empty-cache-$layer taskset -c "$CPUS" python3 -m cutsearch search \
        $(layer_args "$layer") --study "$study" --studies-dir /tmp/def > "$OUT/$study.log" 2>&1
      echo "{\"layer\": \"$layer\", \"cpus\": \"$CPUS\", \"wall_s\": $(($(date +%s) - start))}" \
        > "$OUT/$study.wall.json"
      python3 -m cutsearch record "$study" --studies-dir /tmp/def --out "$OUT/$study.json" >> "$OUT/$study.log" 2>&1
      cp "/tmp/def/results/$study.json" "$OUT/$study.summary.json" 2>/dev/null
      cat "$OUT/$study.wall.json"; grep -v "━" "$OUT/$study.log" | tail -14
    done ;;
  exported)
    study="default-$1-f16"
    python3 -m cutsearch export "$study" --studies-dir /tmp/def --out "/tmp/export-$1" > "$OUT/$study.export.log" 2>&1
    CUTSEARCH_TEST_EXPORT="/tmp/export-$1" timeout "${TESTS_TIMEOUT:-600}" taskset -c "$CPUS" python3 -m pytest -m gpu -q \
      -p no:cacheprovider tests/test_loader_gpu.py tests/test_profile_gpu.py > "$OUT/$study.loader-tests.log" 2>&1
    cp "/tmp/export-$1/meta.json" "$OUT/$study.export.json" 2>/dev/null
    tail -3 "$OUT/$study.export.log" "$OUT/$study.loader-tests.log" ;;
  variants)
    mkdir -p "$DIR"
    timeout "${VARIANTS_TIMEOUT:-330}" taskset -c "$CPUS" python3 "$(dirname "$0")/variants.py" \
      "studies/recorded/h200x2-2026-11-30-exhaustive/exhaustive-$1-f16.json" "$DIR/variants-$1-f16.json" \
      --top "${TOP:-4}" --kinds "$KINDS" --jobs 16 > "$DIR/variants-$1-f16.log" 2>&1
    echo "== $1"; head -30 "$DIR/variants-$1-f16.log" ;;
  *) echo "usage: $0 setup|tests|record LAYER...|default LAYER...|exported LAYER|variants LAYER" >&2; exit 2 ;;
esac
