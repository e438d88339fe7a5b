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
// Loads a lane issues before it adds them: an element's slices are a chain of L2 reads, so the
// reads go out together and only the adds wait on each other.
constexpr int BATCH = 8;
// Threads the lanes of a tiny output may fill (an eighth of an H200's resident threads): past
// that, one thread an element, its loads batched, already has enough reads in flight.
constexpr long long LANE_THREADS = 1LL << 15;

// Lanes that share one element's slices: a power of two up to a warp, at most the slices, and
// no more than LANE_THREADS threads in all. A function of the shape alone, so the sum's order
// is too (cutsearch.model.reduce_lanes mirrors it).
__host__ __device__ inline int lanes_for(long long m, long long n, int splits) {
  int lanes = 1;
  while (lanes < 32 && lanes * 2 <= splits && m * n * lanes * 2 <= LANE_THREADS) lanes *= 2;
  return lanes;
}

__device__ inline float add(float a, float b) { return a + b; }
__device__ inline float4 add(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }

// Slices first, first + step, ... below splits of one element, summed in that order; `at(s)`
// loads slice s. BATCH loads in flight before their adds.
template <class V, class At>
__device__ inline V sum_chain(At at, int first, int step, int splits) {
  V acc{};
  for (int s = first; s < splits; s += BATCH * step) {
    V v[BATCH];
#pragma unroll
    for (int j = 0; j < BATCH; ++j)
      if (s + j * step < splits) v[j] = at(s + j * step);
#pragma unroll
    for (int j = 0; j < BATCH; ++j)
      if (s + j * step < splits) acc = s == first && j == 0 ? v[j] : add(acc, v[j]);
  }
  return acc;
}

// Rows packed (pitch == y_pitch == n, n % 4 == 0) and one lane an element: four elements a
// thread, 16-byte loads and 8-byte stores. `wait`: launched with programmatic dependent launch,
// so wait for the GEMM's writes first.
template <class T, int Act>
__global__ void __launch_bounds__(THREADS)
sum_splits(T* __restrict__ y, const float* __restrict__ parts, long long total, long long n, int splits,
           const T* __restrict__ bias, bool wait) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (wait) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const long long quads = total / 4;
  for (long long q = blockIdx.x * (long long)THREADS + threadIdx.x; q < quads; q += (long long)gridDim.x * THREADS) {
    const float4 acc = sum_chain<float4>(
        [&](int s) { return reinterpret_cast<const float4*>(parts + s * total)[q]; }, 0, 1, splits);
    const long long col = (q * 4) % n;  // the four share a row: n % 4 == 0
    float v[4] = {acc.x, acc.y, acc.z, acc.w};
    alignas(8) T out[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) out[j] = T(cutsearch_act::activate<Act>(bias ? v[j] + float(bias[col + j]) : v[j]));
    reinterpret_cast<uint2*>(y)[q] = *reinterpret_cast<const uint2*>(out);
  }
}

// Any pitches (y's rows unaligned, or the partials padded past n), and `lanes` lanes of a warp an
// element: lane j sums slices j, j + lanes, ..., then the lanes add theirs pairwise (a fixed
// butterfly, so every lane holds the same sum) and the first writes it.
template <class T, int Act>
__global__ void __launch_bounds__(THREADS)
sum_splits_pitched(T* __restrict__ y, long long y_pitch, const float* __restrict__ parts, long long pitch,
                   long long m, long long n, int splits, int lanes, const T* __restrict__ bias, bool wait) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (wait) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const long long part = m * pitch;
  const int lane = threadIdx.x % lanes;
  // A group's lanes run the same elements, so only they need to meet at each shuffle.
  const unsigned group = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1) << (threadIdx.x % 32 - lane);
  for (long long i = (blockIdx.x * (long long)THREADS + threadIdx.x) / lanes; i < m * n;
       i += (long long)gridDim.x * THREADS / lanes) {
    const long long row = i / n, col = i - row * n;
    const float* p = parts + row * pitch + col;
    float acc = sum_chain<float>([&](int s) { return p[s * part]; }, lane, lanes, splits);
    for (int o = lanes / 2; o > 0; o /= 2) acc += __shfl_xor_sync(group, acc, o);
    if (lane == 0) y[row * y_pitch + col] = T(cutsearch_act::activate<Act>(bias ? acc + float(bias[col]) : acc));
  }
}

template <int Act, class T>
cudaError_t launch_sum_splits(T* y, long long y_pitch, const float* parts, long long pitch, long long m, long long n,
                              int splits, const T* bias, int sm_count, cudaStream_t s, bool pdl) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  const int lanes = lanes_for(m, n, splits);
  const bool packed = lanes == 1 && pitch == n && y_pitch == n && n % 4 == 0;
  const long long work = packed ? m * n / 4 : m * n * lanes;
  const long long blocks = (work + THREADS - 1) / THREADS;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(blocks < 8LL * sm_count ? blocks : 8LL * sm_count));
  config.blockDim = dim3(THREADS);
  config.stream = s;
  config.attrs = attr;
  config.numAttrs = pdl ? 1 : 0;
  if (packed) return cudaLaunchKernelEx(&config, sum_splits<T, Act>, y, parts, m * n, n, splits, bias, pdl);
  return cudaLaunchKernelEx(&config, sum_splits_pitched<T, Act>, y, y_pitch, parts, pitch, m, n, splits, lanes, bias,
                            pdl);
}

}  // namespace cutsearch_reduce
