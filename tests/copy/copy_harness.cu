// Test-only: the per-call layout copy of templates/copy.cuh behind a C entry point, so that it
// can be checked against numpy on any pitch, width and pointer offset without a CUTLASS kernel.
#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

${copy_kernels}

__global__ void simple_copy(__half* dst, int dst_pitch, const __half* src, int src_pitch, int rows, int cols) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * dst_pitch) return;
  int r = i / dst_pitch, c = i - r * dst_pitch;
  dst[i] = c < cols ? src[r * src_pitch + c] : __half(0.f);
}

extern "C" {
int cs_abi_version(void) { return 0; }

// dst[r][c] = c < cols ? src[r][c] : 0 for c < dst_pitch; fp16 elements; synchronous.
int test_repitch(void* dst, long long dst_pitch, const void* src, long long src_pitch, long long rows,
                 long long cols) {
  cutsearch_copy::launch_repitch(static_cast<__half*>(dst), dst_pitch, static_cast<const __half*>(src),
                                 src_pitch, rows, cols, nullptr);
  return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
}

// Asynchronous entry points for studies/scripts/copy_bench.py: the same copy on a stream, and a
// plain one-element-per-thread copy to compare it with.
int bench_repitch(void* dst, long long dst_pitch, const void* src, long long src_pitch, long long rows,
                  long long cols, void* stream) {
  cutsearch_copy::launch_repitch(static_cast<__half*>(dst), dst_pitch, static_cast<const __half*>(src),
                                 src_pitch, rows, cols, static_cast<cudaStream_t>(stream));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

int bench_simple(void* dst, long long dst_pitch, const void* src, long long src_pitch, long long rows,
                 long long cols, void* stream) {
  long long total = rows * dst_pitch;
  simple_copy<<<unsigned((total + 255) / 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<__half*>(dst), int(dst_pitch), static_cast<const __half*>(src), int(src_pitch), int(rows), int(cols));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
}
