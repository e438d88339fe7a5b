#!/usr/bin/env bash
# On a two-H200 host (32 CPUs): a default `cutsearch search` of each layer of studies/unseen.toml
# (two per GPU, 16 CPUs each, LIMIT seconds each, default 140), then the export of its winner
# used as an application would (studies/scripts/use_export.py). Everything lands in
# $OUT/unseen.tgz ($OUT keeps at most 8 files).
set -u
here=$(dirname "$0")
bash "$here/h200x2-exhaustive.sh" setup || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
dir=/tmp/unseen
mkdir -p "$dir"

run() {  # GPU CPUS NAME SEARCH-ARGS...
  local gpu=$1 cpus=$2 name=$3; shift 3
  local start; start=$(date +%s)
  CUDA_VISIBLE_DEVICES=$gpu taskset -c "$cpus" python3 -m cutsearch search "$@" --study "$name" \
    --studies-dir "$dir" --timeout "${LIMIT:-140}s" > "$dir/$name.log" 2>&1
  echo "{\"layer\": \"$name\", \"args\": \"$*\", \"cpus\": \"$cpus\", \"wall_s\": $(($(date +%s) - start))}" \
    > "$dir/$name.wall.json"
  python3 -m cutsearch record "$name" --studies-dir "$dir" --out "$dir/$name.json" >> "$dir/$name.log" 2>&1
  python3 -m cutsearch export "$name" --studies-dir "$dir" --out "$dir/export-$name" >> "$dir/$name.log" 2>&1
  CUDA_VISIBLE_DEVICES=$gpu python3 "$here/use_export.py" "$dir/export-$name" --out "$dir/$name.use.json" \
    >> "$dir/$name.log" 2>&1
  echo "== $name"; grep -v "━" "$dir/$name.log" | tail -24
}

(run 0 0-15 odd_k_gelu --m 77 --n 3000 --k 517 --dtype bf16 --bias --activation gelu
 run 0 0-15 gemv_up --m 1 --n 11008 --k 4096 --dtype f16 --no-bias) &
(run 1 16-31 odd_n_relu --m 4000 --n 333 --k 2048 --dtype f16 --bias --activation relu
 run 1 16-31 vocab --m 8 --n 50257 --k 768 --dtype bf16 --no-bias) &
wait
tar czf "$OUT/unseen.tgz" -C "$dir" --exclude='export-*' .
