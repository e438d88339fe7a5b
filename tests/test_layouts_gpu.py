"""The caller's layouts on the GPU: padded x, padded y and y^T each compute the layer; so do
y stored by the nosmem, staged and direct epilogues, split-K with its reduction kernel or its fixup
epilogue, the non-persistent ws kernel, overlapped launches, unaligned x read in place
through row views (the last M mod P rows by the tail kernel), and x copied by the GEMM itself.

Real CUTLASS kernels (one per layout, built in parallel) measured by the real worker against
the float64 reference: a candidate whose result were wrong in a layout would come back as a
Failure, not a Measurement. CI builds them (`nvcc`); the measurement needs a Hopper GPU.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses

import pytest

from cutsearch.abi import io_flags, open_library
from cutsearch.cache import Cache
from cutsearch.codegen import cutlass_version, render
from cutsearch.compiler import CompiledKernel, Compiler, Toolchain
from cutsearch.outcome import Measurement
from cutsearch.pool import WorkerProcess
from cutsearch.problem import Layer
from cutsearch.space import Config, invalid_reason, kernel_problem, knob_grid, row_views
from cutsearch.worker import MeasureRequest

BASE = Layer(m=256, n=1001, k=999, dtype="bf16", bias=True, activation="silu")
CONFIG = Config(tile_m=128, tile_n=64, tile_k=64, kernel_schedule="cooperative", epilogue_schedule="tma")
BIAS_ONLY = dataclasses.replace(BASE, activation="none")
SMALL_M = Layer(m=16, n=1024, k=1024, dtype="bf16", bias=True, activation="silu")
NOSMEM = Config(tile_m=128, tile_n=64, tile_k=64, kernel_schedule="pingpong", epilogue_schedule="nosmem", pad=True)
STAGED = Config(tile_m=128, tile_n=64, tile_k=64, kernel_schedule="cooperative", epilogue_schedule="staged", pad=True)
DIRECT = dataclasses.replace(NOSMEM, epilogue_schedule="direct")
CASES = {
    "x-and-y-padded": (dataclasses.replace(BASE, input="padded", output="padded"), CONFIG),
    "y-transposed-swapped": (dataclasses.replace(BASE, output="transposed"), dataclasses.replace(CONFIG, pad=True, swap_ab=True)),
    "x-padded-y-transposed": (dataclasses.replace(BASE, input="padded", output="transposed"), CONFIG),
    # y^T with M = 226: its rows are unaligned, so only the epilogues that store elements serve it.
    # The bias, C in y's layout whatever D's, varies along D's strided mode: the direct epilogue
    # loads it a column (or, swapped, a row), the staged one adds it as it stages the accumulators.
    "y-transposed-unaligned-direct": (dataclasses.replace(BASE, m=226, activation="relu", output="transposed"), DIRECT),
    "y-transposed-unaligned-direct-swapped-gelu-f16": (
        dataclasses.replace(BASE, m=226, dtype="f16", activation="gelu", output="transposed"),
        dataclasses.replace(DIRECT, tile_m=64, swap_ab=True)),
    "y-transposed-m1-direct-narrow": (dataclasses.replace(BASE, m=1, n=40, output="transposed"), DIRECT),
    "y-transposed-unaligned-staged": (dataclasses.replace(BASE, m=226, output="transposed"), STAGED),
    "y-transposed-unaligned-staged-swapped": (dataclasses.replace(BIAS_ONLY, m=226, output="transposed"),
                                              dataclasses.replace(STAGED, swap_ab=True)),
    "y-transposed-unaligned-nosmem": (dataclasses.replace(BIAS_ONLY, m=226, output="transposed"), NOSMEM),
    "y-transposed-unaligned-nosmem-swapped": (dataclasses.replace(BIAS_ONLY, m=226, output="transposed"),
                                              dataclasses.replace(NOSMEM, swap_ab=True)),
    "y-transposed-unaligned-nosmem-no-bias": (dataclasses.replace(BIAS_ONLY, m=226, bias=False, output="transposed"),
                                              NOSMEM),
    # The nosmem epilogue stores y's unaligned rows itself, the bias added as a zero-stride C.
    "y-stored-unaligned": (BIAS_ONLY, NOSMEM),
    "y-stored-unaligned-swapped": (BIAS_ONLY, dataclasses.replace(NOSMEM, swap_ab=True)),
    "y-stored-unaligned-stream-k": (BIAS_ONLY, dataclasses.replace(NOSMEM, kernel_schedule="cooperative",
                                                                    tile_scheduler="streamk")),
    # The staged epilogue: y's unaligned rows through shared memory, with the activation; M = 1,
    # N below the tile, several tiles a CTA (stream-K), fp16 and bf16.
    "y-staged-silu": (BASE, STAGED),
    "y-staged-swapped-gelu-f16": (dataclasses.replace(BASE, dtype="f16", activation="gelu"),
                                  dataclasses.replace(STAGED, swap_ab=True)),
    "y-staged-m1": (dataclasses.replace(BASE, m=1), dataclasses.replace(STAGED, tile_n=128)),
    "y-staged-stream-k-narrow": (dataclasses.replace(BASE, m=999, n=13, activation="relu"),
                                 dataclasses.replace(STAGED, tile_m=256, tile_scheduler="streamk")),
    # A CTA tile N between the powers of two (more tiles for the SMs where N is odd).
    "y-staged-tile-n-96": (dataclasses.replace(BASE, m=999, n=333, activation="relu"),
                           dataclasses.replace(STAGED, tile_n=96)),
    # Tile widths whose 8-column groups do not come in fours (208: 26 groups, 48: 6), stored in
    # chunks of two; a 208-wide staged tile once left its last 16 columns unwritten.
    "y-staged-tile-n-208": (dataclasses.replace(BASE, m=74, n=51865, k=256, activation="none"),
                            dataclasses.replace(STAGED, tile_n=208, pad=False)),
    "y-staged-swapped-tile-n-48": (dataclasses.replace(BASE, m=999, n=333, dtype="f16", activation="gelu"),
                                   dataclasses.replace(STAGED, tile_n=48, swap_ab=True)),
    # The direct epilogue: y's unaligned rows from the registers, the bias loaded once, the activation
    # fused; swapped (column-major D), no bias, M = 1 on the ws grid, N below the tile (stream-K).
    "y-direct-silu": (BASE, DIRECT),
    "y-direct-swapped-gelu-f16": (dataclasses.replace(BASE, dtype="f16", activation="gelu"),
                                  dataclasses.replace(DIRECT, tile_m=64, swap_ab=True)),
    "y-direct-no-bias-relu": (dataclasses.replace(BASE, bias=False, activation="relu"),
                              dataclasses.replace(DIRECT, swap_ab=True)),
    "y-direct-m1-ws": (dataclasses.replace(BASE, m=1), dataclasses.replace(DIRECT, tile_m=64, kernel_schedule="ws",
                                                                         tile_scheduler="grid")),
    "y-direct-stream-k-narrow": (dataclasses.replace(BASE, m=999, n=13, activation="relu"),
                                 dataclasses.replace(DIRECT, tile_m=256, kernel_schedule="cooperative",
                                                     tile_scheduler="streamk")),
    # Copies x and y: the case for overlapped launches (programmatic dependent launch).
    "x-and-y-copied": (BIAS_ONLY, dataclasses.replace(CONFIG, pad=True)),
    # K sliced on the batch dimension; the reduction kernel adds bias and activation.
    "split-k-swapped": (SMALL_M, Config(tile_m=64, tile_n=16, tile_k=64, kernel_schedule="pingpong",
                                        epilogue_schedule="tma", swap_ab=True, split_k=True)),
    "split-k-m1": (dataclasses.replace(SMALL_M, m=1, activation="gelu"),
                   Config(tile_m=64, tile_n=64, tile_k=64, kernel_schedule="pingpong", epilogue_schedule="tma",
                          split_k=True)),
    # The slices summed by the GEMM's own epilogue: swapped, M = 1 on the cooperative schedule,
    # and an output smaller than one tile.
    "split-k-fixup-swapped": (SMALL_M, Config(tile_m=64, tile_n=16, tile_k=64, kernel_schedule="pingpong",
                                              epilogue_schedule="fixup", swap_ab=True, split_k=True)),
    "split-k-fixup-m1": (dataclasses.replace(SMALL_M, m=1, activation="gelu"),
                         Config(tile_m=128, tile_n=64, tile_k=64, kernel_schedule="cooperative",
                                epilogue_schedule="fixup", split_k=True)),
    "split-k-fixup-tiny-f16": (Layer(m=5, n=40, k=512, dtype="f16", bias=True, activation="relu"),
                               Config(tile_m=64, tile_n=64, tile_k=64, kernel_schedule="pingpong",
                                      epilogue_schedule="fixup", split_k=True)),
    # 5 x 6 tiles, which a 2x1 cluster and a swizzle of 4 round up to 8 x 8: the scheduler hands
    # out tiles past the output (a search of 298x384x7936 crashed on them).
    "split-k-fixup-ragged": (Layer(m=298, n=384, k=2048, dtype="f16", bias=False, activation="gelu"),
                             Config(tile_m=64, tile_n=64, tile_k=64, cluster_m=2, kernel_schedule="pingpong",
                                    epilogue_schedule="fixup", split_k=True)),
    # 96 accumulators a thread: its sums spilled registers while the accumulators stayed live.
    "split-k-fixup-128x96": (Layer(m=200, n=640, k=2048, dtype="bf16", bias=True),
                             Config(tile_m=128, tile_n=96, tile_k=64, cluster_m=2, kernel_schedule="pingpong",
                                    epilogue_schedule="fixup", split_k=True)),
    # Split-K on the ws grid: the slices summed by the fixup epilogue (swapped), or by the
    # reduction kernel (M = 1).
    "split-k-ws-fixup-swapped": (SMALL_M, Config(tile_m=64, tile_n=16, tile_k=64, kernel_schedule="ws",
                                                 epilogue_schedule="fixup", tile_scheduler="grid", swap_ab=True,
                                                 split_k=True)),
    "split-k-ws-m1": (dataclasses.replace(SMALL_M, m=1, activation="gelu"),
                      Config(tile_m=64, tile_n=64, tile_k=64, kernel_schedule="ws", epilogue_schedule="tma",
                             tile_scheduler="grid", split_k=True)),
    # Split-K where K or N is padded: x copied to a pitch the slices cut, the reduction kernel
    # writing y's unaligned rows; one tile in up to 128 slices, the direct orientation, N = 1.
    "split-k-padded-tiny": (Layer(m=7, n=9, k=40001, dtype="f16", bias=True, activation="gelu"),
                            Config(tile_m=64, tile_n=16, tile_k=128, kernel_schedule="ws", epilogue_schedule="tma",
                                   tile_scheduler="grid", swap_ab=True, pad=True, split_k=True)),
    "split-k-padded-direct": (Layer(m=5, n=13, k=3001, dtype="bf16", bias=False, activation="relu"),
                              Config(tile_m=64, tile_n=16, tile_k=64, kernel_schedule="pingpong",
                                     epilogue_schedule="tma", pad=True, split_k=True)),
    "split-k-padded-n1": (Layer(m=3, n=1, k=8192, dtype="bf16", bias=True),
                          Config(tile_m=64, tile_n=16, tile_k=128, kernel_schedule="ws", epilogue_schedule="tma",
                                 tile_scheduler="grid", swap_ab=True, pad=True, split_k=True)),
    # An aligned K that 16-byte slices do not cut (5000), copied to a pitch that they do.
    "split-k-pitched-aligned": (Layer(m=5, n=16, k=5000, dtype="bf16", bias=True, activation="silu"),
                                Config(tile_m=64, tile_n=16, tile_k=32, kernel_schedule="ws", epilogue_schedule="tma",
                                       tile_scheduler="grid", swap_ab=True, pad=True, split_k=True)),
    # x handed over at the caller's pitch (4096 for K = 4095) and y accepted at its own: no copies.
    "split-k-caller-padded": (Layer(m=7, n=9, k=4095, dtype="f16", bias=True, activation="gelu", input="padded",
                                    output="padded"),
                              Config(tile_m=64, tile_n=16, tile_k=64, kernel_schedule="ws", epilogue_schedule="tma",
                                     tile_scheduler="grid", swap_ab=True, split_k=True)),
    # x handed over at the caller's pitch (20008 for K = 20001, which no slice count cuts) and
    # copied to split-K's (20480).
    "split-k-caller-padded-pitched": (Layer(m=7, n=9, k=20001, dtype="f16", bias=True, activation="gelu",
                                            input="padded", output="padded"),
                                      Config(tile_m=64, tile_n=16, tile_k=128, kernel_schedule="ws",
                                             epilogue_schedule="tma", tile_scheduler="grid", swap_ab=True, pad=True,
                                             split_k=True)),
    # The non-persistent kernel (a grid of all the tiles): swapped with a cluster, y's unaligned
    # rows stored by nosmem, and M = 1 with x and y copied.
    "ws-swapped-cluster": (SMALL_M, Config(tile_m=64, tile_n=16, tile_k=64, cluster_m=2, kernel_schedule="ws",
                                           epilogue_schedule="tma", tile_scheduler="grid", swap_ab=True)),
    "ws-y-stored-unaligned": (BIAS_ONLY, dataclasses.replace(NOSMEM, kernel_schedule="ws", tile_scheduler="grid")),
    "ws-m1-gelu-f16": (dataclasses.replace(BASE, m=1, dtype="f16", activation="gelu"),
                       Config(tile_m=128, tile_n=64, tile_k=64, cluster_n=2, kernel_schedule="ws",
                              epilogue_schedule="tma", tile_scheduler="grid", pad=True)),
}
# x read in place through row views (space.RowViews), each with 8, 4, 2 or (M = 1) 1 views: swapped with y's
# unaligned rows stored by nosmem, and by direct with GELU; the visitor tree's GELU with y aligned; the ws grid on a small
# M; stream-K over the views' batch; and K = 7 with y copied out of its padded buffer.
VIEW_CASES = {
    "views-swapped-nosmem": (BIAS_ONLY, dataclasses.replace(NOSMEM, swap_ab=True)),
    "views-swapped-direct-gelu": (dataclasses.replace(BASE, activation="gelu"),
                                  dataclasses.replace(DIRECT, tile_m=256, tile_n=96, kernel_schedule="cooperative",
                                                      cluster_n=2, swap_ab=True)),
    "views-gelu-f16": (Layer(m=96, n=256, k=1002, dtype="f16", bias=True, activation="gelu"),
                       dataclasses.replace(CONFIG, pad=True)),
    "views-ws-swapped": (Layer(m=16, n=512, k=1004, dtype="bf16", bias=True),
                         Config(tile_m=64, tile_n=16, tile_k=64, kernel_schedule="ws", epilogue_schedule="tma",
                                tile_scheduler="grid", swap_ab=True, pad=True)),
    "views-stream-k": (Layer(m=200, n=333, k=1001, dtype="f16", bias=True),
                       dataclasses.replace(NOSMEM, kernel_schedule="cooperative", tile_scheduler="streamk")),
    "views-k7-relu": (Layer(m=8, n=40, k=7, dtype="f16", bias=True, activation="relu"),
                      Config(tile_m=64, tile_n=64, tile_k=64, kernel_schedule="pingpong", epilogue_schedule="tma",
                             pad=True)),
    # M = 1: one view, the kernel's K cut where x ends; swapped on the ws grid, and K below the k-tile.
    "views-m1-ws-swapped-gelu": (Layer(m=1, n=1000, k=334, dtype="bf16", bias=True, activation="gelu"),
                                 Config(tile_m=64, tile_n=16, tile_k=64, kernel_schedule="ws", epilogue_schedule="tma",
                                        tile_scheduler="grid", swap_ab=True, pad=True)),
    "views-m1-k7-direct": (Layer(m=1, n=333, k=7, dtype="f16", bias=True, activation="relu"), DIRECT),
}
CASES.update(VIEW_CASES)
# Views where P does not divide M: the last M mod P rows by the tail kernel (templates/tail.cuh).
# Swapped with the direct epilogue's SiLU (3 rows), one view row and 5 tail rows with y copied out
# of its padded buffer after both, P = 4 under the visitor tree's GELU, and the ws grid without a
# bias (1 row).
TAIL_CASES = {
    "views-tail-swapped-direct-silu": (Layer(m=251, n=1001, k=999, dtype="bf16", bias=True, activation="silu"),
                                       dataclasses.replace(DIRECT, swap_ab=True)),
    "views-tail-y-copied-f16": (Layer(m=13, n=41, k=7, dtype="f16", bias=True, activation="relu"),
                                Config(tile_m=64, tile_n=64, tile_k=64, kernel_schedule="pingpong",
                                       epilogue_schedule="tma", pad=True)),
    "views-tail-p4-gelu": (Layer(m=158, n=333, k=78, dtype="f16", bias=True, activation="gelu"),
                           dataclasses.replace(CONFIG, pad=True)),
    "views-tail-ws-no-bias": (Layer(m=137, n=48, k=2065, dtype="bf16", bias=False),
                              Config(tile_m=64, tile_n=16, tile_k=64, kernel_schedule="ws", epilogue_schedule="tma",
                                     tile_scheduler="grid", swap_ab=True, pad=True)),
}
CASES.update(TAIL_CASES)
# x copied by the GEMM itself, with no copy kernel (the ws grid's `own_copy` knob), staged in the
# stage buffers of the operand no cluster peer multicasts into: swapped alone, swapped with W
# multicast (1x2) and the direct epilogue, swapped with x multicast (2x1) and K below the k-tile,
# x as A with x multicast, and rows of x too long for one staged block (x at any offset); under
# split-K each slice's columns of the rows, swapped with W multicast (the last slice's columns
# partly past K), and x as A. The search offers the last three none (too many rows; split-K
# measured slower): the test of x's bounds forces it on them.
OWN_COPY_CASES = {
    "own-copy-m4-swapped": (Layer(m=4, n=1000, k=187, dtype="f16", bias=False),
                            Config(tile_m=128, tile_n=16, tile_k=64, kernel_schedule="ws", epilogue_schedule="tma",
                                   tile_scheduler="grid", swap_ab=True, pad=True)),
    "own-copy-direct-1x2": (Layer(m=158, n=333, k=78, dtype="bf16", bias=True, activation="silu"),
                            Config(tile_m=64, tile_n=32, tile_k=64, cluster_n=2, kernel_schedule="ws",
                                   epilogue_schedule="direct", tile_scheduler="grid", swap_ab=True, pad=True)),
    "own-copy-k13-2x1-gelu": (Layer(m=37, n=200, k=13, dtype="f16", bias=True, activation="gelu"),
                              Config(tile_m=64, tile_n=16, tile_k=64, cluster_m=2, kernel_schedule="ws",
                                     epilogue_schedule="tma", tile_scheduler="grid", swap_ab=True, pad=True)),
    "own-copy-x-as-a-1x2": (Layer(m=150, n=256, k=13, dtype="f16", bias=True, activation="relu"),
                            Config(tile_m=64, tile_n=64, tile_k=64, cluster_n=2, kernel_schedule="ws",
                                   epilogue_schedule="tma", tile_scheduler="grid", pad=True)),
    "own-copy-long-rows": (Layer(m=40, n=256, k=3001, dtype="bf16", bias=True),
                           Config(tile_m=64, tile_n=16, tile_k=64, kernel_schedule="ws", epilogue_schedule="tma",
                                  tile_scheduler="grid", swap_ab=True, pad=True)),
    "own-copy-split-k-swapped-1x2": (Layer(m=45, n=64, k=3961, dtype="f16", bias=False, activation="relu"),
                                     Config(tile_m=64, tile_n=32, tile_k=64, cluster_n=2, kernel_schedule="ws",
                                            epilogue_schedule="tma", tile_scheduler="grid", swap_ab=True, pad=True,
                                            split_k=True)),
    "own-copy-split-k-x-as-a": (Layer(m=20, n=40, k=2001, dtype="bf16", bias=True, activation="gelu"),
                                Config(tile_m=64, tile_n=64, tile_k=64, kernel_schedule="ws", epilogue_schedule="tma",
                                       tile_scheduler="grid", pad=True, split_k=True)),
}
CASES.update(OWN_COPY_CASES)


@pytest.fixture(scope="module")
def built(kernel_cache) -> dict[str, CompiledKernel]:
    for layer, config in CASES.values():
        assert invalid_reason(layer, config) is None
    compiler = Compiler(Cache(kernel_cache), Toolchain.find(cutlass_version()))
    sources = ((name, render(layer, config)) for name, (layer, config) in CASES.items())
    return dict(compiler.compile_many(sources))


@pytest.mark.nvcc
def test_every_layout_builds(built):
    """And without spilling registers, which the search rejects as a defect."""
    assert all(isinstance(k, CompiledKernel) for k in built.values()), built
    assert not {name: k.ptxas.defect for name, k in built.items() if k.ptxas.defect}


@pytest.mark.gpu
def test_every_layout_computes_the_layer(built):
    """Each case under its first two knobs and under its widest swizzle, which rounds the
    scheduler's grid up past the output's tiles the most."""
    with WorkerProcess(0) as worker:
        for name, (layer, config) in CASES.items():
            kp = kernel_problem(layer, config)
            grid = knob_grid(config, layer)
            knobs = tuple(dict.fromkeys([*grid[:2], max(grid, key=lambda k: (k.swizzle, k.raster))]))
            request = MeasureRequest(library=str(built[name].library), m=layer.m, n=layer.n, k=layer.k,
                                     dtype=layer.dtype, bias=layer.bias, activation=layer.activation,
                                     pad_n=kp.pad_n, pad_k=kp.pad_k, knobs=knobs,
                                     input=layer.input, output=layer.output, reps=5, warmup=1)
            reply = worker.call(request, timeout_s=300)
            assert isinstance(reply, Measurement), (name, reply)
            assert reply.rel_error < 1e-2 and reply.baseline is not None


@pytest.mark.gpu
def test_overlapped_launches_compute_the_layer(built):
    """Each PDL variant passes the float64 check (the worker drops a variant that fails it)."""
    with WorkerProcess(0) as worker:
        for name in ("x-and-y-copied", "y-stored-unaligned", "split-k-swapped"):
            layer, config = CASES[name]
            knobs = tuple(k for k in knob_grid(config, layer) if k.raster == 1 and k.swizzle == 1 and k.splits <= 2)
            assert {k.pdl for k in knobs} == {0, 1}
            assert_every_variant_passes(worker, built, name, knobs)


@pytest.mark.gpu
def test_row_views_compute_the_layer(built):
    """Every views variant passes the float64 check, beside the copy of x it replaces."""
    with WorkerProcess(0) as worker:
        for name, (layer, config) in VIEW_CASES.items():
            assert row_views(layer) is not None
            knobs = tuple(k for k in knob_grid(config, layer) if k.raster < 2 and k.swizzle == 1 and not k.pdl)
            assert {k.views for k in knobs} == {0, 1}, name
            assert_every_variant_passes(worker, built, name, knobs)


@pytest.mark.gpu
def test_row_views_with_a_tail_compute_the_layer(built):
    """Every views variant, launch overlap of the tail included, passes the float64 check. The
    search offers the first case none (W's copies cost too much there): its variants are forced."""
    with WorkerProcess(0) as worker:
        for name, (layer, config) in TAIL_CASES.items():
            views = row_views(layer)
            assert views is not None and views.tail == layer.m % views.count > 0, name
            grid = [k for k in knob_grid(config, layer) if k.raster < 2 and k.swizzle == 1]
            offered = name != "views-tail-swapped-direct-silu"
            assert any(k.views and k.pdl for k in grid) == offered, name
            base = [k for k in grid if not (k.views or k.pdl or k.prefetch or k.own_copy)]
            knobs = tuple(dict.fromkeys(base + [dataclasses.replace(k, views=1, pdl=p) for k in base for p in (0, 1)]))
            assert_every_variant_passes(worker, built, name, knobs)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(TAIL_CASES))
