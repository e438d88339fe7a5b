#!/usr/bin/env bash
# On one H200: W prefetched into L2 while the GEMM waits for the call's copy of x (the `prefetch`
# knob, templates/mainloop.cuh). Each layer's best recorded configs that copy x are measured over
# their knob grid by configs_bench.py, so each overlapped call is timed with and without the
# prefetch in one run. A compile cache carried as .kcache.tgz (configs_bench.py --build-only)
# saves the builds. Writes $OUT/prefetch-NAME.json and prints the pairs (knob_pairs.py).
set -u
here=$(dirname "$0")
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD:$here PYTHONUNBUFFERED=1
mkdir -p /tmp/kc && { [ ! -f .kcache.tgz ] || tar xzf .kcache.tgz -C /tmp/kc; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
bench() {  # TOML NAME CONFIG...
  local toml=$1 name=$2; shift 2
  timeout "${LAYER_TIMEOUT:-150}" python3 "$here/configs_bench.py" "$OUT/prefetch-$name.json" "$toml" "$name" "$@" \
    --cache /tmp/kc --jobs 16 > "$OUT/prefetch-$name.log" 2>&1 || echo "$name: exit $?"
}
bench studies/unseen-random.toml random0 128x16x64_c1x1_ws_tma_grid_swap_pad 128x16x64_c1x1_pingpong_tma_persistent_swap_pad
bench studies/unseen-random3.toml draw3_3 64x16x64_c1x1_ws_tma_grid_swap_pad 64x16x128_c2x1_ws_tma_grid_swap_pad
bench studies/unseen-heads.toml head1 64x16x64_c1x1_ws_tma_grid_swap_pad_splitk 64x32x64_c1x1_ws_tma_grid_swap_pad_splitk
bench studies/unseen-random3.toml draw3_2 64x32x128_c2x1_ws_direct_grid_swap_pad 128x16x32_c1x2_ws_direct_grid_swap_pad
python3 "$here/knob_pairs.py" "$OUT"/prefetch-*.json
