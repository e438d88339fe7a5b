// Gemm operator ${operation_name}
// cutsearch's kernel for a few rows of x, on CUDA cores, behind the same C ABI as the CUTLASS
// kernels. y[M,N] = act(x[M,K] @ W[N,K]^T (+ b[N])), fp32 sums.
//
// Where M is a handful of rows, the layer is W streamed once: a warp owns kRows consecutive rows
// of W and its lanes split K in 16-byte vectors; each lane issues its kLoads x kRows loads of W
// before it uses any, and reads x through the read-only path (M x K is small and stays in L1/L2).
// A block of kWarps warps covers kRows * kWarps / splits rows of W and kTileM rows of x (the
// grid's y covers the rest of M): `splits`, a run-time knob, is how many warps share a row's K,
// summed through shared memory, so that a W of few rows still fills the SMs with loads. W's rows
// must be whole 16-byte vectors (it is padded once, when bound); x's need not be: where K leaves
// them unaligned, each lane cuts x's elements out of two vectors.
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <new>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define CS_BF16 ${is_bf16}
#define CS_HAS_BIAS ${has_bias}
#define CS_ACT ${act}  // 0 none, 1 relu, 2 gelu, 3 silu
#define CS_OUT_T ${transposed}  // y^T (N x M) instead of y

#define CS_IO_X_PADDED 1
#define CS_IO_Y_PADDED 2
#define CS_IO_X_ALIGNED 64

${activations}

${abi_checks}

namespace ${namespace} {

#if CS_BF16
using T = __nv_bfloat16;
__device__ __forceinline__ float2 pair(unsigned bits) {
  return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&bits));
}
#else
using T = __half;
__device__ __forceinline__ float2 pair(unsigned bits) { return __half22float2(*reinterpret_cast<__half2*>(&bits)); }
#endif

constexpr int kTileM = ${tile_m};  // rows of x a block computes
constexpr int kRows = ${rows};     // rows of W a warp owns
constexpr int kLoads = ${loads};   // 16-byte loads of each row a lane has in flight
constexpr int kWarps = ${warps};
constexpr int kMaxSplits = ${max_splits};  // warps that may share a row's K (space.gemv_splits)
constexpr int kVec = 16 / int(sizeof(T));

__device__ __forceinline__ void fma8(float& acc, const uint4& a, const uint4& b) {
  const unsigned* pa = reinterpret_cast<const unsigned*>(&a);
  const unsigned* pb = reinterpret_cast<const unsigned*>(&b);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fa = pair(pa[i]), fb = pair(pb[i]);
    acc = fmaf(fa.x, fb.x, acc);
    acc = fmaf(fa.y, fb.y, acc);
  }
}

// Reading x, host and device code alike, so that a test runs it on the CPU (tests/test_gemv.py).
__host__ __device__ __forceinline__ uint4 load_x(const uint4* p) {
#ifdef __CUDA_ARCH__
  return __ldg(p);  // x is small and read by every warp: the read-only path keeps it in L1
#else
  return *p;
#endif
}

