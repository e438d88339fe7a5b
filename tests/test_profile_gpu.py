"""Profiling and applying on a real GPU: a small transformer block built here (nothing is
downloaded), the acoustic example through the CLI, and, given an export directory in
$CUTSEARCH_TEST_EXPORT (else one searched here), a Linear replaced by it with the same outputs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cutsearch.errors import UserError
from cutsearch.plan import CUTSEARCH, Profile, Shape, plan, read_exports, suite_toml
from cutsearch.problem import Layer, load_layers
from tests.exports import search_and_export

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parent.parent
BATCH, SEQ, DIM, HEADS, FFN = 4, 128, 256, 4, 1024
_EXPORTS: dict[str, Path] = {}  # the export searched here, once for the file


def _block():
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        """Pre-norm attention + MLP; applied `repeats` times with shared weights, so every
        Linear is called more than once per forward pass."""

        def __init__(self, repeats: int = 2) -> None:
            super().__init__()
            self.repeats = repeats
            self.norm1, self.norm2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
            self.qkv, self.proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
            self.fc1, self.fc2 = nn.Linear(DIM, FFN), nn.Linear(FFN, DIM)
            self.head = nn.Linear(DIM, 10, bias=False)
            self.spare = nn.Linear(DIM, DIM)  # never called

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for _ in range(self.repeats):
                b, t, _ = x.shape
                q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
                x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, DIM))
                x = x + self.fc2(F.gelu(self.fc1(self.norm2(x))))
            return self.head(x[:, 0])

    return Block()


def test_profile_of_a_transformer_block_sees_every_linear_call_with_its_shape():
    from cutsearch import profiler
    from cutsearch.profiler import InputSpec

    model, inputs = profiler.place(_block(), [InputSpec((BATCH, SEQ, DIM))], dtype="f16")
    prof = profiler.profile(model, inputs, name="block", warmup=2, reps=10)
    rows = {r.name: r for r in prof.rows}
    m = BATCH * SEQ
    assert {name: (r.shape, r.calls) for name, r in rows.items()} == {
        "qkv": (Shape(m, 3 * DIM, DIM, "f16", True), 2),
        "proj": (Shape(m, DIM, DIM, "f16", True), 2),
        "fc1": (Shape(m, FFN, DIM, "f16", True), 2),
        "fc2": (Shape(m, DIM, FFN, "f16", True), 2),
        "head": (Shape(BATCH, 10, DIM, "f16", False), 1),
    }
    assert prof.not_called == ("spare",)
    shares = [prof.share(r) for r in prof.rows]
    assert all(s > 0 for s in shares) and sum(shares) <= 1.0
    assert prof.forward["p20_us"] <= prof.forward_us <= prof.forward["p80_us"]
    assert prof.latency["median_us"] > 0
    for row in prof.rows:
        assert 0 < prof.efficiency(row) < 2, "within reach of the floor (above 1 only from warm L2)"
    again = Profile.from_dict(json.loads(json.dumps(prof.to_dict())))
    assert {(r.name, r.shape, r.calls) for r in again.rows} == {(r.name, r.shape, r.calls) for r in prof.rows}


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cutsearch", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def test_profile_and_plan_commands_on_the_acoustic_example(tmp_path):
    profile_json, suite = tmp_path / "acoustic-profile.json", tmp_path / "suite.toml"
    proc = _cli("profile", "studies/models/acoustic.py:build", "--input-shape", "2,256,80", "--reps", "5",
                "--out", str(profile_json))
    assert proc.returncode == 0, proc.stderr
    prof = Profile.load(profile_json)
    assert {r.shape for r in prof.rows} == {Shape(512, 1024, 80, "f16", True), Shape(512, 4096, 1024, "f16", True),
                                            Shape(512, 1024, 4096, "f16", True), Shape(512, 5000, 1024, "f16", True)}
    assert prof.linear_share <= 1.0
    data = json.loads(profile_json.read_text())
    assert data["device"]["gpu"] and data["command"].startswith("cutsearch profile")
    proc = _cli("plan", str(profile_json), "--threshold", "0", "--out", str(suite))
    assert proc.returncode == 0, proc.stderr
    assert len(load_layers(suite)) == len(plan(prof, 0.0).targets)
    suite_toml(plan(prof, 0.0))


def test_inputs_the_model_cannot_take_are_one_line(tmp_path):
    proc = _cli("profile", "studies/models/acoustic.py:build", "--input-shape", "2,256,64", "--out",
                str(tmp_path / "p.json"))
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: the forward pass failed with --input-shape 2,256,64: RuntimeError:")


def _export_under_test(tmp_path: Path) -> tuple[Shape, Path]:
    """The export $CUTSEARCH_TEST_EXPORT names, else one searched here for a bare Linear with
    unaligned N and K (where a kernel wins even in two trials), shared by this file's tests."""
    pytest.importorskip("cutsearch.torch", reason="cutsearch.torch (the export side) is not available")
    path = os.environ.get("CUTSEARCH_TEST_EXPORT")
    if not path:
        if "searched" not in _EXPORTS:
            _EXPORTS["searched"] = search_and_export(Layer(m=300, n=1001, k=999, dtype="bf16", bias=True),
                                                     tmp_path / "export")
        path = _EXPORTS["searched"]
    try:
        found, _ = read_exports([Path(path)])
    except UserError as e:  # an export of Linear+activation, say: the user's error, told as such
        pytest.skip(f"CUTSEARCH_TEST_EXPORT: {e}")
    if not found:
        pytest.skip(f"{path} holds no export that replaces a bare nn.Linear")
    return next(iter(found.items()))


