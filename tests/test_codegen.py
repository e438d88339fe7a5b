"""codegen.render: the CUTLASS kernel and launcher that one config on one layer compiles from.

No compiler runs here: these tests read the emitted C++.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cutsearch.codegen import CodegenError, KernelSource, batch_unit, render, unit_group
from cutsearch.problem import Layer
from cutsearch.space import Config, invalid_reason

LAYER = Layer(m=256, n=1024, k=1024)


@functools.cache
def _render(layer: Layer, config: Config) -> KernelSource:
    assert invalid_reason(layer, config) is None, "tests render configs the search would build"
    return render(layer, config)


def kernel_part(source: KernelSource) -> str:
    """The part the CUTLASS interface emitted, without the launcher around it."""
    start = source.code.index("// ---- kernel emitted by the CUTLASS Python interface")
    end = source.code.index("// ----", start + 10)
    return source.code[start:end]


def _collective(source: KernelSource, name: str) -> str:
    text = kernel_part(source)
    start = text.index(f"using {name}")
    return text[start:text.index(">::CollectiveOp", start)]


def mainloop(source: KernelSource) -> str:
    return _collective(source, "CollectiveMainloop")


def epilogue(source: KernelSource) -> str:
    return _collective(source, "CollectiveEpilogue")


def operands(text: str) -> list[tuple[str, str, int]]:
    """(element, layout or stride, alignment) of each operand a collective builder is given."""
    return [(e, lay, int(a)) for e, lay, a in re.findall(r"^\s*([\w:]+), ([\w:]+), (\d+),\s*$", text, re.M)]


HALF_A_B = [("cutlass::half_t", "cutlass::layout::RowMajor", 8), ("cutlass::half_t", "cutlass::layout::ColumnMajor", 8)]


def macro(source: KernelSource, name: str) -> int:
    return int(re.search(rf"#define {name} (\d+)", source.code)[1])


def coop(**kw) -> Config:
    base = dict(tile_m=128, tile_n=128, tile_k=64, kernel_schedule="cooperative", epilogue_schedule="tma")
    return Config(**{**base, **kw})


def test_render_emits_the_cta_tile_and_cluster_of_the_config():
    source = _render(LAYER, Config(tile_m=128, tile_n=256, tile_k=64, cluster_m=2))
    main = mainloop(source)
    assert "cute::Shape<cute::_128, cute::_256, cute::_64>" in main  # the CTA tile, not the cluster's
    assert "cute::Shape<cute::_2,cute::_1,cute::_1>" in main
    assert "cute::Shape<cute::_128, cute::_256, cute::_64>" in epilogue(source)
    assert "_256x256x64_2x1x1_" in source.operation_name  # the interface names the cluster tile


def test_cluster_along_n_divides_the_n_extent():
    source = _render(LAYER, coop(tile_n=64, cluster_n=2))
    assert "cute::Shape<cute::_128, cute::_64, cute::_64>" in mainloop(source)
    assert "cute::Shape<cute::_1,cute::_2,cute::_1>" in mainloop(source)


@pytest.mark.parametrize("tile_n", [96, 160, 192, 224])
def test_tile_n_between_the_powers_of_two_reaches_the_collectives(tile_n):
    source = _render(LAYER, coop(tile_n=tile_n))
    assert f"cute::Shape<cute::_128, cute::_{tile_n}, cute::_64>" in mainloop(source)
    assert f"cute::Shape<cute::_128, cute::_{tile_n}, cute::_64>" in epilogue(source)


def test_launcher_wraps_the_emitted_kernel_type():
    source = _render(LAYER, coop())
    assert f"struct {source.operation_name}_type" in source.code
    assert f"using GemmKernel = {source.operation_name}_type;" in source.code
    assert f'return "{source.operation_name}";' in source.code  # cs_kernel_name
    assert "${" not in source.code  # every template placeholder was substituted
    for symbol in ("cs_create", "cs_bind", "cs_run", "cs_workspace_size", "cs_error", "cs_destroy"):
        assert re.search(rf"\b{symbol}\(", source.code), symbol


@pytest.mark.parametrize("layer, config, kernel, epi, scheduler", [
    (LAYER, Config(tile_m=128, tile_n=128, tile_k=64), "cutlass::gemm::collective::KernelScheduleAuto",
     "cutlass::epilogue::collective::EpilogueScheduleAuto", "PersistentScheduler"),
    (LAYER, coop(kernel_schedule="pingpong"), "cutlass::gemm::KernelTmaWarpSpecializedPingpong",
     "cutlass::epilogue::TmaWarpSpecialized", "PersistentScheduler"),
    (LAYER, coop(), "cutlass::gemm::KernelTmaWarpSpecializedCooperative",
     "cutlass::epilogue::TmaWarpSpecializedCooperative", "PersistentScheduler"),
    (LAYER, coop(tile_scheduler="streamk"), "cutlass::gemm::KernelTmaWarpSpecializedCooperative",
     "cutlass::epilogue::TmaWarpSpecializedCooperative", "StreamKScheduler"),
    (Layer(m=256, n=1001, k=1024), coop(kernel_schedule="pingpong", epilogue_schedule="nosmem"),
     "cutlass::gemm::KernelTmaWarpSpecializedPingpong", "cutlass::epilogue::NoSmemWarpSpecialized",
     "PersistentScheduler"),
    (Layer(m=256, n=1001, k=1024), coop(epilogue_schedule="nosmem", tile_scheduler="streamk"),
     "cutlass::gemm::KernelTmaWarpSpecializedCooperative", "cutlass::epilogue::NoSmemWarpSpecialized",
     "StreamKScheduler"),
    (LAYER, coop(kernel_schedule="ws", tile_scheduler="grid"), "cutlass::gemm::KernelTmaWarpSpecialized",
     "cutlass::epilogue::TmaWarpSpecialized", None),
    (Layer(m=256, n=1001, k=1024), coop(kernel_schedule="ws", epilogue_schedule="nosmem", tile_scheduler="grid"),
     "cutlass::gemm::KernelTmaWarpSpecialized", "cutlass::epilogue::NoSmemWarpSpecialized", None),
], ids=["auto", "pingpong-tma", "cooperative-tma", "cooperative-streamk", "pingpong-nosmem",
        "cooperative-nosmem-streamk", "ws-tma-grid", "ws-nosmem-grid"])
def test_schedules_and_tile_scheduler_reach_the_kernel(layer, config, kernel, epi, scheduler):
    source = _render(layer, config)
    assert re.search(rf"{re.escape(kernel)}\s*$", mainloop(source), re.M)
    # The exact tag: TmaWarpSpecialized must not match TmaWarpSpecializedCooperative.
    assert re.search(rf"{re.escape(epi)}\s*$", epilogue(source), re.M)
    if scheduler is None:  # a grid of all the tiles: CUTLASS's non-persistent kernel takes no scheduler
        assert re.search(r"CollectiveEpilogue,\s*void\s*>", kernel_part(source))
    else:
        assert f"cutlass::gemm::{scheduler}\n" in kernel_part(source)


def test_explicit_stage_count_replaces_the_auto_carveout():
    explicit = mainloop(_render(LAYER, coop(stages=4)))
    auto = mainloop(_render(LAYER, coop(stages=0)))
    assert re.search(r"^\s*_4,\s*$", explicit, re.M)
    assert "StageCountAutoCarveout" not in explicit
    assert "StageCountAutoCarveout<static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>" in auto


def test_direct_layout_writes_row_major_y():
    source = _render(LAYER, coop())
    assert operands(epilogue(source)) == [("cutlass::half_t", "cutlass::layout::RowMajor", 8)] * 2  # C and D
    assert operands(mainloop(source)) == HALF_A_B
    assert macro(source, "CS_SWAP_AB") == 0


def test_swapped_layout_writes_y_transposed_column_major():
    source = _render(LAYER, coop(swap_ab=True))
    assert operands(epilogue(source)) == [("cutlass::half_t", "cutlass::layout::ColumnMajor", 8)] * 2
    # A and B stay K-major: W is A and x is B, both N|M x K row-major in memory.
    assert operands(mainloop(source)) == HALF_A_B
    assert macro(source, "CS_SWAP_AB") == 1


@pytest.mark.parametrize("swap_ab,layout", [(False, "ColumnMajor"), (True, "RowMajor")])
def test_transposed_output_flips_the_layout_of_d(swap_ab, layout):
    """y^T (N x M row-major) is column-major D direct, and row-major D swapped."""
    source = _render(dataclasses.replace(LAYER, output="transposed"), coop(swap_ab=swap_ab))
    assert operands(epilogue(source)) == [("cutlass::half_t", f"cutlass::layout::{layout}", 8)] * 2
    assert operands(mainloop(source)) == HALF_A_B


def test_padded_io_needs_no_other_kernel():
    """Padded x or y only change the launcher's run-time copies, not the kernel."""
    padded = dataclasses.replace(LAYER, k=1000, n=1001, input="padded", output="padded")
    plain = dataclasses.replace(padded, input="contiguous", output="contiguous")
    # The caller's padded buffers fix the pitches, so the unpadded config is the padded kernel.
    assert _render(padded, coop()).code == _render(plain, coop(pad=True)).code


