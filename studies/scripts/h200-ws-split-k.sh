#!/usr/bin/env bash
# Split-K on the ws grid against one kernel and against the persistent fixup, on four layers
# whose outputs leave SMs idle: configs_bench.py on one H200, each layer in one run.
# Run: bash studies/scripts/h200-ws-split-k.sh OUT [LAYER ...]   (LAYER: decode-f16, decode-bf16,
# narrow_long_k, head_long_k, small_m_long_k; default all but decode-bf16)
set -uo pipefail
out=${1:?OUT}; shift
mkdir -p "$out"
declare -A FILE=([decode-f16]=studies/suite.toml [decode-bf16]=studies/suite.toml
                 [narrow_long_k]=studies/unseen-split-k.toml [head_long_k]=studies/unseen-split-k.toml
                 [small_m_long_k]=studies/unseen-long-k.toml)
DECODE="64x16x128_c1x1_ws_tma_grid_swap 64x16x128_c2x1_ws_tma_grid_swap
  64x16x128_c1x1_ws_fixup_grid_swap_splitk 64x16x128_c2x1_ws_fixup_grid_swap_splitk 64x16x64_c1x1_ws_fixup_grid_swap_splitk
  128x16x128_c1x1_ws_fixup_grid_swap_splitk 64x16x128_c1x1_pingpong_fixup_persistent_swap_splitk"
declare -A CONFIGS=([decode-f16]=$DECODE [decode-bf16]=$DECODE
  [narrow_long_k]="64x16x128_c1x2_pingpong_fixup_persistent_swap_splitk 64x16x128_c1x1_ws_fixup_grid_swap_splitk
    64x32x128_c1x1_ws_fixup_grid_swap_splitk 64x16x128_c1x2_ws_fixup_grid_swap_splitk 64x16x128_c1x2_ws_tma_grid_swap"
  [head_long_k]="64x16x128_c2x1_pingpong_fixup_persistent_swap_splitk 64x16x128_c2x1_ws_fixup_grid_swap_splitk
    64x16x128_c1x1_ws_fixup_grid_swap_splitk 64x16x128_c1x1_ws_tma_grid_swap"
  [small_m_long_k]="64x32x128_c1x2_pingpong_tma_persistent 128x64x128_c1x1_ws_fixup_grid_splitk
    64x128x128_c1x1_ws_fixup_grid_splitk 128x64x128_c1x1_ws_fixup_grid_swap_splitk
    64x128x128_c1x1_ws_fixup_grid_swap_splitk 64x128x128_c1x1_ws_tma_grid_swap")
layers=("$@")
[ ${#layers[@]} -eq 0 ] && layers=(decode-f16 narrow_long_k head_long_k small_m_long_k)
cache=$(mktemp -d)
# Every layer's kernels built at once, then each layer measured alone on the GPU.
for name in "${layers[@]}"; do
  # shellcheck disable=SC2086
  python studies/scripts/configs_bench.py - "${FILE[$name]}" "$name" ${CONFIGS[$name]} --cache "$cache" \
    --build-only --jobs "${JOBS:-16}" > "$out/build-$name.log" 2>&1 &
done
wait
cat "$out"/build-*.log
for name in "${layers[@]}"; do
  # shellcheck disable=SC2086
  python studies/scripts/configs_bench.py "$out/ws-split-k-$name.json" "${FILE[$name]}" "$name" ${CONFIGS[$name]} \
    --cache "$cache" 2>&1 | tee "$out/ws-split-k-$name.log"
done