def test_row_views_and_their_tail_read_nothing_past_x(built, name):
    """x is followed by NaNs: had the views or the tail read past its last row, a NaN would reach
    y. The second call sees new values of x, and writes every row again, the tail's too."""
    with created(built, name, views=True) as (layer, kp, lib, handle):
        y, want = two_calls_between_nans(lib, handle, layer, kp, x_offset=0, ws_fill=None, seed=5)
        tail = slice(layer.m - layer.m % row_views(layer).count, layer.m)
        assert float((y[tail].double() - want[tail]).norm() / want[tail].norm()) < 1e-2, name


def two_calls_between_nans(lib, handle, layer, kp, *, x_offset: int, ws_fill: int | None, seed: int):
    """Binds x `x_offset` elements into a buffer of NaNs (more NaNs after it), runs the layer twice
    with new values of x, checks each y against float64, and returns the last (y, want)."""
    torch = pytest.importorskip("torch")
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[layer.dtype]
    gen = torch.Generator(device="cuda").manual_seed(seed)
    buf = torch.full((x_offset + layer.m * layer.k + 4096,), float("nan"), dtype=dtype, device="cuda")
    x = buf[x_offset: x_offset + layer.m * layer.k].view(layer.m, layer.k)
    w = torch.zeros(kp.pad_n, kp.pad_k, dtype=dtype, device="cuda")
    w[: layer.n, : layer.k] = (torch.randn(layer.n, layer.k, device="cuda", generator=gen) / layer.k ** 0.5).to(dtype)
    b = torch.zeros(kp.pad_n, dtype=dtype, device="cuda")
    b[: layer.n] = torch.randn(layer.n, device="cuda", generator=gen).to(dtype)
    size = max(16, lib.cs_workspace_size(handle))
    ws = (torch.empty(size, dtype=torch.uint8, device="cuda") if ws_fill is None
          else torch.full((size,), ws_fill, dtype=torch.uint8, device="cuda"))
    y = torch.empty(layer.m, layer.n, dtype=dtype, device="cuda")
    act = {"none": lambda t: t, "silu": torch.nn.functional.silu, "gelu": torch.nn.functional.gelu,
           "relu": torch.relu}[layer.activation]
    assert lib.cs_bind(handle, x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(), ws.data_ptr()) == 0
    for _ in range(2):
        x.copy_(torch.randn(layer.m, layer.k, device="cuda", generator=gen).to(dtype))
        y.fill_(float("nan"))
        assert lib.cs_run(handle, torch.cuda.current_stream().cuda_stream) == 0, lib.cs_error(handle)
        torch.cuda.synchronize()
        want = act(x.double() @ w[: layer.n, : layer.k].double().T + (b[: layer.n].double() if layer.bias else 0))
        assert bool(torch.isfinite(y).all())
        assert float(torch.linalg.norm(y.double() - want) / torch.linalg.norm(want)) < 1e-2
    return y, want


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["views-m1-ws-swapped-gelu", "views-m1-k7-direct"])
def test_one_row_read_in_place_reads_nothing_past_x(built, name):
    """M = 1 with the views: x's row is followed by NaNs up to W's padded pitch and beyond. Had
    the kernel read past K, a NaN would meet W's zero padding and spread into y."""
    torch = pytest.importorskip("torch")
    with created(built, name, views=True) as (layer, kp, lib, handle):
        dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[layer.dtype]
        gen = torch.Generator(device="cuda").manual_seed(7)
        buf = torch.full((kp.pad_k + 256,), float("nan"), dtype=dtype, device="cuda")
        buf[: layer.k] = torch.randn(layer.k, device="cuda", generator=gen).to(dtype)
        x = buf[: layer.k].view(1, layer.k)
        w = torch.zeros(kp.pad_n, kp.pad_k, dtype=dtype, device="cuda")
        w[: layer.n, : layer.k] = (torch.randn(layer.n, layer.k, device="cuda", generator=gen) / layer.k ** 0.5).to(dtype)
        b = torch.zeros(kp.pad_n, dtype=dtype, device="cuda")
        b[: layer.n] = torch.randn(layer.n, device="cuda", generator=gen).to(dtype)
        ws = torch.empty(max(16, lib.cs_workspace_size(handle)), dtype=torch.uint8, device="cuda")
        y = torch.full((1, layer.n), float("nan"), dtype=dtype, device="cuda")
        assert lib.cs_bind(handle, x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(), ws.data_ptr()) == 0
        assert lib.cs_run(handle, torch.cuda.current_stream().cuda_stream) == 0, lib.cs_error(handle)
        torch.cuda.synchronize()
        act = {"gelu": torch.nn.functional.gelu, "relu": torch.relu}[layer.activation]
        want = act(x.double() @ w[: layer.n, : layer.k].double().T + b[: layer.n].double())
        assert bool(torch.isfinite(y).all())
        assert float(torch.linalg.norm(y.double() - want) / torch.linalg.norm(want)) < 1e-2


