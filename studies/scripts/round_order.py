"""Whether the order of use_export.py's rounds biased the recorded speedups (recorded data).

    python studies/scripts/round_order.py [RECORDINGS_DIR] [--out result.json]

use_export.py timed the export and F.linear in 5 rounds, the order rotating a round, so with two
calls the export went first in rounds 0, 2 and 4 and F.linear in rounds 1 and 3. This reads every
recorded `*.use.json` of that form (two calls, 5 rounds; not those that also timed torch.mm) and,
from its round medians, compares the export's speedup in the rounds it went first with the rounds
it went second, and the reported speedup (the median of round medians) with an order-balanced one
(the geometric mean of the two orders' mean speedups). Replaying them measures nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

FIRST, SECOND = (0, 2, 4), (1, 3)  # the rounds in which the export was timed first, and second


def speedups(record: dict) -> tuple[float, float] | None:
    """The export's mean speedup over F.linear in the rounds it went first, and in those it went second."""
    ours = (record.get("cutsearch_us") or {}).get("round_medians_us")
    theirs = (record.get("f_linear_us") or {}).get("round_medians_us")
    if not ours or not theirs or len(ours) != 5 or record.get("torch_mm_us"):
        return None
    mean = lambda rounds: statistics.mean(theirs[r] / ours[r] for r in rounds)  # noqa: E731
    return mean(FIRST), mean(SECOND)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("recordings", nargs="?", default=str(Path(__file__).resolve().parents[1] / "recorded"))
    ap.add_argument("--out")
    args = ap.parse_args()
    root = Path(args.recordings)
    rows = []
    for path in sorted(root.rglob("*.use.json")):
        record = json.loads(path.read_text())
        pair = speedups(record)
        if pair is None:
            continue
        first, second = pair
        rows.append({"file": str(path.relative_to(root)), "reported": record["speedup_import"],
                     "first": first, "second": second, "balanced": math.sqrt(first * second)})
    if not rows:
        raise SystemExit(f"no 5-round use_export.py records under {root}")
    ratio = [r["first"] / r["second"] for r in rows]
    over = [r["reported"] / r["balanced"] for r in rows]
    summary = {
        "records": len(rows),
        "first_over_second_median": statistics.median(ratio),
        "faster_when_first": sum(x > 1 for x in ratio),
        "reported_over_balanced_median": statistics.median(over),
        "reported_over_balanced_range": [min(over), max(over)],
        "reported_above_balanced": sum(x > 1 for x in over),
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": summary, "records": rows}, indent=1))


if __name__ == "__main__":
    main()
