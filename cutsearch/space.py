"""The configuration space of SM90 CUTLASS GEMMs for one layer, and its validity rules.

A `Config` is what changes the binary (one compile). `Knobs` are run-time arguments of a
built kernel, searched on it without recompiling.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import math
from typing import Any, Iterator

from cutsearch.problem import BYTES, PEAK_BYTES_PER_S, Layer, alignment, pad_to

TILE_M = (64, 128, 256)
# N between the powers of two fills the SMs better where N is not a multiple of 128: on the H200,
# 4000x333x2048 went from 21.9 to 19.0 µs with 128x96 tiles, 3000x1001x999 from 32.2 to 30.2 µs
# with 256x96 (studies/recorded/h200x2-2026-11-30-tiles/). Other multiples of 16 are offered where
# they fill the waves of one layer (fitted_tile_n); 128x112 and 128x240 took 1.7-1.9x as long as
# their bases (studies/recorded/h200-2026-12-01-waves/) before CuTe's extended WGMMA shapes were on.
TILE_N = (16, 32, 64, 96, 128, 160, 192, 224, 256)
TILE_K = (32, 64, 128, 256)
CLUSTERS = ((1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4))
# What the default space searches; `Space(layer, tile_k=TILE_K, clusters=CLUSTERS)` searches all.
DEFAULT_TILE_K = (32, 64, 128)
DEFAULT_CLUSTERS = ((1, 1), (2, 1), (1, 2))
# "ws": CUTLASS's KernelTmaWarpSpecialized, one consumer warpgroup and one output tile a CTA,
# launched as a grid of all the tiles (tile scheduler "grid") rather than persistently.
KERNEL_SCHEDULES = ("auto", "pingpong", "cooperative", "ws")
# "fixup": split-K's slices summed by the GEMM's own epilogue, which then writes y (templates/epilogue.cuh).
EPILOGUE_SCHEDULES = ("auto", "tma", "nosmem", "staged", "direct", "fixup")
# Epilogues that store y with ordinary stores, so rows of any pitch: "nosmem" from the
# accumulators' layout, "staged" through shared memory, a row at a time, and "direct" from the
# accumulators' layout with the bias loaded once and the activation fused (templates/epilogue.cuh).
SIMT_EPILOGUES = ("nosmem", "staged", "direct")
STAGED_WARPS = 8  # the staged epilogue runs in cooperative kernels: 8 consumer warps store at once
TILE_SCHEDULERS = ("persistent", "streamk", "grid")
# Kernel schedule / epilogue schedule / tile scheduler: the combinations CUTLASS accepts on
# SM90, searched as one dimension so that the sampler never proposes a mismatched pair.
SCHEDULES = (
    "auto/auto/persistent",
    "pingpong/tma/persistent", "pingpong/nosmem/persistent", "pingpong/direct/persistent",
    "cooperative/tma/persistent", "cooperative/nosmem/persistent", "cooperative/staged/persistent",
    "cooperative/direct/persistent",
    "cooperative/tma/streamk", "cooperative/nosmem/streamk", "cooperative/staged/streamk",
    "cooperative/direct/streamk",
    "pingpong/fixup/persistent", "cooperative/fixup/persistent",
    # Where one wave of CTAs covers the output, the non-persistent kernel skips the persistent
    # scheduler: on the H200 each of 12 such configs of decode and small_batch was 0.2-0.7 µs
    # faster than its pingpong twin (studies/recorded/h200x2-2026-12-01-ws/).
    "ws/tma/grid", "ws/nosmem/grid", "ws/direct/grid",
    # Split-K on the same grid: the slices are more CTAs, with no persistent scheduler.
    "ws/fixup/grid",
)
STAGES = (0, 2, 3, 4, 5, 6, 7)  # 0: the CollectiveBuilder fits as many as shared memory allows
# The default space leaves the stage count to the CollectiveBuilder. In 64 recorded H200 pairs
# (the same config with explicit and with automatic stages) an explicit count never won by more
# than 0.6%, within a timing's noise, and the median pair lost 0.7%: the dimension multiplied
# the compiles, not the speed. `Space(layer, stages=STAGES)` searches it.
DEFAULT_STAGES = (0,)

# The gemv kernel (templates/gemv.cu), for a few rows of x: CUDA cores, a warp on `rows` rows of
# W, its lanes splitting K in 16-byte vectors with `loads` of each row in flight. As a Config, a
# block's tile: tile_m rows of x (M itself), tile_n = GEMV_WARPS x rows rows of W (a split block
# covers 1 / splits of them, GEMV_SPLITS), tile_k = 32 lanes x `loads` vectors of K. Where M <= 4
# and W is large, a probe of it read W at 88-97% of the streaming floor's speed on an H100,
# 1.09-1.21x F.linear; from M = 8 its fp32 arithmetic bound it, and CUTLASS's tiles ran faster
# (studies/recorded/h100-2026-12-06-skinny-probe/). In default searches on the H200 its best
# trial beat CUTLASS's by 6-19% on four layers of 1-3 rows; on 4x4096x4096 the two were within
# 2%, and the race chose it (studies/recorded/h200-2026-12-06-gemv/).
GEMV_MAX_M = 4
GEMV_WARPS = 8
# (rows, loads): each of these was a probe layer's fastest or within 1% of it; more than eight
# vectors in flight a lane never was.
GEMV_SHAPES = ((1, 2), (1, 4), (1, 8), (2, 2), (2, 4), (4, 2))
GEMV_PARAM = "gemv"  # the Optuna parameter of a gemv trial: its tile, "MxNxK"
# Warps that share a row's K, a run-time knob (Knobs.splits): where W has few rows, a warp a row
# left SMs without loads (2x512x3904: 64 blocks for 132 SMs, 12.96 µs against split-K
# CUTLASS's 9.78 on an H200). With 8 warps a row it took 7.50 µs against 13.23 on an H100, and
# 1.35x F.linear; where W has thousands of rows, splits lost 2-12%
# (studies/recorded/h100-2026-12-06-gemv-split/).
GEMV_SPLITS = (1, 2, 4, 8)
# With eight loads a lane in flight, a kernel whose warps share rows spilled registers (ptxas).
GEMV_SPLIT_MAX_LOADS = 4

SMEM_BYTES = 227 * 1024
SM_COUNT = 132
SPLITS = (2, 3, 4, 6, 8, 16, 32, 64, 128)  # K slices of a split-K config, a run-time knob
SPLITS_IN_ANY_WAVE = 16  # more slices than this only where all of them run in one wave


@dataclasses.dataclass(frozen=True, kw_only=True, order=True)
class Config:
    tile_m: int
    tile_n: int
    tile_k: int
    cluster_m: int = 1
    cluster_n: int = 1
    kernel_schedule: str = "auto"
    epilogue_schedule: str = "auto"
    stages: int = 0
    tile_scheduler: str = "persistent"
    swap_ab: bool = False
    pad: bool = False  # pad K and N (K alone with an epilogue of SIMT_EPILOGUES) to 16-byte rows for TMA
    # K split into slices on the batch dimension: more CTAs where the output tiles cannot fill the
    # SMs. With the TMA epilogue a second kernel sums the fp32 partials and adds the bias and
    # activation; with the fixup epilogue the last slice's CTA of each tile does.
    split_k: bool = False

    @property
    def gemv(self) -> bool:
        """The gemv kernel (templates/gemv.cu) rather than a CUTLASS GEMM."""
        return self.kernel_schedule == "gemv"

    @property
    def key(self) -> str:
        """Stable, human-readable identity: equal keys build equal binaries for one layer."""
        return (f"{self.tile_m}x{self.tile_n}x{self.tile_k}_c{self.cluster_m}x{self.cluster_n}"
                f"_{self.kernel_schedule}_{self.epilogue_schedule}_s{self.stages}_{self.tile_scheduler}"
                f"{'_swap' if self.swap_ab else ''}{'_pad' if self.pad else ''}{'_splitk' if self.split_k else ''}")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if not self.split_k:
            del d["split_k"]  # as recordings and exports made before split-K have it
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Config:
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in fields})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Knobs:
    raster: int = 0         # 0 heuristic, 1 along M, 2 along N
    swizzle: int = 1
    splits: int = 1
    decomposition: int = 0  # 0 heuristic, 1 data-parallel, 2 split-K, 3 stream-K
    reduction: int = 0      # 0 deterministic, 1 nondeterministic (split-K partials in any order)
    pdl: int = 0            # 1: the call's copies and GEMM overlap (programmatic dependent launch)
    views: int = 0          # 1: the GEMM reads unaligned x in place through row views (see RowViews)
    prefetch: int = 0       # 1: with pdl, the GEMM pulls W into L2 while it waits for the x copy
    own_copy: int = 0       # 1: the GEMM copies the rows of x each tile reads, no copy kernel

    def to_dict(self) -> dict[str, int]:
        d = dataclasses.asdict(self)
        for name in ("pdl", "views", "prefetch", "own_copy"):
            if not d[name]:
                del d[name]  # as recordings and exports made before the knob have it
        return d


@dataclasses.dataclass(frozen=True)
class KernelProblem:
    """The GEMM the kernel sees after the layer transforms."""

    m: int
    n: int
    k: int
    pad_n: int
    pad_k: int
    align_ab: int
    align_d: int


def kernel_problem(layer: Layer, config: Config) -> KernelProblem:
    vec = 16 // BYTES[layer.dtype]
    # A caller's padded x keeps its pitch, except where split-K copies it to a longer one. TMA
    # needs aligned pitches, not extents: N is padded only where it is y's row pitch.
    # The gemv kernel reads W in 16-byte rows and x as it lies.
    pad_k = pad_to(layer.k, vec) if config.pad or layer.input == "padded" or config.gemv else layer.k
    if config.split_k and config.pad and split_k_pads_k(layer):
        pad_k = split_k_pitch(layer.k, vec)  # a pitch that many slice counts cut
    transposed = layer.output == "transposed"
    # The SIMT epilogues store rows of any pitch: for them `pad` pads K alone,
    # since padding N would only add y's copy.
    pads_n = (config.pad and config.epilogue_schedule not in SIMT_EPILOGUES) or layer.output == "padded"
    pad_n = pad_to(layer.n, vec) if pads_n and not transposed else layer.n
    m, n = (pad_n, layer.m) if config.swap_ab else (layer.m, pad_n)
    # A and B are both K-major, so their alignment is K's; D's leading dimension is y's pitch.
    return KernelProblem(m=m, n=n, k=pad_k, pad_n=pad_n, pad_k=pad_k, align_ab=alignment(pad_k, layer.dtype),
                         align_d=alignment(layer.m if transposed else pad_n, layer.dtype))


def split_k_pitch(k: int, vec: int) -> int:
    """The row pitch of x and W for split-K where K is padded: a multiple of `slices` 16-byte
    vectors, the most slices (up to 128) whose padding costs at most 1/32 of K in zeros, so that
    every power of two up to them cuts K into 16-byte slices. Where K is such a multiple already,
    K itself."""
    slices = max(s for s in (1, *SPLITS) if s & (s - 1) == 0 and (s == 1 or s * vec * 32 <= k))
    return pad_to(k, slices * vec)


def k_slices(k: int, vec: int) -> int:
    """The most slices of SPLITS that cut K into whole 16-byte vectors (1: none)."""
    return max((s for s in SPLITS if k % (s * vec) == 0), default=1)


# 2x23x24512 won in 8 slices of its own K (2.05x, studies/recorded/h200-2026-12-03-heads/), with
# N padded and x not copied.
SPLIT_K_OWN_SLICES = 8


def split_k_pads_k(layer: Layer) -> bool:
    """Whether split-K's padded configs pad K to split_k_pitch: where x's rows are unaligned (x is
    copied anyway); where N is aligned (padding has nothing else to do); and where the 16-byte
    slices of x's pitch stop below SPLIT_K_OWN_SLICES (K = 5000 has none, 100000 four). Aligned
    rows, a caller's padded x among them, buy the pitch with a copy of x."""
    vec = 16 // BYTES[layer.dtype]
    return (layer.x_pitch % vec != 0 or layer.n % vec == 0
            or k_slices(layer.x_pitch, vec) < SPLIT_K_OWN_SLICES)