def test_plain_layer_has_no_epilogue_visitor_tree():
    source = _render(LAYER, coop())
    assert "Sm90EVT" not in source.code and "Broadcast" not in source.code
    assert (macro(source, "CS_HAS_BIAS"), macro(source, "CS_HAS_ACT")) == (0, 0)


def test_bias_broadcasts_along_rows_of_y():
    source = _render(dataclasses.replace(LAYER, bias=True), coop())
    text = kernel_part(source)
    assert "cutlass::epilogue::fusion::Sm90RowBroadcast<" in text and "Sm90ColBroadcast" not in text
    assert "cute::Stride<cute::Int<0>, cute::Int<1>, cute::Int<0>>" in text  # one value per column n
    assert "cutlass::plus" in text
    assert (macro(source, "CS_HAS_BIAS"), macro(source, "CS_HAS_ACT")) == (1, 0)


def test_bias_broadcasts_along_columns_of_y_transposed_when_swapped():
    source = _render(dataclasses.replace(LAYER, bias=True), coop(swap_ab=True))
    text = kernel_part(source)
    assert "cutlass::epilogue::fusion::Sm90ColBroadcast<" in text and "Sm90RowBroadcast" not in text
    assert "cute::Stride<cute::Int<1>, cute::Int<0>, cute::Int<0>>" in text  # one value per kernel row (= n)
    assert "using StrideD = cute::Stride<cute::Int<1>, int64_t, cute::Int<0>>;" in text  # column-major D
    assert macro(source, "CS_HAS_BIAS") == 1


