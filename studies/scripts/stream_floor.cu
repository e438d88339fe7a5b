// The measured bandwidth floor of a layer: one kernel that reads as many bytes as x, W and b hold
// and writes as many as y, with nothing else to do. Used by studies/scripts/stream_floor.py.
#include <cstdint>

#include <cuda_runtime.h>

// Each thread keeps U independent 16-byte streaming loads in flight. The word sum goes to
// sums[blockIdx.x], so the host can check that every byte was read.
template <int U>
__global__ void stream(const uint4* __restrict__ src, long long n_read, uint4* __restrict__ dst, long long n_write,
                       unsigned* __restrict__ sums) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long first = i;
  unsigned acc = 0;
  for (; i + (U - 1) * stride < n_read; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = __ldcs(src + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) acc += v[u].x + v[u].y + v[u].z + v[u].w;
  }
  for (; i < n_read; i += stride) {
    const uint4 v = __ldcs(src + i);
    acc += v.x + v.y + v.z + v.w;
  }
  for (long long j = first; j < n_write; j += stride) dst[j] = make_uint4(0, 0, 0, 0);
  // Block sum: warp shuffles, then one atomic per warp.
  for (int o = 16; o; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(sums + blockIdx.x, acc);
}

extern "C" {
int cs_abi_version(void) { return 0; }

// n_read and n_write count 16-byte vectors; sums holds `blocks` zeroed words.
int stream_floor(int unroll, const void* src, long long n_read, void* dst, long long n_write, void* sums, int blocks,
                 int threads, void* stream_) {
  auto s = static_cast<cudaStream_t>(stream_);
  auto in = static_cast<const uint4*>(src);
  auto out = static_cast<uint4*>(dst);
  auto acc = static_cast<unsigned*>(sums);
  switch (unroll) {
    case 1: stream<1><<<blocks, threads, 0, s>>>(in, n_read, out, n_write, acc); break;
    case 4: stream<4><<<blocks, threads, 0, s>>>(in, n_read, out, n_write, acc); break;
    case 8: stream<8><<<blocks, threads, 0, s>>>(in, n_read, out, n_write, acc); break;
    default: return 2;
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
}
