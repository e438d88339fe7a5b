"""The diagnosis of a failed GPU test (recorded, 2026-12-04): each of two split-K kernels of
tests/test_layouts_gpu.py, with x copied by the copy kernel or by the GEMM itself, x at an
aligned or odd offset, the workspace filled with 0xFF (NaNs) or zeros, a bias bound to a layer
without one. Prints the float64 relative error and compares the padded x in the workspace with
x, bit for bit. Run from the project root with the two kernels' libraries (built by
`cutsearch.compiler` for the cases own-copy-split-k-swapped-1x2 and own-copy-split-k-x-as-a) at
build/diag/swapped.so and build/diag/xa.so."""
import ctypes, json, sys
import torch
sys.path.insert(0, ".")
from cutsearch.abi import io_flags, open_library
def r256(b): return (b + 255) // 256 * 256
CASES = [("build/diag/swapped.so", dict(m=45, n=64, k=3961, pad_n=64, pad_k=3968, dtype=torch.float16, bias=False, act="relu", swap=True), (4, 8, 16)),
         ("build/diag/xa.so", dict(m=20, n=40, k=2001, pad_n=40, pad_k=2016, dtype=torch.bfloat16, bias=True, act="gelu", swap=False), (4,))]
out = []
for path, L, splits_list in CASES:
    lib = open_library(path)
    m, n, k, pn, pk, dt = L["m"], L["n"], L["k"], L["pad_n"], L["pad_k"], L["dtype"]
    for splits in splits_list:
        for own in (0, 1):
            for off in (0, 3):
                for fill in (0xFF, 0x00):
                    h = ctypes.c_void_p()
                    rc = lib.cs_create(ctypes.byref(h), m, n, k, pn, pk, 0, 1, 1, splits, 0, 0, io_flags(False, False, {"own_copy": own}))
                    assert rc == 0
                    g = torch.Generator(device="cuda").manual_seed(11)
                    buf = torch.full((m * k + 64,), float("nan"), dtype=dt, device="cuda")
                    x = buf[off: off + m * k].view(m, k)
                    x.copy_(torch.randn(m, k, device="cuda", generator=g).to(dt))
                    w = torch.zeros(pn, pk, dtype=dt, device="cuda")
                    w[:n, :k] = (torch.randn(n, k, device="cuda", generator=g) / k ** 0.5).to(dt)
                    b = torch.zeros(pn, dtype=dt, device="cuda"); b[:n] = torch.randn(n, device="cuda", generator=g).to(dt)
                    total = lib.cs_workspace_size(h)
                    ws = torch.full((total,), fill, dtype=torch.uint8, device="cuda")
                    y = torch.full((m, n), float("nan"), dtype=dt, device="cuda")
                    assert lib.cs_bind(h, x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(), ws.data_ptr()) == 0
                    assert lib.cs_run(h, torch.cuda.current_stream().cuda_stream) == 0, lib.cs_error(h)
                    torch.cuda.synchronize()
                    act = {"relu": torch.relu, "gelu": torch.nn.functional.gelu}[L["act"]]
                    want = act(x.double() @ w[:n, :k].double().T + (b[:n].double() if L["bias"] else 0))
                    err = float(torch.linalg.norm(torch.nan_to_num(y.double()) - want) / torch.linalg.norm(want))
                    parts = splits * pn * m * 4
                    xo = total - r256(parts) - r256(m * pk * 2)
                    xp = ws[xo: xo + m * pk * 2].view(dt).view(m, pk)
                    exp = torch.zeros(m, pk, dtype=dt, device="cuda"); exp[:, :k] = x
                    bad = (xp.view(torch.int16) != exp.view(torch.int16))
                    rows = sorted(set(bad.nonzero()[:, 0].tolist()))
                    cols = bad.nonzero()[:, 1]
                    kk = pk // splits
                    rec = dict(lib=path.split("/")[-1], splits=splits, own=own, off=off, fill=fill, total=total, xo=xo, err=err,
                               y_nan=int(torch.isnan(y).sum()), bad=int(bad.sum()), bad_rows=rows[:50],
                               bad_slices=sorted(set((cols // kk).tolist()))[:40],
                               bad_col_in_slice=sorted(set((cols % kk).tolist()))[:20] if len(cols) else [],
                               nan_in_xpad=int(torch.isnan(xp).sum()))
                    print(json.dumps(rec), flush=True); out.append(rec)
                    lib.cs_destroy(h)
import os
json.dump(out, open(os.environ.get("OUT", "/tmp") + "/diag.json", "w"), indent=1)
