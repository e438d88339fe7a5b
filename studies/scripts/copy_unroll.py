"""Measures the per-call x copy inside the layer call, for each block size of the copy: the best
recorded configs of an unaligned layer, rebuilt with the copy's 16-byte vectors a thread set to
1, 2 and 4 (`UNROLL` in templates/copy.cuh), in one run on one GPU.

    python studies/scripts/copy_unroll.py RECORDING.json OUT_DIR [--top 4] [--jobs 16]

Each candidate is checked and timed by the search's own evaluator, which also times the same
kernel with x handed over padded: the difference is what the copy costs in the call. OUT_DIR gets
one recording per block size and `copy-unroll.json`, the comparison.
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

UNROLLS = (1, 2, 4)


def main() -> None:
    args = recording_parser().parse_args()
    layer, configs = best_recorded(args.recording, args.top)
    args.out.mkdir(parents=True, exist_ok=True)
    built_copies = codegen.copy_kernels
    summary, gpu = {}, None
    ev = GpuEvaluator(cache_dir=Path(tempfile.mkdtemp()), jobs=args.jobs)
    try:
        for unroll in UNROLLS:
            text = re.sub(r"constexpr int UNROLL = \d+;", f"constexpr int UNROLL = {unroll};", built_copies())
            codegen.copy_kernels = lambda text=text: text
            results = list(ev.evaluate(layer, configs))
            gpu = ev.device().name
            save_recording(args.out / f"unroll-{unroll}.json", layer, results, study=f"copy-unroll-{unroll}-{layer.slug}",
                           gpu=gpu, date=datetime.date.today().isoformat(),
                           command=f"python studies/scripts/copy_unroll.py {args.recording} OUT --top {args.top}")
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
            summary[unroll] = {"configs": rows, "median_copy_in_call_us": median(costs) if costs else None,
                               "best_call_us": min((row["call_us"] for row in rows if "call_us" in row), default=None)}
            print(f"unroll {unroll}: best call {summary[unroll]['best_call_us']} µs, "
                  f"median copy in the call {summary[unroll]['median_copy_in_call_us']} µs", flush=True)
            for row in rows:
                print("   ", row, flush=True)
    finally:
        codegen.copy_kernels = built_copies
        ev.close()
    (args.out / "copy-unroll.json").write_text(json.dumps(
        {"layer": layer.to_dict(), "gpu": gpu, "date": datetime.date.today().isoformat(),
         "command": f"python studies/scripts/copy_unroll.py {args.recording} OUT --top {args.top}",
         "by_unroll": summary}, indent=1))


if __name__ == "__main__":
    main()
