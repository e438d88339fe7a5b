"""The configuration space: its validity rules, the layer transforms, and the run-time knobs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from cutsearch.problem import Layer
from cutsearch.space import (CLUSTERS, DEFAULT_CLUSTERS, DEFAULT_TILE_K, SCHEDULES, SIMT_EPILOGUES, SM_COUNT,
                             SPLIT_K_OWN_SLICES, TILE_K, TILE_N, Config, Knobs, Space, copies, copies_x, fitted_tile_n,
                             invalid_reason, k_slices, kernel_problem, knob_grid, output_ctas, own_copy_applies,
                             own_copy_built, smem_bytes, split_k_pads_k, split_k_pays, split_k_pitch)

ALIGNED = Layer(m=4096, n=4096, k=4096)
UNALIGNED_K = Layer(m=512, n=1024, k=999)
UNALIGNED_N = Layer(m=512, n=1001, k=1024)
ODD = Layer(m=3000, n=1001, k=999, dtype="bf16", bias=True, activation="gelu")
SMALL = Layer(m=256, n=1024, k=1024)
GELU = Layer(m=1500, n=5120, k=1280, bias=True, activation="gelu")


def cfg(**kw) -> Config:
    base = dict(tile_m=128, tile_n=128, tile_k=64, kernel_schedule="cooperative", epilogue_schedule="tma")
    return Config(**{**base, **kw})


# --- validity rules -------------------------------------------------------------------------

@pytest.mark.parametrize("layer, config, reason", [
    (ALIGNED, cfg(tile_m=64),
     "cooperative schedule splits the CTA tile's M over two warpgroups: tile M must be >= 128"),
    (ALIGNED, cfg(tile_m=256, tile_n=64, kernel_schedule="pingpong"),
     "pingpong schedule gives each warpgroup a whole tile: tile M must be <= 128"),
    (ALIGNED, cfg(kernel_schedule="pingpong", tile_scheduler="streamk"),
     "stream-K tile scheduler needs the cooperative kernel schedule"),
    (ALIGNED, cfg(kernel_schedule="auto", epilogue_schedule="auto", tile_scheduler="streamk"),
     "stream-K tile scheduler needs the cooperative"),
    (ALIGNED, cfg(tile_m=128, tile_n=256, kernel_schedule="pingpong"),
     "128x256 fp32 accumulator needs over 128 registers"),
    (ALIGNED, cfg(tile_m=256, tile_n=256), "256x256 fp32 accumulator needs over 128 registers"),
    (ALIGNED, cfg(stages=7), "7 stages need 257 KiB of shared memory, over 227 KiB"),
    (ALIGNED, cfg(tile_n=256, tile_k=128, stages=3), "3 stages need 321 KiB of shared memory"),
    (UNALIGNED_K, cfg(), "K=999 gives 2-byte rows; the TMA mainloop needs 16 (pad)"),
    (UNALIGNED_N, cfg(), "N=1001 gives unaligned output rows: only the nosmem, staged or direct epilogue stores them (or pad)"),
    (ALIGNED, cfg(epilogue_schedule="nosmem"), "the nosmem epilogue only serves unaligned output rows"),
    (ALIGNED, cfg(epilogue_schedule="staged"), "the staged epilogue only serves unaligned output rows"),
    (ALIGNED, cfg(epilogue_schedule="direct"), "the direct epilogue only serves unaligned output rows"),
    (UNALIGNED_N, cfg(tile_m=64, kernel_schedule="pingpong", epilogue_schedule="staged"),
     "the staged epilogue needs the cooperative schedule"),
    (dataclasses.replace(UNALIGNED_N, activation="relu"), cfg(epilogue_schedule="nosmem"),
     "fused activation (epilogue visitor tree) needs the TMA epilogue"),
    (dataclasses.replace(UNALIGNED_N, bias=True, activation="gelu"), cfg(epilogue_schedule="nosmem"),
     "needs the TMA epilogue"),
    (ALIGNED, cfg(pad=True), "padding is a no-op for this layer"),
    (ALIGNED, cfg(kernel_schedule="pingpong", epilogue_schedule="auto"), "must both be auto or both explicit"),
    (ALIGNED, cfg(kernel_schedule="auto", epilogue_schedule="tma"), "must both be auto or both explicit"),
    (ALIGNED, cfg(tile_m=96), "CTA tile 96x128x64 is outside the space"),
    (ALIGNED, cfg(cluster_m=2, cluster_n=4), "cluster 2x4 is outside the space"),
    (ALIGNED, cfg(tile_scheduler="splitk"), "unknown tile scheduler 'splitk'"),
    (ALIGNED, cfg(kernel_schedule="ws"), "the ws kernel schedule, and only it, launches a grid of all the tiles"),
    (ALIGNED, cfg(kernel_schedule="pingpong", tile_scheduler="grid"), "the ws kernel schedule, and only it"),
    (ALIGNED, cfg(tile_m=256, tile_n=64, kernel_schedule="ws", tile_scheduler="grid"),
     "the ws schedule gives one warpgroup the whole tile: tile M must be <= 128"),
    (ALIGNED, cfg(tile_m=128, tile_n=192, kernel_schedule="ws", tile_scheduler="grid"),
     "128x192 fp32 accumulator needs over 128 registers"),
    (Layer(m=16, n=4096, k=4096), cfg(kernel_schedule="pingpong", epilogue_schedule="fixup", split_k=True),
     "the fixup epilogue beside 128 accumulator registers a thread spills registers"),
    (Layer(m=16, n=4096, k=4096), cfg(tile_n=256, epilogue_schedule="fixup", split_k=True), "spills registers"),
    (ALIGNED, cfg(tile_m=64, kernel_schedule="ws", tile_scheduler="grid"),
     "the ws schedule launches a CTA a tile: 2048 tiles are more than one wave of 132 SMs"),
    (UNALIGNED_N, cfg(kernel_schedule="ws", tile_scheduler="grid", epilogue_schedule="staged"),
     "the ws schedule takes the TMA, the nosmem, the direct or the fixup epilogue"),
    (Layer(m=16, n=4096, k=4096), cfg(tile_m=64, tile_n=16, kernel_schedule="ws", tile_scheduler="grid", split_k=True),
     "the ws schedule launches a CTA a tile: 512 tiles and slices are more than one wave of 132 SMs"),
    (GELU, cfg(tile_m=64, tile_n=224, kernel_schedule="pingpong", swap_ab=True),
     "a fused GELU or SiLU on a 64x224 pingpong tile spills registers"),
    (dataclasses.replace(GELU, activation="silu"), cfg(tile_m=64, tile_n=224, kernel_schedule="pingpong"),
     "a fused GELU or SiLU on a 64x224 pingpong tile spills registers"),
    (dataclasses.replace(UNALIGNED_N, activation="gelu"), cfg(tile_m=256, tile_n=96, epilogue_schedule="staged"),
     "the staged epilogue with GELU on an unswapped 256x96 tile spills registers"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_invalid_reason_names_the_broken_rule(layer, config, reason):
    assert reason in (invalid_reason(layer, config) or "")


@pytest.mark.parametrize("layer, config", [
    (ALIGNED, cfg(tile_m=128)),                                           # cooperative at its smallest M
    (ALIGNED, cfg(tile_m=128, tile_n=64, kernel_schedule="pingpong")),    # pingpong at its largest M
    (ALIGNED, cfg(tile_m=64, tile_n=256, kernel_schedule="pingpong")),    # 128 registers in one warpgroup
    (ALIGNED, cfg(tile_m=128, tile_n=256)),                               # ... in each of two
    (ALIGNED, cfg(tile_scheduler="streamk")),
    (ALIGNED, cfg(stages=6)),                                             # 225 KiB: the most that fits
    (ALIGNED, cfg(tile_n=256, tile_k=128, stages=0)),                     # auto stages: two fit
    (UNALIGNED_K, cfg(pad=True)),
    (UNALIGNED_N, cfg(epilogue_schedule="nosmem")),
    (dataclasses.replace(UNALIGNED_N, bias=True), cfg(epilogue_schedule="nosmem")),  # the bias as C
    (dataclasses.replace(ODD, activation="none"), cfg(epilogue_schedule="nosmem", pad=True)),  # pads K alone
    (dataclasses.replace(ODD, bias=True, activation="gelu"), cfg(epilogue_schedule="staged", pad=True)),  # and acts
    (dataclasses.replace(UNALIGNED_N, m=1001, n=1024, output="transposed"), cfg(epilogue_schedule="staged")),
    # y^T's unaligned rows with a bias: C (the bias) keeps y's layout (codegen._bias_layout).
    (dataclasses.replace(UNALIGNED_N, m=1001, n=1024, bias=True, output="transposed"), cfg(epilogue_schedule="staged")),
    (dataclasses.replace(UNALIGNED_N, m=1001, n=1024, bias=True, output="transposed"),
     cfg(epilogue_schedule="direct", kernel_schedule="pingpong", swap_ab=True)),
    (dataclasses.replace(UNALIGNED_N, m=1001, n=1024, bias=True, output="transposed"), cfg(epilogue_schedule="nosmem")),
    (UNALIGNED_N, cfg(pad=True)),
    (ODD, cfg(pad=True, swap_ab=True)),
    (ALIGNED, Config(tile_m=128, tile_n=128, tile_k=64)),                 # both schedules auto
    (GELU, cfg(kernel_schedule="pingpong")),                              # GELU's 128x128 builds clean
    # With cutsearch's GELU, not erff's, 128 accumulator registers a thread build clean
    # (studies/recorded/local-2026-12-02-gelu-spills-2/).
    (GELU, cfg(kernel_schedule="pingpong", swap_ab=True)),
    (dataclasses.replace(GELU, bias=False), cfg(tile_n=256, swap_ab=True)),
    (GELU, cfg(tile_n=224, swap_ab=True)),                                # cooperative: 112 registers
    (Layer(m=8, n=1000, k=8192, dtype="bf16", bias=True, activation="gelu"),
     cfg(tile_m=64, tile_n=160, kernel_schedule="pingpong", epilogue_schedule="fixup", split_k=True)),
    (GELU, cfg(tile_n=192, swap_ab=True)),                                # 96 accumulator registers a thread
    (dataclasses.replace(UNALIGNED_N, activation="gelu"),
     cfg(tile_m=256, tile_n=96, epilogue_schedule="staged", swap_ab=True)),  # swapped, the staged 256x96 is clean
    (GELU, cfg(swap_ab=True)),                                            # 64 accumulator registers a thread
    (GELU, cfg(tile_n=256, swap_ab=True, tile_scheduler="streamk")),
    (dataclasses.replace(GELU, activation="silu"), cfg(kernel_schedule="pingpong", swap_ab=True)),
    (SMALL, cfg(kernel_schedule="ws", tile_scheduler="grid")),            # 128x128 in one warpgroup
    (Layer(m=16, n=4096, k=4096), cfg(tile_m=64, tile_n=192, kernel_schedule="pingpong", epilogue_schedule="fixup",
                                      split_k=True)),                    # the fixup's largest pingpong tile
    (Layer(m=8, n=1000, k=8192, dtype="bf16", bias=True, activation="gelu"),
     cfg(tile_m=64, tile_n=128, kernel_schedule="pingpong", epilogue_schedule="fixup",
         split_k=True)),                                                 # GELU's beside 64 accumulators
    (UNALIGNED_N, cfg(tile_m=64, kernel_schedule="ws", tile_scheduler="grid", epilogue_schedule="nosmem")),
    # The direct epilogue fuses the activation, on each schedule that has a nosmem epilogue.
    (dataclasses.replace(ODD, bias=True, activation="gelu"), cfg(epilogue_schedule="direct", pad=True)),
    (dataclasses.replace(ODD, bias=True, activation="silu"),
     cfg(tile_m=64, kernel_schedule="pingpong", epilogue_schedule="direct", pad=True, swap_ab=True)),
    (dataclasses.replace(UNALIGNED_N, activation="relu"),
     cfg(tile_m=64, kernel_schedule="ws", tile_scheduler="grid", epilogue_schedule="direct")),
    (UNALIGNED_N, cfg(epilogue_schedule="direct", tile_scheduler="streamk")),
], ids=lambda v: v.key if isinstance(v, Config) else None)
def test_configs_that_follow_every_rule_are_valid(layer, config):
    assert invalid_reason(layer, config) is None


@pytest.mark.parametrize("tiles_m, cluster_m, valid", [(132, 1, True), (133, 1, False), (131, 2, True),
                                                        (133, 2, False)])
def test_the_ws_schedule_is_offered_where_one_wave_covers_the_output(tiles_m, cluster_m, valid):
    """A partial cluster launches whole: 131 tiles in clusters of two are 132 CTAs."""
    ws = cfg(tile_m=64, tile_n=64, cluster_m=cluster_m, kernel_schedule="ws", tile_scheduler="grid")
    reason = invalid_reason(Layer(m=64 * tiles_m - 5, n=64, k=1024), ws)
    assert (reason is None) == valid, reason
    assert valid or "more than one wave of 132 SMs" in reason


def test_explicit_stages_are_checked_against_shared_memory_auto_stages_are_not():
    config = cfg(tile_n=256, tile_k=128)
    assert smem_bytes(config, "f16", 2) <= 227 * 1024 < smem_bytes(config, "f16", 3)
    assert invalid_reason(ALIGNED, dataclasses.replace(config, stages=2)) is None
    assert invalid_reason(ALIGNED, dataclasses.replace(config, stages=3)) is not None
    assert invalid_reason(ALIGNED, dataclasses.replace(config, stages=0)) is None


def test_nosmem_epilogue_frees_the_shared_memory_of_the_tma_epilogue():
    tma, nosmem = cfg(), cfg(epilogue_schedule="nosmem")
    assert smem_bytes(tma, "f16", 4) - smem_bytes(nosmem, "f16", 4) == 64 * 128 * 4


def test_direct_epilogue_needs_no_shared_memory():
    assert smem_bytes(cfg(epilogue_schedule="direct"), "f16", 4) == smem_bytes(cfg(epilogue_schedule="nosmem"), "f16", 4)


def test_staged_epilogue_takes_16_rows_of_40_floats_a_consumer_warp():
    staged, nosmem = cfg(epilogue_schedule="staged"), cfg(epilogue_schedule="nosmem")
    assert smem_bytes(staged, "f16", 4) - smem_bytes(nosmem, "f16", 4) == 8 * 16 * 40 * 4


def test_staged_and_direct_epilogues_pad_k_alone_like_nosmem():
    layer = dataclasses.replace(ODD, bias=True)
    for epilogue in ("nosmem", "staged", "direct"):
        kp = kernel_problem(layer, cfg(pad=True, epilogue_schedule=epilogue))
        assert (kp.pad_k, kp.pad_n, kp.align_d) == (1000, 1001, 1)


# --- layer transforms -----------------------------------------------------------------------

def test_padding_rounds_k_and_n_up_to_16_byte_rows():
    kp = kernel_problem(ODD, cfg(pad=True))
    assert (kp.m, kp.n, kp.k) == (3000, 1008, 1000)
    assert (kp.pad_n, kp.pad_k) == (1008, 1000)
    assert (kp.align_ab, kp.align_d) == (8, 8)


def test_swap_ab_makes_the_kernel_compute_y_transposed():
    kp = kernel_problem(ODD, cfg(pad=True, swap_ab=True))
    assert (kp.m, kp.n, kp.k) == (1008, 3000, 1000)
    assert (kp.pad_n, kp.pad_k) == (1008, 1000)


def test_nosmem_epilogue_pads_k_alone_and_stores_y_rows_as_they_are():
    layer = dataclasses.replace(ODD, activation="none")
    kp = kernel_problem(layer, cfg(pad=True, epilogue_schedule="nosmem"))
    assert (kp.pad_k, kp.pad_n, kp.align_ab, kp.align_d) == (1000, 1001, 8, 1)
    assert copies(layer, kp)  # x still: its rows are 2-byte aligned
    # The caller's padded y fixes the pitch whatever the epilogue, and then TMA stores it.
    padded = dataclasses.replace(layer, output="padded")
    assert kernel_problem(padded, cfg(pad=True, epilogue_schedule="nosmem")).pad_n == 1008
    assert "only serves unaligned output rows" in invalid_reason(padded, cfg(pad=True, epilogue_schedule="nosmem"))
    # Where K is aligned, padding for the nosmem epilogue would pad nothing.
    assert "no-op" in invalid_reason(dataclasses.replace(UNALIGNED_N, bias=True),
                                     cfg(pad=True, epilogue_schedule="nosmem"))


DECODE = Layer(m=16, n=4096, k=4096, bias=True)


def test_split_k_is_searched_on_request_only_where_the_output_tiles_leave_sms_idle():
    assert Space(DECODE).dimensions()["split_k"] == (False,)  # opt-in: it did not win on the H200
    both = (False, True)
    assert Space(DECODE, split_k=both).dimensions()["split_k"] == both
    assert Space(ALIGNED, split_k=both).dimensions()["split_k"] == (False,)  # 4096 x 4096: 1024 128x128 tiles
    assert Space(ODD, split_k=both).dimensions()["split_k"] == (False,)  # 3000 x 1001: over a 128x128 tile an SM
    # A caller's padded buffers: the same rows as contiguous ones where K and N are aligned.
    for io in ({"input": "padded"}, {"output": "padded"}, {"input": "padded", "output": "padded"}):
        assert Space(dataclasses.replace(DECODE, **io), split_k=both).dimensions()["split_k"] == both
    assert Space(dataclasses.replace(DECODE, output="transposed"), split_k=both).dimensions()["split_k"] == (False,)
    split = cfg(tile_m=64, tile_n=16, kernel_schedule="pingpong", swap_ab=True, split_k=True)
    assert invalid_reason(DECODE, split) is None
    assert split.key.endswith("_swap_splitk") and Config.from_dict(split.to_dict()) == split
    assert "less than one 128x128 tile per SM" in invalid_reason(ALIGNED, dataclasses.replace(split, tile_m=128))
    assert "persistent scheduler or the ws grid, with the TMA epilogue" in invalid_reason(
        DECODE, dataclasses.replace(split, tile_m=128, kernel_schedule="cooperative", tile_scheduler="streamk"))
    assert "not y^T" in invalid_reason(dataclasses.replace(DECODE, output="transposed"), split)
    assert "no split into 16-byte slices" in invalid_reason(dataclasses.replace(DECODE, k=264), split)


def test_split_k_is_searched_by_default_only_where_one_kernel_would_idle_most_sms():
    narrow = Layer(m=32, n=512, k=16384, bias=True)  # 16 tiles of 64x32 direct, 8 swapped
    assert split_k_pays(narrow) and Space(narrow).dimensions()["split_k"] == (False, True)
    assert "cooperative/fixup/persistent" in Space(narrow).dimensions()["schedule"]
    assert Space(narrow, split_k=(False,)).dimensions()["split_k"] == (False,)
    # decode: 128 tiles of 64x32 direct (64 swapped), where slices gained nothing on the H200
    assert not split_k_pays(DECODE) and Space(DECODE).dimensions()["split_k"] == (False,)
    assert not split_k_pays(dataclasses.replace(DECODE, m=1))
    # 33 tiles is the edge: a quarter of 132 SMs.
    assert split_k_pays(Layer(m=32, n=32 * 33, k=4096)) and not split_k_pays(Layer(m=32, n=32 * 34, k=4096))
    # Up to 66 tiles, half the SMs, only with a K of 7680 or more.
    assert split_k_pays(Layer(m=32, n=32 * 66, k=7680)) and not split_k_pays(Layer(m=32, n=32 * 66, k=7672))
    assert not split_k_pays(Layer(m=32, n=32 * 67, k=16384))
    # An odd K is padded to a pitch that the slices cut (test_split_k_pads_...).
    assert Space(dataclasses.replace(narrow, k=16383)).dimensions()["split_k"] == (False, True)
    assert not split_k_pays(Layer(m=64, n=64, k=512))  # a short K: no slice would run long


def test_the_fixup_epilogue_sums_split_k_slices_in_the_gemm_and_only_there():
    fixup = cfg(tile_m=64, tile_n=16, tile_k=128, kernel_schedule="pingpong", epilogue_schedule="fixup",
                swap_ab=True, split_k=True)
    assert invalid_reason(DECODE, fixup) is None
    assert invalid_reason(dataclasses.replace(DECODE, activation="gelu"), fixup) is None  # it applies the activation
    assert "it needs split-K" in invalid_reason(DECODE, dataclasses.replace(fixup, split_k=False))
    assert fixup.key == "64x16x128_c1x1_pingpong_fixup_s0_persistent_swap_splitk"
    # One kernel a call: its split counts are knobs, with no second launch to overlap.
    grid = knob_grid(fixup, DECODE)
    assert {k.splits for k in grid} == {2, 4, 8, 16} and {k.pdl for k in grid} == {0}
    assert smem_bytes(fixup, "f16", 4) == smem_bytes(dataclasses.replace(fixup, epilogue_schedule="nosmem"), "f16", 4)
    # Its schedules are offered only where split-K is searched.
    assert not [s for s in Space(DECODE).dimensions()["schedule"] if "fixup" in s]
    assert {s for s in Space(DECODE, split_k=(False, True)).dimensions()["schedule"] if "fixup" in s} == {
        "pingpong/fixup/persistent", "cooperative/fixup/persistent", "ws/fixup/grid"}
    # On the ws grid, only the slice counts that keep the CTAs to one wave: 64 tiles, two slices.
    ws = dataclasses.replace(fixup, kernel_schedule="ws", tile_scheduler="grid")
    assert invalid_reason(DECODE, ws) is None and knob_grid(ws, DECODE) == [Knobs(splits=2)]
    configs = list(Space(DECODE, split_k=(False, True)))
    assert any(c.epilogue_schedule == "fixup" for c in configs)
    assert all(c.split_k for c in configs if c.epilogue_schedule == "fixup")


def test_split_k_knobs_cut_k_into_16_byte_slices_of_two_k_tiles_at_least():
    split = cfg(tile_m=64, tile_n=16, tile_k=128, kernel_schedule="pingpong", swap_ab=True, split_k=True)
    grid = knob_grid(split, dataclasses.replace(DECODE, k=1536))
    assert {k.splits for k in grid} == {2, 3, 4, 6}  # 8 slices of 192 are under two 128-wide k-tiles
    # 1000 splits only into slices that are not 16-byte multiples (500, 250, ...): no split-K.
    assert "no split into 16-byte slices" in invalid_reason(dataclasses.replace(DECODE, k=1000), split)
    assert all(1536 % (k.splits * 8) == 0 and 1536 // k.splits >= 256 for k in grid)
    assert {k.pdl for k in grid} == {0, 1}  # the reduction is a second kernel to overlap
    assert all(k.decomposition == 0 for k in grid)


def test_split_k_pads_an_unaligned_k_to_a_pitch_that_many_slice_counts_cut():
    # 7x9x100001: one output tile, so a single kernel would stream all of K through one SM.
    tiny = Layer(m=7, n=9, k=100001)
    assert split_k_pays(tiny) and Space(tiny).dimensions()["split_k"] == (False, True)
    ws = cfg(tile_m=64, tile_n=16, tile_k=128, kernel_schedule="ws", tile_scheduler="grid", swap_ab=True, pad=True,
             split_k=True)
    assert invalid_reason(tiny, ws) is None
    kp = kernel_problem(tiny, ws)
    # x is copied either way; for split-K to a multiple of 128 vectors (1024 halves), 351 zeros.
    assert (kp.pad_k, kp.pad_n) == (100352, 16) and kernel_problem(tiny, dataclasses.replace(ws, split_k=False)).pad_k == 100008
    grid = knob_grid(ws, tiny)
    # One tile: up to 128 slices fit one wave of CTAs; each a 16-byte multiple of two k-tiles or more.
    assert sorted({k.splits for k in grid}) == [2, 4, 8, 16, 32, 64, 128]
    assert all(kp.pad_k % (k.splits * 8) == 0 and kp.pad_k // k.splits >= 256 for k in grid)
    assert {k.pdl for k in grid} == {0, 1}  # the copy of x, the GEMM and the reduction overlap
    # The fixup epilogue stores y itself, at the kernel's pitch: not where N is padded.
    fixup = dataclasses.replace(ws, epilogue_schedule="fixup")
    assert "fixup epilogue needs K and N in 16-byte rows" in invalid_reason(tiny, fixup)
    # An aligned K that cuts into 8 slices or more keeps its pitch where padding pads N: padding K
    # too would add a copy of x to every call (2x23x24512 won in 8 slices without one).
    aligned_k = dataclasses.replace(tiny, k=24512)
    assert k_slices(24512, 8) == 8 and kernel_problem(aligned_k, ws).pad_k == 24512


def test_split_k_may_pad_an_aligned_k_that_few_slice_counts_cut():
    # 100000 = 8 x 12500 cuts into 16-byte slices only 2 or 4 ways, 5000 in none: unpadded, one
    # output tile would stream K through at most four SMs. Padding copies x to a pitch that up to
    # 128 slices cut.
    ws = cfg(tile_m=64, tile_n=16, tile_k=32, kernel_schedule="ws", tile_scheduler="grid", swap_ab=True, split_k=True)
    for k, unpadded in ((100000, [2, 4]), (5000, [])):
        assert k_slices(k, 8) < SPLIT_K_OWN_SLICES
        layer = Layer(m=7, n=16, k=k)
        assert Space(layer).dimensions()["pad"] == (False, True)
        assert kernel_problem(layer, ws).pad_k == k  # no copy of x unless the config pads
        if unpadded:
            assert sorted({kn.splits for kn in knob_grid(ws, layer)}) == unpadded
        else:
            assert "has no split into 16-byte slices" in invalid_reason(layer, ws)
        padded = dataclasses.replace(ws, pad=True)
        kp = kernel_problem(layer, padded)
        assert invalid_reason(layer, padded) is None and kp.pad_k == split_k_pitch(k, 8) > k
        assert max(kn.splits for kn in knob_grid(padded, layer)) == (128 if k == 100000 else 64)
        assert all(copies_x(layer, kp, kn) for kn in knob_grid(padded, layer))  # each call pays the copy
        # Padding means nothing to a config without split-K here.
        assert "no-op" in invalid_reason(layer, dataclasses.replace(padded, split_k=False))
        # With N unaligned too, padding pads both (a ten-class head).
        ten = dataclasses.replace(layer, n=10)
        assert split_k_pads_k(ten) and kernel_problem(ten, padded).pad_k == kp.pad_k
    # A K that the slices cut keeps its pitch, and padding is not offered.
    layer = Layer(m=7, n=16, k=65536)
    assert split_k_pitch(65536, 8) == 65536 and Space(layer).dimensions()["pad"] == (False,)


def test_split_k_reads_a_padded_x_at_the_callers_pitch_where_that_pitch_cuts():
    ws = cfg(tile_m=64, tile_n=16, tile_k=64, kernel_schedule="ws", tile_scheduler="grid", swap_ab=True, split_k=True)
    # 7x9x4095 with x handed over at pitch 4096 and y accepted at pitch 16: no copy either way.
    layer = Layer(m=7, n=9, k=4095, input="padded", output="padded")
    assert Space(layer).dimensions()["split_k"] == (False, True)
    kp = kernel_problem(layer, ws)
    assert (kp.pad_k, kp.pad_n) == (4096, 16) and invalid_reason(layer, ws) is None
    grid = knob_grid(ws, layer)
    assert sorted({kn.splits for kn in grid}) == [2, 4, 8, 16, 32] and not any(copies(layer, kp, kn) for kn in grid)
    # 4096 cuts 8 ways and more: padding has nothing to pad, and the fixup needs x's own K.
    assert "no-op" in invalid_reason(layer, dataclasses.replace(ws, pad=True))
    assert "fixup epilogue needs K and N" in invalid_reason(layer, dataclasses.replace(ws, epilogue_schedule="fixup"))


def test_padding_is_no_choice_where_the_caller_has_padded_x_and_n_is_aligned():
    """x's rows are the caller's, 16-byte aligned: padding would pad nothing."""
    padded = Layer(m=300, n=1000, k=999, input="padded")
    assert Space(padded).dimensions()["pad"] == (False,)
    assert all(invalid_reason(padded, dataclasses.replace(c, pad=True)) for c in list(Space(padded))[:50])
    assert Space(dataclasses.replace(padded, n=1001)).dimensions()["pad"] == (False, True)
    assert Space(dataclasses.replace(padded, input="contiguous")).dimensions()["pad"] == (False, True)


def test_a_padded_x_is_copied_to_split_ks_pitch_where_its_own_cuts_few_slices():
    """A caller's padded x is searched as a contiguous one is: where its pitch cuts fewer than
    SPLIT_K_OWN_SLICES ways (or N is aligned), padding copies it to split-K's pitch. The call
    then reads x in K's 16-byte rows (IO_X_ALIGNED), not at the kernel's pitch."""
    from cutsearch.abi import IO_X_ALIGNED, IO_X_PADDED, caller_x, io_flags

    ws = cfg(tile_m=64, tile_n=16, tile_k=64, kernel_schedule="ws", tile_scheduler="grid", swap_ab=True, split_k=True)
    # An aligned K: padded x is contiguous x, with the same choices.
    aligned = Layer(m=7, n=16, k=24512, input="padded")
    assert Space(aligned).dimensions() == Space(dataclasses.replace(aligned, input="contiguous")).dimensions()
    # 20001 is handed over at 20008 = 8 x 41 x 61, which no slice count cuts; split-K's pitch does.
    odd = Layer(m=7, n=9, k=20001, input="padded", output="padded")
    assert split_k_pays(odd) and Space(odd).dimensions()["split_k"] == (False, True)
    assert Space(odd).dimensions()["pad"] == (False, True)
    assert "no split into 16-byte slices" in invalid_reason(odd, ws)
    pitched = dataclasses.replace(ws, pad=True)
    kp = kernel_problem(odd, pitched)
    assert (odd.x_pitch, kp.pad_k, kp.pad_n) == (20008, 20480, 16) and invalid_reason(odd, pitched) is None
    assert {kn.splits for kn in knob_grid(pitched, odd)} >= {2, 4, 8, 16, 32} and copies_x(odd, kp)
    flags = io_flags(y_padded=True, **caller_x(True, odd.x_pitch, kp.pad_k))
    assert flags & IO_X_ALIGNED and not flags & IO_X_PADDED
    # Without split-K's pitch the caller's x is read where it lies.
    kp = kernel_problem(odd, cfg(tile_m=64, tile_n=16, tile_k=64, swap_ab=True))
    assert kp.pad_k == 20008 and not copies_x(odd, kp)
    assert caller_x(True, 20008, 20008) == {"x_padded": True, "x_aligned": False}


def test_split_k_pitch_costs_at_most_a_32nd_of_k_in_zeros():
    for vec in (8,):
        for k in range(1024, 70000, 37):
            pitch = split_k_pitch(k, vec)
            assert k <= pitch <= k + k // 32 and pitch % (2 * vec) == 0, k
    assert split_k_pitch(1025, 8) == 1056  # 4 slices of 16 bytes: 31 zeros, where 1/32 of K is 32
    assert split_k_pitch(16383, 8) == 16384


def test_more_than_16_slices_only_where_they_all_run_in_one_wave():
    narrow = Layer(m=32, n=512, k=16384, bias=True)
    split = cfg(tile_m=64, tile_n=16, tile_k=128, kernel_schedule="pingpong", swap_ab=True, split_k=True)
    assert output_ctas(kernel_problem(narrow, split), split) == 16
    assert sorted({k.splits for k in knob_grid(split, narrow)}) == [2, 4, 8, 16]  # 16 x 32 > 132 CTAs
    single = dataclasses.replace(narrow, n=64)  # 2 tiles: 64 slices fit
    assert sorted({k.splits for k in knob_grid(split, single)}) == [2, 4, 8, 16, 32, 64]


def test_unpadded_odd_layer_keeps_its_extents_and_loses_alignment():
    kp = kernel_problem(ODD, cfg())
    assert (kp.m, kp.n, kp.k, kp.pad_n, kp.pad_k) == (3000, 1001, 999, 1001, 999)
    assert (kp.align_ab, kp.align_d) == (1, 1)


def test_swapped_unpadded_problem_is_n_by_m():
    kp = kernel_problem(Layer(m=16, n=4096, k=4096), cfg(swap_ab=True))
    assert (kp.m, kp.n, kp.k) == (4096, 16, 4096)
    assert (kp.pad_n, kp.pad_k) == (4096, 4096)


def test_transposed_output_pads_only_k_because_y_transposed_rows_are_m_long():
    layer = dataclasses.replace(ODD, m=3008, output="transposed")
    kp = kernel_problem(layer, cfg(pad=True))
    assert (kp.m, kp.n, kp.k, kp.pad_n, kp.pad_k) == (3008, 1001, 1000, 1001, 1000)
    assert (kp.align_ab, kp.align_d) == (8, 8)


def test_transposed_output_with_unaligned_m_needs_the_nosmem_epilogue():
    layer = dataclasses.replace(ODD, output="transposed")  # M = 3000 is a multiple of 8
    assert invalid_reason(layer, cfg(pad=True)) is None
    odd_m = dataclasses.replace(layer, m=3001)
    assert "rows of y^T" in invalid_reason(odd_m, cfg(pad=True))


def test_padded_input_and_output_keep_the_kernel_problem():
    padded = dataclasses.replace(ODD, input="padded", output="padded")
    assert kernel_problem(padded, cfg(pad=True)) == kernel_problem(ODD, cfg(pad=True))


def test_a_callers_padded_buffers_fix_the_pitches_so_padding_the_config_is_a_no_op():
    padded = dataclasses.replace(ODD, input="padded", output="padded")
    assert kernel_problem(padded, cfg()) == kernel_problem(ODD, cfg(pad=True))
    assert invalid_reason(padded, cfg()) is None
    assert invalid_reason(padded, cfg(pad=True)) == "padding is a no-op for this layer"


def test_alignment_is_the_largest_power_of_two_up_to_one_vector():
    assert kernel_problem(Layer(m=64, n=1004, k=1020), cfg()).align_ab == 4   # 1020 = 4 * 255
    assert kernel_problem(Layer(m=64, n=1004, k=1020), cfg()).align_d == 4
    assert kernel_problem(Layer(m=64, n=1024, k=1022), cfg()).align_ab == 2


# --- run-time knobs -------------------------------------------------------------------------

def test_persistent_kernels_search_raster_order_and_swizzle():
    grid = knob_grid(cfg(), ALIGNED)
    assert {(k.raster, k.swizzle) for k in grid} == {(r, s) for r in (1, 2) for s in (1, 2, 4, 8)}
    assert len(grid) == 8
    assert all(k.splits == 1 and k.decomposition == 0 and k.reduction == 0 for k in grid)


def test_a_grid_of_all_the_tiles_has_no_knob_but_the_launch_overlap_of_its_copies():
    ws = cfg(tile_m=64, kernel_schedule="ws", tile_scheduler="grid")
    assert knob_grid(ws, ALIGNED) == [Knobs()]
    # With K padded: x copied (and overlapped with the GEMM, or not, and with W prefetched while
    # the GEMM waits for the copy, or not), or read through row views.
    # Not copied by the GEMM itself: a tile's 64 rows of x are 125 KiB, more than one warp copies.
    assert knob_grid(dataclasses.replace(ws, pad=True), UNALIGNED_K) == [
        Knobs(), Knobs(views=1), Knobs(pdl=1), Knobs(pdl=1, prefetch=1)]


def test_the_gemm_copies_x_itself_only_in_a_kernel_built_for_it_and_rows_that_one_warp_copies():
    ws = cfg(tile_m=64, tile_n=16, kernel_schedule="ws", tile_scheduler="grid", swap_ab=True, pad=True)
    small = Layer(m=4, n=1000, k=187)
    assert own_copy_applies(small, ws) and Knobs(own_copy=1) in knob_grid(ws, small)
    # The rows a tile reads: min(16, M) x K x 2 bytes, against 16 KiB.
    assert own_copy_applies(Layer(m=64, n=1000, k=511), ws)  # 16 x 511 x 2 = 16,352 bytes
    assert not own_copy_applies(Layer(m=64, n=1000, k=513), ws)
    assert own_copy_applies(Layer(m=8, n=1000, k=1023), ws)  # only 8 rows to a tile
    # Nothing to copy: K aligned, or x handed over padded.
    assert not own_copy_applies(Layer(m=4, n=1000, k=192), ws)
    assert not own_copy_applies(dataclasses.replace(small, input="padded"), ws)
    # Kernels not built for it: the persistent ones, and a 2x2 cluster (no stage buffer its own).
    assert not own_copy_applies(small, dataclasses.replace(ws, kernel_schedule="pingpong", tile_scheduler="persistent"))
    assert not own_copy_built(dataclasses.replace(ws, cluster_m=2, cluster_n=2))
    assert own_copy_built(dataclasses.replace(ws, cluster_m=2)) and own_copy_built(dataclasses.replace(ws, cluster_n=2))
    # Not under split-K, where it measured slower than the copy kernel (the kernel can).
    assert not own_copy_applies(small, dataclasses.replace(ws, split_k=True))
    assert not any(k.own_copy for k in knob_grid(dataclasses.replace(ws, split_k=True), Layer(m=64, n=64, k=3961)))
    # Only where few CTAs write the same rows of x: a tile's rows are written by every tile along
    # W's N rows, here ceil(N / 64).
    assert own_copy_applies(Layer(m=4, n=2048, k=187), ws)  # 32 CTAs
    assert not own_copy_applies(Layer(m=4, n=2049, k=187), ws)  # 33
    assert not own_copy_applies(Layer(m=4, n=13632, k=187), ws)  # 213: measured slower
    # A variant of its own: no overlap to choose, no views beside it.
    assert [k for k in knob_grid(ws, small) if k.own_copy] == [Knobs(own_copy=1)]


def test_w_is_prefetched_only_where_the_gemm_waits_for_a_copy_of_x():
    padded = cfg(tile_m=64, kernel_schedule="ws", tile_scheduler="grid", pad=True)
    assert Knobs(pdl=1, prefetch=1) in knob_grid(padded, UNALIGNED_K)
    # x handed over padded: no copy to wait for, though y may still be copied.
    assert not any(k.prefetch for k in knob_grid(padded, dataclasses.replace(UNALIGNED_K, input="padded")))
    # Stream-K kernels are never launched early, and the fixup's counters sit between copy and GEMM.
    streamk = cfg(tile_scheduler="streamk", pad=True)
    assert not any(k.prefetch for k in knob_grid(streamk, UNALIGNED_K))
    assert any(k.pdl for k in knob_grid(streamk, UNALIGNED_K))
    # Where only y is copied, the GEMM runs before its copy and waits for nothing.
    unaligned_n = Layer(m=256, n=1001, k=1024)
    assert any(k.pdl for k in knob_grid(dataclasses.replace(padded, epilogue_schedule="tma"), unaligned_n))
    assert not any(k.prefetch for k in knob_grid(dataclasses.replace(padded, epilogue_schedule="tma"), unaligned_n))


def test_stream_k_kernels_search_stream_k_data_parallel_and_split_k():
    config = cfg(tile_k=128, tile_scheduler="streamk")
    grid = knob_grid(config, Layer(m=4096, n=4096, k=1024))  # 8 k-tiles
    by_mode = {mode: [k for k in grid if k.decomposition == mode] for mode in (1, 2, 3)}
    for mode in (1, 3):  # stream-K and data-parallel: one variant per raster order
        assert sorted((k.raster, k.splits, k.reduction) for k in by_mode[mode]) == [(1, 1, 0), (2, 1, 0)]
    # split-K: every split count up to the k-tiles, each with both reductions, in both raster orders
    assert sorted((k.raster, k.splits, k.reduction) for k in by_mode[2]) == [
        (r, s, red) for r in (1, 2) for s in (2, 3, 4, 8) for red in (0, 1)]  # 16 splits exceed 8 k-tiles
    assert len(grid) == len(by_mode[1]) + len(by_mode[2]) + len(by_mode[3])
    assert all(k.swizzle == 1 for k in grid)


def test_split_k_never_splits_below_one_k_tile():
    grid = knob_grid(cfg(tile_k=64, tile_scheduler="streamk"), Layer(m=4096, n=4096, k=64))
    assert [k for k in grid if k.decomposition == 2] == []
    assert {k.decomposition for k in grid} == {1, 3}


def test_overlapped_launches_are_searched_only_where_a_call_copies():
    plain = knob_grid(cfg(pad=True), UNALIGNED_K)
    assert {k.pdl for k in plain} == {0, 1}
    # x copied: each variant with and without overlap. x read through row views: no copy at all.
    copying = {k for k in plain if not k.views}
    assert {dataclasses.replace(k, pdl=0, prefetch=0) for k in copying if k.pdl} == {k for k in copying if not k.pdl}
    # ... and each overlapped one with and without W's prefetch.
    overlapped = {k for k in copying if k.pdl}
    assert {dataclasses.replace(k, prefetch=0) for k in overlapped if k.prefetch} == {
        k for k in overlapped if not k.prefetch}
    assert {k.pdl for k in plain if k.views} == {0}
    assert {k.pdl for k in knob_grid(cfg(), ALIGNED)} == {0}  # the GEMM alone: nothing to overlap
    padded = dataclasses.replace(UNALIGNED_K, input="padded")  # x arrives padded: no copy left
    assert {k.pdl for k in knob_grid(cfg(pad=True), padded)} == {0}


def test_split_k_counts_k_tiles_of_the_padded_problem():
    # K=999 padded to 1000: 1000 / 128 -> 8 k-tiles, so 8 splits are allowed but not 16.
    grid = knob_grid(cfg(tile_k=128, tile_scheduler="streamk", pad=True), UNALIGNED_K)
    assert max(k.splits for k in grid) == 8


# --- the space as the sampler sees it --------------------------------------------------------

def test_params_round_trip_to_the_same_config():
    space = Space(ODD, tile_m=(64, 128), tile_n=(64, 128), tile_k=(64,), stages=(0, 4))
    configs = list(space)
    assert configs, "the narrowed space holds valid configs"
    dims = space.dimensions()
    for config in configs:
        params = Space.params_from_config(config)
        assert set(params) == set(dims)
        assert all(params[name] in dims[name] for name in dims)
        assert Space.config_from_params(params) == config


def test_iteration_yields_only_valid_distinct_configs():
    space = Space(UNALIGNED_N, tile_m=(64, 128, 256), tile_n=(64, 128, 256), tile_k=(64,), stages=(0,))
    configs = list(space)
    assert all(invalid_reason(UNALIGNED_N, c) is None for c in configs)
    assert len({c.key for c in configs}) == len(configs)
    assert {c.pad for c in configs} == {False, True}
    assert {c.tile_scheduler for c in configs} == {"persistent", "streamk", "grid"}


# A space restricted to the TMA epilogue and CUTLASS's nosmem one, with no padding: only nosmem
# stores the unaligned rows, and it fuses no activation.
NO_FUSED_STORE = {"pad": (False,), "schedules": ("pingpong/tma/persistent", "pingpong/nosmem/persistent")}


@pytest.mark.parametrize("layer, restrict, reason", [
    (dataclasses.replace(UNALIGNED_N, bias=True, activation="relu"), NO_FUSED_STORE,
     "the fused activation (epilogue visitor tree) needs the TMA epilogue"),
    (dataclasses.replace(UNALIGNED_N, bias=True), NO_FUSED_STORE, None),
    # y^T with unaligned rows: the element-wise stores serve it, with a bias or not.
    (dataclasses.replace(UNALIGNED_K, m=226, bias=True, output="transposed"), {}, None),
    (dataclasses.replace(UNALIGNED_K, m=226, bias=True, activation="relu", output="transposed", input="padded"), {},
     None),
    (dataclasses.replace(UNALIGNED_K, m=226, output="transposed"), {}, None),
    (ODD, {}, None), (ALIGNED, {}, None),
])
def test_a_space_says_why_it_holds_no_config_exactly_when_it_holds_none(layer, restrict, reason):
    space = Space(layer, tile_k=(64,), **restrict)
    said = space.unserved()
    assert (said is not None) == (reason is not None) == (next(iter(space), None) is None)
    if reason:  # the rules that refused the configs that got furthest, not the first rule of all
        assert reason in said and "(pad)" not in said and "warpgroups" not in said, said


def test_padding_is_searched_only_where_the_layer_is_unaligned():
    assert Space(ALIGNED).dimensions()["pad"] == (False,)
    assert Space(UNALIGNED_K).dimensions()["pad"] == (False, True)
    assert Space(UNALIGNED_N).dimensions()["pad"] == (False, True)
    assert Space(ALIGNED, pad=(True,)).dimensions()["pad"] == (True,)


def test_schedule_dimension_holds_only_pairs_cutlass_accepts():
    for schedule in SCHEDULES:
        kernel, epilogue, scheduler = schedule.split("/")
        config = Config(tile_m=128, tile_n=64 if epilogue == "fixup" else 128, tile_k=64, kernel_schedule=kernel,
                        epilogue_schedule=epilogue, tile_scheduler=scheduler, split_k=epilogue == "fixup")
        layer = UNALIGNED_N if epilogue in SIMT_EPILOGUES else DECODE if epilogue == "fixup" else ALIGNED
        if kernel == "ws":  # one wave of tiles, and of slices under split-K
            layer = dataclasses.replace(layer, m=128 if config.split_k else 256)
        reason = invalid_reason(layer, config)
        assert reason is None, (schedule, reason)


def test_config_key_is_stable():
    """Recordings and studies are keyed by it: changing the format orphans them."""
    config = Config(tile_m=128, tile_n=64, tile_k=128, kernel_schedule="pingpong", epilogue_schedule="tma", pad=True)
    assert config.key == "128x64x128_c1x1_pingpong_tma_s0_persistent_pad"
    swapped = Config(tile_m=256, tile_n=32, tile_k=32, cluster_n=2, kernel_schedule="cooperative",
                     epilogue_schedule="nosmem", stages=3, tile_scheduler="streamk", swap_ab=True)
    assert swapped.key == "256x32x32_c1x2_cooperative_nosmem_s3_streamk_swap"


def test_config_keys_differ_in_every_field():
    base = cfg()
    variants = [dataclasses.replace(base, **{f.name: v}) for f, v in zip(dataclasses.fields(Config), (
        64, 256, 128, 2, 2, "pingpong", "nosmem", 4, "streamk", True, True, True), strict=True)]
    assert all(v != base for v in variants)
    keys = {base.key} | {v.key for v in variants}
    assert len(keys) == len(variants) + 1


def test_config_dict_round_trip_ignores_unknown_keys():
    config = cfg(stages=4, swap_ab=True)
    assert Config.from_dict({**config.to_dict(), "added_later": 1}) == config


def test_knobs_serialise_every_field():
    assert Knobs(raster=2, swizzle=4, splits=3, decomposition=2, reduction=1, pdl=1).to_dict() == {
        "raster": 2, "swizzle": 4, "splits": 3, "decomposition": 2, "reduction": 1, "pdl": 1}
    assert "pdl" not in Knobs().to_dict() and Knobs(**Knobs().to_dict()) == Knobs()


def test_default_space_searches_tile_n_between_the_powers_of_two():
    dims = Space(UNALIGNED_N).dimensions()
    assert {96, 160, 192, 224} <= set(dims["tile_n"])
    assert list(dims["tile_n"]) == sorted(dims["tile_n"])  # ordered: the warm start measures distance in steps
    assert invalid_reason(UNALIGNED_N, cfg(tile_n=96, epilogue_schedule="staged")) is None
    assert invalid_reason(ALIGNED, cfg(tile_m=256, tile_n=160)) is not None  # 160 fp32 columns of 256 rows


def test_default_space_leaves_out_deep_k_tiles_and_clusters_of_four_which_stay_searchable():
    """Measured on the H200 (studies/recorded/h200x2-2026-11-30-variants/): neither won, so the
    default space leaves them out; a space that names them searches them."""
    layer = Layer(m=256, n=1024, k=1024, bias=True)
    dims = Space(layer).dimensions()
    assert dims["tile_k"] == DEFAULT_TILE_K == (32, 64, 128)
    assert dims["cluster"] == ("1x1", "2x1", "1x2")
    wide = {(c.tile_k, c.cluster_m, c.cluster_n) for c in Space(layer, tile_k=TILE_K, clusters=CLUSTERS)}
    assert {256} <= {k for k, _, _ in wide} and {(2, 2), (4, 1), (1, 4)} <= {(m, n) for _, m, n in wide}
    assert set(DEFAULT_CLUSTERS) < set(CLUSTERS)
    assert not any(c.tile_k == 256 or c.cluster_m * c.cluster_n == 4 for c in Space(layer))


def test_the_space_refuses_every_fixup_build_of_the_survey_that_spilled_more_than_a_few_bytes():
    """nvcc 13.0 builds of fixup tiles in three epilogue variants (ptxas reports, recorded; no GPU
    ran): each one that spilled hundreds of bytes, every swapped 128x96 pingpong build, is refused,
    and so is nothing that built clean. The 16-byte spills of unswapped 128x96 with a 1x2 cluster
    stay in the space, where the build's own check fails them."""
    import json

    path = Path(__file__).resolve().parent.parent / "studies/recorded/local-2026-12-02-fixup-spills/builds.json"
    builds = [(Layer.from_dict(r["layer"]), Config.from_dict(r["config"]), r["spill_bytes"])
              for r in json.loads(path.read_text())["records"]]
    refused = {(layer, config): spill for layer, config, spill in builds if invalid_reason(layer, config)}
    assert len(builds) == 72
    assert len(refused) == 9 and min(refused.values()) >= 400  # 3 clusters x 3 epilogue variants
    assert {spill for layer, config, spill in builds if (layer, config) not in refused} <= {0, 16}
    assert {(c.tile_m, c.tile_n, c.kernel_schedule, c.swap_ab) for _, c in refused} == {(128, 96, "pingpong", True)}


