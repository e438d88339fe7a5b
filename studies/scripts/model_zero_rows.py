"""Does a k-step cost less where a tile overhangs the problem? The cost model charges a k-step's
operand feed for the whole tile, zero-filled rows included (they are filled by TMA and multiplied
by WGMMA like any other). This scores, on recorded H200 measurements only, the alternative that
charges only the rows the problem has: within-layer Spearman, as `cutsearch calibrate` scores it.

    python studies/scripts/model_zero_rows.py
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

from cutsearch import calibration, model
from cutsearch.efficiency import Recording, load_recordings

ROOT = Path(__file__).resolve().parents[2]
EXHAUSTIVE = ROOT / "studies" / "recorded" / "h200x2-2026-11-30-exhaustive"
CHARGED = "tile_bytes = (tm + tn) * tk * e"
REAL_ROWS = "tile_bytes = (min(tm, kp.m) + min(tn, kp.n)) * tk * e"


def _scores(label: str, sets: dict[str, list[Recording]]) -> None:
    for name, recordings in sets.items():
        score, _ = calibration.score(calibration.points(recordings), model.DEFAULT)
        small_m = {Path(k).stem: round(v, 3) for k, v in score.spearman.items() if "decode" in k or "m1" in k}
        print(f"{label:<20} {name:<12} mean {score.spearman_mean:.3f}  {small_m}")


def main() -> None:
    calibration_set = json.loads((ROOT / "studies" / "model-calibration.json").read_text())["recordings"]
    sets = {
        "exhaustive": [Recording.load(EXHAUSTIVE / f"exhaustive-{layer}-f16.json")
                       for layer in ("asr_out", "decode", "mlp_down", "small_batch", "unaligned")],
        "calibration": load_recordings([ROOT / r["recording"] for r in calibration_set]),
    }
    _scores("whole tile (model)", sets)
    source = inspect.getsource(model._k_step_s)
    if CHARGED not in source:
        raise SystemExit("model._k_step_s no longer charges the whole tile as this script expects")
    namespace = dict(vars(model))
    exec(source.replace(CHARGED, REAL_ROWS), namespace)  # noqa: S102 - the model's own source, one line changed
    model._k_step_s = namespace["_k_step_s"]
    _scores("real rows only", sets)


if __name__ == "__main__":
    main()
