"""Row views against the copy of x they replace, on the best recorded configs of layers with
unaligned K, in one run on one GPU.

    python studies/scripts/row_views.py OUT_DIR RECORDING.json [RECORDING.json ...] [--top 6] [--jobs 16]
                                        [--dtypes f16,bf16]

Each RECORDING's `top` fastest configs that copy x are built, checked against the float64
reference and timed beside cuBLAS by the search's own evaluator, over their whole knob grid:
every launch variant with x copied into a padded buffer and every one with x read in place
through row views (space.RowViews), in each of `dtypes` (default: the recording's). OUT_DIR gets one recording per layer and `summary.json`:
per config the best screened median of each kind, and the winner's full timing with the
kernel's time on x handed over padded (io variant "x padded").
"""

from __future__ import annotations

import sys
from pathlib import Path

from cutsearch.efficiency import Recording
from cutsearch.outcome import Measurement
from cutsearch.space import views_apply

sys.path.insert(0, str(Path(__file__).resolve().parent))
from variants import measure_recordings  # noqa: E402


def summarize(recording: Path, bases: list) -> dict:
    rec = Recording.load(recording)
    rows = []
    for ev in rec.evaluations:
        o = ev.outcome
        if not isinstance(o, Measurement):
            rows.append({"config": ev.config.key, "failed": o.kind.value, "message": o.message[:200]})
            continue
        copy = [t for k, t in o.variants if not k.views]
        views = [t for k, t in o.variants if k.views]
        rows.append({"config": ev.config.key, "copy_us": min(copy, default=None), "views_us": min(views, default=None),
                     "winner": o.knobs.to_dict(), "winner_us": o.median_us, "cublas_us": o.baseline.median_us,
                     "speedup": o.speedup, "io_variants_us": {k: t.median_us for k, t in o.io_variants}})
    return {"layer": rec.layer.to_dict(), "configs": rows}


def main() -> None:
    measure_recordings("row_views.py", "views", (), views_apply, summarize, report, top=6)


def report(layer_summary: dict) -> None:
    for row in layer_summary["configs"]:
        if "failed" in row:
            print(f"  {row['config']}: failed ({row['failed']})", flush=True)
        else:
            print(f"  {row['config']}: copy {row['copy_us']} µs, views {row['views_us']} µs; winner "
                  f"{row['winner_us']:.2f} µs ({row['speedup']:.2f}x cuBLAS {row['cublas_us']:.2f})", flush=True)


if __name__ == "__main__":
    main()