def test_the_space_refuses_every_gelu_build_of_the_survey_that_spilled():
    """nvcc 13.0 builds of the staged epilogue on every tile, of the TMA epilogue beside 96, 112
    and 128 accumulator registers a thread and of the fixup epilogue beside 64-112, with
    cutsearch's GELU (after a bias or alone) and SiLU (ptxas reports, recorded; no GPU ran): the
    space refuses each build that spilled. Beyond those it refuses only the other 64x224 pingpong
    TMA builds, at the edge: half of them spilled."""
    import json

    path = Path(__file__).resolve().parent.parent / "studies/recorded/local-2026-12-02-gelu-spills-2/builds.json"
    builds = [(Layer.from_dict(r["layer"]), Config.from_dict(r["config"]), r["spill_bytes"])
              for r in json.loads(path.read_text())["records"]]
    assert len(builds) == 200
    spilled = {(layer, config) for layer, config, spill in builds if spill}
    refused = {(layer, config) for layer, config, _ in builds if invalid_reason(layer, config)}
    assert len(spilled) == 10 and spilled <= refused
    edge = refused - spilled
    assert len(edge) == 4
    assert {(c.tile_m, c.tile_n, c.kernel_schedule, c.epilogue_schedule) for _, c in edge} == {(64, 224, "pingpong", "tma")}


