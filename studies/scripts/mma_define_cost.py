"""What CuTe's extended WGMMA shapes cost a base-width tile, on this machine's nvcc (no GPU).

For kernels whose tile has a base width, render each with the extended shapes' macro and without
(codegen.BASE_MMA_WIDTHS emptied makes every tile take it), then
- `ptx`: compile both to PTX, time nvcc and compare the PTX (the unit's own hashed names aside);
- `build`: build decode's winner as a library, alternating with and without, REPEATS times each.

    python studies/scripts/mma_define_cost.py ptx
    python studies/scripts/mma_define_cost.py build [REPEATS]
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cutsearch import codegen
from cutsearch.cache import Cache
from cutsearch.compiler import Compiler, Toolchain
from cutsearch.problem import Layer
from cutsearch.space import Config, invalid_reason

CASES = [
    (Layer(m=3000, n=1001, k=999, dtype="bf16", bias=True),
     Config(tile_m=128, tile_n=192, tile_k=64, cluster_n=2, kernel_schedule="cooperative", epilogue_schedule="direct",
            swap_ab=True, pad=True)),
    (Layer(m=8, n=1000, k=8192, dtype="f16", bias=True, activation="gelu"),
     Config(tile_m=64, tile_n=16, tile_k=128, kernel_schedule="ws", epilogue_schedule="fixup", tile_scheduler="grid",
            swap_ab=True, split_k=True)),
    (Layer(m=3009, n=77, k=192, dtype="f16", bias=True, activation="silu"),
     Config(tile_m=128, tile_n=16, tile_k=128, kernel_schedule="cooperative", epilogue_schedule="staged")),
    (Layer(m=2048, n=8192, k=2048, dtype="bf16", bias=True, activation="gelu"),
     Config(tile_m=128, tile_n=128, tile_k=64, cluster_n=2, kernel_schedule="pingpong", epilogue_schedule="tma")),
]
DECODE = (Layer(m=16, n=4096, k=4096, dtype="f16", bias=True),
          Config(tile_m=64, tile_n=16, tile_k=128, kernel_schedule="ws", epilogue_schedule="tma", tile_scheduler="grid",
                 swap_ab=True))


def both(layer: Layer, config: Config) -> dict[str, codegen.KernelSource]:
    assert invalid_reason(layer, config) is None, (config.key, invalid_reason(layer, config))
    base = codegen.BASE_MMA_WIDTHS
    try:
        without = codegen.render(layer, config)
        codegen.BASE_MMA_WIDTHS = ()
        return {"without": without, "with": codegen.render(layer, config)}
    finally:
        codegen.BASE_MMA_WIDTHS = base


def ptx(toolchain: Toolchain, source: codegen.KernelSource, where: Path) -> tuple[str, float]:
    where.mkdir(parents=True)
    (where / "kernel.cu").write_text(source.code)
    flags = [f for f in toolchain.flags if f not in ("-shared", "-Xptxas=-v", "-Xcompiler=-fPIC")]
    start = time.monotonic()
    run = subprocess.run([toolchain.nvcc, *(f"-I{p}" for p in codegen.cutlass_include_dirs()), *flags, "-ptx",
                          "kernel.cu", "-o", "kernel.ptx"], cwd=where, capture_output=True, text=True)
    elapsed = time.monotonic() - start
    assert run.returncode == 0, run.stderr[-2000:]
    text = (where / "kernel.ptx").read_text().replace(re.search(r"cs_[0-9a-f]{16}", source.code)[0], "NS")
    return re.sub(r"[0-9a-f]{8}_\d+_\w+?_cu_[0-9a-f]{8}", "UNIT", text), elapsed


def main() -> None:
    what = sys.argv[1] if len(sys.argv) > 1 else "ptx"
    toolchain = Toolchain.find(codegen.cutlass_version())
    root = Path(tempfile.mkdtemp())
    if what == "ptx":
        for i, (layer, config) in enumerate(CASES):
            out = {name: ptx(toolchain, src, root / f"{i}-{name}") for name, src in both(layer, config).items()}
            same = out["with"][0] == out["without"][0]
            print(f"{layer.slug} {config.key}: {'same PTX' if same else 'DIFFERENT PTX'}, "
                  f"{out['without'][1]:.0f} s without the macro, {out['with'][1]:.0f} s with it", flush=True)
    elif what == "build":
        sources = both(*DECODE)
        for i in range(int(sys.argv[2]) if len(sys.argv) > 2 else 3):
            for name in ("with", "without"):
                compiler = Compiler(Cache(root / f"{i}-{name}"), toolchain, jobs=1)
                start = time.monotonic()
                built = compiler.compile(sources[name])
                print(f"{name} the macro: {type(built).__name__} in {time.monotonic() - start:.1f} s", flush=True)
    else:
        sys.exit(f"unknown mode {what!r}: ptx or build")


if __name__ == "__main__":
    main()
