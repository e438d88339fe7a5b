// Test-only: the per-call layout copy of templates/copy.cuh behind a C entry point, so that it
// can be checked against numpy on any pitch, width and pointer offset without a CUTLASS kernel.
#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

${copy_kernels}

extern "C" {
int cs_abi_version(void) { return 0; }

// dst[r][c] = c < cols ? src[r][c] : 0 for c < dst_pitch; fp16 elements; synchronous.
int test_repitch(void* dst, long long dst_pitch, const void* src, long long src_pitch, long long rows,
                 long long cols) {
  cutsearch_copy::launch_repitch(static_cast<__half*>(dst), dst_pitch, static_cast<const __half*>(src),
                                 src_pitch, rows, cols, nullptr);
  return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
}
}
