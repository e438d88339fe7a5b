"""A second opinion on the ranking: NVIDIA's nvMatmulHeuristics, when it is installed.

    pip install nvidia-matmul-heuristics

It needs no GPU: it is given the H200's predefined hardware descriptor and its CUTLASS 3
(SM90) target, and it estimates the run time of a CTA tile and cluster on the GEMM the kernel
sees (after swapping A/B and padding). It does not see what else cutsearch searches: the
kernel and epilogue schedules, stages, stream-K, the fused bias/activation, or the per-call
copies of padding, so configs that differ only there tie. Its numbers are estimates, never
measurements; the comparison with recordings reports rank correlations only.

The package is optional and imported lazily: nothing else in cutsearch needs it.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import math
from typing import Any, Sequence

from cutsearch import model
from cutsearch.errors import EnvironmentProblem
from cutsearch.outcome import Measurement
from cutsearch.problem import Layer
from cutsearch.space import SMEM_BYTES, Config, invalid_reason, kernel_problem, knob_grid, smem_bytes

PACKAGE = "nvidia-matmul-heuristics"
PRECISION = {"f16": "HSH", "bf16": "TST"}  # A/B type, fp32 compute, C/D type
TARGET_CUTLASS3 = 4                        # NVMMH_TARGET_CUTLASS3: SM90 warp-specialized kernels
METRICS = {"runtime": 0, "relative": 14}   # NVMMH_METRIC_RUNTIME_S, _RUNTIME_RELATIVE_FAST_S
INSTR = (64, 8, 16)                        # the wgmma shape the library itself reports for SM90


class HeuristicsUnavailable(EnvironmentProblem):
    """nvidia-matmul-heuristics is not installed, or it refused this machine."""


@functools.cache
def _module():
    try:
        import nvMatmulHeuristics
    except ImportError as exc:
        raise HeuristicsUnavailable(f"the second opinion needs `pip install {PACKAGE}` ({exc})") from None
    return nvMatmulHeuristics


def available() -> bool:
    try:
        _module()
    except HeuristicsUnavailable:
        return False
    return True


def _stages(config: Config, dtype: str) -> int:
    """The stages the kernel has: as configured, or as many as the builder fits."""
    if config.stages:
        return config.stages
    fits = [s for s in range(2, 9) if smem_bytes(config, dtype, s) <= SMEM_BYTES]
    return max(fits, default=2)


class Heuristics:
    """Estimates of nvMatmulHeuristics for cutsearch configs, on a predefined GPU."""

    def __init__(self, *, gpu: str = "H200_SXM", metric: str = "relative") -> None:
        nv = _module()
        if metric not in METRICS:
            raise HeuristicsUnavailable(f"unknown metric {metric!r}: choose one of {', '.join(METRICS)}")
        try:
            device = nv.NvMatmulHeuristicsNvidiaGpu[gpu]
        except KeyError:
            known = ", ".join(g.name for g in nv.NvMatmulHeuristicsNvidiaGpu if g.name != "END")
            raise HeuristicsUnavailable(f"nvMatmulHeuristics knows no GPU {gpu!r}: choose one of {known}") from None
        try:
            self._h = nv.NvMatmulHeuristicsInterfaceEx(backend=TARGET_CUTLASS3, flags=nv.NvMatmulHeuristicsFlags.NONE,
                                                       gpu=device)
            self._backend = self._h.createBackend(TARGET_CUTLASS3)
        except (OSError, RuntimeError, AssertionError) as exc:
            raise HeuristicsUnavailable(f"nvMatmulHeuristics could not start: {exc!r}") from None
        self._nv = nv
        self.gpu = gpu
        self.metric = metric
        self._estimate = self._h.lib.nvMatmulHeuristicsEstimateSiliconMetricEx
        self._estimate.restype = ctypes.c_double
        self._layout = nv.NvMatmulHeuristicsMatmulLayout.NT_ROW_MAJOR  # x and W are both K-major
        self._loaded: set[str] = set()

    def _problem(self, m: int, n: int, k: int, precision: str):
        if precision not in self._loaded:
            self._h.loadInternalDiscoverySet(self._layout, precision)
            self._loaded.add(precision)
        return self._h.makeNvMatmulHeuristicsProblem(m, n, k, self._layout)

    def predict_us(self, layer: Layer, config: Config) -> float | None:
        """Its estimate for `config` in microseconds, or None where it rejects the config."""
        if config.gemv:
            return None  # it knows GEMMs on tensor cores
        precision = PRECISION[layer.dtype]
        kp = kernel_problem(layer, config)
        problem = self._problem(kp.m, kp.n, kp.k, precision)
        kc = self._h.nvmmhKernelConfiguration()
        kc.cta[:] = (config.tile_m, config.tile_n, config.tile_k)
        kc.warp[:] = (64, min(config.tile_n, 64), config.tile_k)
        kc.instr[:] = INSTR
        kc.splitK = 1
        kc.loadStages = _stages(config, layer.dtype)
        kc.gridSwizzle = 1
        kc.ctaOrder = 0
        kc.cluster[:] = (config.cluster_m, config.cluster_n)
        seconds = self._estimate(self._h.handle, precision.encode("ascii"), self._backend, ctypes.byref(problem),
                                 ctypes.byref(kc), ctypes.c_int(METRICS[self.metric]), self._h.hardware_descriptor)
        return seconds * 1e6 if seconds > 0 and math.isfinite(seconds) else None

    def rank(self, layer: Layer, configs: Sequence[Config]) -> list[tuple[float | None, Config]]:
        """Configs with its estimates, fastest first; the ones it rejects last."""
        scored = [(self.predict_us(layer, c), c) for c in configs]
        return sorted(scored, key=lambda s: (s[0] is None, s[0] or 0.0, s[1].key))

    def suggest(self, layer: Layer, count: int = 8) -> list[Config]:
        """Its own top picks for the layer, as valid cutsearch configs (schedule chosen by tile M)."""
        precision = PRECISION[layer.dtype]
        problem = self._problem(layer.m, layer.n, layer.k, precision)
        picks: list[Config] = []
        for found in self._h.get(problem, max(count * 4, 16), precision=precision):
            k = found["kernel"]
            schedule = "cooperative" if k.cta_tile_m >= 128 else "pingpong"
            config = Config(tile_m=k.cta_tile_m, tile_n=k.cta_tile_n, tile_k=k.cta_tile_k, cluster_m=k.cluster_m,
                            cluster_n=k.cluster_n, kernel_schedule=schedule, epilogue_schedule="tma")
            if invalid_reason(layer, config) is None and config not in picks:
                picks.append(config)
            if len(picks) == count:
                break
        return picks

    def close(self) -> None:
        backend, self._backend = getattr(self, "_backend", None), None
        if backend:
            self._h.destroyBackend(backend)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown may have unloaded the library
            pass


@dataclasses.dataclass(frozen=True, kw_only=True)
class Comparison:
    """How the model and the second opinion each order one recording's measured configs."""

    recording: str
    layer: Layer
    measured: int
    rated: int                      # configs the library gave an estimate for
    model_vs_measured: float
    heuristics_vs_measured: float   # over the rated configs only
    model_vs_heuristics: float
    rows: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["layer"] = self.layer.to_dict()
        return d