@pytest.mark.parametrize("swap_ab", [False, True], ids=["direct", "swapped"])
def test_nosmem_epilogue_adds_the_bias_as_its_source_c(swap_ab):
    """No visitor tree: D = acc + beta * C, C being the bias read with a zero stride across rows."""
    layer = Layer(m=3000, n=1001, k=999, bias=True)
    source = _render(layer, coop(kernel_schedule="pingpong", epilogue_schedule="nosmem", pad=True, swap_ab=swap_ab))
    assert "Sm90EVT" not in source.code and "Broadcast" not in source.code
    assert (macro(source, "CS_HAS_BIAS"), macro(source, "CS_BIAS_AS_C")) == (0, 1)
    layout = "ColumnMajor" if swap_ab else "RowMajor"
    assert operands(epilogue(source)) == [("cutlass::half_t", f"cutlass::layout::{layout}", 1)] * 2  # y's own rows
    assert [a for _, _, a in operands(mainloop(source))] == [8, 8]  # x padded to 16-byte rows
    assert macro(_render(layer, coop(pad=True, swap_ab=swap_ab)), "CS_BIAS_AS_C") == 0  # TMA: the visitor tree


@pytest.mark.parametrize("epilogue_schedule", ["nosmem", "direct", "staged"])
@pytest.mark.parametrize("swap_ab", [False, True], ids=["direct", "swapped"])
def test_the_bias_as_source_c_keeps_y_s_layout_where_d_is_y_transposed(epilogue_schedule, swap_ab):
    """y^T's rows (M long, here unaligned) are stored element by element. The bias is C with a
    zero stride across y's rows: C keeps y's layout while D is y^T's, so the zero the launcher
    sets is a run-time stride (C's other one is a compile-time 1). Plain y keeps C and D alike."""
    layer = Layer(m=225, n=1001, k=999, bias=True, output="transposed")
    config = coop(epilogue_schedule=epilogue_schedule, pad=True, swap_ab=swap_ab,
                  kernel_schedule="pingpong" if epilogue_schedule != "staged" else "cooperative")
    y_layout, d_layout = ("ColumnMajor", "RowMajor") if swap_ab else ("RowMajor", "ColumnMajor")
    source = _render(layer, config)
    assert operands(epilogue(source)) == [("cutlass::half_t", f"cutlass::layout::{y_layout}", 1),
                                          ("cutlass::half_t", f"cutlass::layout::{d_layout}", 1)]
    assert macro(source, "CS_BIAS_AS_C") == 1 and macro(source, "CS_Y_TRANSPOSED") == 1
    plain = _render(dataclasses.replace(layer, output="contiguous"), config)
    assert operands(epilogue(plain)) == [("cutlass::half_t", f"cutlass::layout::{y_layout}", 1)] * 2
    # Without a bias nothing is bound as C, and C keeps D's layout as the interface emits it.
    bare = _render(dataclasses.replace(layer, bias=False), config)
    assert operands(epilogue(bare)) == [("cutlass::half_t", f"cutlass::layout::{d_layout}", 1)] * 2


