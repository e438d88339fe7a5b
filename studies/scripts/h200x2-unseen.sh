#!/usr/bin/env bash
# On a two-H200 host (32 CPUs): a default `cutsearch search` of each layer of a TOML file
# (default studies/unseen.toml; layers alternate between the GPUs, 16 CPUs each, LIMIT seconds
# each, default 140), then the export of its winner used as an application would
# (studies/scripts/use_export.py). Everything lands in $OUT/unseen.tgz ($OUT keeps at most 8 files).
# GPUS="1" runs every layer on GPU 1 alone (CPUs 16-31), leaving GPU 0 to other work.
# SEARCH_ARGS adds options to each search (--split-k, say); SKIP_SETUP=1 where the wheels are in.
# ONLY="NAME ..." searches those layers alone; SUFFIX is appended to each study's name.
#   h200x2-unseen.sh [LAYERS.toml]
set -u
: "${OUT:?the folder the results land in}"
here=$(dirname "$0")
toml=${1:-studies/unseen.toml}
[ -n "${SKIP_SETUP:-}" ] || bash "$here/h200x2-exhaustive.sh" setup || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
dir=/tmp/unseen
mkdir -p "$dir"

run() {  # GPU CPUS NAME SEARCH-ARGS...
  local gpu=$1 cpus=$2 name=$3; shift 3
  local start; start=$(date +%s)
  # shellcheck disable=SC2068
  CUDA_VISIBLE_DEVICES=$gpu taskset -c "$cpus" python3 -m cutsearch search $@ ${SEARCH_ARGS:-} --study "$name" \
    --studies-dir "$dir" --timeout "${LIMIT:-140}s" > "$dir/$name.log" 2>&1
  echo "{\"layer\": \"$name\", \"args\": \"$*\", \"cpus\": \"$cpus\", \"wall_s\": $(($(date +%s) - start))}" \
    > "$dir/$name.wall.json"
  python3 -m cutsearch record "$name" --studies-dir "$dir" --out "$dir/$name.json" >> "$dir/$name.log" 2>&1
  python3 -m cutsearch export "$name" --studies-dir "$dir" --out "$dir/export-$name" >> "$dir/$name.log" 2>&1
  CUDA_VISIBLE_DEVICES=$gpu python3 "$here/use_export.py" "$dir/export-$name" --out "$dir/$name.use.json" \
    >> "$dir/$name.log" 2>&1
  echo "== $name"; grep -v "━" "$dir/$name.log" | grep -E "│|speedup_import|rel_error|Error|error" | tail -16
  save
}

save() {  # what is done so far, so that a run cut by its time limit keeps its finished layers
  tar czf "$OUT/unseen.tgz.$BASHPID" -C "$dir" --exclude='export-*' . && mv -f "$OUT/unseen.tgz.$BASHPID" "$OUT/unseen.tgz"
}

# NAME|SEARCH-ARGS per layer, from the file.
mapfile -t layers < <(python3 - "$toml" "${ONLY:-}" "${SUFFIX:-}" <<'PY'
import sys
from pathlib import Path
from cutsearch.problem import load_layers
layers = load_layers(Path(sys.argv[1]))
only = sys.argv[2].split() or list(layers)
if unknown := [n for n in only if n not in layers]:
    sys.exit(f"not in {sys.argv[1]}: {', '.join(unknown)}")
for name in only:
    l = layers[name]
    print(f"{name}{sys.argv[3]}|--m {l.m} --n {l.n} --k {l.k} --dtype {l.dtype} {'--bias' if l.bias else '--no-bias'} "
          f"--activation {l.activation} --input {l.input} --output {l.output}")
PY
)
[ ${#layers[@]} -gt 0 ] || exit 2
read -r -a gpus <<< "${GPUS:-0 1}"
for slot in "${!gpus[@]}"; do
  (
    gpu=${gpus[$slot]}
    cpus=$([ "$gpu" = 0 ] && echo 0-15 || echo 16-31)
    for i in "${!layers[@]}"; do
      if [ $((i % ${#gpus[@]})) = "$slot" ]; then run "$gpu" "$cpus" "${layers[$i]%%|*}" "${layers[$i]#*|}"; fi
    done
  ) &
done
wait
save