def test_the_space_refuses_the_wide_cooperative_builds_that_spilled_and_no_other():
    """nvcc 13.0 builds of the cooperative 128x224 TMA tile with every fused activation, under
    either tile scheduler, in either orientation (ptxas reports, recorded; no GPU ran): only the
    swapped persistent build with a bias and SiLU in f16 spilled, and the space refuses it alone.
    The H100 search that found it had built it four times (two clusters, two k-tiles), each a
    typed defect; the space refuses those four too."""
    import json

    root = Path(__file__).resolve().parent.parent / "studies/recorded"
    survey = json.loads((root / "local-2026-12-06-wide-cooperative-spills/builds.json").read_text())["records"]
    builds = [(Layer.from_dict(r["layer"]), Config.from_dict(r["config"]), r["spill_bytes"]) for r in survey]
    assert len(builds) == 32
    spilled = {(layer, config) for layer, config, spill in builds if spill}
    refused = {(layer, config) for layer, config, _ in builds if invalid_reason(layer, config)}
    assert len(spilled) == 1 and refused == spilled

    study = json.loads((root / "h100-2026-12-06-random18-19/r18_4.json").read_text())
    layer = Layer.from_dict(study["layer"])
    defects = [Config.from_dict(e["config"]) for e in study["evaluations"]
               if e.get("failure", {}).get("kind") == "defect"]
    assert len(defects) == 4 and all("spilled" in e["failure"]["message"]
                                     for e in study["evaluations"] if "failure" in e)
    assert all(invalid_reason(layer, config) for config in defects)
    measured = [Config.from_dict(e["config"]) for e in study["evaluations"] if "measurement" in e]
    assert len(measured) == 28 and not any(invalid_reason(layer, config) for config in measured)


