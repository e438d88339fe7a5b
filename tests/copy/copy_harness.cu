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

// The copy with `unroll` 16-byte vectors a thread (1, 2 or 4), on a stream.
static cudaError_t repitch(int unroll, void* dst, long long dst_pitch, const void* src, long long src_pitch,
                           long long rows, long long cols, cudaStream_t s) {
  auto d = static_cast<__half*>(dst);
  auto x = static_cast<const __half*>(src);
  if (unroll == 2) return cutsearch_copy::launch_repitch<__half, 2>(d, dst_pitch, x, src_pitch, rows, cols, s);
  if (unroll == 4) return cutsearch_copy::launch_repitch<__half, 4>(d, dst_pitch, x, src_pitch, rows, cols, s);
  if (unroll == 1) return cutsearch_copy::launch_repitch<__half, 1>(d, dst_pitch, x, src_pitch, rows, cols, s);
  return cudaErrorInvalidValue;
}

// dst[r][c] = c < cols ? src[r][c] : 0 for c < dst_pitch; fp16 elements; synchronous.
int test_repitch(void* dst, long long dst_pitch, const void* src, long long src_pitch, long long rows,
                 long long cols, int unroll) {
  if (repitch(unroll, dst, dst_pitch, src, src_pitch, rows, cols, nullptr) != cudaSuccess) return 1;
  return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
}

// Asynchronous entry points for studies/scripts/copy_bench.py: the same copy on a stream at each
// block size, and a plain one-element-per-thread copy to compare it with.
int copy_unroll(void) { return cutsearch_copy::UNROLL; }  // the block size the launcher builds

int bench_repitch(void* dst, long long dst_pitch, const void* src, long long src_pitch, long long rows,
                  long long cols, void* stream, int unroll) {
  return repitch(unroll, dst, dst_pitch, src, src_pitch, rows, cols, static_cast<cudaStream_t>(stream)) ==
         cudaSuccess ? 0 : 1;
}

int bench_simple(void* dst, long long dst_pitch, const void* src, long long src_pitch, long long rows,
                 long long cols, void* stream) {
  long long total = rows * dst_pitch;
  simple_copy<<<unsigned((total + 255) / 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<__half*>(dst), int(dst_pitch), static_cast<const __half*>(src), int(src_pitch), int(rows), int(cols));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
}
