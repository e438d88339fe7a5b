"""The same suite layers across the recorded suite runs: F.linear, the best kernel, their ratio and
the winning config, run by run, from the committed files (recorded H200 data; nothing is measured).

    python studies/scripts/suite_history.py small_batch-f16 decode-bf16 ...

Runs that wrote a suite file are read from it; the thirteenth, cut in two, from its per-layer
summaries. A layer whose export called cuBLAS shows the best kernel's own time.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "studies" / "recorded"
# (run, its suite file or its directory of per-layer summaries)
RUNS = [
    ("ninth", RECORDED / "h200-2026-12-01-suite-v9" / "suite-nvidia-h200-2026-12-01.json"),
    ("tenth", RECORDED / "h200-2026-12-01-suite-v10" / "suite-nvidia-h200-2026-12-01.json"),
    ("eleventh", RECORDED / "h200-2026-12-01-suite-v11" / "suite-nvidia-h200-2026-12-01.json"),
    ("twelfth", ROOT / "studies" / "results" / "suite-nvidia-h200-2026-12-02.json"),
    ("thirteenth", RECORDED / "h200-2026-12-03-suite-v13"),
    ("fourteenth", ROOT / "studies" / "results" / "suite-nvidia-h200-2026-12-03.json"),
]


def _config(c: dict) -> str:
    swapped = ", swapped" if c["swap_ab"] else ""
    return f"{c['tile_m']}x{c['tile_n']}x{c['tile_k']} {c['kernel_schedule']} {c['cluster_m']}x{c['cluster_n']}{swapped}"


def _rows(where: Path) -> dict[str, tuple[float, float, str]]:
    """name -> (F.linear µs, best kernel µs, config) for one run."""
    if where.is_dir():  # a run with no suite file of all its layers: its per-layer summaries
        out = {}
        for path in sorted(where.glob("suite-*-*16.json")):
            s = json.loads(path.read_text())
            out[s["study"].removeprefix("suite-")] = (s["cublas_us"], s["best_us"], _config(s["best"]["config"]))
        return out
    records = json.loads(where.read_text())["records"]
    return {r["name"]: (r["cublas_us"], r.get("kernel_us") or r["cutsearch_us"], _config(r["config"])) for r in records}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("layers", nargs="+", help="suite records by name, e.g. small_batch-f16")
    args = parser.parse_args()
    runs = [(name, _rows(where)) for name, where in RUNS]
    for layer in args.layers:
        print(f"{layer}: run, F.linear µs, best kernel µs, ratio, config")
        ratios = []
        for run, rows in runs:
            if layer in rows:
                cublas, kernel, config = rows[layer]
                ratios.append(cublas / kernel)
                print(f"  {run:<11} {cublas:8.2f} {kernel:8.2f} {cublas / kernel:6.3f}x  {config}")
        if ratios:
            print(f"  ratio {min(ratios):.3f}-{max(ratios):.3f}x over {len(ratios)} runs")


if __name__ == "__main__":
    main()
