"""An analytic cost model of one SM90 GEMM configuration on an H200.

It ranks the space before anything is compiled. It accounts for the roofline, wave
quantization over the SMs, tile padding waste, the operand feed of small tiles, cluster and
stages, and the per-call cost of each layout transform. Its numbers are predictions: they
order candidates, they are never reported as measurements.
"""

from __future__ import annotations

import dataclasses
import math

from cutsearch.problem import BYTES, PEAK_BYTES_PER_S, PEAK_FLOPS, Layer
from cutsearch.space import (SIMT_EPILOGUES, SM_COUNT, SMEM_BYTES, Config, KernelProblem, Knobs, RowViews,
                             applied_views, kernel_problem, output_ctas, smem_bytes)


@dataclasses.dataclass(frozen=True)
class Coefficients:
    """Free constants, calibrated against recorded H200 measurements (see calibrate())."""

    launch_us: float = 4.0        # launch, prologue and epilogue drain of one kernel
    tile_fill_us: float = 0.35    # pipeline fill per wave of tiles
    # Operand bytes one SM pulls from L2, and straight from DRAM when nothing is reused, at most;
    # the SMs that run at once share the totals (the shared feed, below), which give each of 132
    # SMs the rates the model had for every SM: 8e10 and 4e10.
    l2_feed_bytes_per_s: float = 1e11
    dram_feed_bytes_per_s: float = 1e11
    l2_total_bytes_per_s: float = 8e10 * SM_COUNT
    dram_total_bytes_per_s: float = 4e10 * SM_COUNT
    copy_overhead_us: float = 2.0  # one extra pitched copy or memset launch
    k_step_us: float = 0.02        # barrier and issue cost of one k-block, whatever its size
    multicast_gain: float = 1.25   # a cluster's operand feed: TMA multicast shares one operand's loads
    stage_penalty: tuple[float, ...] = (1.25, 1.25, 1.25, 1.08, 1.02, 1.0, 1.0, 1.0)
    # y stored by ordinary stores. The nosmem and direct epilogues store whole 16-byte runs where
    # D is column-major and scattered 2-byte pieces where it is row-major; the staged one whole
    # rows where D is row-major and 16-element pieces of columns where it is column-major. The
    # names follow nosmem: "column" is the fast orientation.
    store_column_bytes_per_s: float = 2.0e12
    store_row_bytes_per_s: float = 0.5e12


DEFAULT = Coefficients()
# Fitted to 21 recorded H200 studies, 395 measured configs (studies/model-calibration.json:
# within-layer Spearman 0.22 -> 0.52; fitted on the 18 suite studies alone it scores 0.52 on
# three held-out recordings, against 0.36 for DEFAULT). Warm starts blend it with DEFAULT.
# Since the builder's stage count is counted (builder_stages) rather than taken for six, the same
# 395 score 0.67 with it and 0.62 with DEFAULT; a refit from DEFAULT reached only 0.66.
# Its feed rates were fitted for every SM pulling at once: they are its totals over 132 SMs.
# It credits a cluster's feed with no multicast gain. Of the pairs of trials that differ only in a
# cluster of 2, measured more than 2% apart, the cluster was faster in 255 of 429 on an H200 and
# slower in 45 of 56 on an H100; on both cards its ranking improves without the gain (Spearman
# 0.564 -> 0.611 on 279 H200 recordings, 0.443 -> 0.513 on 51 H100 ones). DEFAULT's H200 ranking
# is best with the gain (0.638 against 0.579), so it keeps it: warm starts blend both views
# (studies/scripts/model_multicast.py).
CALIBRATED = Coefficients(launch_us=13.22, tile_fill_us=0.0361, l2_total_bytes_per_s=9.52e10 * SM_COUNT,
                          dram_total_bytes_per_s=3.92e10 * SM_COUNT, copy_overhead_us=1.08, k_step_us=0.00465,
                          multicast_gain=1.0)


