"""Property-based tests of the input parsers and the space's rules (hypothesis, no GPU).

Whatever a user types or writes in a layer file becomes a Layer or a UserError, never another
exception. The space validator never raises on any config built from the space's dimensions,
its valid configs have consistent kernel problems, and iterating a space yields exactly its
valid configs.
"""

from __future__ import annotations

import itertools
import json
import math
import string

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cutsearch.cli.app import parse_duration
from cutsearch.errors import UserError
from cutsearch.model import predict_us
from cutsearch.problem import ACTIVATIONS, BYTES, DTYPES, INT32_MAX, MAX_LAYER_BYTES, Layer, load_layers, pad_to
from cutsearch.space import (
    CLUSTERS, EPILOGUE_SCHEDULES, KERNEL_SCHEDULES, SIMT_EPILOGUES, SMEM_BYTES, STAGES, TILE_K, TILE_M, TILE_N, TILE_SCHEDULERS,
    Config, Space, invalid_reason, kernel_problem, knob_grid, row_views, smem_bytes, split_k_pads_k, split_k_pitch,
)

# No deadline (CI machines are slow) and no example database written into the checkout.
quick = settings(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
slow = settings(quick, max_examples=25)  # each example enumerates a whole space

# ---- strategies ------------------------------------------------------------------------------------

dims = st.one_of(st.integers(min_value=1, max_value=20_000), st.integers(min_value=-5, max_value=2**40),
                 st.sampled_from([0, 1, 8, INT32_MAX, INT32_MAX + 1]))
scalars = st.one_of(st.none(), st.booleans(), dims, st.floats(allow_nan=True), st.text(max_size=8),
                    st.sampled_from(DTYPES + ACTIVATIONS + ("f32", "fp16", "BF16", "")),
                    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
layer_keys = st.sampled_from(["M", "N", "K", "m", "n", "k", "dtype", "bias", "activation", "name"])
layer_dicts = st.dictionaries(st.one_of(layer_keys, st.text(max_size=6)), scalars, max_size=10)
# Mostly layers that parse, to reach the invariants of valid ones too.
plausible_layer_dicts = st.fixed_dictionaries(
    {"M": dims, "N": dims, "K": dims},
    optional={"dtype": st.sampled_from(DTYPES + ("f32",)), "bias": st.one_of(st.booleans(), scalars),
              "activation": st.sampled_from(ACTIVATIONS + ("tanh",)), "name": st.text(max_size=8)})

small_layers = st.builds(Layer, m=st.integers(1, 20_000), n=st.integers(1, 20_000), k=st.integers(1, 20_000),
                         dtype=st.sampled_from(DTYPES), bias=st.booleans(), activation=st.sampled_from(ACTIVATIONS))


def check_layer(layer: Layer) -> None:
    """What every Layer that parses guarantees."""
    for value in (layer.m, layer.n, layer.k):
        assert type(value) is int and 0 < value <= INT32_MAX
    assert layer.dtype in DTYPES and layer.activation in ACTIVATIONS and isinstance(layer.bias, bool)
    assert layer.bytes <= MAX_LAYER_BYTES
    assert layer.floor_us > 0
    assert Layer.from_dict(layer.to_dict(), name=layer.name) == layer


# ---- Layer.from_dict -------------------------------------------------------------------------------

@quick
@given(st.one_of(layer_dicts, plausible_layer_dicts))
def test_any_layer_dict_is_a_layer_or_a_user_error(data):
    try:
        layer = Layer.from_dict(data)
    except UserError as exc:
        assert str(exc)
        return
    check_layer(layer)
    m = data["M"] if "M" in data else data["m"]
    assert layer.m == m and layer.dtype == data.get("dtype", "f16")


@quick
@given(st.integers(-3, INT32_MAX + 3), st.integers(1, 64), st.integers(1, 64))
def test_dimensions_beyond_int32_or_not_positive_are_refused(m, n, k):
    try:
        layer = Layer(m=m, n=n, k=k)
    except UserError:
        assert m <= 0 or m > INT32_MAX or 2 * (m * k + n * k + m * n) > MAX_LAYER_BYTES
    else:
        check_layer(layer)


@quick
@given(st.integers(1, INT32_MAX), st.integers(1, INT32_MAX), st.integers(1, INT32_MAX), st.booleans())
def test_a_layer_fits_the_memory_ceiling_or_is_refused(m, n, k, bias):
    bytes_needed = BYTES["f16"] * (m * k + n * k + m * n + (n if bias else 0))
    try:
        Layer(m=m, n=n, k=k, bias=bias)
    except UserError as exc:
        assert bytes_needed > MAX_LAYER_BYTES and "GiB" in str(exc)
    else:
        assert bytes_needed <= MAX_LAYER_BYTES


# ---- load_layers -----------------------------------------------------------------------------------

def toml_value(value) -> str:
    """A value in TOML (strings and floats through JSON's spelling, which TOML shares)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, str)):
        return json.dumps(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ("nan" if value != value else ("inf" if value > 0 else "-inf"))
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(value)


toml_scalars = st.one_of(st.booleans(), st.integers(-2**40, 2**40), st.sampled_from([0, 1, 16, 4096, INT32_MAX + 1]),
                         st.floats(), st.text(max_size=8), st.sampled_from(DTYPES + ACTIVATIONS + ("f32",)))
toml_values = st.one_of(toml_scalars, st.lists(st.one_of(st.sampled_from(DTYPES + ("f32",)), toml_scalars),
                                               max_size=3))
table_names = st.text(alphabet=string.ascii_letters + string.digits + "_-", min_size=1, max_size=10)
table_keys = st.one_of(st.sampled_from(["M", "N", "K", "dtype", "dtypes", "bias", "activation", "name"]),
                       table_names)


@st.composite
def toml_documents(draw) -> str:
    lines = []
    for key, value in draw(st.dictionaries(table_names, toml_values, max_size=2)).items():
        lines.append(f"{key} = {toml_value(value)}")
    for name, table in draw(st.dictionaries(table_names, st.dictionaries(table_keys, toml_values, max_size=7),
                                            max_size=3)).items():
        lines.append(f"[{name}]")
        lines += [f"{key} = {toml_value(value)}" for key, value in table.items()]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def layer_file(tmp_path_factory):
    return tmp_path_factory.mktemp("layers") / "layers.toml"


def load(layer_file, text: str):
    layer_file.write_text(text)
    return load_layers(layer_file)


@quick
@given(st.one_of(toml_documents(), st.text(max_size=200)))
def test_any_layer_file_gives_layers_or_a_user_error(layer_file, text):
    try:
        layers = load(layer_file, text)
    except UserError as exc:
        assert str(exc)
        return
    assert layers
    for name, layer in layers.items():
        assert isinstance(name, str) and layer.name == name
        check_layer(layer)


@quick
@given(st.integers(1, 20_000), st.integers(1, 20_000), st.integers(1, 20_000), st.sampled_from(DTYPES),
       st.booleans(), st.sampled_from(ACTIVATIONS))
def test_a_layer_table_reads_back_the_layer_it_describes(layer_file, m, n, k, dtype, bias, activation):
    text = (f"[layer]\nname = \"fc1\"\nM = {m}\nN = {n}\nK = {k}\ndtype = \"{dtype}\"\n"
            f"bias = {toml_value(bias)}\nactivation = \"{activation}\"\n")
    assert load(layer_file, text) == {"fc1": Layer(m=m, n=n, k=k, dtype=dtype, bias=bias, activation=activation,
                                                  name="fc1")}


@quick
@given(st.dictionaries(table_names.filter(lambda s: s != "layer"),
                       st.tuples(st.integers(1, 4096), st.lists(st.sampled_from(DTYPES), min_size=1, max_size=2,
                                                                unique=True)),
                       min_size=1, max_size=4))
def test_named_tables_give_one_layer_per_dtype(layer_file, tables):
    text = "".join(f"[{name}]\nM = {m}\nN = 64\nK = 64\ndtypes = {toml_value(dtypes)}\n"
                   for name, (m, dtypes) in tables.items())
    layers = load(layer_file, text)
    expected = {name if len(dtypes) == 1 else f"{name}-{d}": (m, d) for name, (m, dtypes) in tables.items()
                for d in dtypes}
    assert {key: (layer.m, layer.dtype) for key, layer in layers.items()} == expected


def test_a_directory_or_a_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_layers(tmp_path / "missing.toml")
    with pytest.raises(UserError, match=str(tmp_path)):
        load_layers(tmp_path)


# ---- parse_duration --------------------------------------------------------------------------------

@quick
@given(st.one_of(st.none(), st.text(max_size=20),
                 st.text(alphabet="0123456789.hms \t", max_size=12)))
def test_any_duration_text_is_a_positive_number_of_seconds_or_a_user_error(text):
    try:
        seconds = parse_duration(text)
    except UserError as exc:
        assert str(exc)
        return
    if text is None:
        assert seconds is None
    else:
        assert isinstance(seconds, float) and seconds > 0


amounts = st.one_of(st.integers(0, 10_000).map(str), st.decimals(0, 1000, places=2, allow_nan=False,
                                                                    allow_infinity=False).map(str))


@quick
@given(st.one_of(st.none(), amounts), st.one_of(st.none(), amounts), st.one_of(st.none(), amounts),
       st.booleans(), st.sampled_from(["", " "]))
def test_hours_minutes_and_seconds_add_up(h, m, s, s_suffix, gap):
    parts = [f"{h}h" if h is not None else "", f"{m}m" if m is not None else "",
             (f"{s}s" if s_suffix else s) if s is not None else ""]
    text = gap.join(p for p in parts if p)
    expected = sum(float(v) * f for v, f in ((h, 3600), (m, 60), (s, 1)) if v is not None)
    assume(text.strip())
    if expected <= 0:
        with pytest.raises(UserError):
            parse_duration(text)
    else:
        assert parse_duration(text) == pytest.approx(expected)


# ---- the space -------------------------------------------------------------------------------------

@st.composite
def layer_and_config(draw):
    """A layer, and a config drawn from its space's dimensions (valid or not)."""
    layer = draw(small_layers)
    params = {name: draw(st.sampled_from(choices)) for name, choices in Space(layer).dimensions().items()}
    return layer, Space.config_from_params(params), params


@quick
@given(layer_and_config())
def test_invalid_reason_never_raises_on_configs_from_the_dimensions(case):
    layer, config, params = case
    reason = invalid_reason(layer, config)
    assert reason is None or (isinstance(reason, str) and reason)
    assert Space.params_from_config(config) == params


@st.composite
def layer_and_valid_config(draw):
    layer = draw(small_layers)
    valid = list(Space(layer))
    assume(valid)
    return layer, draw(st.sampled_from(valid))


@slow
@given(layer_and_valid_config())
def test_valid_configs_have_consistent_kernel_problems(case):
    layer, c = case
    assert invalid_reason(layer, c) is None
    kp = kernel_problem(layer, c)
    vec = 16 // BYTES[layer.dtype]
    assert kp.align_ab == vec and kp.pad_k % kp.align_ab == 0  # the TMA mainloop's 16-byte rows
    assert kp.pad_n % kp.align_d == 0 and (kp.align_d == vec or c.epilogue_schedule in SIMT_EPILOGUES)
    # Split-K pads K to a pitch its slices cut where split_k_pads_k says so.
    top_k = split_k_pitch(layer.k, vec) if c.split_k and split_k_pads_k(layer) else pad_to(layer.k, vec)
    assert kp.k == kp.pad_k and kp.pad_k in (layer.k, top_k) and layer.n <= kp.pad_n < layer.n + vec
    if not c.pad:
        assert (kp.pad_k, kp.pad_n) == (layer.k, layer.n)
    else:
        assert (kp.pad_k, kp.pad_n) != (layer.k, layer.n)
    assert (kp.m, kp.n) == ((kp.pad_n, layer.m) if c.swap_ab else (layer.m, kp.pad_n))
    assert smem_bytes(c, layer.dtype, c.stages or 2) <= SMEM_BYTES
    grid = knob_grid(c, layer)
    assert grid and len(set(grid)) == len(grid)
    for knobs in grid:
        assert math.isfinite(predict_us(layer, c, knobs)) and predict_us(layer, c, knobs) > 0
        if knobs.views:  # only where x is copied and its rows can be viewed in place
            views = row_views(layer)
            assert c.pad and views is not None and layer.m >= views.count
            assert views.tail == layer.m % views.count < 8  # the tail kernel's rows at most (templates/tail.cuh)
            # K' fills whole vectors, or (one row) is x's own K, cut where x ends.
            assert views.k % vec == 0 or (layer.m == 1 and views.k == layer.k)


configs_anything = st.builds(
    Config, tile_m=st.one_of(st.sampled_from(TILE_M), st.integers(-8, 512)),
    tile_n=st.one_of(st.sampled_from(TILE_N), st.integers(-8, 512)),
    tile_k=st.one_of(st.sampled_from(TILE_K), st.integers(-8, 512)),
    cluster_m=st.one_of(st.sampled_from([m for m, _ in CLUSTERS]), st.integers(-2, 8)),
    cluster_n=st.one_of(st.sampled_from([n for _, n in CLUSTERS]), st.integers(-2, 8)),
    kernel_schedule=st.one_of(st.sampled_from(KERNEL_SCHEDULES), st.text(max_size=5)),
    epilogue_schedule=st.one_of(st.sampled_from(EPILOGUE_SCHEDULES), st.text(max_size=5)),
    stages=st.one_of(st.sampled_from(STAGES), st.integers(-3, 64)),
    tile_scheduler=st.one_of(st.sampled_from(TILE_SCHEDULERS), st.text(max_size=5)),
    swap_ab=st.booleans(), pad=st.booleans())


@quick
@given(small_layers, configs_anything)
def test_invalid_reason_never_raises_on_any_config(layer, config):
    reason = invalid_reason(layer, config)
    assert reason is None or isinstance(reason, str)


@st.composite
def small_spaces(draw):
    """A layer and a space over a few choices of each dimension (small enough to enumerate)."""
    def some(choices):
        return tuple(draw(st.lists(st.sampled_from(choices), min_size=1, max_size=3, unique=True)))

    layer = draw(small_layers)
    space = Space(layer, tile_m=some(TILE_M), tile_n=some(TILE_N), tile_k=some(TILE_K), clusters=some(CLUSTERS),
                  schedules=some(Space(layer).schedules), stages=some(STAGES), swap_ab=some((False, True)))
    return space


@quick
@given(small_spaces())
def test_iterating_a_space_yields_exactly_its_valid_configs(space):
    configs = list(space)
    dims = space.dimensions()
    every = [Space.config_from_params(dict(zip(dims, values))) for values in itertools.product(*dims.values())]
    assert configs == [c for c in every if invalid_reason(space.layer, c) is None]
    assert len({c.key for c in configs}) == len(configs)
    for c in configs:
        assert Space.config_from_params(Space.params_from_config(c)) == c