@pytest.mark.gpu
def test_x_copied_by_the_gemm_computes_the_layer(built):
    """Every own-copy variant passes the float64 check, beside the copy kernel it replaces."""
    with WorkerProcess(0) as worker:
        for name, (layer, config) in OWN_COPY_CASES.items():
            knobs = tuple(k for k in knob_grid(config, layer) if not k.pdl)
            offered = name in ("own-copy-m4-swapped", "own-copy-direct-1x2", "own-copy-k13-2x1-gelu",
                               "own-copy-x-as-a-1x2")
            assert {k.own_copy for k in knobs} == ({0, 1} if offered else {0}), name
            if not offered:  # forced below
                continue
            assert_every_variant_passes(worker, built, name, knobs)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(OWN_COPY_CASES))
def test_x_copied_by_the_gemm_reads_only_x_and_each_call_its_own(built, name):
    """x starts an odd number of elements into a buffer of NaNs and is followed by more: had the
    copy read outside x, a NaN would reach y. The second call, on the same pointers, sees new
    values of x: nothing of the first call's copy is reused. Under split-K, in the most slices the
    search measures. A bias is bound even where the layer has none, and must not be added (the
    split-K reduction kernel once added it)."""
    layer, config = CASES[name]
    splits = max(k.splits for k in knob_grid(config, layer))
    with created(built, name, splits, own_copy=True) as (layer, kp, lib, handle):
        two_calls_between_nans(lib, handle, layer, kp, x_offset=3, ws_fill=0xFF, seed=11)  # a workspace of NaNs


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["split-k-fixup-ragged", "split-k-fixup-swapped", "split-k-fixup-128x96"])
def test_the_fixup_computes_the_layer_under_every_raster_and_swizzle(built, name):
    """Every knob the search measures on a fixup kernel, the swizzles that round the grid up
    included, passes the float64 check."""
    layer, config = CASES[name]
    knobs = tuple(knob_grid(config, layer))
    assert {k.swizzle for k in knobs} >= {1, 4} and {k.raster for k in knobs} == {1, 2}
    with WorkerProcess(0) as worker:
        assert_every_variant_passes(worker, built, name, knobs)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["split-k-ws-fixup-swapped", "split-k-ws-m1"])