def _two_layers(shape: Shape):
    """A Linear of the export's shape, then one that no export covers."""
    import torch

    return torch.nn.Sequential(torch.nn.Linear(shape.k, shape.n, bias=shape.bias), torch.nn.ReLU(),
                               torch.nn.Linear(shape.n, 8))


@pytest.mark.nvcc  # where no export is given, one is searched
def test_apply_replaces_the_matching_linear_and_keeps_the_outputs(tmp_path):
    from cutsearch import profiler
    from cutsearch.profiler import InputSpec

    shape, export = _export_under_test(tmp_path)
    model, inputs = profiler.place(_two_layers(shape), [InputSpec((shape.m, shape.k))], dtype=shape.dtype)
    reference = profiler.forward(model, inputs)
    applied = profiler.apply(model, {(shape.m, shape.n, shape.k, shape.dtype, shape.bias): export}, inputs)
    assert type(applied[0]).__module__ == "cutsearch.torch"
    assert type(applied[2]).__name__ == "Linear" and type(applied[2]).__module__.startswith("torch")
    assert profiler.rel_error(reference, profiler.forward(applied, inputs)) < 1e-2


@pytest.mark.nvcc  # where no export is given, one is searched
def test_apply_command_reports_measured_against_predicted(tmp_path):
    shape, export = _export_under_test(tmp_path)
    (tmp_path / "two.py").write_text(
        "import torch\n"
        "def build():\n"
        f"    return torch.nn.Sequential(torch.nn.Linear({shape.k}, {shape.n}, bias={shape.bias}), torch.nn.ReLU(),\n"
        f"                               torch.nn.Linear({shape.n}, 8))\n")
    out = tmp_path / "applied.json"
    proc = _cli("apply", str(tmp_path / "two.py") + ":build", "--input-shape", f"{shape.m},{shape.k}", "--dtype",
                shape.dtype, "--exports", str(export), "--reps", "10", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    comparison = data["comparison"]
    assert comparison["measured_speedup"] > 0 and comparison["output_rel_error"] < 1e-2
    assert [r["name"] for r in comparison["replaced"]] == ["0"]
    assert {r.kind for r in Profile.from_dict(data).rows if r.name == "0"} == {CUTSEARCH}
    assert "measured" in proc.stdout and "predicted" in proc.stdout