def predict_us(layer: Layer, config: Config, knobs: Knobs | None = None,
               coeff: Coefficients = DEFAULT) -> float:
    """One call's predicted µs: waves of k-steps or the DRAM traffic, whichever is longer, and the
    split's partials, the launch, y's ordinary stores and what the call adds around the GEMM."""
    kp = kernel_problem(layer, config)
    e = BYTES[layer.dtype]
    if config.gemv:
        return _gemv_us(layer, kp, coeff)
    # Row views: a batch of P GEMMs of M / P rows against P shifted copies of W, and no x copy.
    views = applied_views(layer, config, knobs is not None and bool(knobs.views))
    batches = 1
    if views is not None:
        rows = layer.m // views.count
        kp = dataclasses.replace(kp, m=kp.m if config.swap_ab else rows, n=rows if config.swap_ab else kp.n,
                                 k=views.k)
        batches = views.count
    tiles = output_ctas(kp, config) * batches  # clusters launch whole: a partial cluster still occupies its SMs
    k_iters = math.ceil(kp.k / config.tile_k)
    unique = (kp.m * kp.k + kp.n * kp.k) * e * batches
    cluster = config.cluster_m * config.cluster_n
    slots = SM_COUNT // cluster * cluster
    splits = _splits(config, knobs, k_iters, slots, tiles)
    step_s = _k_step_s(layer, config, kp, tiles, k_iters, unique, coeff, min(tiles * splits, slots))
    if splits > 1:
        waves = math.ceil(tiles * splits / slots)
        compute_s = waves * math.ceil(k_iters / splits) * step_s
        # Stream-K and the fixup epilogue fix up tiles through the workspace; otherwise split-K's
        # fp32 partials are written and read back by its reduction kernel.
        in_workspace = config.epilogue_schedule == "fixup" or not config.split_k
        partials = tiles * config.tile_m * config.tile_n if in_workspace else kp.m * kp.n
        reduce_s = partials * 4 * 2 * splits / PEAK_BYTES_PER_S
    else:
        waves = math.ceil(tiles / slots)
        compute_s = waves * k_iters * step_s
        reduce_s = 0.0
    # DRAM: every operand once, the padded output once.
    dram = unique + kp.m * kp.n * e * batches + (layer.n * e if layer.bias else 0)
    memory_s = dram / PEAK_BYTES_PER_S
    t = max(compute_s, memory_s) + reduce_s
    t_us = t * 1e6 + coeff.launch_us + waves * coeff.tile_fill_us
    t_us += _simt_store_us(layer, config, kp, batches, coeff)
    for term_us in _per_call_us(layer, config, kp, views, splits, coeff):
        t_us += term_us
    return t_us


# The gemv kernel's fp32 multiply-adds a second, with the conversions beside them: what its probe
# reached where arithmetic bound it, 16x4096x4096 on an H100 (studies/recorded/h100-2026-12-06-skinny-probe/).
GEMV_FMA_PER_S = 8e12
# Of the datasheet bandwidth. The probe's 88-97% were of the streaming floor's speed, which is
# lower; the search measures every gemv config (queued first), so this only serves ModelEvaluator.
GEMV_STREAM_SHARE = 0.9


def _gemv_us(layer: Layer, kp: KernelProblem, coeff: Coefficients) -> float:
    """The gemv kernel: W streamed once, or its multiply-adds, whichever is longer."""
    e = BYTES[layer.dtype]
    dram = (layer.m * kp.pad_k + kp.pad_n * kp.pad_k + layer.m * layer.n) * e + (layer.n * e if layer.bias else 0)
    t = max(dram / (GEMV_STREAM_SHARE * PEAK_BYTES_PER_S), layer.m * layer.n * kp.pad_k / GEMV_FMA_PER_S)
    return t * 1e6 + coeff.launch_us