def test_split_k_on_the_ws_grid_computes_the_layer_in_every_slice_count(built, name):
    """Every slice count the search measures on the ws grid, up to one wave of CTAs, passes the
    float64 check."""
    layer, config = CASES[name]
    knobs = tuple(knob_grid(config, layer))
    assert sorted({k.splits for k in knobs}) == [2, 4, 8]
    with WorkerProcess(0) as worker:
        assert_every_variant_passes(worker, built, name, knobs)


@pytest.mark.gpu
@pytest.mark.parametrize("name, splits", [("split-k-padded-tiny", [2, 4, 8, 16, 32, 64, 128]),
                                          ("split-k-padded-direct", [2, 4, 8]), ("split-k-padded-n1", [2, 4, 8, 16, 32]),
                                          ("split-k-pitched-aligned", [2, 4, 8, 16, 32, 64]),
                                          ("split-k-caller-padded", [2, 4, 8, 16, 32]),
                                          ("split-k-caller-padded-pitched", [2, 4, 8, 16, 32, 64])])
def test_split_k_with_k_or_n_padded_computes_the_layer_in_every_slice_count(built, name, splits):
    """Every slice count and launch overlap passes the float64 check; so do the best variant with
    x handed over at the kernel's pitch and with y accepted padded (the reduction kernel's pitch),
    where the layer copies them."""
    layer, config = CASES[name]
    kp = kernel_problem(layer, config)
    knobs = tuple(knob_grid(config, layer))
    assert sorted({k.splits for k in knobs}) == splits
    with WorkerProcess(0) as worker:
        reply = assert_every_variant_passes(worker, built, name, knobs)
    x_copied = kp.pad_k != layer.x_pitch  # a caller's padded x, too, to split-K's pitch
    y_copied = kp.pad_n != layer.n and layer.output == "contiguous"
    want = {"x padded"} if x_copied else set()
    assert {io for io, _ in reply.io_variants} == want | ({"kernel only"} if y_copied else set()), reply.io_variants


