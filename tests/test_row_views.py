"""x's row views (space.RowViews): an unaligned x read in place, exactly, without its copy.

The launcher's arithmetic is replayed here in numpy with integer-valued float64 data, so every
sum is exact: the batch of views against W's shifted copies, and the tail's last M mod P rows against
copy 0, give x @ W^T bit for bit, every element a view reads lies inside x, and every TMA address
and pitch is a 16-byte multiple.
The GPU tests (tests/test_layouts_gpu.py) run the same arithmetic in the built kernels.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from cutsearch.abi import IO_X_VIEWS, io_flags
from cutsearch.codegen import render
from cutsearch.efficiency import Recording
from cutsearch.model import CALIBRATED, DEFAULT, predict_us
from cutsearch.outcome import Measurement
from cutsearch.problem import BYTES, PEAK_BYTES_PER_S, Layer
from cutsearch.space import (Config, Knobs, RowViews, kernel_problem, knob_grid, row_views, transforms,
                             views_apply)

PAD = Config(tile_m=128, tile_n=64, tile_k=64, kernel_schedule="cooperative", epilogue_schedule="nosmem", pad=True)


def views_of(layer: Layer) -> RowViews:
    views = row_views(layer)
    assert views is not None
    return views


def shifted_weights(w: np.ndarray, views: RowViews) -> np.ndarray:
    """W' as the launcher builds it: zeros, then per copy i one pitched copy of W (pitch K')
    written from element s_i on, each row followed by zeros up to K' that run into the next
    row's head (and, for the last row of the last copy, into one spare row)."""
    n, k = w.shape
    flat = np.zeros((views.count * n + 1) * views.k)
    for i, s in enumerate(views.shifts()):
        rows = np.zeros((n, views.k))
        rows[:, :k] = w
        start = i * n * views.k + s
        flat[start:start + n * views.k] = rows.ravel()
    return flat[: views.count * n * views.k].reshape(views.count, n, views.k)


def through_views(x: np.ndarray, w: np.ndarray, views: RowViews) -> np.ndarray:
    """y from the batch of views, each read where the launcher points TMA at it, and the tail's
    rows from x's last rows and W' copy 0, each up to K (templates/tail.cuh)."""
    m, k = x.shape
    flat = x.ravel()
    rows = m // views.count
    assert views.tail == m % views.count
    covered = rows * views.count
    w_views = shifted_weights(w, views)
    y = np.full((m, w.shape[0]), np.nan)
    for i in range(views.count):
        start = i * (k - views.shift)
        last = start + (rows - 1) * views.count * k + views.k  # one past the last element read
        assert 0 <= start and last <= covered * k, (i, start, last, flat.size)  # never the tail's rows
        view = np.lib.stride_tricks.as_strided(flat[start:], shape=(rows, views.k),
                                               strides=(views.count * k * 8, 8), writeable=False)
        y[i:covered:views.count] = view @ w_views[i].T
    assert not np.isnan(y[:covered]).any()
    y[covered:] = flat[covered * k:].reshape(views.tail, k) @ w_views[0][:, :k].T
    return y


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 6, 7, 9, 13, 20, 100, 517, 999, 1001, 1002, 1004, 4095])
@pytest.mark.parametrize("tail", [0, 1, 3, 7])
def test_the_views_compute_x_times_w_transposed_exactly(dtype, k, tail):
    vec = 16 // BYTES[dtype]
    p = vec // math.gcd(k, vec)
    m, n = 3 * p + tail % p, 5
    layer = Layer(m=m, n=n, k=k, dtype=dtype)
    views = views_of(layer)
    assert views.count == p and views.shift == k % vec and views.tail == tail % p
    rng = np.random.default_rng(k)
    x = rng.integers(-8, 9, size=(m, k)).astype(np.float64)
    w = rng.integers(-8, 9, size=(n, k)).astype(np.float64)
    assert np.array_equal(through_views(x, w, views), x @ w.T)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("k", [1, 7, 9, 334, 999, 4095])
