"""What the per-call copy of x still costs where K is not a multiple of 8, on recorded searches.

Every recorded search batch whose layer has contiguous x with unaligned rows (K not a multiple of
the 16-byte vector, M > 1) and whose best call was also timed with x handed over padded (the
"x padded" figure of `cutsearch search`), recorded on or after --since (default 2026-12-03,
when every way of reading x below existed), the latest recording of each layer. For each: whether
x's row views could read it in place (P = 8 / gcd(K, 8) divides M), what the best call did with
x, and how much faster its kernel was with x handed over padded. Recorded measurements only.

    python studies/scripts/x_copy_gap.py [--gpu H200|H100] [--since 2026-12-03]
"""

from __future__ import annotations

import argparse
import gzip
import re
import statistics
from pathlib import Path

from cutsearch.efficiency import Recording, recordings_among
from cutsearch.space import row_views

RECORDED = Path(__file__).resolve().parents[2] / "studies" / "recorded"
VEC = 8  # f16 and bf16 elements in 16 bytes


def p_divides_m(layer) -> bool:
    """Whether x's row views cover every row, with no tail (which these recordings predate)."""
    views = row_views(layer)
    return views is not None and views.tail == 0


def how_x_arrives(config, knobs) -> str:
    if config.gemv:
        return "gemv kernel"  # reads x's unaligned rows in place: no copy, no views
    if knobs.views:
        return "row views"
    return "own copy" if knobs.own_copy else "copy kernel"


def recorded_on(rec: Recording) -> str:
    return re.search(r"\d{4}-\d{2}-\d{2}", rec.path.parent.name).group(0)


def searched_at(rec: Recording) -> str:
    """When the search began, from its Optuna journal where one is kept beside the recording
    (journals/NAME.journal.log.gz): a layer searched twice in a day has its later search last.
    Empty where there is none, so a recording without a journal sorts first in its day."""
    journal = rec.path.parent / "journals" / f"{rec.path.stem}.journal.log.gz"
    if not journal.is_file():
        return ""
    with gzip.open(journal, "rt") as lines:
        for line in lines:
            if (found := re.search(r'"datetime_start":\s*"([^"]+)"', line)) is not None:
                return found.group(1)
    return ""


def rows(gpu: str, since: str) -> list[tuple[Recording, str, float, float]]:
    """(recording, how the best call read x, its median, the same kernel's with x handed over padded)."""
    latest: dict[object, tuple[Recording, str, float, float]] = {}
    recordings = recordings_among(sorted(RECORDED.glob("*/*.json")), 8)
    for rec in sorted(recordings, key=lambda r: (recorded_on(r), searched_at(r), str(r.path))):
        layer = rec.layer
        if gpu not in (rec.meta.get("gpu") or "") or recorded_on(rec) < since:
            continue
        if layer.input != "contiguous" or layer.m == 1 or not layer.k % VEC:
            continue
        best = rec.best()
        padded = dict(best.outcome.io_variants).get("x padded") if best else None
        if padded is not None:
            latest[layer] = (rec, how_x_arrives(best.config, best.outcome.knobs), best.outcome.median_us,
                             padded.median_us)
    return list(latest.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="H200", help="recordings of this GPU model (default H200)")
    parser.add_argument("--since", default="2026-12-03", help="recordings of this date or later")
    args = parser.parse_args()
    table = rows(args.gpu, args.since)
    print(f"{'recording':<44} {'layer':<22} {'P | M':<6} {'x read by':<12} {'best µs':>8} {'x padded µs':>11} {'gap µs':>7}")
    for rec, how, us, padded in table:
        layer = rec.layer
        views = "yes" if p_divides_m(layer) else "no"
        where = f"{rec.path.parent.name}/{rec.name}"
        print(f"{where:<44} {layer.shape + ' ' + layer.dtype:<22} {views:<6} {how:<12} {us:>8.2f} {padded:>11.2f} "
              f"{us - padded:>7.2f}")
    gemv = "gemv kernel"
    for label, pick in (("P divides M", lambda r: r[1] != gemv and p_divides_m(r[0].layer)),
                        ("P does not divide M", lambda r: r[1] != gemv and not p_divides_m(r[0].layer)),
                        ("The gemv kernel, x read in place", lambda r: r[1] == gemv)):
        group = [r for r in table if pick(r)]
        if group:
            gaps = [us - padded for _, _, us, padded in group]
            shares = [(us - padded) / us for _, _, us, padded in group]
            print(f"{label}: {len(group)} recordings, gap median {statistics.median(gaps):.2f} µs "
                  f"({min(gaps):.2f} to {max(gaps):.2f}), {100 * statistics.median(shares):.0f}% of the call at the median")


if __name__ == "__main__":
    main()