def assert_every_variant_passes(worker, built, name: str, knobs: tuple) -> Measurement:
    layer, config = CASES[name]
    kp = kernel_problem(layer, config)
    request = MeasureRequest(library=str(built[name].library), m=layer.m, n=layer.n, k=layer.k,
                             dtype=layer.dtype, bias=layer.bias, activation=layer.activation,
                             pad_n=kp.pad_n, pad_k=kp.pad_k, knobs=knobs, input=layer.input, output=layer.output,
                             reps=5, warmup=1)
    reply = worker.call(request, timeout_s=300)
    assert isinstance(reply, Measurement), (name, reply)
    assert {k for k, _ in reply.variants} == set(knobs), (name, reply.variants)
    return reply


@contextlib.contextmanager
def created(built, name: str, splits: int = 1, *, m: int | None = None, views: bool = False, own_copy: bool = False):
    """A case's kernel opened and created for its layer: (layer, kp, lib, handle)."""
    layer, config = CASES[name]
    layer = dataclasses.replace(layer, m=m or layer.m)
    kp = kernel_problem(layer, config)
    lib = open_library(built[name].library)
    handle = ctypes.c_void_p()
    assert lib.cs_create(ctypes.byref(handle), layer.m, layer.n, layer.k, kp.pad_n, kp.pad_k, 0, 1, 1, splits, 0, 0,
                         io_flags(False, False, {"views": views, "own_copy": own_copy})) == 0
    try:
        yield layer, kp, lib, handle
    finally:
        lib.cs_destroy(handle)


