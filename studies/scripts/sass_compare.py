"""Does a change leave the device code of kernels it should not touch as it was? The SASS of
layout cases built at a git revision and in the working tree, compared; no GPU needed.

    python studies/scripts/sass_compare.py OUT.json --base REV --cases NAME,NAME,... [--jobs 2]

The cases are named from `tests/test_layouts_gpu.py`'s CASES (the working tree's). Each tree
renders and builds them with its own cutsearch and templates, through a fresh compile cache;
`cuobjdump -sass` disassembles each library, and the content-named namespaces are blanked, so
equal SASS means the same instructions in the same order for every kernel of the library. Cases
built in one translation unit (as the search builds them) share a library, and its SASS.
`cuobjdump` and `nvdisasm` are found on PATH, or through $CUOBJDUMP and $NVDISASM_PATH (the
PyPI wheels nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm carry both).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build(tree: Path, cases: list[str], out: Path, jobs: int) -> None:
    """In a child process whose cutsearch is `tree`'s: build each case, write its SASS to `out`."""
    sys.path.insert(0, str(tree))
    sys.path.insert(1, str(ROOT))  # the working tree's tests, for the cases
    from cutsearch.cache import Cache
    from cutsearch.codegen import cutlass_version, render
    from cutsearch.compiler import CompiledKernel, Compiler, Toolchain
    from tests.test_layouts_gpu import CASES

    compiler = Compiler(Cache(Path(tempfile.mkdtemp())), Toolchain.find(cutlass_version()), jobs=jobs)
    report = {}
    for name, built in compiler.compile_many((name, render(*CASES[name])) for name in cases):
        if not isinstance(built, CompiledKernel):
            report[name] = {"failure": f"{built.kind.value}: {built.message}"[:500]}
            continue
        sass = subprocess.run([os.environ.get("CUOBJDUMP", "cuobjdump"), "-sass", str(built.library)],
                              capture_output=True, text=True, check=True).stdout
        sass = re.sub(r"cs_[0-9a-f]{16}", "cs_NAMESPACE", sass)
        (out / f"{name}.sass").write_text(sass)
        report[name] = {"sass_sha256": hashlib.sha256(sass.encode()).hexdigest(),
                        "functions": sass.count("Function :"), "spill_bytes": built.ptxas.spill_bytes}
    (out / "report.json").write_text(json.dumps(report, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--base", required=True, help="the git revision to compare the working tree with")
    parser.add_argument("--cases", required=True, type=lambda v: v.split(","))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--build", nargs=2, type=Path, metavar=("TREE", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build:
        build(args.build[0], args.cases, args.build[1], args.jobs)
        return
    work = Path(tempfile.mkdtemp())
    base = work / "base-tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base), args.base], check=True,
                   capture_output=True)
    try:
        reports = {}
        for label, tree in (("base", base), ("working_tree", ROOT)):
            (work / label).mkdir()
            subprocess.run([sys.executable, __file__, str(args.out), "--base", args.base, "--cases", ",".join(args.cases),
                            "--jobs", str(args.jobs), "--build", str(tree), str(work / label)], check=True)
            reports[label] = json.loads((work / label / "report.json").read_text())
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    same = {name: reports["base"][name].get("sass_sha256") == reports["working_tree"][name].get("sass_sha256")
            and "sass_sha256" in reports["base"][name] for name in args.cases}
    args.out.write_text(json.dumps({
        "recorded": "cuobjdump -sass of real nvcc builds; nothing ran on a GPU",
        "command": "python studies/scripts/sass_compare.py " + " ".join(sys.argv[1:]),
        "base": args.base, "working_tree_head": head, "same_sass": same, **reports}, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    print(f"{sum(same.values())} of {len(same)} cases build the same SASS as {args.base}")


if __name__ == "__main__":
    main()