// The 16 bytes that start `s` elements into lo, running on into hi. s is the same for a whole
// row of x, so every lane of a warp takes the same selects: an indexed register array would go
// to local memory.
__host__ __device__ __forceinline__ uint4 cut(const uint4& lo, const uint4& hi, int s) {
  const unsigned c[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  const int q = s / 2;
  const int bits = (s % 2) * 16;
  unsigned d[5];
#pragma unroll
  for (int j = 0; j < 5; ++j) d[j] = q == 0 ? c[j] : q == 1 ? c[j + 1] : q == 2 ? c[j + 2] : c[j + 3];
  unsigned out[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) out[j] = unsigned((((unsigned long long)d[j + 1] << 32) | d[j]) >> bits);  // one SHF
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// x as 16-byte vectors from the one that holds its first element, and how many elements into
// that one it starts (a caller may hand over x at any element).
__host__ __device__ __forceinline__ const uint4* x_vectors(const void* x, int* off) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(x);
  *off = int(p % 16 / sizeof(T));
  return reinterpret_cast<const uint4*>(p - p % 16);
}

// Where a block's rows of x lie, x_ld elements apart from `off` elements into xv, where either
// leaves rows unaligned (rows past m read row m - 1 again, never stored): row i from vector
// at[i], shift[i] elements into it; the last vector that holds any of x; how many elements of a
// row's last vector are still in K: past them lie the next row's, which W's zeros would turn
// into NaN where they are infinite.
struct XRows {
  long long at[kTileM];
  int shift[kTileM];
  long long last;
  int in_k;  // 1..kVec elements of a row's last vector
};

// Word t of a row's last vector, as much of it as is still in K.
__host__ __device__ __forceinline__ unsigned in_k(unsigned word, int t, int elements) {
  return 2 * t + 1 < elements ? word : 2 * t < elements ? word & 0xffffu : 0u;
}

__host__ __device__ __forceinline__ XRows x_rows(int m0, int m, long long x_ld, int k, int off) {
  XRows r;
#pragma unroll
  for (int i = 0; i < kTileM; ++i) {
    const long long e = off + (m0 + (i < m - 1 - m0 ? i : m - 1 - m0)) * x_ld;
    r.at[i] = e / kVec;
    r.shift[i] = int(e % kVec);
  }
  r.last = (off + (m - 1) * x_ld + k - 1) / kVec;
  r.in_k = k - (k - 1) / kVec * kVec;
  return r;
}

// Row i's elements [v * kVec, v * kVec + kVec) of K, zero past K.
__host__ __device__ __forceinline__ uint4 x_vector(const uint4* xv, const XRows& r, int i, int v, int vectors) {
  uint4 lo = load_x(xv + r.at[i] + v);
  const long long next = r.at[i] + v + 1;
  const uint4 hi = r.shift[i] ? load_x(xv + (next < r.last ? next : r.last)) : lo;
  lo = cut(lo, hi, r.shift[i]);
  if (v == vectors - 1)
    lo = make_uint4(in_k(lo.x, 0, r.in_k), in_k(lo.y, 1, r.in_k), in_k(lo.z, 2, r.in_k), in_k(lo.w, 3, r.in_k));
  return lo;
}

// vectors: K's 16-byte vectors a row; x_ldv, w_ld: x's and W's row pitches in vectors; y_ld: y's
// row pitch in elements (y^T: N rows of pitch m). kShift: x's rows are not whole vectors, or x
// starts x_off elements into its first (x_vectors); x_ld, in elements, is then x's pitch.
// kSplit: warps share a row's K, `splits` of them (dividing kWarps: cs_create checks); without
// it the kernel is the one measured before splits were (its registers are as they were).
template <bool kShift, bool kSplit>
__global__ void __launch_bounds__(kWarps * 32) gemv(T* __restrict__ y, long long y_ld, const T* __restrict__ x,
                                                     long long x_ldv, int m, const T* __restrict__ w, long long w_ld,
                                                     int n, int vectors, const T* __restrict__ bias, long long x_ld,
                                                     int k, int x_off, int splits_arg) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int splits = kSplit ? splits_arg : 1;
  const int part = warp % splits;  // of the K a warp's group of `splits` shares
  // Each part a run of whole passes of the warp: a stride of `splits` passes spilled registers.
  constexpr int kPass = 32 * kLoads;
  const int chunk = ((vectors + kPass - 1) / kPass + splits - 1) / splits * kPass;
  const int begin = kSplit ? part * chunk : 0;
  const int end = kSplit ? min(vectors, begin + chunk) : vectors;
  const long long row0 = ((long long)blockIdx.x * (kWarps / splits) + warp / splits) * kRows;
  const int m0 = blockIdx.y * kTileM;
  // Whole warps past W's rows exit: PTX's barrier waits only for threads that have not.
  if (row0 >= n) return;
  const uint4* xv = reinterpret_cast<const uint4*>(x) + (kShift ? 0 : m0 * x_ldv);
  const uint4* wv = reinterpret_cast<const uint4*>(w);
  const XRows xr = x_rows(m0, m, x_ld, k, x_off);  // unused, and so not computed, where !kShift
  float acc[kRows][kTileM];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int i = 0; i < kTileM; ++i) acc[r][i] = 0.f;
#pragma unroll 1
  for (int v0 = begin + lane; v0 < end; v0 += kPass) {
    uint4 held[kLoads][kRows];
#pragma unroll
    for (int u = 0; u < kLoads; ++u)
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int v = v0 + 32 * u;
        // W is read once: streaming loads keep it from evicting x.
        held[u][r] = v < vectors && row0 + r < n ? __ldcs(wv + (row0 + r) * w_ld + v) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      // Past K (zeroed there where x's rows are unaligned), and in rows past m, x is read from
      // where it is valid and meets zeros of W or is dropped: no branch keeps the loads apart.
      const int v = min(v0 + 32 * u, vectors - 1);
#pragma unroll
      for (int i = 0; i < kTileM; ++i) {
        const uint4 xi = kShift ? x_vector(xv, xr, i, v, vectors) : __ldg(xv + min(i, m - 1 - m0) * x_ldv + v);
#pragma unroll
        for (int r = 0; r < kRows; ++r) fma8(acc[r][i], held[u][r], xi);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int i = 0; i < kTileM; ++i)
#pragma unroll
      for (int o = 16; o > 0; o /= 2) acc[r][i] += __shfl_xor_sync(0xffffffffu, acc[r][i], o);
  // Lane j stores output j of the warp's kRows x kTileM (at most 16), so that no lane stores them all.
  static_assert(kRows * kTileM <= 32, "a lane an output");
  float v = 0.f;
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int i = 0; i < kTileM; ++i)
      if (lane == r * kTileM + i) v = acc[r][i];
  if (kSplit) {  // the group's first warp sums its parts, in order: the same sum every call
    __shared__ float parts[kWarps][kRows * kTileM];
    if (lane < kRows * kTileM) parts[warp][lane] = v;
    __syncthreads();
    if (part) return;
    v = 0.f;
    for (int p = 0; p < splits; ++p) v += parts[warp + p][lane % (kRows * kTileM)];
  }
  const long long c = row0 + lane / kTileM;
  const int row = m0 + lane % kTileM;
  if (lane >= kRows * kTileM || c >= n || row >= m) return;
  if (CS_HAS_BIAS) v += float(bias[c]);
  v = cutsearch_act::activate<CS_ACT>(v);
  y[CS_OUT_T ? c * y_ld + row : row * y_ld + c] = T(v);
}