@pytest.mark.gpu
@pytest.mark.parametrize("name,views,m", [("y-stored-unaligned", False, None), ("y-staged-silu", False, None),
                                          ("x-and-y-copied", False, None),
                                          # W's shifted copies are rebuilt for the new W.
                                          ("views-swapped-nosmem", True, None), ("views-gelu-f16", True, None),
                                          ("views-swapped-direct-gelu", True, None), ("y-direct-silu", False, None),
                                          # M not a multiple of the views' 8: 3 rows by the tail;
                                          # M below it: x is copied instead.
                                          ("views-swapped-nosmem", True, 251), ("views-swapped-nosmem", True, 5)])
def test_new_weights_bound_beside_the_same_x_and_y_are_the_ones_used(built, name, views, m):
    """cs_bind rebuilds the kernel's arguments when W or b moves, not only when x or y does: a
    layer prepared again with new weights must not read the old buffers."""
    torch = pytest.importorskip("torch")
    with created(built, name, m=m, views=views) as (layer, kp, lib, handle):
        if views:  # the views' workspace holds W's copies and no x: it differs from the copy's
            with created(built, name, m=m) as (_, _, _, copying):
                assert (lib.cs_workspace_size(handle) != lib.cs_workspace_size(copying)) == (m != 5)
        dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[layer.dtype]
        gen = torch.Generator(device="cuda").manual_seed(3)
        x = torch.randn(layer.m, layer.k, device="cuda", generator=gen).to(dtype)
        act = {"none": lambda t: t, "silu": torch.nn.functional.silu, "gelu": torch.nn.functional.gelu}[layer.activation]
        ws = torch.empty(max(16, lib.cs_workspace_size(handle)), dtype=torch.uint8, device="cuda")
        y = torch.empty(layer.m, layer.n, dtype=dtype, device="cuda")
        earlier = []  # the previous weights stay allocated: each new pair has pointers of its own
        for _ in range(2):
            w = torch.zeros(kp.pad_n, kp.pad_k, dtype=dtype, device="cuda")
            w[: layer.n, : layer.k] = (torch.randn(layer.n, layer.k, device="cuda", generator=gen) / layer.k ** 0.5).to(dtype)
            b = torch.zeros(kp.pad_n, dtype=dtype, device="cuda")
            b[: layer.n] = torch.randn(layer.n, device="cuda", generator=gen).to(dtype)
            assert not {w.data_ptr(), b.data_ptr()} & {t.data_ptr() for t in earlier}
            earlier += [w, b]
            assert lib.cs_bind(handle, x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(), ws.data_ptr()) == 0
            assert lib.cs_run(handle, torch.cuda.current_stream().cuda_stream) == 0, lib.cs_error(handle)
            torch.cuda.synchronize()
            want = act(x.double() @ w[: layer.n, : layer.k].double().T + b[: layer.n].double())
            assert float(torch.linalg.norm(y.double() - want) / torch.linalg.norm(want)) < 1e-2


