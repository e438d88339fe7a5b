"""The host time of one call of an exported layer through `cutsearch.load`, against the torch
calls it stands for, and against an older loader (a copy of cutsearch/loader.py) on the same export.

    python studies/scripts/loader_host.py OUT.json OLD_LOADER.py EXPORT_DIR...

Each figure is the median, over 5 rounds, of the host's time per call: 300 calls queued back to
back without waiting for the GPU ("async"), and 100 calls each after a synchronize ("synced").
The GPU's own time is use_export.py's business; this is what an eager caller pays on the CPU.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import cutsearch
from cold_l2 import host_us, save

ACT = {"none": lambda t: t, "relu": F.relu, "gelu": F.gelu, "silu": F.silu}


def host_synced(call, calls: int = 100) -> float:
    spent = 0.0
    for _ in range(calls):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        call()
        spent += time.perf_counter() - t0
    return spent / calls * 1e6


def main(out: Path, old_loader: Path, exports: list[Path]) -> None:
    spec = importlib.util.spec_from_file_location("old_loader", old_loader)
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    records = []
    for path in exports:
        new_fc, old_fc = cutsearch.load(path), old.load(path)
        layer = new_fc.meta["layer"]
        dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[layer["dtype"]]
        x = torch.randn(layer["M"], layer["K"], device="cuda", dtype=dtype)
        w = torch.randn(layer["N"], layer["K"], device="cuda", dtype=dtype) / layer["K"] ** 0.5
        b = torch.randn(layer["N"], device="cuda", dtype=dtype) if layer["bias"] else None
        y = torch.empty(layer["M"], layer["N"], device="cuda", dtype=dtype)
        act = ACT[layer["activation"]]
        new_fc.prepare(w, b)
        old_fc.prepare(w, b)
        want = act(F.linear(x, w, b)).double()
        for fc in (new_fc, old_fc):
            y.fill_(float("nan"))
            fc(x, out=y)
            torch.cuda.synchronize()
            err = float(torch.linalg.norm(y.double() - want) / torch.linalg.norm(want))
            assert err < 1e-2, (path, err)
        calls = {"cutsearch.load, into out": lambda: new_fc(x, out=y),
                 "older loader, into out": lambda: old_fc(x, out=y),
                 "F.linear (and the activation)": lambda: act(F.linear(x, w, b))}
        rounds = {label: {"async": [], "synced": []} for label in calls}
        for _ in range(5):
            for label, call in calls.items():
                for _ in range(20):
                    call()
                rounds[label]["async"].append(host_us(call, calls=300))
                rounds[label]["synced"].append(host_synced(call))
        record = {"export": path.name, **layer, "backend": new_fc.backend, "via": new_fc.via,
                  "host_us_per_call": {label: {k: statistics.median(v) for k, v in r.items()}
                                       for label, r in rounds.items()},
                  "rounds": rounds}
        records.append(record)
        print(path.name, new_fc.via, {label: {k: round(v, 1) for k, v in r.items()}
                                      for label, r in record["host_us_per_call"].items()}, flush=True)
    save(out, "python studies/scripts/loader_host.py " + " ".join(sys.argv[1:]), records)


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]), [Path(p) for p in sys.argv[3:]])
