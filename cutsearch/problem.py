"""The fully-connected layer a search is for: y = act(x @ W^T + b)."""

from __future__ import annotations

import dataclasses
import math
import tomllib
from pathlib import Path
from typing import Any, Iterable

from cutsearch.errors import UserError

DTYPES = ("f16", "bf16")
ACTIVATIONS = ("none", "relu", "gelu", "silu")
# What the caller hands over and accepts. "padded" rows have a 16-byte pitch (K or N rounded up
# to 8 elements), which spares the per-call copy an unaligned K or N otherwise costs.
INPUTS = ("contiguous", "padded")
OUTPUTS = ("contiguous", "padded", "transposed")
INT32_MAX = 2**31 - 1
BYTES = {"f16": 2, "bf16": 2}

# Ceilings measured on the H200 (shared measurement protocol): bf16 dense matmul, D2D copy.
PEAK_FLOPS = 790e12
PEAK_BYTES_PER_S = 4.3e12
PEAKS_GPU = "H200"
# Device memory one layer may need (x, W, y, padding), far below an H200's 141 GB.
MAX_LAYER_BYTES = 64 * 2**30


def floor_note(gpu: str | None) -> str:
    """What a floor shown beside times measured on `gpu` must add: whose peaks it assumes, where
    those are another GPU's (an H100 has less memory bandwidth: its memory-bound floors are higher)."""
    return f"at the {PEAKS_GPU}'s peaks" if gpu and PEAKS_GPU not in gpu else ""


