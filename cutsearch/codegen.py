"""Config -> KernelSource: the kernel's C++ from the CUTLASS Python interface, plus the launcher.

The only module that imports `cutlass_cppgen`. Only its code generation is used: its run-time
path imports `cuda.cuda`, which cuda-python 13 removed, and it needs no GPU to emit code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib.metadata
import re
import sqlite3
import string
from pathlib import Path

from cutsearch.problem import Layer
from cutsearch.space import (GEMV_WARPS, SIMT_EPILOGUES, STAGED_WARPS, Config, gemv_shape, gemv_splits,
                             kernel_problem, own_copy_built, row_views)

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
if not TEMPLATES.is_dir():  # installed as a wheel: the templates ship inside the package
    TEMPLATES = Path(__file__).resolve().parent / "templates"


class CodegenError(Exception):
    """The CUTLASS Python interface refused the configuration."""


@dataclasses.dataclass(frozen=True)
class KernelSource:
    operation_name: str
    code: str  # one translation unit: kernel + C-ABI launcher
    cutlass_version: str
    libraries: tuple[str, ...] = ()  # extra libraries to link, e.g. ("cublasLt",)

    @property
    def parts(self) -> tuple[str, str] | None:
        """(headers and shared code, the kernel's own part), where the source can share a unit."""
        at = self.code.find(KERNEL_PART)
        return None if at < 0 else (self.code[:at], self.code[at:])

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.code.encode() + repr(self.libraries).encode()).hexdigest()


# The launcher's marker between what kernels can share and what each owns (templates/launcher.cu).
KERNEL_PART = "// ==== one kernel ===="
_NAMESPACE = "CUTSEARCH_NAMESPACE"
# The toolkit the option registry plans for: the newest tested, whatever nvcc is on PATH.
REGISTRY_CUDA = "13.0"
# The C ABI's functions: renamed per kernel where several share one library.
ABI_FUNCTIONS = ("cs_abi_version", "cs_kernel_name", "cs_error", "cs_workspace_size", "cs_create", "cs_bind",
                 "cs_run", "cs_destroy")


def unit_group(source: KernelSource) -> tuple[str, ...] | None:
    """What sources must share to share a translation unit: None where the source cannot."""
    parts = source.parts
    if parts is None:
        return None
    head, _, rest = _split_includes(parts[0])
    return (head, rest, *source.libraries)


def batch_unit(sources: list[KernelSource]) -> tuple[str, list[str]] | None:
    """One translation unit holding every source, and the symbol prefix of each one's C ABI.

    Headers are parsed once for all. Each kernel keeps its own namespace, so its code and
    symbols are those of its own unit. None where the sources cannot share a unit.
    """
    groups = {unit_group(s) for s in sources}
    if None in groups or len(groups) != 1:
        return None
    parts = [s.parts for s in sources]
    shared = [_split_includes(p[0]) for p in parts]
    includes = list(dict.fromkeys(line for _, inc, _ in shared for line in inc))
    prefixes = [f"k{i}_" for i in range(len(sources))]
    out = [shared[0][0], "\n".join(includes), shared[0][2]]
    for prefix, (_, body) in zip(prefixes, parts):
        out += [f"#define {f} {prefix}{f}" for f in ABI_FUNCTIONS]
        out.append(body)
        out += [f"#undef {f}" for f in ABI_FUNCTIONS]
    return "\n".join(out) + "\n", prefixes


def _split_includes(preamble: str) -> tuple[str, tuple[str, ...], str]:
    """What precedes the first include (macros the headers read), the includes, and the rest."""
    lines = preamble.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith("#include")), len(lines))
    after = lines[first:]
    return ("\n".join(lines[:first]), tuple(line for line in after if line.startswith("#include")),
            "\n".join(line for line in after if not line.startswith("#include")))


def cutlass_version() -> str:
    return importlib.metadata.version("nvidia-cutlass")


def cutlass_include_dirs() -> list[Path]:
    import cutlass_library

    root = Path(cutlass_library.source_path)
    return [root / "include", root / "tools" / "util" / "include"]


