#!/usr/bin/env bash
# The loader's per-call host cost, before and after a change to cutsearch/loader.py, on one GPU:
# use_export.py on each export named, under the loader in the tree ("new") and under OLD_LOADER
# ("old"), in turn, ROUNDS times each (default 2), each run a fresh process.
#   OLD_LOADER=build/old_loader.py h200-loader-host.sh EXPORT_DIR...
# Results: $OUT/host/<export>.<new|old>.<round>.json
set -u
here=$(dirname "$0")
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p "$OUT/host" /tmp/loaders
cp cutsearch/loader.py /tmp/loaders/new.py
cp "$OLD_LOADER" /tmp/loaders/old.py
for r in $(seq 1 "${ROUNDS:-2}"); do
  for which in new old; do
    cp "/tmp/loaders/$which.py" cutsearch/loader.py
    for e in "$@"; do
      python3 "$here/use_export.py" "$e" --out "$OUT/host/$(basename "$e").$which.$r.json" > /dev/null \
        || echo "use_export failed: $e ($which)"
    done
  done
done
cp /tmp/loaders/new.py cutsearch/loader.py
python3 - "$OUT/host" <<'PY'
import json, sys
from pathlib import Path
for f in sorted(Path(sys.argv[1]).glob("*.json")):
    d = json.loads(f.read_text())
    print(f"{f.stem:40s} host {d['host_us_per_call_async']:6.1f} µs  ours {d['cutsearch_us']['median_us']:6.1f}"
          f"  F.linear {d['f_linear_us']['median_us']:6.1f}  {d['speedup_import']:.2f}x")
PY