def _k_step_s(layer: Layer, config: Config, kp: KernelProblem, tiles: int, k_iters: int, unique: int,
              coeff: Coefficients, active: int) -> float:
    """One k-block of one tile: the MMA rate, or the operand feed when the tile is thin, with
    `active` CTAs pulling operands at once."""
    e = BYTES[layer.dtype]
    tm, tn, tk = config.tile_m, config.tile_n, config.tile_k
    cluster = config.cluster_m * config.cluster_n
    tile_flops = 2 * tm * tn * tk
    tile_bytes = (tm + tn) * tk * e / (coeff.multicast_gain if cluster > 1 else 1.0)
    # Operand traffic that L2 cannot serve from reuse comes from DRAM, at a lower per-SM rate.
    # Rows of a tile past the problem are zeros TMA fills in, not traffic: counting them made
    # unswapped 64-row tiles look L2-fed on decode (within-layer Spearman 0.56 -> 0.67 without).
    traffic = tiles * k_iters * (min(tm, kp.m) + min(tn, kp.n)) * tk * e
    dram_share = min(1.0, unique / traffic) if traffic else 1.0
    # The SMs that run at once share L2's and DRAM's bandwidth; fewer of them each get more.
    l2 = min(coeff.l2_feed_bytes_per_s, coeff.l2_total_bytes_per_s / active)
    dram = min(coeff.dram_feed_bytes_per_s, coeff.dram_total_bytes_per_s / active)
    feed = 1.0 / (dram_share / dram + (1 - dram_share) / l2)
    step_s = max(tile_flops / (PEAK_FLOPS / SM_COUNT), tile_bytes / feed) + coeff.k_step_us * 1e-6
    # Warpgroup occupancy: a 64-row tile on the cooperative schedule idles half the math.
    if config.kernel_schedule in ("pingpong", "ws"):
        step_s *= 0.95  # pingpong overlaps one tile's epilogue with the next tile's MMA; ws runs a tile alike
    stages = config.stages or builder_stages(config, layer.dtype)
    return step_s * coeff.stage_penalty[min(stages, len(coeff.stage_penalty) - 1)]


