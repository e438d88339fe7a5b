#!/usr/bin/env bash
# Screenshots of the dashboard and of the report of the recorded 64-trial asr_out study
# (fc-4096x5000x1024-f16), taken by headless Chromium. Needs `pip install -e .` and chromium.
set -euo pipefail
cd "$(dirname "$0")"

STUDY=fc-4096x5000x1024-f16
PORT=${PORT:-8765}
CHROMIUM=${CUTSEARCH_TEST_CHROMIUM:-chromium}
WORK=$(mktemp -d)
SERVER=
# SIGTERM, not SIGINT: a shell script's background job ignores SIGINT.
trap '[ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; wait; rm -rf "$WORK"' EXIT

# A copy: the recording stays untouched.
mkdir -p "$WORK/studies/$STUDY"
cp "../recorded/h200-2026-11-30/journals/$STUDY.log" "$WORK/studies/$STUDY/journal.log"

shot() {  # shot URL HEIGHT PNG
  "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$WORK/chromium" --virtual-time-budget=10000 --hide-scrollbars \
    --window-size="1280,$2" --screenshot="$3" "$1" 2>/dev/null
}

python3 -m cutsearch report "$STUDY" --storage "$WORK/studies/$STUDY/journal.log" --out "$WORK/report.html"
shot "file://$WORK/report.html" 3500 report-asr_out.png

python3 -m cutsearch dashboard "$STUDY" --studies-dir "$WORK/studies" --port "$PORT" &
SERVER=$!
python3 - "$PORT" <<'PY'
import sys, time, urllib.request
for _ in range(120):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/api/meta", timeout=2)
        break
    except OSError:
        time.sleep(0.5)
else:
    sys.exit("the dashboard did not start")
PY
shot "http://127.0.0.1:$PORT/dashboard/studies/0" 1400 dashboard-asr_out.png
ls -l report-asr_out.png dashboard-asr_out.png
