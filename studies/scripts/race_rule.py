"""Judge recorded races again by two rules, beside what each export did from a fresh process.

    python studies/scripts/race_rule.py OUT.json RECORDING_DIR...

For every study journal of each recording directory (journals/*.gz) whose search ended in a race
and whose export was used from a fresh process (LAYER.use.json, studies/scripts/use_export.py):
the race's best kernel by its median against cuBLAS's, the rounds it was faster in, the verdict
by the median alone and by the rule that ships a kernel only if it was faster in every round
(verdict.Verdict.steady), and the export's measured speedup. Replays recorded H200 data: nothing
here is measured.
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
import tempfile
from pathlib import Path

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from cutsearch.verdict import judge, records


def rows(directory: Path) -> list[dict]:
    out = []
    for journal in sorted((directory / "journals").glob("*.gz")):
        name = journal.name.split(".")[0]
        use = directory / f"{name}.use.json"
        if not use.exists():
            continue
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "journal.log"
            path.write_bytes(gzip.decompress(journal.read_bytes()))
            storage = JournalStorage(JournalFileBackend(str(path)))
            for summary in optuna.get_all_study_summaries(storage):
                study = optuna.load_study(study_name=summary.study_name, storage=storage)
                race = study.user_attrs.get("race")
                if not race:
                    continue
                verdict = judge(records(study), race)
                cublas = statistics.median(race["cublas_us"])
                medians = {n: statistics.median(us) for n, us in zip(race["trials"], race["kernel_us"]) if us}
                fastest = min(medians, key=lambda n: (medians[n], n))
                used = json.loads(use.read_text())
                out.append({"recording": directory.name, "study": name, "layer": study.user_attrs.get("layer"),
                            "fastest_by_median": {"trial": fastest, "speedup": cublas / medians[fastest],
                                                  "rounds_won": verdict.rounds_won[fastest]},
                            "rounds": verdict.rounds,
                            "ships_by_median": cublas / medians[fastest] >= 1.0,
                            "ships_by_every_round": verdict.kernel_ships,
                            "export_backend": used["backend"], "export_speedup": used["speedup_import"]})
    return out


def main(out: Path, directories: list[Path]) -> None:
    found = [r for d in directories for r in rows(d)]
    for r in found:
        f = r["fastest_by_median"]
        print(f"{r['recording']:32s} {r['study']:14s} median {f['speedup']:.3f}x, won {f['rounds_won']}/{r['rounds']}"
              f"  ships: by median {r['ships_by_median']!s:5s} every round {r['ships_by_every_round']!s:5s}"
              f"  export {r['export_backend']} {r['export_speedup']:.3f}x")
    command = "python studies/scripts/race_rule.py OUT.json " + " ".join(str(d) for d in directories)
    out.write_text(json.dumps({"command": command, "source": "recorded H200 races, judged again", "rows": found},
                              indent=1))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]])
