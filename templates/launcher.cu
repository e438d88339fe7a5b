// cutsearch C-ABI launcher for one CUTLASS SM90 GEMM, rendered by cutsearch.
// The layer is y[M,N] = act(x[M,K] @ W[N,K]^T (+ b[N])).
// Layout transforms chosen by the search are applied here, so one call computes y:
//   CS_SWAP_AB : the kernel computes y^T = W x^T (kernel M = N, kernel N = M).
//   pad_k > K  : x is copied per call into a zero-padded workspace buffer, unless the caller
//                hands x over already padded (CS_IO_X_PADDED: row pitch pad_k, finite padding).
//                CS_IO_X_ALIGNED: x comes in 16-byte rows (pitch K rounded up), copied where
//                pad_k is longer (split-K's pitch, which more slice counts cut).
//   pad_n > N  : the kernel writes a padded output that is copied into y, unless the caller
//                accepts y padded (CS_IO_Y_PADDED: row pitch pad_n).
// A transposed output (y^T, N x M) is a property of the kernel's D layout, not of this file.
//   CS_SPLIT_K : K in `splits` slices on the kernel's batch dimension. 1: the kernel writes fp32
//                partials into the workspace, and a second kernel sums them with the bias and
//                activation into y, at y's own pitch (no copy where N is padded). 2: its own
//                epilogue does (templates/epilogue.cuh, fixup), and the workspace's tile
//                counters are zeroed once a binding, not before each call.
//   CS_IO_PDL  : the call's kernels overlap launch and prologue with the kernel before them
//                (programmatic dependent launch); each waits for the writes it reads.
//   CS_IO_X_VIEWS : instead of copying x (pad_k > K), read it in place as P row views, a batch
//                of M / P rows each, against P shifted copies of W that the first call after
//                binding builds in the workspace (cutsearch.space.RowViews). The last M mod P
//                rows, if any, are computed by a second kernel against the unshifted copy
//                (templates/tail.cuh). Where M = 1, x's one row is read in place with the
//                kernel's K cut where it ends (TMA fills the rest of the last k-block with
//                zeros), against W as it is. Ignored where x comes in 16-byte rows or 1 < M < P: x is
//                then copied.
//   CS_IO_W_PREFETCH : with CS_IO_PDL and a copy of x, the GEMM asks L2 for W while it waits
//                for the copy (templates/mainloop.cuh).
//   CS_IO_X_OWN_COPY : where x is copied, the GEMM copies it itself, each CTA the rows its tile
//                reads (under split-K, its slice's columns of them), with W prefetched meanwhile:
//                no copy kernel (templates/mainloop.cuh). Ignored by kernels built without it
//                (CS_OWN_COPY 0), and where those rows' columns do not fit the kernel's staging.
// W and b must already be laid out by the caller: W as [pad_n, pad_k], b as [pad_n].

// Before any include, for CUTLASS's SM90 kernels to wait for the kernel before them only where
// they first read global memory, and let the kernel after them launch at their last tile
// (both no-ops without PDL). Not for stream-K: CUTLASS 4.2's stream-K scheduler does not
// compile with it, so those kernels are never launched early (CS_GDC 0).
${gdc_define}
// Before any include, for CuTe to offer every WGMMA width, where the tile needs one of the
// extended widths (cutsearch.codegen.extended_mma).
${mma_define}

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <type_traits>

#include <cuda_runtime.h>

${includes}
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/util/packed_stride.hpp"

${abi_checks}

${copy_kernels}

${own_epilogues}

${own_mainloop}