@pytest.mark.gpu
def test_cs_bind_refuses_bad_pointers_and_queues_nothing_outside_the_callers_stream(built):
    """A missing or misaligned pointer is cs_bind's 1 and its reason, before the GPU could fault
    on it. A good binding queues no work (its workspace is zeroed by cs_run, on the call's
    stream): a stream-K layer's very first bind and call can be captured in a CUDA graph on a
    side stream, where work on the legacy default stream would break the capture."""
    torch = pytest.importorskip("torch")
    with created(built, "y-stored-unaligned-stream-k") as (layer, kp, lib, handle):
        dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[layer.dtype]
        gen = torch.Generator(device="cuda").manual_seed(11)
        x = torch.randn(layer.m, layer.k, device="cuda", generator=gen).to(dtype)
        w = torch.zeros(kp.pad_n, kp.pad_k, dtype=dtype, device="cuda")
        w[: layer.n, : layer.k] = (torch.randn(layer.n, layer.k, device="cuda", generator=gen) / layer.k ** 0.5).to(dtype)
        b = torch.zeros(kp.pad_n, dtype=dtype, device="cuda")
        b[: layer.n] = torch.randn(layer.n, device="cuda", generator=gen).to(dtype)
        y = torch.full((layer.m, layer.n), float("nan"), dtype=dtype, device="cuda")
        assert lib.cs_workspace_size(handle) > 0  # stream-K's
        ws = torch.empty(lib.cs_workspace_size(handle), dtype=torch.uint8, device="cuda")
        good = [x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(), ws.data_ptr()]
        missing = {0: "x, w and y must not be null", 1: "x, w and y must not be null",
                   2: "this layer adds a bias: b must not be null", 3: "x, w and y must not be null",
                   4: "the workspace must not be null (cs_workspace_size bytes)"}
        for i, reason in missing.items():
            args = [None if j == i else p for j, p in enumerate(good)]
            assert lib.cs_bind(handle, *args) == 1 and lib.cs_error(handle).decode() == "cs_bind: " + reason
        for i, name in enumerate(["x", "w", "b", "y", "the workspace"]):
            args = [p + 2 if j == i else p for j, p in enumerate(good)]
            if i == 0:  # x is copied here: any element will do, but not half of one
                assert lib.cs_bind(handle, *args) == 0, lib.cs_error(handle)
                args[0] -= 1
                name = "x must be aligned to its elements"
            else:
                name = f"{name} must be 16-byte aligned"
            assert lib.cs_bind(handle, *args) == 1 and lib.cs_error(handle).decode() == "cs_bind: " + name
        # The x + 2 binding was good; the refusal after it left the handle unbound.
        assert lib.cs_run(handle, torch.cuda.current_stream().cuda_stream) == 1
        assert lib.cs_error(handle).decode() == "cs_run: cs_bind was not called"
    with created(built, "y-stored-unaligned-stream-k") as (_, _, lib, fresh):
        side = torch.cuda.Stream()
        assert lib.cs_bind(fresh, None, *good[1:]) == 1
        assert lib.cs_run(fresh, side.cuda_stream) == 1  # a refusal binds nothing
        assert lib.cs_error(fresh).decode() == "cs_run: cs_bind was not called"
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            assert lib.cs_bind(fresh, *good) == 0, lib.cs_error(fresh)
            assert lib.cs_run(fresh, side.cuda_stream) == 0, lib.cs_error(fresh)
        want = x.double() @ w[: layer.n, : layer.k].double().T + b[: layer.n].double()
        for _ in range(2):
            y.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            assert float(torch.linalg.norm(y.double() - want) / torch.linalg.norm(want)) < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["split-k-fixup-swapped", "split-k-fixup-m1", "split-k-ws-fixup-swapped"])