@contextlib.contextmanager
def _no_runtime_cache():
    """Importing cutlass_cppgen opens its run-time kernel cache, `compiled_cache.db` in the working
    directory, which cutsearch never uses: it would litter the user's directory, and a read-only
    one fails the import. Opened in memory instead, only for that import."""
    real = sqlite3.connect

    def connect(database, *args, **kwargs):
        return real(":memory:" if database == "compiled_cache.db" else database, *args, **kwargs)

    sqlite3.connect = connect
    try:
        yield
    finally:
        sqlite3.connect = real


@functools.cache
def _cutlass():
    # cutlass_library skips importing its generator when sys.argv holds "-m" (pytest -m gpu
    # does): import it explicitly, the option registry needs it.
    import cutlass_library.generator  # noqa: F401
    import cutlass_library

    with _no_runtime_cache():
        import cutlass_cppgen
    from cutlass_cppgen.library_defaults import OptionRegistry

    # Pre-seed what the interface would otherwise learn by running nvcc: the code emitted must
    # not depend on which nvcc is on PATH (the compiler reports a kernel its toolkit cannot build).
    cutlass_cppgen._nvcc_version = REGISTRY_CUDA
    cutlass_cppgen._option_registry = OptionRegistry(90)
    # Tracing an epilogue from source text needs two imports that module forgets.
    import ast
    import textwrap

    import cutlass_cppgen.epilogue.epilogue as evt_frontend

    evt_frontend.ast, evt_frontend.textwrap = ast, textwrap
    return cutlass_cppgen, cutlass_library


_KERNEL_SCHEDULES = {"auto": "ScheduleAuto", "pingpong": "TmaWarpSpecializedPingpong",
                     "cooperative": "TmaWarpSpecializedCooperative", "ws": "TmaWarpSpecialized"}
_EPILOGUE_SCHEDULES = {
    ("auto", "auto"): "ScheduleAuto",
    ("pingpong", "tma"): "TmaWarpSpecialized",
    ("cooperative", "tma"): "TmaWarpSpecializedCooperative",
    ("pingpong", "nosmem"): "NoSmemWarpSpecialized",
    ("cooperative", "nosmem"): "NoSmemWarpSpecialized",
    ("ws", "tma"): "TmaWarpSpecialized",
    ("ws", "nosmem"): "NoSmemWarpSpecialized",
    # Emitted as nosmem, then given our own epilogue (templates/epilogue.cuh).
    ("cooperative", "staged"): "NoSmemWarpSpecialized",
    ("pingpong", "direct"): "NoSmemWarpSpecialized",
    ("cooperative", "direct"): "NoSmemWarpSpecialized",
    ("ws", "direct"): "NoSmemWarpSpecialized",
    ("pingpong", "fixup"): "NoSmemWarpSpecialized",
    ("cooperative", "fixup"): "NoSmemWarpSpecialized",
    ("ws", "fixup"): "NoSmemWarpSpecialized",
}
# Epilogues of templates/epilogue.cuh, each emitted as nosmem and then swapped in.
OWN_EPILOGUES = ("staged", "direct", "fixup")
_TILE_SCHEDULERS = {"persistent": "Persistent", "streamk": "StreamK", "grid": "Default"}
_GDC_DEFINE = "#ifndef CUTLASS_ENABLE_GDC_FOR_SM90\n#define CUTLASS_ENABLE_GDC_FOR_SM90 1\n#endif"
# CuTe picks the widest WGMMA whose N divides the tile's N, but without this macro it offers only
# these widths: a 160- or 224-wide tile then issues 5 or 7 m64n32 instructions a k-step where one
# m64n160 or m64n224 would do. The macro is defined only for tiles of other widths: its 56,000
# lines of headers cost each translation unit about a third more time in nvcc's front end, and a
# tile of a base width gets the same instruction (and PTX) without it.
EXTENDED_MMA_SHAPES = True
BASE_MMA_WIDTHS = (8, 16, 32, 64, 96, 128, 192, 256)
_EXTENDED_MMA_DEFINE = "#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED 1"


