"""Measures the best recorded configs of a layer rebuilt with each setting of one switch in the
rendered templates, in one run on one GPU:

- `copy-unroll`: the per-call copy's 16-byte vectors a thread (1, 2, 4; `UNROLL` in
  templates/copy.cuh). The difference to the same kernel with x handed over padded is what the
  copy costs inside the call.

A switch for an experiment that was not kept goes with its patch
(studies/recorded/h200x2-2026-11-30-staged-rows/).

    python studies/scripts/rebuilt.py RECORDING.json OUT_DIR SWITCH [--top 4] [--jobs 16]

Each candidate is checked and timed by the search's own evaluator. OUT_DIR gets one recording
per setting and `SWITCH.json`, the comparison.
"""

from __future__ import annotations

import datetime
import json
import re
import tempfile
from pathlib import Path
from statistics import median

from cutsearch import codegen
from cutsearch.evaluator import GpuEvaluator, save_recording
from cutsearch.outcome import Measurement
from variants import best_recorded, recording_parser

# switch: (the codegen function whose text is rebuilt, the constant's pattern, its settings,
# the configs it changes)
SWITCHES = {
    "copy-unroll": ("copy_kernels", r"constexpr int UNROLL = \d+;",
                    {u: f"constexpr int UNROLL = {u};" for u in ("1", "2", "4")}, lambda c: True),
}


def main() -> None:
    ap = recording_parser()
    ap.add_argument("switch", choices=sorted(SWITCHES))
    args = ap.parse_args()
    function, pattern, settings, changed = SWITCHES[args.switch]
    layer, configs = best_recorded(args.recording, args.top, changed)
    command = f"python studies/scripts/rebuilt.py {args.recording} OUT {args.switch} --top {args.top}"
    args.out.mkdir(parents=True, exist_ok=True)
    built = getattr(codegen, function)
    summary, gpu = {}, None
    ev = GpuEvaluator(cache_dir=Path(tempfile.mkdtemp()), jobs=args.jobs)
    try:
        for setting, line in settings.items():
            text, count = re.subn(pattern, line, built())
            assert count == 1, f"{pattern!r} not in {function}()"
            setattr(codegen, function, lambda text=text: text)
            results = list(ev.evaluate(layer, configs))
            gpu = ev.device().name
            save_recording(args.out / f"{args.switch}-{setting}.json", layer, results,
                           study=f"{args.switch}-{setting}-{layer.slug}", gpu=gpu,
                           date=datetime.date.today().isoformat(), command=command)
            rows = []
            for r in results:
                o = r.outcome
                if not isinstance(o, Measurement):
                    rows.append({"config": r.config.key, "failure": o.kind.value})
                    continue
                padded = dict(o.io_variants).get("x padded")
                rows.append({"config": r.config.key, "call_us": o.median_us, "speedup": o.speedup,
                             "x_padded_us": padded.median_us if padded else None,
                             "copy_in_call_us": o.median_us - padded.median_us if padded else None})
            costs = [row["copy_in_call_us"] for row in rows if row.get("copy_in_call_us") is not None]
            summary[setting] = {"configs": rows, "median_copy_in_call_us": median(costs) if costs else None,
                                "best_call_us": min((row["call_us"] for row in rows if "call_us" in row), default=None)}
            print(f"{args.switch} {setting}: best call {summary[setting]['best_call_us']} µs, "
                  f"median copy in the call {summary[setting]['median_copy_in_call_us']} µs", flush=True)
            for row in rows:
                print("   ", row, flush=True)
    finally:
        setattr(codegen, function, built)
        ev.close()
    (args.out / f"{args.switch}.json").write_text(json.dumps(
        {"layer": layer.to_dict(), "gpu": gpu, "date": datetime.date.today().isoformat(), "command": command,
         "by_setting": summary}, indent=1))


if __name__ == "__main__":
    main()