// ==== one kernel ====
// Everything below belongs to one kernel, in a namespace named by its content, so that several
// kernels can share one translation unit (their headers parsed once) and still compile to the
// same machine code, under the same symbol names, as alone.
namespace ${namespace} {

#define CS_SWAP_AB ${swap_ab}
#define CS_HAS_BIAS ${has_bias}
#define CS_HAS_ACT ${has_act}
#define CS_BIAS_AS_C ${bias_as_c}
#define CS_GDC ${gdc}
#define CS_PREFETCH_W ${prefetch_w}
#define CS_OWN_COPY ${own_copy}
#define CS_SPLIT_K ${split_k}
// The layer's activation and bias, for the kernels beside the GEMM: split-K's sum, the views' tail.
#define CS_LAYER_ACT ${layer_act}
#define CS_LAYER_BIAS ${layer_bias}
#define CS_Y_TRANSPOSED ${y_transposed}

// ---- kernel emitted by the CUTLASS Python interface ----------------------------------------
${kernel_source}
// --------------------------------------------------------------------------------------------

// Named rather than anonymous: nvcc's host stubs cannot name kernels in an anonymous namespace.
namespace cutsearch_impl {

using GemmKernel = ${operation_name}_type;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
using ElementA = typename GemmKernel::ElementA;
using ElementB = typename GemmKernel::ElementB;
using ElementD = typename GemmKernel::ElementD;
using StrideA = typename GemmKernel::StrideA;
using StrideB = typename GemmKernel::StrideB;
using StrideD = typename GemmKernel::StrideD;
using SchedulerArgs = typename GemmKernel::TileSchedulerArguments;
// Where the layer's bias reaches y: the visitor tree, C with a zero stride, or the split-K reduction.
constexpr bool kReadsBias = CS_HAS_BIAS || CS_BIAS_AS_C || (CS_SPLIT_K == 1 && CS_LAYER_BIAS);

// Stream-K has splits and a decomposition mode; the persistent scheduler has neither.
template <class T, class = void> struct has_splits : std::false_type {};
template <class T> struct has_splits<T, std::void_t<decltype(std::declval<T&>().splits)>> : std::true_type {};
template <class T, class = void> struct has_raster : std::false_type {};
template <class T> struct has_raster<T, std::void_t<decltype(std::declval<T&>().raster_order)>> : std::true_type {};

// A template, so that the branch for the other scheduler is discarded rather than compiled.
template <class S>
void set_scheduler(S& s, int raster, int swizzle, int splits, int decomposition, int reduction) {
  if constexpr (has_raster<S>::value) {
    using R = decltype(s.raster_order);
    s.raster_order = raster == 1 ? R::AlongM : raster == 2 ? R::AlongN : R::Heuristic;
    s.max_swizzle_size = swizzle > 0 ? swizzle : 1;
  }
  if constexpr (has_splits<S>::value) {
    using D = decltype(s.decomposition_mode);
    s.splits = splits > 0 ? splits : 1;
    s.decomposition_mode = decomposition == 1 ? D::DataParallel
                         : decomposition == 2 ? D::SplitK
                         : decomposition == 3 ? D::StreamK : D::Heuristic;
    using Red = decltype(s.reduction_mode);
    s.reduction_mode = reduction == 1 ? Red::Nondeterministic : Red::Deterministic;
  }
}

[[maybe_unused]] inline size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

// Whether a stride's batch mode is a run-time value: a visitor-tree epilogue traced for one
// matrix fixes D's at zero, and then the views' batch cannot be stored.
template <class S>
constexpr bool batched = !cute::is_static<std::remove_cv_t<std::remove_reference_t<
    decltype(cute::get<2>(std::declval<S&>()))>>>::value;
constexpr bool kBatchedD = batched<StrideD>;

// A template, so that the assignment to a static batch stride is discarded rather than compiled.
template <class S>
void set_batch_stride(S& s, int64_t v) {
  if constexpr (batched<S>) cute::get<2>(s) = v;
}

// C's strides before any C is bound: D's, unless C's layout differs from D's, as it does only
// where the bias is C and y is y^T (codegen), and the launcher then binds C's own.
template <class StrideC, class StrideD>
StrideC unbound_c_stride(StrideD const& dD) {
  if constexpr (std::is_same_v<StrideC, StrideD>) return dD;
  else return StrideC{};
}

}  // namespace cutsearch_impl

using namespace cutsearch_impl;

enum { CS_IO_X_PADDED = 1, CS_IO_Y_PADDED = 2, CS_IO_PDL = 4, CS_IO_X_VIEWS = 8, CS_IO_W_PREFETCH = 16,
       CS_IO_X_OWN_COPY = 32, CS_IO_X_ALIGNED = 64 };

struct cs_layer {
  int m, n, k, pad_n, pad_k, io;
  int x_pitch;  // x's row pitch as the caller hands it over: k, pad_k (CS_IO_X_PADDED) or K's 16-byte rows
  int km, kn, kk;  // the kernel's problem after the transforms
  int splits = 1;  // K slices under CS_SPLIT_K
  int views = 1, view_shift = 0;  // x's row views (P) and each one's shift (q) under CS_IO_X_VIEWS
  int tail = 0;  // x's rows past the views' batch, M mod P
  bool k_cut = false;  // M = 1 under CS_IO_X_VIEWS: the kernel's K is x's, its pitch pad_k
  bool own_copy = false;  // CS_IO_X_OWN_COPY where x is copied: by the GEMM, no copy kernel
  int batches = 1;  // the kernel's batch: the K slices or the views
  cutlass::KernelHardwareInfo hw;
  SchedulerArgs scheduler{};
  typename Gemm::Arguments args{};
  Gemm gemm;
  size_t kernel_ws = 0, x_pad_bytes = 0, y_pad_bytes = 0, parts_bytes = 0, w_views_bytes = 0;
  bool ws_zeroed = false;  // the fixup's counters, since the workspace was bound
  bool epilogue_ws = false;  // the kernel's workspace is its epilogue's alone (the ws grid's fixup)
  bool w_views_built = false;  // W's shifted copies, since W or the workspace was bound
  const void* x = nullptr;
  const void* w = nullptr;
  const void* bias = nullptr;
  void* y = nullptr;
  char* ws = nullptr;
  bool bound = false;
  char error[512] = {0};
};

using cutsearch_abi::fail;

extern "C" {

int cs_abi_version(void) { return 3; }
const char* cs_kernel_name(void) { return "${operation_name}"; }
const char* cs_error(const cs_layer* h) { return cutsearch_abi::cs_error_of(h ? h->error : nullptr, h); }
size_t cs_workspace_size(const cs_layer* h) {
  return h ? round_up(h->kernel_ws, 256) + round_up(h->x_pad_bytes, 256) + round_up(h->y_pad_bytes, 256) +
             round_up(h->parts_bytes, 256) + h->w_views_bytes : 0;
}

[[maybe_unused]] static int gcd(int a, int b) { return b ? gcd(b, a % b) : a; }

// raster: 0 heuristic, 1 along M, 2 along N. decomposition: 0 heuristic, 1 data-parallel,
// 2 split-K, 3 stream-K. reduction: 0 deterministic, 1 nondeterministic (split partials
// reduced in any order). Each is ignored where the tile scheduler has no such knob. splits:
// stream-K's splits, or a split-K kernel's K slices (at least 2, each a 16-byte multiple).
// io: CS_IO_* flags, the layouts the caller hands over and accepts.
int cs_create(cs_layer** out, int m, int n, int k, int pad_n, int pad_k, int device,
              int raster, int swizzle, int splits, int decomposition, int reduction, int io) {
  if (!out) return cutsearch_abi::refuse("cs_create: out is null");
  *out = nullptr;
  if (cutsearch_abi::check_create(m, n, k, pad_n, pad_k, device, io)) return 1;
  const int vec = int(16 / sizeof(ElementA));
#if CS_SPLIT_K
  // Each slice a 16-byte multiple, as TMA needs of the batch stride.
  if (splits < 2 || pad_k % (splits * vec) != 0)
    return cutsearch_abi::refuse("cs_create: %d splits do not cut pad_k = %d into slices of whole 16-byte vectors",
                                 splits, pad_k);
#endif
  cs_layer* h = new (std::nothrow) cs_layer();
  if (!h) return cutsearch_abi::refuse("cs_create: out of host memory");
  h->m = m; h->n = n; h->k = k; h->pad_n = pad_n; h->pad_k = pad_k; h->io = io;
  h->x_pitch = io & CS_IO_X_PADDED ? pad_k : io & CS_IO_X_ALIGNED ? (k + vec - 1) / vec * vec : k;
  h->kk = pad_k;
#if CS_SPLIT_K
  h->splits = h->batches = splits;
  h->kk = pad_k / splits;
#elif !CS_Y_TRANSPOSED
  if (kBatchedD && (io & CS_IO_X_VIEWS) && h->x_pitch == k && pad_k != k && m >= vec / gcd(k, vec)) {
    h->views = h->batches = vec / gcd(k, vec);
    h->view_shift = k % vec;
    h->tail = m % h->views;
    h->kk = k + (h->views - 1) * h->view_shift;  // a vector multiple: the last view ends at row P * (M / P) of x
  } else if ((io & CS_IO_X_VIEWS) && h->x_pitch == k && pad_k != k && m == 1) {
    // One row has no pitch to align: TMA reads it up to K and fills the rest with zeros.
    h->k_cut = true;
    h->kk = k;
  }
#endif
  h->km = CS_SWAP_AB ? pad_n : m / h->views;
  h->kn = CS_SWAP_AB ? m / h->views : pad_n;
  h->hw.device_id = device;
  h->hw.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(device);
  set_scheduler(h->scheduler, raster, swizzle, splits, decomposition, reduction);
  // Sizes depend on the problem and scheduler only, so the workspace is known before binding.
  typename Gemm::Arguments probe = {cutlass::gemm::GemmUniversalMode::kGemm,
                                    {h->km, h->kn, h->kk, h->batches}, {}, {}, h->hw, h->scheduler};
  h->kernel_ws = Gemm::get_workspace_size(probe);
  // CUTLASS's non-persistent ws kernel sizes and zeroes no workspace, yet hands its epilogue the
  // one it is given: there the fixup's counters and partials take all of it.
  const size_t epilogue_ws = GemmKernel::CollectiveEpilogue::get_workspace_size(probe.problem_shape, probe.epilogue);
  h->epilogue_ws = h->kernel_ws < epilogue_ws;
  if (h->epilogue_ws) h->kernel_ws = epilogue_ws;
  h->x_pad_bytes = pad_k != h->x_pitch && h->views == 1 && !h->k_cut ? size_t(m) * pad_k * sizeof(ElementA) : 0;
#if CS_OWN_COPY
  // x is copied only without the views, so the kernel's batch, if any, is split-K's slices.
  h->own_copy = (io & CS_IO_X_OWN_COPY) && h->x_pad_bytes && h->x_pitch == k &&  // it reads rows of pitch k
                GemmKernel::CollectiveMainloop::copies_rows_of(h->splits > 1 ? h->kk : k);
#endif
  // P copies of W, [P, pad_n, K'], and one row of slack that the last copy's shifted rows reach.
  h->w_views_bytes = h->views > 1 ? (size_t(h->views) * pad_n + 1) * h->kk * sizeof(ElementA) : 0;
  // Split-K's reduction kernel writes y at its own pitch: no padded copy of y.
  h->y_pad_bytes = CS_SPLIT_K != 1 && pad_n != n && !(io & CS_IO_Y_PADDED) ? size_t(m) * pad_n * sizeof(ElementD) : 0;
  h->parts_bytes = CS_SPLIT_K == 1 ? size_t(h->splits) * h->km * h->kn * sizeof(ElementD) : 0;
  *out = h;
  return 0;
}

// Arguments are rebuilt only when a pointer changes: the TMA descriptors and epilogue hold them.
int cs_bind(cs_layer* h, const void* x, const void* w, const void* bias, void* y, void* workspace) {
  if (!h) return 1;
  if (h->bound && x == h->x && w == h->w && bias == h->bias && y == h->y && workspace == h->ws) return 0;
  // A copied x (by the copy kernel or the GEMM's own copy) may start at any element.
  if (const char* problem = cutsearch_abi::bind_problem(x, w, bias, kReadsBias, y, workspace, cs_workspace_size(h),
                                                         h->x_pad_bytes ? sizeof(ElementA) : 16, 16)) {
    h->bound = false;
    return fail(h, "cs_bind", problem);
  }
  if (!h->bound || workspace != h->ws) h->ws_zeroed = false;
  if (!h->bound || workspace != h->ws || w != h->w) h->w_views_built = false;
  h->x = x; h->w = w; h->y = y; h->ws = static_cast<char*>(workspace); h->bias = bias;
  char* ws_kernel = h->ws;
  char* x_pad = h->ws + round_up(h->kernel_ws, 256);
  char* y_pad = x_pad + round_up(h->x_pad_bytes, 256);
  char* parts = y_pad + round_up(h->y_pad_bytes, 256);
  char* w_views = parts + round_up(h->parts_bytes, 256);
  const void* x_eff = h->x_pad_bytes ? static_cast<const void*>(x_pad) : x;
  const void* w_eff = h->views > 1 ? static_cast<const void*>(w_views) : w;
  void* y_eff = h->parts_bytes ? static_cast<void*>(parts) : h->y_pad_bytes ? static_cast<void*>(y_pad) : y;
  const void* a = CS_SWAP_AB ? w_eff : x_eff;
  const void* b = CS_SWAP_AB ? x_eff : w_eff;
  // Under the cut, W's rows and x's one row keep the pitch pad_k that TMA needs.
  const int pitch_k = h->k_cut ? h->pad_k : h->kk;
  auto dA = cutlass::make_cute_packed_stride(StrideA{}, cute::make_shape(h->km, pitch_k, h->batches));
  auto dB = cutlass::make_cute_packed_stride(StrideB{}, cute::make_shape(h->kn, pitch_k, h->batches));
  auto dD = cutlass::make_cute_packed_stride(StrideD{}, cute::make_shape(h->km, h->kn, h->batches));
#if CS_SPLIT_K
  // Slice l of A and B is columns [l * kk, (l + 1) * kk) of their K-major rows of pad_k.
  cute::get<0>(dA) = h->kk * h->splits; cute::get<2>(dA) = h->kk;
  cute::get<0>(dB) = h->kk * h->splits; cute::get<2>(dB) = h->kk;
#elif !CS_Y_TRANSPOSED  // y^T's unit stride is where the views would step by P rows (no views)
  if (h->views > 1) {
    // View i: rows i, i + P, ... of x, from i * (K - q) elements in; W' is packed [P, pad_n, K'];
    // y's rows i, i + P, ... are its rows of pitch pad_n (D^T's columns when swapped).
    const int64_t p = h->views, x_rows = p * h->k, x_view = h->k - h->view_shift, pitch = h->pad_n;
    auto view_x = [&](auto& d) { cute::get<0>(d) = x_rows; cute::get<2>(d) = x_view; };
    if constexpr (CS_SWAP_AB) view_x(dB); else view_x(dA);
    cute::get<CS_SWAP_AB ? 1 : 0>(dD) = p * pitch;
    set_batch_stride(dD, pitch);
  }
#endif
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {h->km, h->kn, h->kk, h->batches},
      {static_cast<ElementA const*>(a), dA, static_cast<ElementB const*>(b), dB},
      {{}, nullptr, unbound_c_stride<typename GemmKernel::StrideC>(dD), static_cast<ElementD*>(y_eff), dD},
      h->hw,
      h->scheduler};
#if CS_PREFETCH_W
  // Only where the GEMM is launched early and waits for the copy of x (cs_run), or copies it.
  args.mainloop.prefetch_w =
      h->own_copy || ((h->io & CS_IO_W_PREFETCH) && (h->io & CS_IO_PDL) && h->x_pad_bytes && !h->kernel_ws);
#endif
#if CS_OWN_COPY
  args.mainloop.x = h->own_copy ? x : nullptr;
  args.mainloop.x_k = h->k;
  args.mainloop.x_pitch = h->pad_k;
#endif
#if CS_HAS_BIAS && CS_HAS_ACT
  args.epilogue.thread = {{{}, {static_cast<ElementD const*>(bias)}, {}}, {}};
#elif CS_HAS_BIAS
  args.epilogue.thread = {{}, {static_cast<ElementD const*>(bias)}, {}};
#elif CS_BIAS_AS_C
  // No visitor tree (the nosmem epilogue): D = acc + 1 * C, where C is the bias with a zero
  // stride across y's rows: C is y's layout (codegen), whether D is y or y^T, so the zero is its
  // leading dimension, row-major or (A and B swapped) column-major.
  using StrideC = typename GemmKernel::StrideC;
  auto dC = cutlass::make_cute_packed_stride(StrideC{}, cute::make_shape(h->km, h->kn, 1));
  cute::get<CS_SWAP_AB ? 1 : 0>(dC) = 0;
  set_batch_stride(dC, 0);  // and across the views' batch
  args.epilogue.ptr_C = static_cast<typename GemmKernel::ElementC const*>(bias);
  args.epilogue.dC = dC;
  args.epilogue.thread.beta = 1;
#else
  (void)bias;
#endif
  // CUTLASS's check asks for a K of whole vectors, which TMA needs of pitches and bases only: under
  // the cut, the check runs on pad_k and the launch has x's K.
  typename Gemm::Arguments check = args;
  cute::get<2>(check.problem_shape) = pitch_k;
  cutlass::Status st = Gemm::can_implement(check);
  // A refused binding leaves none: cs_run refuses, and the next cs_bind starts over.
  auto unbind = [h](const char* what, const char* detail) { h->bound = false; return fail(h, what, detail); };
  if (st != cutlass::Status::kSuccess) return unbind("can_implement", cutlassGetStatusString(st));
  // update, not initialize, even the first time: initialize would also zero the workspace on the
  // legacy default stream, outside the caller's stream (and any graph capture); cs_run does that.
  if (!h->bound && GemmKernel::SharedStorageSize >= (48 << 10)) {
    if (cudaFuncSetAttribute(cutlass::device_kernel<GemmKernel>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(GemmKernel::SharedStorageSize)) != cudaSuccess)
      return unbind("cudaFuncSetAttribute", cudaGetErrorString(cudaGetLastError()));
  }
  st = h->gemm.update(args, ws_kernel);
  if (st != cutlass::Status::kSuccess) return unbind("update", cutlassGetStatusString(st));
  h->args = args;
  h->bound = true;
  return 0;
}

// One layer call: the per-call transforms, the workspace reset stream-K needs,
// and the kernel, all on `stream`, so they are captured by CUDA graphs and counted by timers.
int cs_run(cs_layer* h, void* stream) {
  if (!h || !h->bound) return fail(h, "cs_run", "cs_bind was not called");
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  char* x_pad = h->ws + round_up(h->kernel_ws, 256);
  char* y_pad = x_pad + round_up(h->x_pad_bytes, 256);
  const bool pdl = h->io & CS_IO_PDL;
  if (h->views > 1 && !h->w_views_built) {
    // Once a binding, on the call's stream: copy i of W shifted right by i * q, zeros around it.
    // Each copy's rows overrun by i * q into the next row's zero head, the last into the slack.
    auto* w_views = reinterpret_cast<ElementA*>(y_pad + round_up(h->y_pad_bytes, 256) + round_up(h->parts_bytes, 256));
    cudaError_t ze = cudaMemsetAsync(w_views, 0, h->w_views_bytes, s);
    if (ze != cudaSuccess) return fail(h, "cudaMemsetAsync", cudaGetErrorString(ze));
    for (int i = 0; i < h->views; ++i) {
      cudaError_t ce = cutsearch_copy::launch_repitch(
          w_views + size_t(i) * h->pad_n * h->kk + size_t(i) * h->view_shift, h->kk,
          static_cast<const ElementA*>(h->w), h->pad_k, h->pad_n, h->k, s);
      if (ce != cudaSuccess) return fail(h, "launch", cudaGetErrorString(ce));
    }
    h->w_views_built = true;
  }
  if (h->x_pad_bytes && !h->own_copy) {
    cutsearch_copy::launch_repitch(reinterpret_cast<ElementA*>(x_pad), h->pad_k,
                                   static_cast<const ElementA*>(h->x), h->x_pitch, h->m, h->k, s,
                                   /*pdl=*/false, /*trigger=*/pdl);
  }
  // Stream-K and split-K's fixup count arrivals in the workspace: stream-K before every launch,
  // the fixup once (its last arrival resets each counter).
  if (h->kernel_ws && (CS_SPLIT_K != 2 || !h->ws_zeroed)) {
    cutlass::Status st =
        h->epilogue_ws
            ? GemmKernel::CollectiveEpilogue::initialize_workspace(h->args.problem_shape, h->args.epilogue, h->ws, s)
            : GemmKernel::initialize_workspace(h->args, h->ws, s);
    if (st != cutlass::Status::kSuccess) return fail(h, "initialize_workspace", cutlassGetStatusString(st));
    h->ws_zeroed = true;
  }
  // Overlap only with our own copy: a workspace reset in between is a memset, not a kernel. A
  // GEMM built without grid-dependency control would not wait for the copy's writes.
  cutlass::Status st = h->gemm.run(s, nullptr, CS_GDC && pdl && h->x_pad_bytes && !h->own_copy && !h->kernel_ws);
  if (st != cutlass::Status::kSuccess) return fail(h, "run", cutlassGetStatusString(st));
#if CS_SPLIT_K == 1
  // The partials are [m, pad_n] either way (D^T column-major when swapped is the same bytes);
  // y's rows are n apart, or pad_n where the caller accepts y padded.
  cudaError_t re = cutsearch_reduce::launch_sum_splits<CS_LAYER_ACT>(
      static_cast<ElementA*>(h->y), (h->io & CS_IO_Y_PADDED) ? h->pad_n : h->n,
      reinterpret_cast<const float*>(y_pad + round_up(h->y_pad_bytes, 256)), h->pad_n, h->m, h->n, h->splits,
      CS_LAYER_BIAS ? static_cast<const ElementA*>(h->bias) : nullptr, h->hw.sm_count, s, CS_GDC && pdl);
  if (re != cudaSuccess) return fail(h, "launch", cudaGetErrorString(re));
#endif
#if !CS_SPLIT_K && !CS_Y_TRANSPOSED  // the views' conditions (cs_create); split-K's D is fp32 partials
  if (h->tail) {
    // Rows P * (M / P) on, against copy 0 of W (unshifted), into y's rows of pitch pad_n (y_pad or y).
    const int first = h->m - h->tail;
    auto* w_views = reinterpret_cast<const ElementA*>(y_pad + round_up(h->y_pad_bytes, 256) + round_up(h->parts_bytes, 256));
    auto* y_rows = static_cast<ElementD*>(h->y_pad_bytes ? static_cast<void*>(y_pad) : h->y) + size_t(first) * h->pad_n;
    cudaError_t te = cutsearch_tail::launch_tail_rows<CS_LAYER_ACT>(
        y_rows, h->pad_n, static_cast<const ElementA*>(h->x) + size_t(first) * h->k, h->tail, h->k, w_views, h->kk,
        h->pad_n, CS_LAYER_BIAS ? static_cast<const ElementD*>(h->bias) : nullptr, h->hw.sm_count, s, pdl);
    if (te != cudaSuccess) return fail(h, "launch", cudaGetErrorString(te));
  }
#endif
  if (h->y_pad_bytes) {
    // Direct: y_pad is [m, pad_n] row-major. Swapped: y^T is [pad_n, m] column-major,
    // which is the same bytes. Either way row i of y starts at i * pad_n.
    cutsearch_copy::launch_repitch(static_cast<ElementD*>(h->y), h->n,
                                   reinterpret_cast<const ElementD*>(y_pad), h->pad_n, h->m, h->n, s,
                                   /*pdl=*/pdl);
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return fail(h, "launch", cudaGetErrorString(e));
  return 0;
}

void cs_destroy(cs_layer* h) { delete h; }

}  // extern "C"

}  // namespace ${namespace}
#undef CS_SWAP_AB
#undef CS_HAS_BIAS
#undef CS_HAS_ACT
#undef CS_BIAS_AS_C
#undef CS_GDC
#undef CS_PREFETCH_W
#undef CS_OWN_COPY
#undef CS_SPLIT_K
#undef CS_LAYER_ACT
#undef CS_LAYER_BIAS
#undef CS_Y_TRANSPOSED