@pytest.mark.parametrize("schedule", ["cooperative", "pingpong", "ws"])
@pytest.mark.parametrize("swap_ab", [False, True], ids=["unswapped", "swapped"])
def test_direct_epilogue_replaces_the_nosmem_one_and_fuses_the_activation(schedule, swap_ab):
    """The direct epilogue takes the nosmem one's place on each schedule that has it, keeps its
    types (the bias bound as a zero-stride C) and applies the activation."""
    layer = Layer(m=300, n=1001, k=999, bias=True, activation="silu")
    config = coop(epilogue_schedule="direct", pad=True, swap_ab=swap_ab, kernel_schedule=schedule,
                  tile_m=128 if schedule == "cooperative" else 64,
                  tile_scheduler="grid" if schedule == "ws" else "persistent")
    source = _render(layer, config)
    text = kernel_part(source)
    assert ("Sm90TmaWarpSpecializedAdapter<\n    cutsearch_direct::DirectEpilogue<CollectiveEpilogueNoSmem, 3>>;"
            in text)
    layout = "ColumnMajor" if swap_ab else "RowMajor"
    assert operands(epilogue(source)) == [("cutlass::half_t", f"cutlass::layout::{layout}", 1)] * 2  # y's own rows
    assert "epi_direct" in source.operation_name and "nosmem" not in source.operation_name
    assert (macro(source, "CS_HAS_BIAS"), macro(source, "CS_HAS_ACT"), macro(source, "CS_BIAS_AS_C")) == (0, 0, 1)
    assert "Sm90EVT" not in source.code


@pytest.mark.parametrize("swap_ab", [False, True], ids=["direct", "swapped"])
@pytest.mark.parametrize("activation", ["none", "gelu"])
def test_staged_epilogue_replaces_the_nosmem_one_and_keeps_its_arguments(swap_ab, activation):
    """The interface emits the nosmem epilogue; the staged one takes its place, keeps its types
    (so the launcher binds the bias as a zero-stride C alike) and applies the activation."""
    layer = Layer(m=3000, n=1001, k=999, bias=True, activation=activation)
    config = coop(epilogue_schedule="staged", pad=True, swap_ab=swap_ab)
    source = _render(layer, config)
    text = kernel_part(source)
    assert "using CollectiveEpilogueNoSmem =" in text and "NoSmemWarpSpecialized" in text
    act = {"none": 0, "gelu": 2}[activation]
    assert ("Sm90TmaWarpSpecializedAdapter<\n    cutsearch_staged::StagedEpilogue<CollectiveEpilogueNoSmem, "
            f"{act}, 8>>;") in text
    layout = "ColumnMajor" if swap_ab else "RowMajor"
    assert operands(epilogue(source)) == [("cutlass::half_t", f"cutlass::layout::{layout}", 1)] * 2  # y's own rows
    assert "epi_staged" in source.operation_name and "nosmem" not in source.operation_name
    assert source.code.count("class StagedEpilogue") == 1
    assert (macro(source, "CS_HAS_BIAS"), macro(source, "CS_HAS_ACT"), macro(source, "CS_BIAS_AS_C")) == (0, 0, 1)
    assert "Sm90EVT" not in source.code
    # Kernels with another epilogue do not carry it.
    assert "class StagedEpilogue" not in _render(layer, dataclasses.replace(config, epilogue_schedule="tma")).code