def test_one_row_is_read_up_to_k_against_w_as_it_is(dtype, k):
    """M = 1: the kernel's K is x's own, so no element past x is read and W needs no copies; the
    pitch TMA needs is W's padded one, which x's one row never steps by."""
    layer = Layer(m=1, n=5, k=k, dtype=dtype)
    views = views_of(layer)
    assert (views.count, views.k) == (1, k) and views.shifts() == (0,)
    pad_k = kernel_problem(layer, PAD).pad_k
    assert pad_k > k and (pad_k * BYTES[dtype]) % 16 == 0
    rng = np.random.default_rng(k)
    x = rng.integers(-8, 9, size=(1, k)).astype(np.float64)
    w = rng.integers(-8, 9, size=(5, k)).astype(np.float64)
    assert np.array_equal(through_views(x, w, views), x @ w.T)
    assert views_apply(layer, PAD) and any(kn.views for kn in knob_grid(PAD, layer))
    assert transforms(layer, PAD, {"views": 1})["x_views"] == {"count": 1, "shift": k % layer.vector, "k": k,
                                                                "tail": 0}


@pytest.mark.parametrize("m,k", [(3000, 999), (16, 1004), (96, 1002), (8, 7), (4000, 4095), (3001, 999),
                                 (15, 7), (98, 2486)])
