// Rendered into every kernel's translation unit (templates/launcher.cu); tests compile it alone.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

#include "activation.cuh"

// The rows of x past its row views' batch (a named namespace: nvcc's host stubs cannot name
// kernels in an anonymous one). The views cover P * (M / P) rows; the last M mod P < P rows are
// dot products of x's rows, read in place, with W's rows, read from the views' unshifted copy of
// W (16-byte rows of pitch K', zero past K). That reads W once more, where a copy of x would
// read and write all of x. A block owns `cols` rows of W, and its threads split K: each loads one
// 16-byte vector of each of those rows a chunk, all before it waits, so a block's reads go out
// together (a loop of dependent reads a lane was 3-13 µs slower on the H200). x's rows are
// staged in shared memory a chunk at a time, 16-byte aligned there whatever their alignment in x.
namespace cutsearch_tail {

constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
constexpr int MAX_ROWS = 7;  // M mod P, and P is at most 8 (16-byte vectors of 2-byte elements)
constexpr int COLS = 4;      // W's rows a block owns, at most

// One 16-byte vector of each row a thread: 2048 columns of 2-byte elements, 7 rows of them 28 KB.
template <class T>
constexpr int chunk() { return THREADS * int(16 / sizeof(T)); }

// Row r's columns [c0, c0 + width) of x (rows k apart) into xs[r][0, width), zeros after them up to
// a whole vector. The aligned vectors inside the range are loaded whole, its ragged ends element by
// element; every thread's loads are issued before its first store.
template <class T>
__device__ inline void stage(T (*xs)[chunk<T>()], const T* __restrict__ x, int rows, int k, int c0, int width) {
  constexpr int V = 16 / sizeof(T);
  constexpr int SLOTS = 2;  // vectors a thread loads a row: a chunk's, and one more where the row is unaligned
  alignas(16) T held[MAX_ROWS][SLOTS][V];
#pragma unroll
  for (int r = 0; r < MAX_ROWS; ++r) {
    if (r >= rows) break;
    const T* src = x + static_cast<long long>(r) * k + c0;
    const int lead = int((reinterpret_cast<uintptr_t>(src) & 15) / sizeof(T));
#pragma unroll
    for (int slot = 0; slot < SLOTS; ++slot) {
      const int e0 = (int(threadIdx.x) + slot * THREADS) * V - lead;  // the vector's first column
      if (e0 >= 0 && e0 + V <= width) {
        *reinterpret_cast<uint4*>(held[r][slot]) = __ldg(reinterpret_cast<const uint4*>(src + e0));
      } else {
#pragma unroll
        for (int q = 0; q < V; ++q) held[r][slot][q] = e0 + q >= 0 && e0 + q < width ? src[e0 + q] : T(0.f);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < MAX_ROWS; ++r) {
    if (r >= rows) break;
    const int lead = int((reinterpret_cast<uintptr_t>(x + static_cast<long long>(r) * k + c0) & 15) / sizeof(T));
#pragma unroll
    for (int slot = 0; slot < SLOTS; ++slot) {
      const int e0 = (int(threadIdx.x) + slot * THREADS) * V - lead;
#pragma unroll
      for (int q = 0; q < V; ++q)
        if (e0 + q >= 0 && e0 + q < width) xs[r][e0 + q] = held[r][slot][q];
    }
    if (int(threadIdx.x) < V && width + int(threadIdx.x) < chunk<T>()) xs[r][width + threadIdx.x] = T(0.f);
  }
}

// `y`, `x`: the first tail row of each; y's rows `y_pitch` apart, x's `k`. `w`: `n` rows of pitch
// `w_pitch` (a vector multiple, zero from k on). Launched after the GEMM, with programmatic
// dependent launch where the call overlaps its kernels: it reads nothing the GEMM writes, so it
// waits for the GEMM only at its end, for the stream's next work to see both.
template <class T, int Act>
__global__ void __launch_bounds__(THREADS)
tail_rows(T* __restrict__ y, long long y_pitch, const T* __restrict__ x, int rows, int k,
          const T* __restrict__ w, long long w_pitch, int n, const T* __restrict__ bias, int cols) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
  constexpr int V = 16 / sizeof(T);
  constexpr int C = chunk<T>();
  __shared__ alignas(16) T xs[MAX_ROWS][C];
  __shared__ float partial[WARPS][COLS * MAX_ROWS];
  const long long first = static_cast<long long>(blockIdx.x) * cols;
  const int v = int(threadIdx.x) * V;  // this thread's column in each chunk
  float acc[COLS][MAX_ROWS];
#pragma unroll
  for (int j = 0; j < COLS; ++j)
#pragma unroll
    for (int r = 0; r < MAX_ROWS; ++r) acc[j][r] = 0.f;
  for (int c0 = 0; c0 < k; c0 += C) {
    const int width = k - c0 < C ? k - c0 : C;
    const bool mine = v < width;  // past K, W' is zero up to its pitch, a vector multiple
    uint4 wv[COLS];
#pragma unroll
    for (int j = 0; j < COLS; ++j) {
      wv[j] = make_uint4(0, 0, 0, 0);
      if (mine && j < cols && first + j < n) wv[j] = __ldg(reinterpret_cast<const uint4*>(w + (first + j) * w_pitch + c0 + v));
    }
    __syncthreads();  // the previous chunk of x is read
    stage<T>(xs, x, rows, k, c0, width);
    __syncthreads();
    if (!mine) continue;
#pragma unroll
    for (int r = 0; r < MAX_ROWS; ++r) {
      if (r >= rows) break;
      const uint4 xv = *reinterpret_cast<const uint4*>(&xs[r][v]);
      const T* xe = reinterpret_cast<const T*>(&xv);
#pragma unroll
      for (int j = 0; j < COLS; ++j) {
        const T* we = reinterpret_cast<const T*>(&wv[j]);
#pragma unroll
        for (int e = 0; e < V; ++e) acc[j][r] = fmaf(float(xe[e]), float(we[e]), acc[j][r]);
      }
    }
  }
  // A butterfly within each warp, then the warps' sums in order: the same bits every launch.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < COLS; ++j)
#pragma unroll
    for (int r = 0; r < MAX_ROWS; ++r) {
#pragma unroll
      for (int o = 16; o > 0; o /= 2) acc[j][r] += __shfl_xor_sync(0xffffffffu, acc[j][r], o);
      if (lane == 0) partial[warp][j * MAX_ROWS + r] = acc[j][r];
    }
  __syncthreads();
  const int t = threadIdx.x;
  if (t < cols * rows) {
    const int j = t / rows, r = t % rows;
    const long long col = first + j;
    if (col < n) {
      float sum = partial[0][j * MAX_ROWS + r];
      for (int i = 1; i < WARPS; ++i) sum += partial[i][j * MAX_ROWS + r];
      if (bias) sum += float(bias[col]);
      y[r * y_pitch + col] = T(cutsearch_act::activate<Act>(sum));
    }
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// One block per `cols` rows of W: one where that gives two blocks a multiprocessor, up to COLS
// where W has more rows (fewer blocks staging the same x).
template <int Act, class T>
cudaError_t launch_tail_rows(T* y, long long y_pitch, const T* x, int rows, int k, const T* w, long long w_pitch,
                             int n, const T* bias, int sm_count, cudaStream_t s, bool pdl) {
  if (rows < 1 || rows > MAX_ROWS) return cudaErrorInvalidValue;
  const long long per_pass = 2LL * (sm_count > 0 ? sm_count : 1);
  long long cols = (n + per_pass - 1) / per_pass;
  cols = cols < 1 ? 1 : cols > COLS ? COLS : cols;
  const long long blocks = (n + cols - 1) / cols;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(blocks));
  config.blockDim = dim3(THREADS);
  config.stream = s;
  config.attrs = attr;
  config.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&config, tail_rows<T, Act>, y, y_pitch, x, rows, k, w, w_pitch, n, bias, int(cols));
}

}  // namespace cutsearch_tail