def _epilogue_fn(layer: Layer):
    """The EVT the layer needs, traced by the interface from a Python function."""
    act = layer.activation
    if layer.bias and act != "none":
        src = f"def fc(accum, bias):\n    D = {act}(accum + bias)\n    return D\n"
    elif layer.bias:
        src = "def fc(accum, bias):\n    D = accum + bias\n    return D\n"
    elif act != "none":
        src = f"def fc(accum):\n    D = {act}(accum)\n    return D\n"
    else:
        return None
    return src


def render(layer: Layer, config: Config) -> KernelSource:
    """Emit one translation unit for `config` on `layer`."""
    if config.gemv:
        return render_gemv(layer, config)
    cc, _ = _cutlass()
    kp = kernel_problem(layer, config)
    element = {"f16": cc.DataType.f16, "bf16": cc.DataType.bf16}[layer.dtype]
    # y (M x N row-major) is the swapped kernel's column-major D; y^T flips it once more.
    column_major_d = config.swap_ab != (layer.output == "transposed")
    layout_d = cc.LayoutType.ColumnMajor if column_major_d else cc.LayoutType.RowMajor
    # Split-K with a second kernel writes fp32 partials (16-byte rows of 4) and leaves bias and
    # activation to it; the fixup epilogue keeps its partials in the workspace and writes y.
    fixup = config.epilogue_schedule == "fixup"
    partials = config.split_k and not fixup
    out = cc.DataType.f32 if partials else element
    align_d = 4 if partials else kp.align_d
    try:
        plan = cc.op.Gemm(element_A=element, element_B=element, element_C=out, element_D=out,
                          element_accumulator=cc.DataType.f32,
                          layout_A=cc.LayoutType.RowMajor, layout_B=cc.LayoutType.ColumnMajor,
                          layout_C=layout_d, cc=90, kernel_cc=90)
        # The SIMT epilogues have no visitor tree: D = act(acc + 1 * C), with C the
        # bias broadcast by a zero stride (the launcher sets it), is their fused bias.
        simt_store = config.epilogue_schedule in SIMT_EPILOGUES or fixup
        bias_as_c = layer.bias and simt_store
        fn = None if simt_store or partials else _epilogue_fn(layer)
        if fn is not None:
            plan.epilogue_visitor = _traced_epilogue(fn, layer, config, element, layout_d)
        operation = plan.construct(_tile_description(plan, config), alignment_A=kp.align_ab, alignment_B=kp.align_ab,
                                   alignment_C=align_d)
        kernel = _cta_tile_descriptor(operation.rt_module.emit(), config)
        includes = "\n".join(f'#include "{h}"' for h in operation.rt_module.emitter.includes)
        name = operation.procedural_name()
        if bias_as_c:
            kernel = _bias_layout(kernel, config)
        if config.epilogue_schedule in OWN_EPILOGUES:
            kernel, name = _replace_nosmem_epilogue(kernel, name, layer, config)
        views = row_views(layer)
        if fn is not None and views is not None and views.count > 1:
            kernel = _batched_visitor_output(kernel)
        if fn is not None:
            kernel = _own_activations(kernel, layer)
    except KeyError as exc:
        raise CodegenError(f"no such schedule in this CUTLASS: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - the interface raises bare Exception for invalid configs
        raise CodegenError(str(exc).strip() or type(exc).__name__) from None
    # CUTLASS 4.2's stream-K scheduler does not compile with grid-dependency control.
    gdc = config.tile_scheduler != "streamk"
    if gdc:
        kernel = _wrapped_mainloop(kernel, config)
    code = render_template("launcher.cu", includes=includes, kernel_source=kernel, operation_name=name,
                           abi_checks=abi_checks(), copy_kernels=copy_kernels(), namespace=_NAMESPACE,
                           own_epilogues=own_epilogues() if config.epilogue_schedule in OWN_EPILOGUES else "",
                           own_mainloop=own_mainloop() if gdc else "", prefetch_w=int(gdc),
                           own_copy=int(gdc and own_copy_built(config)),
                           swap_ab=int(config.swap_ab), has_bias=int(fn is not None and layer.bias),
                           has_act=int(fn is not None and layer.activation != "none"),
                           bias_as_c=int(bias_as_c), gdc=int(gdc), gdc_define=_GDC_DEFINE if gdc else "",
                           mma_define=_EXTENDED_MMA_DEFINE if extended_mma(config) else "",
                           split_k=(2 if fixup else 1) if config.split_k else 0,
                           layer_act=ACTIVATIONS[layer.activation], layer_bias=int(layer.bias),
                           y_transposed=int(layer.output == "transposed"))
    # Named by content: equal kernels share a name, different ones can share a translation unit.
    namespace = "cs_" + hashlib.sha256(code.encode()).hexdigest()[:16]
    return KernelSource(operation_name=name, code=code.replace(_NAMESPACE, namespace),
                        cutlass_version=cutlass_version())


def extended_mma(config: Config) -> bool:
    """Whether the tile's width needs CuTe's extended WGMMA shapes."""
    return EXTENDED_MMA_SHAPES and config.tile_n not in BASE_MMA_WIDTHS


def _traced_epilogue(fn: str, layer: Layer, config: Config, element, layout_d):
    """The visitor tree of `fn`, traced on example tensors of the kernel's types and layouts."""
    cc, _ = _cutlass()
    from cutlass_cppgen.backend.evt.ir.tensor import Tensor

    def example(shape, elt, layout=cc.LayoutType.RowMajor):
        return Tensor(element=elt, shape=shape, layout_tag=layout)

    # Fixed example sizes: the tracer reads a unit extent as a broadcast (M=1 would bake
    # a zero row stride into D), and equal sources let every layer share the kernel.
    examples = {"accum": example((2, 2), cc.DataType.f32), "D": example((2, 2), element, layout_d)}
    if layer.bias:
        # The bias follows N: per column of y, per row of y^T when swapped.
        examples["bias"] = example((2, 1) if config.swap_ab else (1, 2), element)
    return cc.epilogue.trace(fn, examples, cc=90)


def _tile_description(plan, config: Config):
    """The plan's first tile description, with the config's tile, cluster, stages and schedules."""
    _, cl = _cutlass()
    return plan.tile_descriptions()[0].clone_and_update({
        "threadblock_shape": [config.tile_m * config.cluster_m, config.tile_n * config.cluster_n, config.tile_k],
        "cluster_shape": [config.cluster_m, config.cluster_n, 1],
        "stages": config.stages or None,
        "kernel_schedule": cl.KernelScheduleType[_KERNEL_SCHEDULES[config.kernel_schedule]],
        "epilogue_schedule": cl.EpilogueScheduleType[_EPILOGUE_SCHEDULES[(config.kernel_schedule, config.epilogue_schedule)]],
        "tile_scheduler": cl.TileSchedulerType[_TILE_SCHEDULERS[config.tile_scheduler]],
    })


def _batched_visitor_output(kernel: str) -> str:
    """Give a visitor tree's D a batch stride: traced from one matrix, it is fixed at zero, and
    x's row views store their rows of y as a batch (space.RowViews)."""
    patched, count = re.subn(r"(using StrideD = cute::Stride<[^;]*), cute::Int<0>>;", r"\1, int64_t>;", kernel)
    if count != 1:
        raise CodegenError("the visitor tree's StrideD has no zero batch stride to replace")
    return patched


# The visitor tree's activations that templates/activation.cuh replaces, and with what
# (studies/scripts/activation_cost.py empties it to measure CUTLASS's own).
OWN_ACTIVATIONS = {"silu": ("cutlass::epilogue::thread::SiLu", "cutsearch_act::SiLu"),
                   "gelu": ("cutlass::epilogue::thread::GELU", "cutsearch_act::Gelu")}


def _own_activations(kernel: str, layer: Layer) -> str:
    """Point the visitor tree's activation at ours where CUTLASS's is slow: its SiLU takes expf
    and an IEEE division per element, its GELU erff, in an epilogue that the mainloop does not
    hide."""
    if layer.activation not in OWN_ACTIVATIONS:
        return kernel
    theirs, ours = OWN_ACTIVATIONS[layer.activation]
    # Whole names only: GELU is also the start of GELU_taylor.
    patched, count = re.subn(re.escape(theirs) + r"\b", ours, kernel)
    if count == 0:
        raise CodegenError(f"the visitor tree has no {theirs} to replace")
    return patched


def _cta_tile_descriptor(kernel: str, config: Config) -> str:
    """The interface describes a fused epilogue with the cluster's tile; its broadcasts index by
    the CTA tile, which the collective builders get. Give the descriptor the CTA tile too."""
    if config.cluster_m == config.cluster_n == 1 or "EpilogueDescriptor<" not in kernel:
        return kernel
    cta = f"cute::Shape<_{config.tile_m}, _{config.tile_n}, _{config.tile_k}>"
    pattern = re.compile(r"(EpilogueDescriptor<\s*)cute::Shape<_\d+, _\d+, _\d+>")
    patched, count = pattern.subn(lambda mt: mt.group(1) + cta, kernel, count=1)
    if count != 1:
        raise CodegenError("unexpected epilogue descriptor in the emitted kernel")
    return patched


def _replace_nosmem_epilogue(kernel: str, name: str, layer: Layer, config: Config) -> tuple[str, str]:
    """Swap the emitted nosmem epilogue for one of ours, which keep its types and arguments."""
    act = ACTIVATIONS[layer.activation]
    own = {"staged": f"cutsearch_staged::StagedEpilogue<CollectiveEpilogueNoSmem, {act}, {STAGED_WARPS}>",
           "direct": f"cutsearch_direct::DirectEpilogue<CollectiveEpilogueNoSmem, {act}>",
           "fixup": f"cutsearch_fixup::FixupEpilogue<CollectiveEpilogueNoSmem, {act}, {config.tile_m}, {config.tile_n}>",
           }[config.epilogue_schedule]
    patched = _wrap_collective(kernel, "CollectiveEpilogue", r"NoSmemWarpSpecialized\s*", "CollectiveEpilogueNoSmem",
                               f"cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<\n    {own}>",
                               "nosmem epilogue")
    tag = f"epi_{config.epilogue_schedule}"
    own_name = name.replace("epi_nosmem", tag) if "epi_nosmem" in name else f"{name}_{config.epilogue_schedule}"
    return patched.replace(name, own_name), own_name


def _wrapped_mainloop(kernel: str, config: Config) -> str:
    """Wrap the emitted mainloop so that W is prefetched into L2 while the kernel waits for x, and
    (the ws kernel, whose producer has no register cap) so that it can copy x itself
    (templates/mainloop.cuh)."""
    args = f"{str(config.swap_ab).lower()}, {str(own_copy_built(config)).lower()}"
    return _wrap_collective(kernel, "CollectiveMainloop", "", "CollectiveMainloopBase",
                            f"cutsearch_mainloop::Mainloop<CollectiveMainloopBase, {args}>", "mainloop")



def _bias_layout(kernel: str, config: Config) -> str:
    """Give C, the bias, the layout of y's D whatever the caller's y: row-major, or column-major
    when A and B swap. The interface gives C the layout of D, and D of y^T would fix C's stride
    across y's rows at a compile-time 1, where the bias needs the zero that the launcher sets."""
    layout = "ColumnMajor" if config.swap_ab else "RowMajor"
    # The epilogue builder's arguments: ..., ElementAccumulator, ElementCompute, ElementC, LayoutC, ...
    pattern = re.compile(r"(epilogue::collective::CollectiveBuilder<.*?float,\s*float,\s*[\w:]+,\s*)"
                         r"cutlass::layout::\w+", re.S)
    patched, count = pattern.subn(rf"\1cutlass::layout::{layout}", kernel, count=1)
    if count != 1:
        raise CodegenError("unexpected epilogue builder in the emitted kernel")
    return patched


def _wrap_collective(kernel: str, name: str, tail: str, base: str, wrapper: str, what: str) -> str:
    """Rename the emitted collective `name` (its builder's arguments ending in `tail`) to `base`,
    and define `name` as `wrapper` around it."""
    pattern = re.compile(rf"using {name} =(.*?{tail}>::CollectiveOp;)", re.S)
    patched, count = pattern.subn(lambda m: f"using {base} ={m.group(1)}\nusing {name} = {wrapper};", kernel, count=1)
    if count != 1:
        raise CodegenError(f"unexpected {what} in the emitted kernel")
    return patched


# The activation ids of the rendered C++ (the split-K reduction and the cuBLAS fallback).
ACTIVATIONS = {"none": 0, "relu": 1, "gelu": 2, "silu": 3}


def render_fallback(layer: Layer) -> KernelSource:
    """The cuBLAS fallback with the same C ABI, for layers no CUTLASS kernel beat cuBLAS on."""
    act = ACTIVATIONS[layer.activation]
    code = render_template("cublas_fallback.cu", is_bf16=int(layer.dtype == "bf16"), has_bias=int(layer.bias), act=act,
                           transposed=int(layer.output == "transposed"), activations=activations(),
                           abi_checks=abi_checks())
    return KernelSource(operation_name="cublas_fallback", code=code, cutlass_version=cutlass_version(),
                        libraries=("cublasLt",))


def render_gemv(layer: Layer, config: Config) -> KernelSource:
    """The gemv kernel (templates/gemv.cu) for `config` on `layer`: no CUTLASS in it."""
    rows, loads = gemv_shape(config, layer.dtype)
    name = f"cutsearch_gemv_{config.tile_m}x{config.tile_n}x{config.tile_k}_{layer.dtype}"
    code = render_template("gemv.cu", operation_name=name, is_bf16=int(layer.dtype == "bf16"),
                           has_bias=int(layer.bias), act=ACTIVATIONS[layer.activation],
                           transposed=int(layer.output == "transposed"), tile_m=config.tile_m, rows=rows, loads=loads,
                           warps=GEMV_WARPS, max_splits=max(gemv_splits(loads)), activations=activations(),
                           abi_checks=abi_checks(), namespace=_NAMESPACE)
    namespace = "cs_" + hashlib.sha256(code.encode()).hexdigest()[:16]
    return KernelSource(operation_name=name, code=code.replace(_NAMESPACE, namespace),
                        cutlass_version=cutlass_version())


def copy_kernels() -> str:
    """The activations, and the per-call pad/unpad, split-K reduction and views' tail kernels,
    inlined so that a kernel's source stands alone."""
    copy = (TEMPLATES / "copy.cuh").read_text()
    reduce = (TEMPLATES / "reduce.cuh").read_text()
    tail = (TEMPLATES / "tail.cuh").read_text()
    return "\n".join((activations(), copy[copy.index("// Per-call layout copy"):],
                      reduce[reduce.index("// Split-K reduction"):], tail[tail.index("// The rows of x past"):]))


def abi_checks() -> str:
    """templates/abi.cuh, inlined: the C ABI's argument checks."""
    text = (TEMPLATES / "abi.cuh").read_text()
    return text[text.index("// The C ABI's argument checks"):]


def activations() -> str:
    """templates/activation.cuh, inlined."""
    text = (TEMPLATES / "activation.cuh").read_text()
    return text[text.index("// The layer's activations"):]


def own_epilogues() -> str:
    """Our own epilogues (they need CUTLASS's headers, which the copies do not)."""
    text = (TEMPLATES / "epilogue.cuh").read_text()
    return text[text.index("// Staged epilogue"):]


def own_mainloop() -> str:
    """templates/mainloop.cuh, inlined (it needs CUTLASS's headers)."""
    text = (TEMPLATES / "mainloop.cuh").read_text()
    return text[text.index("// The mainloop around"):]


def render_template(name: str, **values: object) -> str:
    return string.Template((TEMPLATES / name).read_text()).substitute(values)