@pytest.mark.parametrize("swap_ab", [False, True], ids=["direct", "swapped"])
def test_split_k_writes_fp32_partials_and_leaves_bias_and_activation_to_its_reduction(swap_ab):
    layer = Layer(m=16, n=4096, k=4096, dtype="bf16", bias=True, activation="gelu")
    source = _render(layer, coop(kernel_schedule="pingpong", tile_m=64, tile_n=16, swap_ab=swap_ab, split_k=True))
    assert "Sm90EVT" not in source.code and "Broadcast" not in source.code
    layout = "ColumnMajor" if swap_ab else "RowMajor"
    assert operands(epilogue(source)) == [("float", f"cutlass::layout::{layout}", 4)] * 2  # 16-byte rows
    assert [t for t, _, _ in operands(mainloop(source))] == ["cutlass::bfloat16_t"] * 2
    assert (macro(source, "CS_SPLIT_K"), macro(source, "CS_LAYER_ACT")) == (1, 2)  # GELU
    assert (macro(source, "CS_HAS_BIAS"), macro(source, "CS_HAS_ACT")) == (0, 0)
    # The reduction adds the bias only for a layer with one, whatever the caller binds.
    assert macro(source, "CS_LAYER_BIAS") == 1
    no_bias = _render(dataclasses.replace(layer, bias=False),
                      coop(kernel_schedule="pingpong", tile_m=64, tile_n=16, swap_ab=swap_ab, split_k=True))
    assert macro(no_bias, "CS_LAYER_BIAS") == 0
    # The same config without the split: one kernel, the visitor tree, no reduction.
    plain = _render(layer, coop(kernel_schedule="pingpong", tile_m=64, tile_n=16, swap_ab=swap_ab))
    assert (macro(plain, "CS_SPLIT_K"), macro(plain, "CS_HAS_BIAS"), macro(plain, "CS_HAS_ACT")) == (0, 1, 1)
    assert unit_group(plain) == unit_group(source)  # they can share a translation unit


@pytest.mark.parametrize("kernel_schedule, tile_m", [("pingpong", 64), ("cooperative", 128)])
def test_split_k_with_the_fixup_writes_y_itself_with_bias_and_activation(kernel_schedule, tile_m):
    """The fixup epilogue takes the nosmem one's place: D in the layer's dtype (no fp32 partials
    for a second kernel), the bias as a zero-stride C, the activation in the epilogue, sized by
    the CTA tile for its workspace."""
    layer = Layer(m=8, n=1000, k=8192, dtype="bf16", bias=True, activation="gelu")
    config = coop(kernel_schedule=kernel_schedule, tile_m=tile_m, tile_n=16, epilogue_schedule="fixup",
                  swap_ab=True, split_k=True)
    source = _render(layer, config)
    text = kernel_part(source)
    assert ("Sm90TmaWarpSpecializedAdapter<\n    cutsearch_fixup::FixupEpilogue<CollectiveEpilogueNoSmem, "
            f"2, {tile_m}, 16>>;") in text
    assert operands(epilogue(source)) == [("cutlass::bfloat16_t", "cutlass::layout::ColumnMajor", 8)] * 2
    assert (macro(source, "CS_SPLIT_K"), macro(source, "CS_BIAS_AS_C"), macro(source, "CS_HAS_ACT")) == (2, 1, 0)
    assert "epi_fixup" in source.operation_name and source.code.count("class FixupEpilogue") == 1
    assert "Sm90EVT" not in source.code
    # With the reduction kernel instead: fp32 partials, CS_SPLIT_K 1.
    kernel = _render(layer, dataclasses.replace(config, epilogue_schedule="tma"))
    assert macro(kernel, "CS_SPLIT_K") == 1 and "class FixupEpilogue" not in kernel.code


def test_stream_k_kernels_are_built_without_grid_dependency_control():
    """CUTLASS 4.2's stream-K scheduler does not compile with it; the launcher then never
    launches the GEMM early."""
    streamk, persistent = _render(LAYER, coop(tile_scheduler="streamk")), _render(LAYER, coop())
    assert "CUTLASS_ENABLE_GDC_FOR_SM90" not in streamk.code and macro(streamk, "CS_GDC") == 0
    assert "#define CUTLASS_ENABLE_GDC_FOR_SM90 1" in persistent.code and macro(persistent, "CS_GDC") == 1
    assert unit_group(streamk) != unit_group(persistent)
    assert batch_unit([streamk, persistent]) is None
    assert unit_group(persistent) == unit_group(_render(LAYER, coop(swap_ab=True)))