def smem_bytes(config: Config, dtype: str, stages: int) -> int:
    e = BYTES[dtype]
    mainloop = stages * (config.tile_m + config.tile_n) * config.tile_k * e
    if config.epilogue_schedule in ("nosmem", "direct", "fixup"):
        epilogue = 0
    elif config.epilogue_schedule == "staged":  # 16 rows of 40 floats a consumer warp
        epilogue = STAGED_WARPS * 16 * 40 * 4
    else:
        epilogue = min(config.tile_m, 64) * min(config.tile_n, 128) * 4
    return mainloop + epilogue + 1024


@functools.lru_cache(maxsize=256)  # invalid_reason asks for every config of a space
def fitted_tile_n(layer: Layer) -> tuple[int, ...]:
    """Tile widths off TILE_N that make the output tiles fill one or two waves of the SMs, for a
    tile height and an orientation, as cuBLAS's own kernels do (a 256x72 tile for 203x11008x14336:
    3 x 43 tiles on 132 SMs). Multiples of 16: CUTLASS 4.2 did not build 72- or 88-wide tiles."""
    widths = set()
    for rows, cols in ((layer.m, layer.n), (layer.n, layer.m)):  # y, and y^T when A and B swap
        for tile_m in TILE_M:
            for waves in (1, 2):
                across = waves * SM_COUNT // -(-rows // tile_m)
                if across:
                    widths.add(-(-cols // (16 * across)) * 16)
    return tuple(sorted(w for w in widths if 16 <= w <= 256 and w not in TILE_N))


def invalid_reason(layer: Layer, config: Config) -> str | None:
    """Why `config` cannot build or run for `layer`, from rules known before compiling.

    Rules learned by compiling are kept by the search in its study; these are the ones that
    hold for every layer. The first broken rule is named, in the order of the checks below.
    """
    found = _refusal(layer, config)
    return None if found is None else found[1]


def _refusal(layer: Layer, config: Config) -> tuple[int, str] | None:
    """The first broken rule: its place in the order of the checks, and its reason."""
    for place, reason in enumerate(_checks(layer, config)):
        if reason is not None:
            return place, reason
    return None


def _checks(layer: Layer, c: Config) -> Iterator[str | None]:
    """Each rule's reason or None, in order, lazily: a later check may assume the earlier held."""
    if c.gemv:
        yield _gemv_invalid(layer, c)
        return
    yield _outside_space(layer, c)
    yield _schedule_conflict(c)
    yield _over_resources(layer, c)
    kp = kernel_problem(layer, c)
    yield _misaligned(layer, c, kp)
    yield _epilogue_conflict(layer, c, kp)
    yield _split_k_invalid(layer, c, kp) if c.split_k else None
    yield _launch_invalid(layer, c, kp)


def gemv_config(layer: Layer, rows: int, loads: int) -> Config:
    vec = 16 // BYTES[layer.dtype]
    return Config(tile_m=layer.m, tile_n=GEMV_WARPS * rows, tile_k=32 * vec * loads, kernel_schedule="gemv",
                  epilogue_schedule="direct", tile_scheduler="grid")


def gemv_shape(config: Config, dtype: str) -> tuple[int, int]:
    """A gemv config's (rows, loads)."""
    return config.tile_n // GEMV_WARPS, config.tile_k // (32 * (16 // BYTES[dtype]))


def gemv_splits(loads: int) -> tuple[int, ...]:
    """How many warps may share a row's K in a gemv kernel of `loads` loads a lane."""
    return GEMV_SPLITS if loads <= GEMV_SPLIT_MAX_LOADS else (1,)


def gemv_unserved(layer: Layer) -> str | None:
    """Why the gemv kernel cannot serve this layer, or None where it can."""
    if layer.m > GEMV_MAX_M:
        return f"the gemv kernel serves at most {GEMV_MAX_M} rows of x"
    return None


def gemv_loads(layer: Layer) -> int:
    """The most loads a lane of the gemv kernel needs in flight: the fewest, a power of two, that
    cover K's vectors in one pass of a warp. More read x and multiply it by W's zeros, the whole
    pass whatever K is (4x13632x187: 19.7, 32.1 and 74.9 µs for 2, 4 and 8 loads,
    studies/recorded/h100-2026-12-06-gemv-split/random0.json)."""
    vectors = -(-layer.k * BYTES[layer.dtype] // 16)
    return 1 << (-(-vectors // 32) - 1).bit_length()


def gemv_configs(layer: Layer) -> tuple[Config, ...]:
    """The gemv kernel's configs for this layer: none where it cannot serve it. Where K is
    short, a shape's loads are cut to those K needs (gemv_loads)."""
    if gemv_unserved(layer) is not None:
        return ()
    most = gemv_loads(layer)
    shapes = dict.fromkeys((rows, min(loads, most)) for rows, loads in GEMV_SHAPES)
    return tuple(gemv_config(layer, rows, loads) for rows, loads in shapes)


def _gemv_invalid(layer: Layer, c: Config) -> str | None:
    if (unserved := gemv_unserved(layer)) is not None:
        return unserved
    if c not in gemv_configs(layer):
        return f"gemv tile {c.tile_m}x{c.tile_n}x{c.tile_k} is outside the space"
    return None


def _outside_space(layer: Layer, c: Config) -> str | None:
    if c.tile_m not in TILE_M or c.tile_n not in TILE_N + fitted_tile_n(layer) or c.tile_k not in TILE_K:
        return f"CTA tile {c.tile_m}x{c.tile_n}x{c.tile_k} is outside the space"
    if (c.cluster_m, c.cluster_n) not in CLUSTERS:
        return f"cluster {c.cluster_m}x{c.cluster_n} is outside the space"
    if c.kernel_schedule not in KERNEL_SCHEDULES or c.epilogue_schedule not in EPILOGUE_SCHEDULES:
        return "unknown schedule"
    if c.tile_scheduler not in TILE_SCHEDULERS:
        return f"unknown tile scheduler {c.tile_scheduler!r}"
    return None


def _schedule_conflict(c: Config) -> str | None:
    if (c.kernel_schedule == "auto") != (c.epilogue_schedule == "auto"):
        return "kernel and epilogue schedules must both be auto or both explicit"
    if c.kernel_schedule == "cooperative" and c.tile_m < 128:
        return "the cooperative schedule splits the CTA tile's M over two warpgroups: tile M must be >= 128"
    if c.kernel_schedule == "pingpong" and c.tile_m > 128:
        return "the pingpong schedule gives each warpgroup a whole tile: tile M must be <= 128"
    if c.tile_scheduler == "streamk" and c.kernel_schedule != "cooperative":
        return "the stream-K tile scheduler needs the cooperative kernel schedule"
    if (c.kernel_schedule == "ws") != (c.tile_scheduler == "grid"):
        return "the ws kernel schedule, and only it, launches a grid of all the tiles"
    if c.kernel_schedule == "ws" and c.tile_m > 128:
        return "the ws schedule gives one warpgroup the whole tile: tile M must be <= 128"
    if c.kernel_schedule == "ws" and c.epilogue_schedule not in ("tma", "nosmem", "direct", "fixup"):
        return "the ws schedule takes the TMA, the nosmem, the direct or the fixup epilogue"
    return None


def _warpgroups(c: Config) -> int:
    """Consumer warpgroups that share the accumulator: cooperative splits the tile over two;
    pingpong and ws give each one a whole tile."""
    return 2 if c.kernel_schedule == "cooperative" or (c.kernel_schedule == "auto" and c.tile_m >= 128) else 1


def _over_resources(layer: Layer, c: Config) -> str | None:
    if c.tile_m * c.tile_n > 128 * 128 * _warpgroups(c):
        return f"a {c.tile_m}x{c.tile_n} fp32 accumulator needs over 128 registers a thread in each warpgroup"
    if c.tile_n * c.tile_k * BYTES[layer.dtype] < 1024 or c.tile_m * c.tile_k * BYTES[layer.dtype] < 1024:
        return "operand tile below 1 KiB cannot use the 128-byte TMA swizzle"
    if c.stages and smem_bytes(c, layer.dtype, c.stages) > SMEM_BYTES:
        return f"{c.stages} stages need {smem_bytes(c, layer.dtype, c.stages) // 1024} KiB of shared memory, over 227 KiB"
    if smem_bytes(c, layer.dtype, c.stages or 2) > SMEM_BYTES:
        return "fewer than two stages fit in shared memory"
    return None


def _misaligned(layer: Layer, c: Config, kp: KernelProblem) -> str | None:
    vec = 16 // BYTES[layer.dtype]
    if kp.align_ab < vec:
        return f"K={kp.k} gives {kp.align_ab * BYTES[layer.dtype]}-byte rows; the TMA mainloop needs 16 (pad)"
    if kp.align_d < vec and c.epilogue_schedule not in SIMT_EPILOGUES:
        if layer.output == "transposed":
            return f"M={layer.m} gives unaligned rows of y^T: only the nosmem, staged or direct epilogue stores them"
        return f"N={kp.pad_n} gives unaligned output rows: only the nosmem, staged or direct epilogue stores them (or pad)"
    if c.pad and kernel_problem(layer, dataclasses.replace(c, pad=False)) == kp:
        return "padding is a no-op for this layer"
    return None


def _epilogue_conflict(layer: Layer, c: Config, kp: KernelProblem) -> str | None:
    fused = layer.bias or layer.activation != "none"
    if c.kernel_schedule == "auto" and fused:
        return "the fused bias/activation (epilogue visitor tree) needs an explicit TMA epilogue schedule"
    if c.epilogue_schedule == "nosmem" and layer.activation != "none":
        return "the fused activation (epilogue visitor tree) needs the TMA epilogue"
    if c.epilogue_schedule == "staged" and c.kernel_schedule != "cooperative":
        # On the H200 every pingpong kernel with it that a search built spilled registers.
        return "the staged epilogue needs the cooperative schedule (under pingpong it spills registers)"
    if (c.epilogue_schedule == "staged" and layer.activation == "gelu" and not c.swap_ab
            and (c.tile_m, c.tile_n) == (256, 96)):
        # ptxas (nvcc 13.0): 56-84 bytes of spills in each such build (f16 and bf16, with and
        # without a bias, k-tiles 32 and 64), and 176 in a search on the H200 (1x2 cluster); none
        # swapped, with SiLU, or on the other tiles (studies/recorded/local-2026-12-02-gelu-spills-2/).
        return "the staged epilogue with GELU on an unswapped 256x96 tile spills registers"
    if c.epilogue_schedule in SIMT_EPILOGUES and kp.align_d == 16 // BYTES[layer.dtype]:
        return f"the {c.epilogue_schedule} epilogue only serves unaligned output rows; the TMA epilogue is faster"
    if c.epilogue_schedule == "fixup" and not c.split_k:
        return "the fixup epilogue sums split-K slices: it needs split-K"
    # The accumulator takes all 128 registers a thread it may: an epilogue that needs many more spills.
    if c.epilogue_schedule == "fixup" and c.tile_m * c.tile_n == 128 * 128 * _warpgroups(c):
        # ptxas (nvcc 13.0): 940-1928 bytes of spills for each of 128x128, 64x256 (pingpong),
        # 128x256 and 256x128 (cooperative); none for 64x192 pingpong.
        return "the fixup epilogue beside 128 accumulator registers a thread spills registers"
    if (c.epilogue_schedule == "fixup" and c.swap_ab and c.kernel_schedule == "pingpong"
            and (c.tile_m, c.tile_n) == (128, 96)):
        # ptxas (nvcc 13.0): 408-436 bytes of spills in every such build, whatever the cluster,
        # dtype or fused epilogue; none for 64x192 pingpong or 256x96 cooperative swapped
        # (studies/recorded/local-2026-12-02-fixup-spills/).
        return "the fixup epilogue on a swapped 128x96 pingpong tile spills registers"
    if (layer.activation in ("gelu", "silu") and c.epilogue_schedule == "tma" and c.kernel_schedule == "pingpong"
            and (c.tile_m, c.tile_n) == (64, 224)):
        # ptxas (nvcc 13.0): 8-12 bytes of spills in 4 of the 8 such builds of a survey, with GELU
        # or SiLU, after a bias or not, either orientation; no other TMA tile spilled, 128
        # accumulator registers a thread included (studies/recorded/local-2026-12-02-gelu-spills-2/).
        return "a fused GELU or SiLU on a 64x224 pingpong tile spills registers"
    if (layer.dtype == "f16" and layer.bias and layer.activation == "silu" and c.epilogue_schedule == "tma"
            and c.kernel_schedule == "cooperative" and c.tile_scheduler == "persistent" and c.swap_ab
            and (c.tile_m, c.tile_n) == (128, 224)):
        # ptxas (nvcc 13.0): 8 bytes of spills in each such build, whatever the cluster or k-tile;
        # none in the other 31 ways of building that tile with a fused activation: the other dtype,
        # no bias, GELU, stream-K, unswapped (studies/recorded/local-2026-12-06-wide-cooperative-spills/).
        return "a bias and SiLU in f16 on a swapped 128x224 cooperative tile spills registers"
    return None


def _launch_invalid(layer: Layer, c: Config, kp: KernelProblem) -> str | None:
    if c.kernel_schedule == "ws":
        slices = min(k_splits(c, kp, layer.dtype)) if c.split_k else 1
        if (ctas := output_ctas(kp, c) * slices) > SM_COUNT:
            what = f"{ctas} tiles" if slices == 1 else f"{ctas} tiles and slices"
            return (f"the ws schedule launches a CTA a tile: {what} are more than one wave of {SM_COUNT} SMs, "
                    "which the persistent schedules serve")
    if -(-kp.m // c.tile_m) < c.cluster_m:
        return "cluster along M is larger than the problem"
    if -(-kp.n // c.tile_n) < c.cluster_n:
        return "cluster along N is larger than the problem"
    return None


def output_ctas(kp: KernelProblem, config: Config) -> int:
    """The CTAs that cover the output once, one tile each; a partial cluster launches whole."""
    tiles_m, tiles_n = -(-kp.m // config.tile_m), -(-kp.n // config.tile_n)
    return (-(-tiles_m // config.cluster_m) * config.cluster_m) * (-(-tiles_n // config.cluster_n) * config.cluster_n)


def split_k_helps(layer: Layer) -> bool:
    """Split-K is searched where the output holds less than one 128x128 tile per SM: only
    there do its output tiles leave SMs idle."""
    return layer.m * layer.n < SM_COUNT * 128 * 128


SPLIT_K_MIN_K = 1024  # below it each slice's mainloop is too short to pay for the split
SPLIT_K_LONG_K = 7680  # between the H200's longest losing K (7424) and shortest winning one (7936)


def split_k_pays(layer: Layer) -> bool:
    """Split-K is searched by default where K is long and even 64x32 tiles, in either
    orientation, would give at most a quarter of the SMs a tile: one kernel cannot then stream W
    fast enough. On the H200, 32x512x16384 went from 23.3 µs in one kernel to 15.0 µs in four
    slices, while decode (64 such tiles swapped, 128 direct) gained nothing
    (studies/recorded/h200x2-2026-12-01-fixup/). Up to half the SMs it pays only where K is very
    long: on the ws grid it won on 298x384x7936 (best trial 4% faster) and 128x1024x8192 (export
    8% faster), and lost 3-19% on five layers with K of 4096-7424
    (studies/recorded/h200-2026-12-03-split-k-band/, h200-2026-12-03-split-k-gap/). Past half, on
    200x640x10240, its best config lost 24% in a search and 15% when split by hand at the best
    one-kernel tile (h200-2026-12-02-split-k-fixed/, h200-2026-12-03-split-k-wide/)."""
    tiles = max(-(-layer.m // 64) * -(-layer.n // 32), -(-layer.n // 64) * -(-layer.m // 32))
    if not split_k_helps(layer) or layer.k < SPLIT_K_MIN_K:
        return False
    return tiles <= SM_COUNT // 4 or (tiles <= SM_COUNT // 2 and layer.k >= SPLIT_K_LONG_K)


def k_splits(config: Config, kp: KernelProblem, dtype: str) -> tuple[int, ...]:
    """The slice counts that cut K into 16-byte-aligned slices of at least two k-tiles; past
    SPLITS_IN_ANY_WAVE, only where the slices of all output tiles run at once."""
    vec = 16 // BYTES[dtype]
    return tuple(s for s in SPLITS if kp.k % (s * vec) == 0 and kp.k // s >= 2 * config.tile_k
                 and (s <= SPLITS_IN_ANY_WAVE or output_ctas(kp, config) * s <= SM_COUNT))


def _split_k_invalid(layer: Layer, c: Config, kp: KernelProblem) -> str | None:
    if not split_k_helps(layer):
        return "split-K only where the output holds less than one 128x128 tile per SM"
    if c.tile_scheduler not in ("persistent", "grid") or c.epilogue_schedule not in ("tma", "fixup"):
        return ("split-K runs on the persistent scheduler or the ws grid, with the TMA epilogue and a reduction "
                "kernel or with the fixup epilogue (stream-K splits on its own)")
    if layer.output == "transposed":
        return "split-K's reduction writes y in rows, not y^T"
    if c.epilogue_schedule == "fixup" and (kp.pad_k != layer.k or kp.pad_n != layer.n):
        return "split-K's fixup epilogue needs K and N in 16-byte rows (the reduction kernel pads)"
    if not k_splits(c, kp, layer.dtype):
        return f"K={kp.k} has no split into 16-byte slices of two {c.tile_k}-wide k-tiles or more"
    return None


def knob_grid(config: Config, layer: Layer) -> list[Knobs]:
    """Run-time variants measured on each built kernel: the search's second level."""
    if config.gemv:
        # Splits that leave each of a row's warps a pass of K (the rest is compiled in).
        passes = -(-kernel_problem(layer, config).pad_k // config.tile_k)
        return [Knobs(splits=s) for s in gemv_splits(gemv_shape(config, layer.dtype)[1]) if s <= passes]
    kp = kernel_problem(layer, config)
    grid = [Knobs(raster=r, swizzle=s) for r in (1, 2) for s in (1, 2, 4, 8)]
    if config.tile_scheduler == "streamk":
        k_tiles = -(-kp.k // config.tile_k)
        grid = [Knobs(raster=r, swizzle=1, decomposition=3) for r in (1, 2)]
        grid += [Knobs(raster=r, swizzle=1, decomposition=1) for r in (1, 2)]
        grid += [Knobs(raster=r, swizzle=1, splits=s, decomposition=2, reduction=red)
                 for r in (1, 2) for s in (2, 3, 4, 8, 16) if s <= k_tiles for red in (0, 1)]
    if config.split_k:
        grid = [Knobs(raster=r, swizzle=sw, splits=s) for r in (1, 2) for sw in (1, 4)
                for s in k_splits(config, kp, layer.dtype)]
    if config.tile_scheduler == "grid":
        # The grid is the tiles in order, nothing to raster or swizzle; split-K's slices multiply
        # its CTAs, up to one wave.
        grid = ([Knobs(splits=s) for s in k_splits(config, kp, layer.dtype) if output_ctas(kp, config) * s <= SM_COUNT]
                if config.split_k else [Knobs()])
    if views_apply(layer, config):
        grid += [dataclasses.replace(k, views=1) for k in grid]
    # Launch overlap matters only between kernels of one call: a copy, the split-K reduction
    # kernel or the views' tail, and the GEMM.
    reduces = config.split_k and config.epilogue_schedule != "fixup"
    tail = (views := row_views(layer)) is not None and views.tail > 0
    grid += [dataclasses.replace(k, pdl=1) for k in grid if copies(layer, kp, k) or reduces or (k.views and tail)]
    # The GEMM waits for the copy of x only where it is launched early, and only kernels without a
    # workspace of their own are (stream-K's and the fixup's counters are reset in between).
    waits = config.tile_scheduler != "streamk" and config.epilogue_schedule != "fixup"
    grid += [dataclasses.replace(k, prefetch=1) for k in grid if k.pdl and waits and copies_x(layer, kp, k)]
    if own_copy_applies(layer, config):
        grid += [dataclasses.replace(k, own_copy=1) for k in grid if not (k.pdl or k.views)]
    return grid


def own_copy_built(config: Config) -> bool:
    """Whether the kernel is built able to copy x itself (templates/mainloop.cuh): the ws kernel,
    whose producer calls the mainloop once and has no register cap, in a cluster where one
    operand's stage buffers receive no other CTA's loads, to stage x in."""
    return config.kernel_schedule == "ws" and (config.cluster_m == 1 or config.cluster_n == 1)


def own_copy_applies(layer: Layer, config: Config) -> bool:
    """Whether the GEMM may copy x itself in place of the copy kernel: a kernel built for it, not
    under split-K, and only where the rows of x a tile reads are a few one warp copies, written
    by a few CTAs (every tile along W's rows writes the same ones).

    The kernels can copy a slice's columns under split-K too (through the C ABI's flag), but on
    the H200 it lost to the copy kernel in all 11 pairs of 475x64x3961 and 8x512x12001, by
    2.7-21.6 µs, with the rows' unaligned ends loaded in batches
    (studies/recorded/h200-2026-12-04-own-copy-split-k/)."""
    kp = kernel_problem(layer, config)
    if not copies_x(layer, kp) or not own_copy_built(config) or config.split_k:
        return False
    tile_bytes, writers = own_copy_load(layer, config, layer.k)
    return tile_bytes <= OWN_COPY_MAX_BYTES and writers <= OWN_COPY_MAX_WRITERS


def own_copy_load(layer: Layer, config: Config, columns: int) -> tuple[int, int]:
    """What the GEMM's own copy of x costs a CTA: the bytes it copies (its tile's rows, `columns`
    of each), and the CTAs that write each of those rows (every tile along W's rows)."""
    kp = kernel_problem(layer, config)
    rows = min(config.tile_n if config.swap_ab else config.tile_m, layer.m)
    writers = math.ceil(kp.pad_n / (config.tile_m if config.swap_ab else config.tile_n))
    return rows * columns * BYTES[layer.dtype], writers


# A tile's rows of x, at most. 16 rows of 700 (22.4 KB) were 6.5 µs slower than the copy kernel
# on the H200 (studies/recorded/h200-2026-12-04-own-copy-split-k/).
OWN_COPY_MAX_BYTES = 16 << 10
# On the H200, with 3 and 19 CTAs writing each row of x the GEMM's own copy was 0.0-1.4 µs faster
# than the best call with a copy kernel; with 107 and 131 it was 1.7-2.2 µs slower: the writes of
# the same bytes queue (studies/recorded/h200-2026-12-04-own-copy/).
OWN_COPY_MAX_WRITERS = 32


def copies_x(layer: Layer, kp: KernelProblem, knobs: Knobs | None = None) -> bool:
    """Whether a CUTLASS kernel's call copies x into a padded buffer before the GEMM (a caller's
    padded x only to split-K's pitch). The gemv kernel reads x in place."""
    return kp.pad_k != layer.x_pitch and not (knobs and knobs.views)


def copies(layer: Layer, kp: KernelProblem, knobs: Knobs | None = None) -> bool:
    """Whether a call copies x into a padded buffer or y out of one, beside the GEMM."""
    return copies_x(layer, kp, knobs) or (kp.pad_n != layer.n and layer.output == "contiguous")


@dataclasses.dataclass(frozen=True)
class RowViews:
    """x read in place, without its per-call copy, where its rows are not 16-byte aligned.

    Row r of x starts r * K elements in. Rows i, i + P, i + 2P, ... (view i) are P * K apart,
    a 16-byte multiple. View i is read from the 16-byte boundary at or below its first row,
    i * (K - q) elements in (q = K mod the 16-byte vector), so each of its rows arrives shifted
    right by s_i = i * q elements, with the previous row's tail in front and the next row's
    head behind. W' holds P copies of W, copy i shifted right by s_i with zeros around it, so
    view i times W'_i is exactly rows i, i + P, ... of x @ W^T (the neighbours' elements meet
    zeros; x must be finite). The kernel runs the P views as a batch of M / P rows each, with
    K' = K + (P - 1) q, a vector multiple, so the last view's last row ends where P * (M / P)
    rows of x end. Where P does not divide M, a second kernel computes the last M mod P rows
    (the tail) against copy 0 of W', which is W itself at pitch K' (templates/tail.cuh).

    Where M = 1, x's one row has no pitch to align: one view, K' = K, against W as it is. The
    kernel's K stops where x ends and TMA fills the rest of the last k-block with zeros, so
    nothing past x is read (and x need not be finite).
    """

    count: int   # P: views, the batch of the kernel
    shift: int   # q: each view's rows start q elements further right than the previous view's
    k: int       # K': the kernel's K, W' rows
    tail: int = 0  # M mod P: x's last rows, computed beside the views' batch

    def shifts(self) -> tuple[int, ...]:
        return tuple(i * self.shift for i in range(self.count))


def row_views(layer: Layer) -> RowViews | None:
    """The views that read this layer's x in place, or None where its rows are aligned, x comes
    padded, y is y^T (a view's rows of y^T are not unit-stride), or 1 < M < P (no whole view)."""
    vec = 16 // BYTES[layer.dtype]
    q = layer.k % vec
    if not q or layer.input != "contiguous" or layer.output == "transposed":
        return None
    if layer.m == 1:
        return RowViews(count=1, shift=q, k=layer.k)
    count = vec // math.gcd(layer.k, vec)
    if layer.m < count:
        return None
    return RowViews(count=count, shift=q, k=layer.k + (count - 1) * q, tail=layer.m % count)


def transforms(layer: Layer, config: Config, knobs: dict[str, int]) -> dict[str, Any]:
    """The layer transforms a measured kernel applies (`knobs` as its measurement records them)."""
    kp = kernel_problem(layer, config)
    out: dict[str, Any] = {"swap_ab": config.swap_ab, "pad_n": kp.pad_n, "pad_k": kp.pad_k}
    views = applied_views(layer, config, bool(knobs.get("views")))
    if views is not None:
        out["x_views"] = dataclasses.asdict(views)
    return out


def applied_views(layer: Layer, config: Config, requested: bool) -> RowViews | None:
    """The views a call of this config reads x through, where its knobs ask for them."""
    return row_views(layer) if requested and views_apply(layer, config) else None


def views_apply(layer: Layer, config: Config) -> bool:
    """Whether the views may replace this config's copy of x: not under split-K's batch, and
    only where reading W's extra copies could take at most VIEWS_MAX_COST times as long as the
    copy (its launch, and its bytes read and written once), at the H200's bandwidth. With a
    tail, its launch and its read of W count too, against TAIL_MAX_COST."""
    kp = kernel_problem(layer, config)
    views = row_views(layer)
    if kp.pad_k == layer.k or config.split_k or views is None or config.gemv:
        return False
    e = BYTES[layer.dtype]
    extra_us = (views.count - 1) * kp.pad_n * views.k * e / PEAK_BYTES_PER_S * 1e6
    copy_us = COPY_LAUNCH_US + 2 * layer.m * layer.k * e / PEAK_BYTES_PER_S * 1e6
    if views.tail:
        extra_us += COPY_LAUNCH_US + kp.pad_n * views.k * e / PEAK_BYTES_PER_S * 1e6
        return extra_us <= TAIL_MAX_COST * copy_us
    return extra_us <= VIEWS_MAX_COST * copy_us


VIEWS_MAX_COST = 4
# On an H100, in one run, the views with a tail beat the copy of x on the two layers of six where
# this ratio was 0.79 and 1.05 (by 2.3-2.9 µs), and lost by 6-16 µs where it was 1.10-2.39: the
# line lies between (studies/recorded/h100-2026-12-05-view-tails/). On the H200 the two won again,
# by 2.9 µs (studies/recorded/h200-2026-12-05-tails-kept/).
TAIL_MAX_COST = 1.075
COPY_LAUNCH_US = 2.0  # a copy kernel's launch and drain beside the GEMM (the model's copy_overhead_us)


def unserved_line(reason: str) -> str:
    """What a search, `show` and the report say of a layer that `Space.unserved` gives a reason for."""
    return f"no kernel of the space searched can compute this layer ({reason}): nothing to search, an export calls cuBLAS"


@dataclasses.dataclass(frozen=True)
class Space:
    """The choices of each dimension, for one layer. The search samples from these."""

    layer: Layer
    tile_m: tuple[int, ...] = TILE_M
    tile_n: tuple[int, ...] | None = None  # default: TILE_N and the layer's fitted_tile_n
    tile_k: tuple[int, ...] = DEFAULT_TILE_K
    clusters: tuple[tuple[int, int], ...] = DEFAULT_CLUSTERS
    schedules: tuple[str, ...] = SCHEDULES
    stages: tuple[int, ...] = DEFAULT_STAGES
    swap_ab: tuple[bool, ...] = (False, True)
    pad: tuple[bool, ...] | None = None  # default: (False, True) where the layer is unaligned or split-K pads K
    # (False, True): also split-K, where split_k_helps. None: where split_k_pays.
    split_k: tuple[bool, ...] | None = None
    gemv: bool = True  # also the gemv kernel's configs, where it serves the layer (gemv_configs)

    def dimensions(self) -> dict[str, tuple[Any, ...]]:
        vec = 16 // BYTES[self.layer.dtype]
        # Slices cut x's own pitch or split-K's, to which a padded config copies x.
        cut = (self.layer.input == "contiguous"
               or max(k_slices(self.layer.x_pitch, vec), k_slices(split_k_pitch(self.layer.k, vec), vec)) > 1)
        offered = cut and self.layer.output != "transposed" and split_k_helps(self.layer)
        wanted = self.split_k if self.split_k is not None else (False, True) if split_k_pays(self.layer) else (False,)
        split = tuple(v for v in wanted if offered or not v) or (False,)
        # Padding is offered where rows are unaligned, and where split-K would copy x to its pitch.
        pitched = (True in split and split_k_pads_k(self.layer)
                   and split_k_pitch(self.layer.k, vec) != self.layer.x_pitch)
        aligned = self.layer.x_pitch % vec == 0 and self.layer.n % vec == 0 and not pitched
        pad = self.pad if self.pad is not None else ((False,) if aligned else (False, True))
        # The fixup epilogue exists only for split-K: without it, its schedules are dead choices.
        schedules = self.schedules if True in split else tuple(s for s in self.schedules if "/fixup/" not in s)
        tile_n = self.tile_n if self.tile_n is not None else tuple(sorted(TILE_N + fitted_tile_n(self.layer)))
        return {
            "tile_m": self.tile_m, "tile_n": tile_n, "tile_k": self.tile_k,
            "cluster": tuple(f"{m}x{n}" for m, n in self.clusters),
            "schedule": schedules, "stages": self.stages, "swap_ab": self.swap_ab, "pad": pad,
            "split_k": split,
        }

    def gemv_configs(self) -> tuple[Config, ...]:
        """The gemv kernel's configs. Not sampled: a study measures each of them once, first."""
        return gemv_configs(self.layer) if self.gemv else ()

    @staticmethod
    def config_from_params(params: dict[str, Any]) -> Config:
        if GEMV_PARAM in params:
            tm, tn, tk = (int(v) for v in str(params[GEMV_PARAM]).split("x"))
            return Config(tile_m=tm, tile_n=tn, tile_k=tk, kernel_schedule="gemv", epilogue_schedule="direct",
                          tile_scheduler="grid")
        cm, cn = (int(v) for v in str(params["cluster"]).split("x"))
        kernel, epilogue, scheduler = str(params["schedule"]).split("/")
        return Config(tile_m=params["tile_m"], tile_n=params["tile_n"], tile_k=params["tile_k"],
                      cluster_m=cm, cluster_n=cn, kernel_schedule=kernel, epilogue_schedule=epilogue,
                      stages=params["stages"], tile_scheduler=scheduler, swap_ab=params["swap_ab"],
                      pad=params["pad"], split_k=params.get("split_k", False))

    @staticmethod
    def params_from_config(config: Config) -> dict[str, Any]:
        if config.gemv:
            return {GEMV_PARAM: f"{config.tile_m}x{config.tile_n}x{config.tile_k}"}
        return {"tile_m": config.tile_m, "tile_n": config.tile_n, "tile_k": config.tile_k,
                "cluster": f"{config.cluster_m}x{config.cluster_n}",
                "schedule": f"{config.kernel_schedule}/{config.epilogue_schedule}/{config.tile_scheduler}",
                "stages": config.stages, "swap_ab": config.swap_ab, "pad": config.pad, "split_k": config.split_k}

    def unserved(self) -> str | None:
        """Why no config of the space can compute its layer, or None where one can: the rules
        that refused the configs that passed the most checks, most frequent first."""
        if self.gemv_configs():
            return None
        dims = self.dimensions()
        furthest, reasons = -1, collections.Counter()
        for values in itertools.product(*dims.values()):
            found = _refusal(self.layer, self.config_from_params(dict(zip(dims, values))))
            if found is None:
                return None
            place, reason = found
            if place > furthest:
                furthest, reasons = place, collections.Counter()
            if place == furthest:
                reasons[reason] += 1
        return "; ".join(reason for reason, _ in reasons.most_common(3))

    def __iter__(self) -> Iterator[Config]:
        """Every valid config, in a fixed order (exhaustive runs and model ranking)."""
        dims = self.dimensions()
        for values in itertools.product(*dims.values()):
            config = self.config_from_params(dict(zip(dims, values)))
            if invalid_reason(self.layer, config) is None:
                yield config