def test_the_fixup_gives_the_same_bits_call_after_call(built, name):
    """The fixup's tile counters wrap back to zero on each tile's last slice, with no reset
    between calls: 100 calls on each of two workspaces (each filled with 0xFF before binding)
    all give the first call's bits (the slices are summed in a fixed order), and those are the
    layer's result."""
    torch = pytest.importorskip("torch")
    splits = max(k.splits for k in knob_grid(CASES[name][1], CASES[name][0]))
    with created(built, name, splits) as (layer, _, lib, handle):
        dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[layer.dtype]
        gen = torch.Generator(device="cuda").manual_seed(5)
        x = torch.randn(layer.m, layer.k, device="cuda", generator=gen).to(dtype)
        w = (torch.randn(layer.n, layer.k, device="cuda", generator=gen) / layer.k ** 0.5).to(dtype)
        b = torch.randn(layer.n, device="cuda", generator=gen).to(dtype)
        act = {"silu": torch.nn.functional.silu, "gelu": torch.nn.functional.gelu}[layer.activation]
        want = act(x.double() @ w.double().T + b.double())
        stream = torch.cuda.current_stream().cuda_stream
        results = []
        for _ in range(2):  # a workspace of its own each time: its counters are zeroed at binding
            ws = torch.full((lib.cs_workspace_size(handle),), 0xFF, dtype=torch.uint8, device="cuda")
            y = torch.empty(layer.m, layer.n, dtype=dtype, device="cuda")
            assert lib.cs_bind(handle, x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(), ws.data_ptr()) == 0
            for _ in range(100):
                y.fill_(float("nan"))
                assert lib.cs_run(handle, stream) == 0, lib.cs_error(handle)
                results.append(y.clone())
        torch.cuda.synchronize()
        assert all(torch.equal(r, results[0]) for r in results)
        assert float(torch.linalg.norm(results[0].double() - want) / torch.linalg.norm(want)) < 1e-2