def test_every_view_starts_and_steps_on_16_bytes_and_k_prime_fills_vectors(m, k):
    layer = Layer(m=m, n=64, k=k)
    views = views_of(layer)
    e, vec = BYTES[layer.dtype], layer.vector
    assert views.k % vec == 0 and views.k >= k
    assert (views.count * k * e) % 16 == 0  # a view's row pitch
    assert ((k - views.shift) * e) % 16 == 0  # the step from one view's start to the next
    # The last view's last row ends exactly where the views' rows end, and the tail's begin.
    p = views.count
    assert (p - 1) * (k - views.shift) + (m // p - 1) * p * k + views.k == (m - views.tail) * k


def test_views_exist_only_for_contiguous_x_with_unaligned_rows_and_a_whole_view():
    assert row_views(Layer(m=64, n=64, k=1024)) is None  # aligned rows: nothing to copy
    assert row_views(Layer(m=64, n=64, k=999, input="padded")) is None
    assert row_views(Layer(m=64, n=64, k=999, output="transposed")) is None  # a view's y^T rows are strided
    assert row_views(Layer(m=63, n=64, k=999)) == RowViews(count=8, shift=7, k=1048, tail=7)  # 7 rows past the views
    assert row_views(Layer(m=7, n=64, k=999)) is None  # not one row a view
    assert row_views(Layer(m=8, n=64, k=1002)).count == 4
    assert row_views(Layer(m=6, n=64, k=1002)) == RowViews(count=4, shift=2, k=1008, tail=2)
    assert row_views(Layer(m=3, n=64, k=1002)) is None
    assert row_views(Layer(m=1, n=64, k=999)) == RowViews(count=1, shift=7, k=999)  # one row: K cut where x ends
    assert row_views(Layer(m=1, n=64, k=1000)) is None
    assert row_views(Layer(m=6, n=64, k=1004)).count == 2  # K = 4 mod 8: rows pair up on 16 bytes
    assert row_views(Layer(m=4000, n=333, k=999)) == RowViews(count=8, shift=7, k=999 + 7 * 7)


def test_the_knob_grid_adds_the_views_beside_every_copy_of_x():
    layer = Layer(m=3000, n=1001, k=999, bias=True)
    grid = knob_grid(PAD, layer)
    copying = [k for k in grid if not k.views]
    viewing = [k for k in grid if k.views]
    assert {dataclasses.replace(k, views=0) for k in viewing} == {k for k in copying if not k.pdl}
    # nosmem stores y's rows itself: with x read in place, nothing is copied to overlap with.
    assert not any(k.pdl for k in viewing)
    # The TMA epilogue pads N too, so y is copied out and launch overlap stays a choice.
    tma = dataclasses.replace(PAD, epilogue_schedule="tma")
    assert {k.pdl for k in knob_grid(tma, layer) if k.views} == {0, 1}
    # So it is where the tail kernel follows the views' batch.
    assert {k.pdl for k in knob_grid(PAD, Layer(m=475, n=64, k=3961)) if k.views} == {0, 1}


@pytest.mark.parametrize("layer,config", [
    (Layer(m=3000, n=1001, k=999), dataclasses.replace(PAD, pad=False)),  # no copy of x to replace
    (Layer(m=3000, n=1001, k=999, output="transposed"), PAD),
    (Layer(m=5, n=1001, k=999), PAD),  # below one row a view: x is copied
    (Layer(m=8, n=16384, k=4095), PAD),
    (Layer(m=16, n=1024, k=1024), Config(tile_m=64, tile_n=16, tile_k=64, kernel_schedule="pingpong",
                                         epilogue_schedule="tma", swap_ab=True, split_k=True)),
])
def test_no_views_where_they_do_not_apply(layer, config):
    assert not views_apply(layer, config)
    assert not any(k.views for k in knob_grid(config, layer))


def test_the_views_are_recorded_as_a_transform_and_a_launch_flag():
    layer = Layer(m=3000, n=1001, k=999, bias=True)
    assert "x_views" not in transforms(layer, PAD, {"raster": 1})
    assert transforms(layer, PAD, {"raster": 1, "views": 1})["x_views"] == {"count": 8, "shift": 7, "k": 1048,
                                                                            "tail": 0}
    assert transforms(Layer(m=475, n=64, k=3961), PAD, {"views": 1})["x_views"]["tail"] == 3
    assert IO_X_VIEWS == 8 and io_flags(False, False, {"pdl": 1, "views": 1}) == 12
    assert Knobs(views=1).to_dict()["views"] == 1 and "views" not in Knobs().to_dict()


def test_the_model_drops_the_copy_of_x_and_reads_p_copies_of_w():
    # W small beside x: the copy's launch and bytes outweigh W's copies.
    for layer in (Layer(m=3000, n=1001, k=999), Layer(m=100000, n=64, k=3)):
        assert predict_us(layer, PAD, Knobs(raster=1, views=1)) < predict_us(layer, PAD, Knobs(raster=1))
    # W as large as x: reading it eight times costs more than copying x once.
    square = Layer(m=4000, n=4096, k=4095)
    assert predict_us(square, PAD, Knobs(raster=1, views=1)) > predict_us(square, PAD, Knobs(raster=1))


def test_the_model_charges_the_tail_a_launch_and_one_more_read_of_w():
    """473 rows make the same batch of 59 rows a view as 472, and one row for the tail kernel."""
    whole, tail = Layer(m=472, n=64, k=3961), Layer(m=473, n=64, k=3961)
    views = views_of(tail)
    w_us = kernel_problem(tail, PAD).pad_n * views.k * 2 / PEAK_BYTES_PER_S * 1e6
    for coeff in (DEFAULT, CALIBRATED):
        extra = predict_us(tail, PAD, Knobs(raster=1, views=1), coeff) - predict_us(whole, PAD, Knobs(raster=1, views=1),
                                                                                  coeff)
        assert extra == pytest.approx(coeff.copy_overhead_us + w_us)


RECORDED = Path(__file__).resolve().parent.parent / "studies" / "recorded"


@pytest.mark.parametrize("coeff, least", [(DEFAULT, 99), (CALIBRATED, 95)], ids=["default", "calibrated"])
def test_on_recorded_h200_data_the_model_picks_the_faster_of_views_and_copy(coeff, least):
    """Recorded H200 data, replayed: 108 configs of six layers, each measured with x copied and
    with x read through views (M = 1's one row for two of them). The model, choosing between its
    best prediction of each, agrees with the measured winner for at least 99 (on the first 106,
    80 before it counted part of W's extra reads). CALIBRATED agreed for 99 too while it credited
    a cluster's feed with a 1.25x multicast gain; without it, 95, while it orders cluster twins and
    whole recordings better on both cards (studies/scripts/model_multicast.py)."""
    paths = [RECORDED / "h200-2026-12-01-unseen-views" / f"{name}.json" for name in ("coords_relu", "k2_gelu",
                                                                                    "odd_k_bias")]
    paths += sorted((RECORDED / "h200-2026-12-01-views").glob("views-*.json"))
    paths.append(RECORDED / "h200-2026-12-03-one-row" / "one-row-draw3_3.json")
    agree = total = 0
    for path in paths:
        rec = Recording.load(path)
        for ev in rec.evaluations:
            if not isinstance(ev.outcome, Measurement):
                continue
            measured = {v: min(t for k, t in ev.outcome.variants if k.views == v) for v in (0, 1)}
            grid = knob_grid(ev.config, rec.layer)
            predicted = {v: min(predict_us(rec.layer, ev.config, k, coeff) for k in grid if k.views == v) for v in (0, 1)}
            total += 1
            agree += (predicted[1] < predicted[0]) == (measured[1] < measured[0])
    assert total == 108 and agree >= least


def test_on_recorded_h100_data_the_tail_is_offered_where_it_beat_the_copy():
    """Recorded H100 data, replayed: 18 configs of six layers whose M is not a multiple of P, each
    timed with x copied and with the views and their tail, in one run. The offer line
    (space.TAIL_MAX_COST) holds the two layers where the tail won on most configs, and no other."""
    offered_layers = []
    for path in sorted((RECORDED / "h100-2026-12-05-view-tails" / "h100").glob("views-*.json")):
        rec = Recording.load(path)
        assert row_views(rec.layer).tail > 0
        won = []
        for ev in rec.evaluations:
            measured = {v: min(t for k, t in ev.outcome.variants if k.views == v) for v in (0, 1)}
            won.append(measured[1] < measured[0])
        offered = {views_apply(rec.layer, ev.config) for ev in rec.evaluations}
        assert offered == {sum(won) > len(won) / 2}, (rec.layer.shape, won)
        if True in offered:
            offered_layers.append(rec.layer.shape)
    assert offered_layers == ["137x48x2065", "475x64x3961"]


def test_views_are_not_offered_where_w_copies_cost_far_more_than_the_copy_of_x():
    assert views_apply(Layer(m=16, n=512, k=1004), PAD)  # 1 MB more read against a launch: offered
    assert not views_apply(Layer(m=8, n=4096, k=4095), PAD)  # 235 MB more read: not


@pytest.mark.parametrize("m,n,k,offered", [
    # Recorded on an H100: the views with a tail won on the first two, lost on the other four.
    (475, 64, 3961, True), (137, 48, 2065, True), (158, 1177, 78, False), (1500, 777, 1499, False),
    (37, 1234, 567, False), (2327, 1838, 398, False),
    (3000, 1001, 999, True), (3001, 1001, 999, False),  # the same W: no tail, and a tail to pay for
])
def test_views_with_a_tail_are_offered_only_where_they_cost_about_the_copy(m, n, k, offered):
    assert views_apply(Layer(m=m, n=n, k=k), PAD) == offered


def test_a_visitor_tree_gets_a_batch_stride_for_d_only_where_views_exist():
    config = dataclasses.replace(PAD, epilogue_schedule="tma")
    with_views = render(Layer(m=96, n=256, k=1002, bias=True, activation="gelu"), config).code
    without = render(Layer(m=3, n=256, k=1002, bias=True, activation="gelu"), config).code  # below P = 4
    one_row = render(Layer(m=1, n=256, k=1002, bias=True, activation="gelu"), config).code  # one view: no batch
    assert "using StrideD = cute::Stride<int64_t, cute::Int<1>, int64_t>;" in with_views
    assert "using StrideD = cute::Stride<int64_t, cute::Int<1>, cute::Int<0>>;" in without
    assert "using StrideD = cute::Stride<int64_t, cute::Int<1>, cute::Int<0>>;" in one_row
    assert "#define CS_Y_TRANSPOSED 0" in with_views


def test_the_x_copy_gap_script_reports_what_the_copy_of_x_still_costs():
    """Recorded data (H200 from 2026-12-03 on, and the H100 batches of 2026-12-05 to -07): where P
    does not divide M, x is copied on every call, and its kernel was a median 2.50 µs (H200) and
    3.60 µs (H100) faster with x handed over padded. The gemv kernel copies nothing: its layers
    are counted apart. Of a layer searched twice in a day, the later search counts (its journal
    says when it began). FINDINGS quotes these lines."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    out = {gpu: subprocess.run([sys.executable, str(root / "studies" / "scripts" / "x_copy_gap.py"), "--gpu", gpu],
                               capture_output=True, text=True, timeout=120, check=True, env=env).stdout
           for gpu in ("H200", "H100")}
    assert "P does not divide M: 15 recordings, gap median 2.50 µs (-1.18 to 5.95)" in out["H200"]
    assert "P divides M: 2 recordings" in out["H200"]
    assert "P does not divide M: 15 recordings, gap median 3.60 µs (-0.24 to 11.01)" in out["H100"]
    assert "The gemv kernel, x read in place: 2 recordings, gap median 0.86 µs" in out["H100"]
    assert "2x199x2087 bf16        no     gemv kernel" in out["H100"]
    # 2x64x93 was searched three times on 2026-12-06 and again on 2026-12-07: the latest counts.
    assert "h100-2026-12-07-gemv-wide/r21_0              2x64x93 f16            no     gemv kernel" in out["H100"]
    assert "P divides M: 2 recordings, gap median 0.37 µs" in out["H100"]
