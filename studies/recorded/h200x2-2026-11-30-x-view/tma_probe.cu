// Probe: does a TMA tile load accept a box whose innermost start coordinate is not 16-byte aligned?
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cuda.h>
#include <cuda_runtime.h>

__global__ void load(const __grid_constant__ CUtensorMap map, int c0, int c1, uint16_t* out) {
  __shared__ alignas(1024) uint16_t tile[8 * 64];
  __shared__ alignas(8) uint64_t bar;
  uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
  uint32_t t = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b));
    asm volatile("fence.mbarrier_init.release.cluster;");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(8 * 64 * 2));
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(t), "l"(&map), "r"(c0), "r"(c1), "r"(b) : "memory");
    uint32_t done = 0;
    while (!done) asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(b));
    for (int i = 0; i < 8 * 64; ++i) out[i] = tile[i];
  }
}

int main(int argc, char** argv) {
  const int swz = atoi(argv[1]), c0 = atoi(argv[2]);
  const int rows = 64, cols = 7992;  // 8 rows of K = 999 as one view row
  uint16_t* x; uint16_t* out;
  cudaMalloc(&x, rows * cols * 2); cudaMalloc(&out, 8 * 64 * 2);
  uint16_t* h = new uint16_t[rows * cols];
  for (int i = 0; i < rows * cols; ++i) h[i] = uint16_t(i % 60000);
  cudaMemcpy(x, h, rows * cols * 2, cudaMemcpyHostToDevice);
  CUtensorMap map;
  cuuint64_t dims[2] = {cols, rows}, strides[1] = {cols * 2};
  cuuint32_t box[2] = {64, 8}, unit[2] = {1, 1};
  CUresult r = cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, x, dims, strides, box, unit,
      CU_TENSOR_MAP_INTERLEAVE_NONE, swz ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  load<<<1, 32>>>(map, c0, 0, out);
  cudaError_t e = cudaDeviceSynchronize();
  uint16_t got[8 * 64] = {};
  bool ok = e == cudaSuccess;
  if (ok) cudaMemcpy(got, out, sizeof(got), cudaMemcpyDeviceToHost);
  if (ok && !swz) for (int r2 = 0; r2 < 8; ++r2) for (int c = 0; c < 64; ++c) ok &= got[r2 * 64 + c] == h[r2 * cols + c0 + c];
  printf("swizzle %s, box start column %4d (%2d bytes past 16): encode %d, %s%s\n", swz ? "128B" : "none", c0,
         (c0 * 2) % 16, int(r), cudaGetErrorString(e), ok && !swz ? ", data right" : "");
}