def _splits(config: Config, knobs: Knobs | None, k_iters: int, slots: int, tiles: int) -> int:
    """The slices K is cut into: stream-K's split or stream-K decomposition, or split-K's."""
    splits = 1
    if config.tile_scheduler == "streamk" and knobs is not None and knobs.decomposition in (2, 3):
        splits = knobs.splits if knobs.decomposition == 2 else max(1, min(k_iters, slots // max(tiles, 1)))
    if config.split_k:
        splits = knobs.splits if knobs is not None and knobs.splits > 1 else 2
    return splits


def _simt_store_us(layer: Layer, config: Config, kp: KernelProblem, batches: int, coeff: Coefficients) -> float:
    """y stored by ordinary stores rather than TMA: at the rate of the orientation D has."""
    if config.epilogue_schedule not in SIMT_EPILOGUES:
        return 0.0
    column_major_d = config.swap_ab != (layer.output == "transposed")
    fast = not column_major_d if config.epilogue_schedule == "staged" else column_major_d
    rate = coeff.store_column_bytes_per_s if fast else coeff.store_row_bytes_per_s
    if config.epilogue_schedule == "direct" and fast:
        rate /= 1 - DIRECT_STORE_SAVING
    return kp.m * kp.n * batches * BYTES[layer.dtype] / rate * 1e6


def _per_call_us(layer: Layer, config: Config, kp: KernelProblem, views: RowViews | None, splits: int,
                 coeff: Coefficients) -> list[float]:
    """What a call adds around the GEMM, term by term: copies, workspace resets, a second kernel,
    W's extra reads (and the views' tail), and the persistent scheduler a grid saves."""
    e = BYTES[layer.dtype]
    terms = []
    # A pitched copy reads and writes its bytes once. A caller's padded x needs none, but for
    # split-K's longer pitch.
    if kp.pad_k != layer.x_pitch and views is None:
        terms.append(coeff.copy_overhead_us + 2 * layer.m * layer.k * e / PEAK_BYTES_PER_S * 1e6)
    reduces = config.split_k and config.epilogue_schedule != "fixup"
    if kp.pad_n != layer.n and layer.output == "contiguous" and not reduces:  # the reduction writes y
        terms.append(coeff.copy_overhead_us + 2 * layer.m * layer.n * e / PEAK_BYTES_PER_S * 1e6)
    if config.tile_scheduler == "streamk":
        terms.append(coeff.copy_overhead_us)  # the workspace reset before every launch
        if splits > 1:
            terms.append(STREAMK_SPLIT_US * (splits - 1))
    if reduces:
        terms.append(coeff.copy_overhead_us + REDUCE_ROUND_US * reduce_rounds(layer.m, layer.n, splits))
    elif config.split_k:  # summed by the fixup epilogue
        terms.append(coeff.copy_overhead_us + FIXUP_SPLIT_US * (splits - 1))
    if views is not None:
        # Part of reading W's extra copies is not hidden under the mainloop.
        terms.append(VIEWS_UNHIDDEN * (views.count - 1) * kp.pad_n * views.k * e / PEAK_BYTES_PER_S * 1e6)
        if views.tail:  # a second kernel, which reads W once more
            terms.append(coeff.copy_overhead_us + kp.pad_n * views.k * e / PEAK_BYTES_PER_S * 1e6)
    if config.tile_scheduler == "grid":
        terms.append(-GRID_SAVING_US)
    return terms


# The shared feed: an SM's operand feed was one constant, so a layer's bandwidth grew with every
# CTA it ran. It does not: the SMs share L2's and DRAM's bandwidth, and decode's W streamed no
# faster with twice its 64 CTAs, each on half of K (studies/recorded/h200x2-2026-12-01-fixup/).
# With each SM's share of the totals, up to 1e11 B/s, DEFAULT orders recorded H200 batches better:
# within-layer Spearman 0.45 -> 0.55 on the 68 recordings of 2026-12-02/03 and 0.66 -> 0.77 on
# the 39 of 2026-12-04, and its top 4 holds a config within 2% of the fastest in 71% (was 56%)
# and 87% (74%) of them; CALIBRATED gains alike. On the five exhaustive recordings, the config it
# ranks first is still within 2% of the fastest, and decode's Spearman goes from 0.70 to 0.93
# (studies/scripts/model_shared_feed.py). Where all 132 SMs pull at once, nothing changed.

# No term for 160- and 224-wide tiles: they ran a median 1.25x slower than the model said on 33
# recorded configs (studies/recorded/h200-2026-12-01-unseen-mixed/) while CuTe split their WGMMA
# into 5 or 7 m64n32 instructions. With the extended shapes (codegen.EXTENDED_MMA_SHAPES) the same
# kernels took 2-26% less (median 18%), and the model ranks them without a term (Spearman 0.95,
# against 0.85 with the 1.25 it charged; studies/recorded/h200-2026-12-02-mma-shapes/).

# The share of row views' extra reads of W (its P - 1 more copies) that a call waits for. On 106
# recorded H200 configs of five layers measured both ways, the model then picks the faster of
# views and copy for 97 with either constant set, against 80 without the term; any share from
# 0.25 to 0.5 does (studies/recorded/h200-2026-12-01-views/, .../h200-2026-12-01-unseen-views/).
VIEWS_UNHIDDEN = 0.5

# The share of the nosmem epilogue's store time the direct one saves where D is column-major (its
# fast orientation): the bias loaded once, no load-to-store chain. On the H200, the unaligned
# layer's 4 best nosmem configs took 0.1-2.5 µs less with it in each of 8 pairs (f16 and bf16),
# median 1.3 µs of the 3 µs this model gives y's stores (studies/recorded/h200-2026-12-01-direct/).
DIRECT_STORE_SAVING = 0.4

# Each extra split of a stream-K tile: its partial written, waited for and read back by the CTA
# that finishes the tile. On the decode exhaustive recording the model put stream-K's split tiles
# at 0.69 of their measured time and persistent ones at 1.24; with 1 µs a split, within-layer
# Spearman on the five exhaustive recordings went from 0.867 to 0.886 (decode 0.67 to 0.70) and
# on the 21 calibration studies from 0.630 to 0.636 (0.656 to 0.665 with CALIBRATED).
STREAMK_SPLIT_US = 1.0

# The fixup epilogue saves the reduction kernel's launch, but each tile's last CTA waits for the
# other slices and reads their partials one after another. On 65 recorded H200 pairs of one
# kernel at one slice count, summed either way in one run, the fixup was a median 0.6 µs slower
# (0.2 µs in 2 slices, 2.6 µs in 16), where the model had put it 1.2 µs faster. Priced as that
# launch plus 0.2 µs a slice past the first, the model orders 45 of the 65 pairs as measured,
# against 24 (studies/scripts/model_fixup.py).
FIXUP_SPLIT_US = 0.2

# Each round of loads in one element's chain in the reduction kernel (templates/reduce.cuh: a
# lane's share of the slices, REDUCE_BATCH loads in flight at a time): about one L2 round trip.
# When the kernel summed an element's slices one after another, a round a slice, 0.15 µs fitted
# the H200's 7x9x100001 and 1x1x8192 in 2-128 slices (studies/recorded/h200-2026-12-03-tiny-out/
# split-k-padded/). Since, those layers and nine more tiny outputs take one round in any slice
# count, and the model picks a slice count a median within 3% of each config's fastest with any
# term from 0 to 1 µs (.../tiny-out/lanes/, .../h200-2026-12-03-heads/; studies/scripts/model_reduce_splits.py).
# Outputs too large for lanes have not been measured past 8 slices (two rounds).
REDUCE_ROUND_US = 0.15
REDUCE_BATCH = 8  # reduce.cuh's BATCH
REDUCE_LANE_THREADS = 1 << 15  # reduce.cuh's LANE_THREADS


def reduce_lanes(m: int, n: int, splits: int) -> int:
    """The lanes that share one element's slices in the reduction kernel (reduce.cuh's
    lanes_for): a power of two up to a warp, at most the slices, REDUCE_LANE_THREADS in all."""
    lanes = 1
    while lanes < 32 and lanes * 2 <= splits and m * n * lanes * 2 <= REDUCE_LANE_THREADS:
        lanes *= 2
    return lanes


def reduce_rounds(m: int, n: int, splits: int) -> int:
    """Rounds of loads in one element's chain: its lane's share of the slices, REDUCE_BATCH at a
    time."""
    return math.ceil(math.ceil(splits / reduce_lanes(m, n, splits)) / REDUCE_BATCH)

# One wave of a CTA a tile, without the persistent scheduler: the median of 12 measured pairs of
# H200 twins of decode and small_batch (0.22-0.69 µs, studies/recorded/h200x2-2026-12-01-ws/).
GRID_SAVING_US = 0.4


def builder_stages(config: Config, dtype: str) -> int:
    """The stages the CUTLASS builder fits when the config leaves them to it: what shared memory
    holds after the epilogue's part (StageCountAutoCarveout)."""
    stage = (config.tile_m + config.tile_n) * config.tile_k * BYTES[dtype] + 32  # operands and a barrier
    return max(2, (SMEM_BYTES - smem_bytes(config, dtype, 0)) // stage)


def best_knobs(layer: Layer, config: Config, grid: list[Knobs], coeff: Coefficients = DEFAULT) -> tuple[Knobs, float]:
    scored = [(predict_us(layer, config, k, coeff), i, k) for i, k in enumerate(grid)]
    t, _, k = min(scored)
    return k, t


def rank(layer: Layer, configs: list[Config], coeff: Coefficients = DEFAULT) -> list[tuple[float, Config]]:
    """Configs with predicted times, fastest first."""
    from cutsearch.space import knob_grid

    scored = [(best_knobs(layer, c, knob_grid(c, layer), coeff)[1], c) for c in configs]
    return sorted(scored, key=lambda s: (s[0], s[1].key))


# A config is pruned, never built, when both constant sets predict it at this many times their
# best prediction for the layer or slower. On the five exhaustive H200 recordings (2,231
# configs) every config within 2% of the measured best was within 1.27x by one of them.
PRUNE_RATIO = 2.0


def hopeless(layer: Layer, configs: list[Config], ratio: float = PRUNE_RATIO) -> set[str]:
    """Keys of the configs not worth a compile: the tail of both rankings."""
    tails = []
    for coeff in (CALIBRATED, DEFAULT):
        ranked = rank(layer, configs, coeff)
        if not ranked:
            return set()
        tails.append({c.key for t, c in ranked if t >= ratio * ranked[0][0]})
    return set.intersection(*tails)


# The kinds of config a new study's first batch always measures: the model knows least about
# stream-K, and about which sums split-K's slices faster, the fixup epilogue or the reduction
# kernel (each won by a microsecond or more on some recorded layer).
HEDGED = (lambda c: c.tile_scheduler == "streamk",
          lambda c: c.split_k and c.epilogue_schedule == "fixup",
          lambda c: c.split_k and c.epilogue_schedule != "fixup")


def warm_start(layer: Layer, configs: list[Config], count: int) -> list[Config]:
    """The first configs to build: the diverse tops of both rankings, interleaved."""
    # A hedge against the model's blind spots: the third list holds only one-kernel persistent
    # GEMMs with a TMA epilogue, the kinds it was calibrated on (it knows least about split-K and
    # about element-wise stores of unaligned rows).
    plain = [c for c in configs
             if c.tile_scheduler == "persistent" and c.epilogue_schedule not in ("nosmem", "direct") and not c.split_k]
    ranked = rank(layer, configs, CALIBRATED)
    picks = [diverse_top(ranked, count), diverse_top(rank(layer, configs, DEFAULT), count),
             diverse_top(rank(layer, plain or configs, DEFAULT), count)]
    merged: list[Config] = []
    for pair in zip(*picks):
        for c in pair:
            if c not in merged and len(merged) < count:
                merged.append(c)
    # The best config of each HEDGED kind takes the last places, which the interleaving may cut.
    hedges = [next((c for _, c in ranked if kind(c)), None) for kind in HEDGED]
    hedges = [c for c in hedges if c is not None][:max(1, count // 4)]
    if len(merged) == count:
        free = [i for i in reversed(range(count)) if merged[i] not in hedges]
        for c in (c for c in hedges if c not in merged):
            merged[free.pop(0)] = c
    return merged


def diverse_top(ranked: list[tuple[float, Config]], count: int, per_shape: int = 2) -> list[Config]:
    """The best `count` configs, at most `per_shape` per CTA tile and schedule.

    The model ties many near-identical configs; spreading the first batch over shapes makes
    the warm start robust to the model's errors.
    """
    picked: list[Config] = []
    seen: dict[tuple, int] = {}
    for _, c in ranked:
        group = (c.tile_m, c.tile_n, c.tile_k, c.kernel_schedule, c.tile_scheduler)
        if seen.get(group, 0) < per_shape:
            seen[group] = seen.get(group, 0) + 1
            picked.append(c)
            if len(picked) == count:
                break
    # The model is least sure about split-K: always let the best stream-K config be measured.
    streamk = next((c for _, c in ranked if c.tile_scheduler == "streamk"), None)
    if count >= 4 and streamk is not None and streamk not in picked:
        picked[-1:] = [streamk]
    return picked


def spearman(xs: list[float], ys: list[float]) -> float:
    """Rank correlation, for reporting how well the model orders measured kernels."""
    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(len(v)), key=v.__getitem__)
        r = [0.0] * len(v)
        for pos, idx in enumerate(order):
            r[idx] = float(pos)
        return r

    if len(xs) < 2:
        return float("nan")
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sx = math.sqrt(sum((a - mx) ** 2 for a in rx))
    sy = math.sqrt(sum((b - my) ** 2 for b in ry))
    return cov / (sx * sy) if sx and sy else float("nan")
