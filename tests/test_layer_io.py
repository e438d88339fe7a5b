"""The layouts a caller hands over and accepts: validation, identity and buffer shapes."""

from __future__ import annotations

import pytest

from cutsearch.errors import UserError
from cutsearch.problem import Layer, load_layers


def test_default_layer_keeps_its_old_identity():
    layer = Layer(m=3000, n=1001, k=999, bias=True)
    assert layer.slug == "fc-3000x1001x999-f16-bias"
    assert "input" not in layer.to_dict() and "output" not in layer.to_dict()


def test_io_options_change_the_study_name_and_round_trip():
    layer = Layer(m=3000, n=1001, k=999, input="padded", output="transposed")
    assert layer.slug == "fc-3000x1001x999-f16-xpad-yT"
    assert Layer.from_dict(layer.to_dict()) == layer


@pytest.mark.parametrize("output,shape", [("contiguous", (3000, 1001)), ("padded", (3000, 1008)),
                                          ("transposed", (1001, 3000))])
def test_output_buffer_shape_follows_the_layout(output, shape):
    assert Layer(m=3000, n=1001, k=999, output=output).y_shape == shape


def test_padded_input_pitch_is_k_rounded_to_16_bytes():
    assert Layer(m=8, n=8, k=999, input="padded").x_pitch == 1000
    assert Layer(m=8, n=8, k=999).x_pitch == 999
    assert Layer(m=8, n=8, k=1024, input="padded").x_pitch == 1024


@pytest.mark.parametrize("field,value", [("input", "transposed"), ("output", "strided"), ("input", 1)])
def test_unknown_layouts_are_user_errors(field, value):
    with pytest.raises(UserError, match=f"unsupported {field} layout"):
        Layer(m=8, n=8, k=8, **{field: value})


def test_suite_files_carry_the_io_options(tmp_path):
    path = tmp_path / "suite.toml"
    path.write_text('[unaligned_padded]\nM = 3000\nN = 1001\nK = 999\ndtypes = ["f16", "bf16"]\n'
                    'input = "padded"\noutput = "padded"\n')
    layers = load_layers(path)
    assert {layer.input for layer in layers.values()} == {"padded"}
    assert {layer.output for layer in layers.values()} == {"padded"}


def test_io_flags_carry_the_layouts_and_overlapped_launches():
    from cutsearch.abi import IO_PDL, IO_X_PADDED, IO_Y_PADDED, io_flags

    assert (IO_X_PADDED, IO_Y_PADDED, IO_PDL) == (1, 2, 4)
    assert io_flags(False, False) == 0
    assert io_flags(True, False, {"pdl": 1}) == 5
    assert io_flags(True, True, {"pdl": 0}) == 3
    assert io_flags(False, False, {"pdl": 1, "prefetch": 1}) == 20
    assert io_flags(False, False, {"own_copy": 1}) == 32


def test_every_io_flag_has_the_same_value_in_python_the_launcher_and_the_export_header():
    import re

    from cutsearch import abi
    from cutsearch.codegen import TEMPLATES

    ours = {name: value for name, value in vars(abi).items() if name.startswith("IO_")}
    launcher = (TEMPLATES / "launcher.cu").read_text()
    enum = re.search(r"enum \{ (CS_IO_[^}]*) \};", launcher).group(1)
    in_launcher = {n.strip()[3:]: int(v) for n, v in (item.split("=") for item in enum.split(","))}
    header = (TEMPLATES / "cutsearch_fc.h").read_text()
    in_header = {n[3:]: int(v) for n, v in re.findall(r"#define (CS_IO_\w+) (\d+)", header)}
    assert len(ours) == 7 and ours == in_launcher == in_header


def test_the_export_header_passes_the_searched_launch_mode_to_cs_create():
    from cutsearch.export import _header

    layer = Layer(m=300, n=1001, k=999, bias=True, input="padded")
    text = _header(layer, kernel_name="k", pad_n=1008, pad_k=1000, knobs={"raster": 1, "pdl": 1})
    assert "#define CUTSEARCH_FC_IO 5" in text and "#define CS_IO_PDL 4" in text
    contiguous = Layer(m=300, n=1001, k=999, bias=True)
    text = _header(contiguous, kernel_name="k", pad_n=1001, pad_k=1000, knobs={"raster": 1, "views": 1})
    assert "#define CUTSEARCH_FC_IO 8" in text and "#define CS_IO_X_VIEWS 8" in text
    # A padded x that split-K copies to its pitch comes in K's 16-byte rows, not at pad_k.
    odd = Layer(m=7, n=9, k=20001, bias=True, input="padded")
    text = _header(odd, kernel_name="k", pad_n=16, pad_k=20480, knobs={"splits": 64, "pdl": 1})
    assert "#define CUTSEARCH_FC_IO 68" in text and "#define CS_IO_X_ALIGNED 64" in text
    assert "#define CUTSEARCH_FC_X_PITCH 20008" in text and "#define CUTSEARCH_FC_PAD_K 20480" in text
    # The cuBLAS fallback's pad_k is K: it reads the padded x where it lies.
    assert "#define CUTSEARCH_FC_IO 1" in _header(odd, kernel_name="k", pad_n=9, pad_k=20001, knobs={})


def test_the_export_readme_offers_x_at_the_kernels_pitch_only_where_it_is_longer():
    from cutsearch.export import _layouts

    odd = Layer(m=7, n=9, k=20001, bias=True, input="padded")
    text = _layouts(odd, 20480)
    assert text.startswith("x is [M, 20008]") and "x may also come as [M, 20480]" in text
    assert "may also come" in _layouts(Layer(m=300, n=1001, k=999), 1000)
    # Nothing to offer where the kernel reads x at the caller's pitch, or the fallback reads it.
    assert "may also come" not in _layouts(Layer(m=300, n=1001, k=1000), 1000)
    assert "may also come" not in _layouts(odd, 20001)