def compare(recordings: Sequence[Any], heuristics: Heuristics,
            coeff: model.Coefficients = model.DEFAULT) -> list[Comparison]:
    """Rank correlations against recorded measurements, per recording (nothing is measured)."""
    from cutsearch.calibration import rank_correlation

    out = []
    for rec in recordings:
        measured = [e for e in rec.evaluations if isinstance(e.outcome, Measurement)]
        rows = []
        for ev in measured:
            predicted = model.best_knobs(rec.layer, ev.config, knob_grid(ev.config, rec.layer), coeff)[1]
            rows.append({"config": ev.config.key, "measured_us": ev.outcome.median_us, "model_us": predicted,
                         "heuristics_us": heuristics.predict_us(rec.layer, ev.config)})
        rated = [r for r in rows if r["heuristics_us"] is not None]
        out.append(Comparison(
            recording=rec.name, layer=rec.layer, measured=len(rows), rated=len(rated),
            model_vs_measured=rank_correlation([r["model_us"] for r in rows], [r["measured_us"] for r in rows]),
            heuristics_vs_measured=rank_correlation([r["heuristics_us"] for r in rated],
                                                    [r["measured_us"] for r in rated]),
            model_vs_heuristics=rank_correlation([r["model_us"] for r in rated], [r["heuristics_us"] for r in rated]),
            rows=rows))
    return out