// Only where warps may share a row is the split kernel built: with eight loads a lane in flight
// its registers spilled.
template <bool kShift>
auto* kernel_for(int splits) {
  if constexpr (kMaxSplits > 1)
    if (splits > 1) return gemv<kShift, true>;
  return gemv<kShift, false>;
}

}  // namespace ${namespace}

struct cs_layer {
  int m, n, k, pad_n, pad_k, io, splits;
  long long x_ld;  // x's row pitch in elements
  const void *x = nullptr, *w = nullptr, *bias = nullptr;
  void* y = nullptr;
  bool bound = false;
  char error[256] = {0};
};

using cutsearch_abi::fail;

extern "C" {

int cs_abi_version(void) { return 3; }
const char* cs_kernel_name(void) { return "${operation_name}"; }
const char* cs_error(const cs_layer* h) { return cutsearch_abi::cs_error_of(h ? h->error : nullptr, h); }
size_t cs_workspace_size(const cs_layer*) { return 0; }

// Of the CUTLASS kernels' knobs this kernel has splits alone: how many warps share a row of W's
// K. raster, swizzle, decomposition and reduction are ignored. Of io's flags it reads the layouts
// of x and y; the others ask for work it does not do (copies, views) and are ignored.
int cs_create(cs_layer** out, int m, int n, int k, int pad_n, int pad_k, int device, int, int, int splits, int, int,
              int io) {
  if (!out) return cutsearch_abi::refuse("cs_create: out is null");
  *out = nullptr;
  if (splits < 1 || splits > ${namespace}::kMaxSplits || ${namespace}::kWarps % splits)
    return cutsearch_abi::refuse("cs_create: splits (%d) must divide %d, this kernel's most warps to share a row",
                                 splits, ${namespace}::kMaxSplits);
  if (cutsearch_abi::check_create(m, n, k, pad_n, pad_k, device, io)) return 1;
  using ${namespace}::kVec;
  const long long x_ld = io & CS_IO_X_PADDED ? pad_k : io & CS_IO_X_ALIGNED ? (k + kVec - 1) / kVec * kVec : k;
  if (pad_k % kVec)
    return cutsearch_abi::refuse("cs_create: this kernel reads W in 16-byte vectors: its row pitch pad_k (%d "
                                 "elements) must be a multiple of %d",
                                 pad_k, kVec);
  if ((m + ${namespace}::kTileM - 1) / ${namespace}::kTileM > 65535)
    return cutsearch_abi::refuse("cs_create: this kernel serves at most %d rows of x", 65535 * ${namespace}::kTileM);
  cs_layer* h = new (std::nothrow) cs_layer();
  if (!h) return cutsearch_abi::refuse("cs_create: out of host memory");
  h->m = m; h->n = n; h->k = k; h->pad_n = pad_n; h->pad_k = pad_k; h->io = io; h->x_ld = x_ld; h->splits = splits;
  *out = h;
  return 0;
}

int cs_bind(cs_layer* h, const void* x, const void* w, const void* bias, void* y, void* workspace) {
  if (!h) return 1;
  // x may start at any element (x_vectors).
  const size_t x_align = sizeof(${namespace}::T);
  if (const char* problem = cutsearch_abi::bind_problem(x, w, bias, CS_HAS_BIAS, y, workspace, 0, x_align, 16)) {
    h->bound = false;
    return fail(h, "cs_bind", problem);
  }
  h->x = x; h->w = w; h->bias = bias; h->y = y;
  h->bound = true;
  return 0;
}

int cs_run(cs_layer* h, void* stream) {
  if (!h || !h->bound) return fail(h, "cs_run", "cs_bind was not called");
  using namespace ${namespace};
  const long long y_ld = CS_OUT_T ? h->m : (h->io & CS_IO_Y_PADDED) ? h->pad_n : h->n;
  const int block_rows = kRows * kWarps / h->splits;
  const dim3 grid(unsigned((h->n + block_rows - 1) / block_rows), unsigned((h->m + kTileM - 1) / kTileM));
  int x_off;
  const uint4* x = x_vectors(h->x, &x_off);
  auto* kernel = h->x_ld % kVec || x_off ? kernel_for<true>(h->splits) : kernel_for<false>(h->splits);
  kernel<<<grid, kWarps * 32, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<T*>(h->y), y_ld, reinterpret_cast<const T*>(x), h->x_ld / kVec, h->m, static_cast<const T*>(h->w),
      h->pad_k / kVec, h->n, (h->k + kVec - 1) / kVec, static_cast<const T*>(h->bias), h->x_ld, h->k, x_off, h->splits);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return fail(h, "launch", cudaGetErrorString(e));
  return 0;
}

void cs_destroy(cs_layer* h) { delete h; }

}  // extern "C"