@pytest.mark.parametrize("swap_ab", [False, True])
def test_kernels_launched_early_prefetch_w_which_is_a_only_when_swapped(swap_ab):
    kernel = _render(LAYER, coop(swap_ab=swap_ab))
    assert (f"using CollectiveMainloop = cutsearch_mainloop::Mainloop<CollectiveMainloopBase, "
            f"{str(swap_ab).lower()}, false>;") in kernel.code
    assert "struct Mainloop" in kernel.code and macro(kernel, "CS_PREFETCH_W") == 1
    assert macro(kernel, "CS_OWN_COPY") == 0  # the persistent producer is capped at 40 registers
    # Stream-K kernels never wait for the copy: their mainloop is CUTLASS's own.
    streamk = _render(LAYER, coop(tile_scheduler="streamk", swap_ab=swap_ab))
    assert "cutsearch_mainloop" not in streamk.code and macro(streamk, "CS_PREFETCH_W") == 0


@pytest.mark.parametrize("cluster, built", [((1, 1), True), ((2, 1), True), ((1, 2), True), ((2, 2), False)])
def test_ws_kernels_can_copy_x_themselves_where_a_stage_buffer_is_their_own(cluster, built):
    config = Config(tile_m=64, tile_n=16, tile_k=64, cluster_m=cluster[0], cluster_n=cluster[1], kernel_schedule="ws",
                    epilogue_schedule="tma", tile_scheduler="grid", swap_ab=True, pad=True)
    kernel = _render(Layer(m=64, n=1000, k=187), config)
    assert (f"cutsearch_mainloop::Mainloop<CollectiveMainloopBase, true, {str(built).lower()}>;") in kernel.code
    assert macro(kernel, "CS_OWN_COPY") == int(built)


# SiLU and GELU are ours (templates/activation.cuh): CUTLASS's take expf and an IEEE division, or
# erff, per element.
@pytest.mark.parametrize("activation, functor", [("relu", "cutlass::epilogue::thread::ReLu"),
                                                 ("gelu", "cutsearch_act::Gelu"),
                                                 ("silu", "cutsearch_act::SiLu")])
def test_activation_is_fused_in_the_epilogue(activation, functor):
    source = _render(dataclasses.replace(LAYER, activation=activation), coop())
    assert f"{functor}, cutlass::half_t, float" in kernel_part(source)
    assert "thread::SiLu" not in kernel_part(source)
    assert "thread::GELU" not in kernel_part(source)
    assert "Broadcast" not in kernel_part(source)
    assert (macro(source, "CS_HAS_BIAS"), macro(source, "CS_HAS_ACT")) == (0, 1)


def test_bias_then_activation_on_bf16_layer_uses_bf16_everywhere():
    layer = Layer(m=3000, n=1001, k=999, dtype="bf16", bias=True, activation="gelu")
    source = _render(layer, coop(tile_n=64, kernel_schedule="pingpong", pad=True))
    text = kernel_part(source)
    assert "cutlass::half_t" not in text
    assert re.search(r"Sm90RowBroadcast<\s*0 /\*Stages\*/, typename EpilogueDescriptor::TileShape, "
                     r"cutlass::bfloat16_t, cutlass::bfloat16_t,", text)
    assert "cutsearch_act::Gelu, cutlass::bfloat16_t, float" in text
    # GELU applies to the sum: its EVT node takes the plus node as its child.
    assert re.search(r"Sm90EVT<\s*Compute1,\s*EVTCompute0>", text)
    assert operands(mainloop(source)) == [("cutlass::bfloat16_t", "cutlass::layout::RowMajor", 8),
                                          ("cutlass::bfloat16_t", "cutlass::layout::ColumnMajor", 8)]
    assert operands(epilogue(source)) == [("ElementC", "StrideC", 8), ("ElementD", "StrideD", 8)]
    assert "using ElementD = cutlass::bfloat16_t;" in text
    assert "_bf16_bf16_f32_bf16_bf16_" in source.operation_name
    assert (macro(source, "CS_HAS_BIAS"), macro(source, "CS_HAS_ACT")) == (1, 1)


