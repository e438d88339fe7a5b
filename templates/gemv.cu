// Gemm operator ${operation_name}
// cutsearch's kernel for a few rows of x, on CUDA cores, behind the same C ABI as the CUTLASS
// kernels. y[M,N] = act(x[M,K] @ W[N,K]^T (+ b[N])), fp32 sums.
//
// Where M is a handful of rows, the layer is W streamed once: a warp owns kRows consecutive rows
// of W and its lanes split K in 16-byte vectors; each lane issues its kLoads x kRows loads of W
// before it uses any, and reads x through the read-only path (M x K is small and stays in L1/L2).
// A block of kWarps warps covers kRows * kWarps rows of W and kTileM rows of x (the grid's y
// covers the rest of M). x and W must have rows of whole 16-byte vectors.
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

// vectors: K's 16-byte vectors a row; x_ld, w_ld: row pitches in vectors; y_ld: y's row pitch
// in elements (y^T: N rows of pitch m).
__global__ void __launch_bounds__(kWarps * 32) gemv(T* __restrict__ y, long long y_ld, const T* __restrict__ x,
                                                     long long x_ld, int m, const T* __restrict__ w, long long w_ld,
                                                     int n, int vectors, const T* __restrict__ bias) {
  const int lane = threadIdx.x % 32;
  const long long row0 = ((long long)blockIdx.x * kWarps + threadIdx.x / 32) * kRows;
  const int m0 = blockIdx.y * kTileM;
  if (row0 >= n) return;
  const uint4* xv = reinterpret_cast<const uint4*>(x) + m0 * x_ld;
  const uint4* wv = reinterpret_cast<const uint4*>(w);
  float acc[kRows][kTileM];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int i = 0; i < kTileM; ++i) acc[r][i] = 0.f;
#pragma unroll 1
  for (int v0 = lane; v0 < vectors; v0 += 32 * kLoads) {
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
      // Past K, and in rows past m (the last row read again, never stored), x is read from where
      // it is valid and meets zeros of W or is dropped: no branch keeps the loads apart.
      const int v = min(v0 + 32 * u, vectors - 1);
#pragma unroll
      for (int i = 0; i < kTileM; ++i) {
        const uint4 xi = __ldg(xv + min(i, m - 1 - m0) * x_ld + v);
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
  const long long c = row0 + lane / kTileM;
  const int row = m0 + lane % kTileM;
  if (lane >= kRows * kTileM || c >= n || row >= m) return;
  if (CS_HAS_BIAS) v += float(bias[c]);
  v = cutsearch_act::activate<CS_ACT>(v);
  y[CS_OUT_T ? c * y_ld + row : row * y_ld + c] = T(v);
}

}  // namespace ${namespace}

struct cs_layer {
  int m, n, k, pad_n, pad_k, io;
  long long x_ld;  // x's row pitch in elements
  const void *x = nullptr, *w = nullptr, *bias = nullptr;
  void* y = nullptr;
  bool bound = false;
  char error[256] = {0};
};

static int fail(cs_layer* h, const char* what, const char* detail) {
  if (h) std::snprintf(h->error, sizeof(h->error), "%s: %s", what, detail);
  return 1;
}

extern "C" {

int cs_abi_version(void) { return 3; }
const char* cs_kernel_name(void) { return "${operation_name}"; }
const char* cs_error(const cs_layer* h) { return cutsearch_abi::cs_error_of(h ? h->error : nullptr, h); }
size_t cs_workspace_size(const cs_layer*) { return 0; }

// raster, swizzle, splits, decomposition and reduction are the CUTLASS kernels' knobs: this
// kernel has none. Of io's flags it reads the layouts of x and y; the others ask for work it
// does not do (copies, views) and are ignored.
int cs_create(cs_layer** out, int m, int n, int k, int pad_n, int pad_k, int device, int, int, int, int, int, int io) {
  if (!out) return cutsearch_abi::refuse("cs_create: out is null");
  *out = nullptr;
  if (cutsearch_abi::check_create(m, n, k, pad_n, pad_k, device, io)) return 1;
  using ${namespace}::kVec;
  const long long x_ld = io & CS_IO_X_PADDED ? pad_k : io & CS_IO_X_ALIGNED ? (k + kVec - 1) / kVec * kVec : k;
  if (x_ld % kVec || pad_k % kVec)
    return cutsearch_abi::refuse("cs_create: this kernel reads x and W in 16-byte vectors: their rows (%lld and %d "
                                 "elements) must be multiples of %d",
                                 x_ld, pad_k, kVec);
  if ((m + ${namespace}::kTileM - 1) / ${namespace}::kTileM > 65535)
    return cutsearch_abi::refuse("cs_create: this kernel serves at most %d rows of x", 65535 * ${namespace}::kTileM);
  cs_layer* h = new (std::nothrow) cs_layer();
  if (!h) return cutsearch_abi::refuse("cs_create: out of host memory");
  h->m = m; h->n = n; h->k = k; h->pad_n = pad_n; h->pad_k = pad_k; h->io = io; h->x_ld = x_ld;
  *out = h;
  return 0;
}

int cs_bind(cs_layer* h, const void* x, const void* w, const void* bias, void* y, void* workspace) {
  if (!h) return 1;
  if (const char* problem = cutsearch_abi::bind_problem(x, w, bias, CS_HAS_BIAS, y, workspace, 0, 16, 16)) {
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
  const dim3 grid(unsigned((h->n + kRows * kWarps - 1) / (kRows * kWarps)), unsigned((h->m + kTileM - 1) / kTileM));
  gemv<<<grid, kWarps * 32, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<T*>(h->y), y_ld, static_cast<const T*>(h->x), h->x_ld / kVec, h->m, static_cast<const T*>(h->w),
      h->pad_k / kVec, h->n, (h->k + kVec - 1) / kVec, static_cast<const T*>(h->bias));
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return fail(h, "launch", cudaGetErrorString(e));
  return 0;
}

void cs_destroy(cs_layer* h) { delete h; }

}  // extern "C"