def test_the_gelu_spill_rules_hold_for_the_wide_tiles_built_with_the_extended_wgmma_shapes():
    """The 160- and 224-wide builds of that survey, again with one m64n160/m64n224 instruction a
    k-step (ptxas reports, recorded; no GPU ran): each one that spilled is still refused."""
    import json

    path = Path(__file__).resolve().parent.parent / "studies/recorded/local-2026-12-02-wide-mma-spills/builds.json"
    builds = [(Layer.from_dict(r["layer"]), Config.from_dict(r["config"]), r["spill_bytes"])
              for r in json.loads(path.read_text())["records"]]
    assert len(builds) == 48 and {c.tile_n for _, c, _ in builds} == {160, 224}
    spilled = {(layer, config) for layer, config, spill in builds if spill}
    assert len(spilled) == 3
    assert all(invalid_reason(layer, config) for layer, config in spilled)


def test_fitted_tile_widths_fill_whole_waves_of_the_sms():
    """203x11008x14336 swapped: 43 rows of 256-row tiles leave room for 3 tiles across x's 203
    rows, so 80 wide (129 tiles for 132 SMs); unswapped, one 256-row tile of x leaves 132 across
    W's 11008 rows, so 96, already a width of the grid."""
    layer = Layer(m=203, n=11008, k=14336, dtype="bf16", bias=True, activation="gelu")
    widths = fitted_tile_n(layer)
    assert 80 in widths and 96 not in widths
    assert all(w % 16 == 0 and 16 <= w <= 256 and w not in TILE_N for w in widths)
    assert Space(layer).dimensions()["tile_n"] == tuple(sorted(TILE_N + widths))
    fitted = cfg(tile_m=256, tile_n=80, swap_ab=True)
    assert invalid_reason(layer, fitted) is None
    kp = kernel_problem(layer, fitted)
    assert -(-kp.m // 256) * -(-kp.n // 80) == 129
    # Another layer's fitted width is not a choice here; a layer on the grid gets none.
    assert "outside the space" in invalid_reason(ALIGNED, fitted)
    assert fitted_tile_n(ALIGNED) == ()


def test_split_k_on_the_ws_grid_is_searched_where_it_won_on_the_h200_and_not_for_decode():
    """Recorded on one H200 (studies/recorded/h200-2026-12-02-ws-split-k/): the same tiles as one
    kernel, as persistent split-K and as split-K on the ws grid. On 8x1000x8192 the grid's fixup
    was fastest, and the default space offers it there, with slice counts up to one wave. On
    decode every split lost to one kernel, and its default space holds no split-K."""
    from cutsearch.efficiency import Recording

    here = Path(__file__).resolve().parent.parent / "studies/recorded/h200-2026-12-02-ws-split-k"
    head = Recording.load(here / "ws-split-k-head_long_k.json")
    best = head.best().config
    assert (best.kernel_schedule, best.epilogue_schedule, best.split_k) == ("ws", "fixup", True)
    assert best in set(Space(head.layer))
    persistent = [e.outcome.median_us for e in head.measured() if e.config.tile_scheduler == "persistent"]
    assert head.best().outcome.median_us < min(persistent)
    assert all(output_ctas(kernel_problem(head.layer, best), best) * k.splits <= SM_COUNT
               for k in knob_grid(best, head.layer))
    decode = Recording.load(here / "ws-split-k-decode-f16.json")
    assert not decode.best().config.split_k
    assert Space(decode.layer).dimensions()["split_k"] == (False,)


@pytest.mark.parametrize("files", [
    ("h200-2026-12-03-split-k-band/band_proj.json", "h200-2026-12-03-split-k-band/band_proj_split.json"),
    ("h200-2026-12-03-split-k-band/band_gelu.json", "h200-2026-12-03-split-k-band/band_gelu_split.json"),
    ("h200-2026-12-03-split-k-band/band_square.json", "h200-2026-12-03-split-k-band/band_square_split.json"),
    ("h200-2026-12-03-split-k-band/band_wide.json", "h200-2026-12-03-split-k-band/band_wide_split.json"),
    ("h200-2026-12-03-split-k-gap/gap_proj.json", "h200-2026-12-03-split-k-gap/gap_proj_split.json"),
    ("h200-2026-12-03-split-k-gap/gap_silu.json", "h200-2026-12-03-split-k-gap/gap_silu_split.json"),
    ("h200-2026-12-02-ws-split-k/search/random5.json",),
    ("h200-2026-12-02-split-k-fixed/proj_long_k.json",),
    ("h200-2026-12-03-split-k-wide/proj_long_k.json", "h200-2026-12-03-split-k-wide/proj_long_k_split.json",
     "h200-2026-12-03-split-k-wide/proj_long_k.configs.json"),
])
def test_the_default_space_holds_split_k_exactly_where_it_won_on_the_h200(files):
    """Recorded on one H200: searches of long-K layers with split-K in their space (and, for the
    band layers, the same trial count without it). Split-K won where its best trial beat every
    one-kernel trial; the default space must hold it there and nowhere else among these."""
    from cutsearch.efficiency import Recording

    here = Path(__file__).resolve().parent.parent / "studies/recorded"
    recordings = [Recording.load(here / f) for f in files]
    layer = dataclasses.replace(recordings[-1].layer, name=None)
    assert all(dataclasses.replace(r.layer, name=None) == layer for r in recordings)
    times = {kind: min(e.outcome.median_us for r in recordings for e in r.measured() if e.config.split_k == kind)
             for kind in (False, True)}
    assert split_k_pays(layer) == (times[True] < times[False])
    assert Space(layer).dimensions()["split_k"] == ((False, True) if split_k_pays(layer) else (False,))