def test_padded_layer_gets_full_16_byte_alignment():
    odd = Layer(m=3000, n=1001, k=999, dtype="bf16")
    source = _render(odd, coop(tile_n=64, kernel_schedule="pingpong", pad=True))
    assert "_align8_" in source.operation_name
    assert [a for _, _, a in operands(mainloop(source))] == [8, 8]
    assert operands(epilogue(source)) == [("cutlass::bfloat16_t", "cutlass::layout::RowMajor", 8)] * 2


def test_unaligned_output_gets_the_alignment_its_rows_allow():
    # N = 1002: 4-byte rows of y, which only the nosmem epilogue stores; K stays 16-byte aligned.
    source = _render(Layer(m=256, n=1002, k=1024), coop(kernel_schedule="pingpong", epilogue_schedule="nosmem"))
    assert "_align8_" in source.operation_name
    assert operands(mainloop(source)) == HALF_A_B
    assert operands(epilogue(source)) == [("cutlass::half_t", "cutlass::layout::RowMajor", 2)] * 2


@pytest.mark.parametrize("epi", [{}, {"bias": True}, {"activation": "silu"}, {"bias": True, "activation": "gelu"}],
                         ids=["plain", "bias", "silu", "bias-gelu"])
@pytest.mark.parametrize("swap_ab", [False, True], ids=["direct", "swapped"])
def test_same_config_on_layers_of_equal_alignment_gives_identical_source(epi, swap_ab):
    """The cache keys on the source, so this is what lets layers share built kernels."""
    config = coop(cluster_m=2, swap_ab=swap_ab)
    small = _render(Layer(m=256, n=1024, k=1024, **epi), config)
    large = _render(Layer(m=4096, n=5000, k=4096, **epi), config)
    assert small.code == large.code
    assert small.digest == large.digest


@pytest.mark.parametrize("epi", [{"bias": True}, {"activation": "relu"}], ids=["bias", "relu"])
@pytest.mark.parametrize("swap_ab", [False, True], ids=["direct", "swapped"])
def test_batch_of_one_gets_the_same_kernel_as_larger_batches(epi, swap_ab):
    config = coop(kernel_schedule="pingpong", tile_n=64, swap_ab=swap_ab)
    one = _render(Layer(m=1, n=1024, k=1024, **epi), config)
    assert "int64_t" in re.search(r"using StrideD = (.*);", one.code)[1]  # y's leading dimension is dynamic
    assert one.code == _render(Layer(m=256, n=1024, k=1024, **epi), config).code


def test_batch_of_one_without_epilogue_shares_the_kernel():
    config = coop(kernel_schedule="pingpong", tile_n=64)
    assert _render(Layer(m=1, n=1024, k=1024), config).code == _render(Layer(m=256, n=1024, k=1024), config).code


def test_output_alignment_decides_whether_unaligned_layers_share_a_kernel():
    config = coop(kernel_schedule="pingpong", epilogue_schedule="nosmem")
    n1001, n1003, n1002 = (_render(Layer(m=256, n=n, k=1024), config) for n in (1001, 1003, 1002))
    assert n1001.code == n1003.code  # both 2-byte rows: alignment 1
    assert n1001.digest != n1002.digest  # 4-byte rows: alignment 2


def test_different_epilogues_get_different_kernels():
    config = coop()
    digests = {_render(dataclasses.replace(LAYER, **epi), config).digest
               for epi in ({}, {"bias": True}, {"activation": "relu"}, {"activation": "gelu"})}
    assert len(digests) == 4


def test_stream_k_with_pingpong_is_refused_by_the_interface():
    with pytest.raises(CodegenError, match="Stream-K"):
        render(LAYER, coop(kernel_schedule="pingpong", tile_scheduler="streamk"))


def test_unknown_schedule_pair_raises_codegen_error():
    with pytest.raises(CodegenError, match="no such schedule"):
        render(LAYER, coop(kernel_schedule="pingpong", epilogue_schedule="auto"))


def test_generating_code_leaves_nothing_in_the_working_directory(tmp_path):
    """cutlass_cppgen opens a cache file in the working directory when imported; cutsearch never
    uses it, and a read-only directory must not fail the import."""
    root = Path(__file__).resolve().parent.parent
    script = ("from cutsearch import codegen; from cutsearch.problem import Layer; from cutsearch.space import Space; "
              "layer = Layer(m=64, n=64, k=64); print(len(codegen.render(layer, next(iter(Space(layer)))).code))")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(root)}, timeout=300)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 1000
    assert list(tmp_path.iterdir()) == []
