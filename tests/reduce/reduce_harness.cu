// Test-only: the split-K reduction of templates/reduce.cuh behind C entry points, so that it can
// be checked against numpy on any shape, pitch and slice count without a CUTLASS kernel.
#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

${copy_kernels}

extern "C" {
int cs_abi_version(void) { return 0; }

// The lanes an element's slices are spread over (host code: callable without a GPU).
int reduce_lanes(long long m, long long n, int splits) { return cutsearch_reduce::lanes_for(m, n, splits); }

// y[r][c] = sum over s of parts[s][r][c] (+ bias[c]) for c < n, fp16 y at y_pitch, fp32 parts at
// pitch; bias may be null; synchronous.
int test_sum_splits(void* y, long long y_pitch, const void* parts, long long pitch, long long m, long long n,
                    int splits, const void* bias, int sm_count) {
  cudaError_t e = cutsearch_reduce::launch_sum_splits<0>(static_cast<__half*>(y), y_pitch,
                                                         static_cast<const float*>(parts), pitch, m, n, splits,
                                                         static_cast<const __half*>(bias), sm_count, nullptr, false);
  if (e != cudaSuccess) return 1;
  return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
}
}