def replayed_from(gpus: Iterable[str | None]) -> str:
    """What replayed times are: measured earlier, on the GPUs their recordings name."""
    named = " and ".join(sorted({g for g in gpus if g}))
    return f"replayed from recorded {named} measurements" if named else "replayed from recorded measurements"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Layer:
    """x is M x K row-major, W is N x K (constant), y is M x N row-major.

    input="padded": x arrives with row pitch pad_to(K, 8), its padding columns finite.
    output="padded": y may be written with row pitch pad_to(N, 8); "transposed": y^T, N x M.
    """

    m: int
    n: int
    k: int
    dtype: str = "f16"
    bias: bool = False
    activation: str = "none"
    input: str = "contiguous"
    output: str = "contiguous"
    name: str | None = None

    def __post_init__(self) -> None:
        for dim in ("m", "n", "k"):
            value = getattr(self, dim)
            if isinstance(value, bool) or not isinstance(value, int):
                raise UserError(f"{dim.upper()} must be an integer, got {value!r}")
            if value <= 0:
                raise UserError(f"{dim.upper()} must be positive, got {value}")
            if value > INT32_MAX:
                raise UserError(f"{dim.upper()}={value} is beyond int32, which CUTLASS indexes with")
        if self.dtype not in DTYPES:
            raise UserError(f"unsupported dtype {self.dtype!r}: choose one of {', '.join(DTYPES)}"
                            " (fp32 accumulation is implied)")
        if self.activation not in ACTIVATIONS:
            raise UserError(f"unsupported activation {self.activation!r}: choose one of {', '.join(ACTIVATIONS)}")
        if self.input not in INPUTS:
            raise UserError(f"unsupported input layout {self.input!r}: choose one of {', '.join(INPUTS)}")
        if self.output not in OUTPUTS:
            raise UserError(f"unsupported output layout {self.output!r}: choose one of {', '.join(OUTPUTS)}")
        if self.bytes > MAX_LAYER_BYTES:
            raise UserError(f"layer {self.m}x{self.n}x{self.k} needs {self.bytes:,} bytes ({self.bytes / 2**30:,.1f} "
                            f"GiB) of device memory, over the {MAX_LAYER_BYTES:,} ({MAX_LAYER_BYTES // 2**30} GiB) "
                            "this tool allows")

    @property
    def shape(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    @property
    def slug(self) -> str:
        """A file-system safe name that identifies the layer's math."""
        epi = ("-bias" if self.bias else "") + ("" if self.activation == "none" else f"-{self.activation}")
        io = ("-xpad" if self.input == "padded" else "") + {"contiguous": "", "padded": "-ypad",
                                                            "transposed": "-yT"}[self.output]
        return f"fc-{self.shape}-{self.dtype}{epi}{io}"

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    @property
    def bytes(self) -> int:
        e = BYTES.get(self.dtype, 2)
        return e * (self.m * self.k + self.n * self.k + self.m * self.n + (self.n if self.bias else 0))

    @property
    def floor_us(self) -> float:
        """Roofline floor: no kernel for this layer runs much faster on an H200."""
        return max(self.flops / PEAK_FLOPS, self.bytes / PEAK_BYTES_PER_S) * 1e6

    @property
    def vector(self) -> int:
        """Elements in one 16-byte vector: TMA needs row pitches that are multiples of it."""
        return 16 // BYTES[self.dtype]

    @property
    def x_pitch(self) -> int:
        return x_pitch(self.k, self.dtype, self.input)

    @property
    def y_shape(self) -> tuple[int, int]:
        """The output buffer the caller provides."""
        if self.output == "transposed":
            return (self.n, self.m)
        return (self.m, pad_to(self.n, self.vector) if self.output == "padded" else self.n)

    @property
    def fallback_fuses_activation(self) -> bool:
        """Whether the cuBLAS fallback's library (templates/cublas_fallback.cu) fuses the
        activation into cuBLASLt's GEMM, where F.linear runs it as a second kernel: ReLU, into y
        (cuBLASLt's epilogue works along y's rows, not y^T's)."""
        return self.activation == "relu" and self.output != "transposed"

    def to_dict(self) -> dict[str, Any]:
        data = {"M": self.m, "N": self.n, "K": self.k, "dtype": self.dtype, "bias": self.bias,
                "activation": self.activation}
        # Only when set: layers recorded before these options existed keep their identity.
        if self.input != "contiguous":
            data["input"] = self.input
        if self.output != "contiguous":
            data["output"] = self.output
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, name: str | None = None) -> Layer:
        if not isinstance(data, dict):
            raise UserError(f"a layer must be a table of M, N, K, dtype, ..., got {data!r}")
        known = {"M", "N", "K", "m", "n", "k", "dtype", "bias", "activation", "input", "output", "name"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise UserError(f"unknown layer key(s): {', '.join(unknown)}")
        try:
            m, n, k = (data[key] if key in data else data[key.lower()] for key in ("M", "N", "K"))
        except KeyError as missing:
            raise UserError(f"layer is missing {str(missing).upper()}") from None
        bias = data.get("bias", False)
        if not isinstance(bias, bool):
            raise UserError(f"bias must be true or false, got {bias!r}")
        return cls(m=m, n=n, k=k, dtype=data.get("dtype", "f16"), bias=bias,
                   activation=data.get("activation", "none"), input=data.get("input", "contiguous"),
                   output=data.get("output", "contiguous"), name=data.get("name", name))


def x_pitch(k: int, dtype: str, input: str) -> int:
    """x's row pitch as the caller hands it over: K, or K in 16-byte rows where padded."""
    return pad_to(k, 16 // BYTES[dtype]) if input == "padded" else k


def pad_to(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def alignment(extent: int, dtype: str, *, vector_bytes: int = 16) -> int:
    """Largest power-of-two element count dividing `extent`, capped at one 16-byte vector."""
    cap = vector_bytes // BYTES[dtype]
    return math.gcd(extent, cap) if extent else cap


def load_layers(path: Path) -> dict[str, Layer]:
    """Layers from a TOML file: a [layer] table, or one table per named layer."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(f"layer file {path} does not exist") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"layer file {path} is not valid TOML: {exc}") from None
    except OSError as exc:  # a directory, no permission...
        raise UserError(f"cannot read layer file {path}: {exc.strerror or exc}") from None
    if "layer" in data and isinstance(data["layer"], dict):
        table = data["layer"]
        name = table.get("name", Path(path).stem)
        if not isinstance(name, str):
            raise UserError(f"layer file {path}: name must be a string, got {name!r}")
        return {name: Layer.from_dict(table, name=name)}
    layers = {}
    for name, table in data.items():
        if not isinstance(table, dict):
            continue
        # Measured baselines beside a layer (`floor_us`, `f16 = { linear = ... }`, as in a shapes
        # file) are notes; any other key that is no layer key is a typo that would change the layer.
        fields = {key: value for key, value in table.items()
                  if not (key.endswith("_us") or (key in DTYPES and isinstance(value, dict)))}
        dtypes = fields.pop("dtypes", None)
        if dtypes is None:
            dtypes = [fields.pop("dtype", "f16")]
        elif "dtype" in fields:
            raise UserError(f"layer {name!r}: give dtype or dtypes, not both")
        if not isinstance(dtypes, list) or not dtypes:
            raise UserError(f"layer {name!r}: dtypes must be a list such as [\"f16\", \"bf16\"], got {dtypes!r}")
        for dtype in dtypes:
            key = name if len(dtypes) == 1 else f"{name}-{dtype}"
            if key in layers:
                raise UserError(f"layer {key!r} is defined twice in {path}")
            try:
                layers[key] = Layer.from_dict({**fields, "dtype": dtype}, name=key)
            except UserError as exc:
                raise UserError(f"layer {name!r} in {path}: {exc}") from None
    if not layers:
        raise UserError(f"layer file {path} defines no layer: expected a [layer] table with M, N, K")
    return layers


def select_layers(layers: dict[str, Layer], names: str | None, path: Path) -> dict[str, Layer]:
    """The layers of `load_layers(path)` that comma-separated `names` name, in their order; all of
    them without names. A table's name selects each of its dtypes (`tiny`: `tiny-f16`, `tiny-bf16`)."""
    if names is None:
        return layers
    wanted = [s.strip() for s in names.split(",") if s.strip()]
    if not wanted:
        raise UserError(f"{names!r} names no layer: give layer names separated by commas")
    picked = {w: [k for k in layers if k == w or k in (f"{w}-{dtype}" for dtype in DTYPES)] for w in wanted}
    missing = [w for w, keys in picked.items() if not keys]
    if missing:
        tables = dict.fromkeys(k.rsplit("-", 1)[0] if k.rsplit("-", 1)[-1] in DTYPES else k for k in layers)
        example = next((k for k in layers if k not in tables), None)
        one = f"; one dtype as {example}" if example else ""
        raise UserError(f"no layer named {', '.join(missing)} in {path} (it has {', '.join(tables)}{one})")
    return {k: layers[k] for keys in picked.values() for k in keys}
