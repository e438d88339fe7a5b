// Rendered into every kernel's translation unit (templates/launcher.cu); tests compile it alone.
#pragma once
#include <cuda_runtime.h>

#include "activation.cuh"

// Split-K reduction (a named namespace: nvcc's host stubs cannot name kernels in an anonymous
// one). The GEMM wrote `splits` fp32 partials of y, each m rows of `pitch` floats (y padded to
// pitch >= n columns), back to back; this sums them in a fixed order (deterministic), adds the
// bias, applies the activation and writes y's n columns at its own row pitch.
namespace cutsearch_reduce {

constexpr int THREADS = 256;

// Rows packed (pitch == y_pitch == n, n % 4 == 0): four elements a thread, 16-byte loads and
// 8-byte stores. `wait`: launched with programmatic dependent launch, so wait for the GEMM's
// writes first.
template <class T, int Act>
__global__ void __launch_bounds__(THREADS)
sum_splits(T* __restrict__ y, const float* __restrict__ parts, long long total, long long n, int splits,
           const T* __restrict__ bias, bool wait) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (wait) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const long long quads = total / 4;
  for (long long q = blockIdx.x * (long long)THREADS + threadIdx.x; q < quads; q += (long long)gridDim.x * THREADS) {
    float4 acc = reinterpret_cast<const float4*>(parts)[q];
    for (int s = 1; s < splits; ++s) {
      const float4 p = reinterpret_cast<const float4*>(parts + s * total)[q];
      acc.x += p.x; acc.y += p.y; acc.z += p.z; acc.w += p.w;
    }
    const long long col = (q * 4) % n;  // the four share a row: n % 4 == 0
    float v[4] = {acc.x, acc.y, acc.z, acc.w};
    alignas(8) T out[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) out[j] = T(cutsearch_act::activate<Act>(bias ? v[j] + float(bias[col + j]) : v[j]));
    reinterpret_cast<uint2*>(y)[q] = *reinterpret_cast<const uint2*>(out);
  }
}

// Any pitches (y's rows unaligned, or the partials padded past n): one element a thread.
template <class T, int Act>
__global__ void __launch_bounds__(THREADS)
sum_splits_pitched(T* __restrict__ y, long long y_pitch, const float* __restrict__ parts, long long pitch,
                   long long m, long long n, int splits, const T* __restrict__ bias, bool wait) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (wait) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const long long part = m * pitch;
  for (long long i = blockIdx.x * (long long)THREADS + threadIdx.x; i < m * n; i += (long long)gridDim.x * THREADS) {
    const long long row = i / n, col = i - row * n;
    const float* p = parts + row * pitch + col;
    float acc = p[0];
    for (int s = 1; s < splits; ++s) acc += p[s * part];
    y[row * y_pitch + col] = T(cutsearch_act::activate<Act>(bias ? acc + float(bias[col]) : acc));
  }
}

template <int Act, class T>
cudaError_t launch_sum_splits(T* y, long long y_pitch, const float* parts, long long pitch, long long m, long long n,
                              int splits, const T* bias, int sm_count, cudaStream_t s, bool pdl) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  const bool packed = pitch == n && y_pitch == n && n % 4 == 0;
  const long long work = packed ? m * n / 4 : m * n;
  const long long blocks = (work + THREADS - 1) / THREADS;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(blocks < 8LL * sm_count ? blocks : 8LL * sm_count));
  config.blockDim = dim3(THREADS);
  config.stream = s;
  config.attrs = attr;
  config.numAttrs = pdl ? 1 : 0;
  if (packed) return cudaLaunchKernelEx(&config, sum_splits<T, Act>, y, parts, m * n, n, splits, bias, pdl);
  return cudaLaunchKernelEx(&config, sum_splits_pitched<T, Act>, y, y_pitch, parts, pitch, m, n, splits, bias, pdl);
}

}  // namespace cutsearch_reduce
