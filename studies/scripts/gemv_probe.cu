// A probe, not part of the search: how close plain kernels for a handful of rows of x come to the
// streaming floor, on CUDA cores (here) and on tensor cores (gemv_mma, below), with fp32 sums.
// Used by studies/scripts/gemv_probe.py.
//
// y[m][c] = sum_j x[m][j] w[c][j] + bias[c], for M <= 16 rows of x. A warp owns R consecutive rows
// of W and its lanes split K in 16-byte vectors; each lane issues its U x R loads of W before it
// uses any, and reads x through the read-only path (M x K is small and stays in L1/L2). Warps
// stride over the row groups. K must be a multiple of 8 and x, W 16-byte aligned (the probe's layers).
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cooperative_groups.h>
#include <cuda_runtime.h>

namespace cg = cooperative_groups;

template <class T>
__device__ inline float2 pair(unsigned bits);
template <>
__device__ inline float2 pair<__half>(unsigned bits) { return __half22float2(*reinterpret_cast<__half2*>(&bits)); }
template <>
__device__ inline float2 pair<__nv_bfloat16>(unsigned bits) {
  return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&bits));
}

template <class T>
__device__ inline void fma8(float& acc, const uint4& a, const uint4& b) {
  const unsigned* pa = reinterpret_cast<const unsigned*>(&a);
  const unsigned* pb = reinterpret_cast<const unsigned*>(&b);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fa = pair<T>(pa[i]), fb = pair<T>(pb[i]);
    acc = fmaf(fa.x, fb.x, acc);
    acc = fmaf(fa.y, fb.y, acc);
  }
}

template <class T, int M, int R, int U>
__global__ void __launch_bounds__(256) gemv(T* __restrict__ y, const T* __restrict__ x, int k,
                                            const T* __restrict__ w, int n, const T* __restrict__ bias) {
  const int lane = threadIdx.x % 32;
  const int vectors = k / 8;
  const long long warps = (long long)gridDim.x * (blockDim.x / 32);
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  const uint4* wv = reinterpret_cast<const uint4*>(w);
  for (long long g = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; g * R < n; g += warps) {
    const long long row0 = g * R;
    float acc[R][M];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int m = 0; m < M; ++m) acc[r][m] = 0.f;
    for (int v0 = lane; v0 < vectors; v0 += 32 * U) {
      uint4 held[U][R];
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const int v = v0 + 32 * u;
          held[u][r] = v < vectors && row0 + r < n ? __ldcs(wv + (row0 + r) * vectors + v) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int v = v0 + 32 * u;
        if (v >= vectors) break;
#pragma unroll
        for (int m = 0; m < M; ++m) {
          const uint4 xm = __ldg(xv + (long long)m * vectors + v);
#pragma unroll
          for (int r = 0; r < R; ++r) fma8<T>(acc[r][m], held[u][r], xm);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int m = 0; m < M; ++m) {
#pragma unroll
        for (int o = 16; o > 0; o /= 2) acc[r][m] += __shfl_xor_sync(0xffffffffu, acc[r][m], o);
      }
    // Lane i writes output i of the warp's R x M, spread so that no lane writes them all.
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int m = 0; m < M; ++m)
        if (lane == (r * M + m) % 32 && row0 + r < n) {
          const float b = bias ? float(bias[row0 + r]) : 0.f;
          y[(long long)m * n + row0 + r] = T(acc[r][m] + b);
        }
  }
}

template <class T, int M, int R, int U>
static int launch(void* y, const void* x, int k, const void* w, int n, const void* b, int blocks, int threads,
                  cudaStream_t s) {
  gemv<T, M, R, U><<<blocks, threads, 0, s>>>(static_cast<T*>(y), static_cast<const T*>(x), k,
                                               static_cast<const T*>(w), n, static_cast<const T*>(b));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

template <class T, int M>
static int by_shape(int r, int u, void* y, const void* x, int k, const void* w, int n, const void* b, int blocks,
                    int threads, cudaStream_t s) {
#define CS_CASE(R_, U_) \
  if (r == R_ && u == U_) return launch<T, M, R_, U_>(y, x, k, w, n, b, blocks, threads, s);
  CS_CASE(1, 2) CS_CASE(1, 4) CS_CASE(1, 8) CS_CASE(2, 2) CS_CASE(2, 4) CS_CASE(4, 1) CS_CASE(4, 2)
#undef CS_CASE
  return 2;
}

template <class T>
static int by_rows(int m, int r, int u, void* y, const void* x, int k, const void* w, int n, const void* b,
                   int blocks, int threads, cudaStream_t s) {
  switch (m) {
    case 1: return by_shape<T, 1>(r, u, y, x, k, w, n, b, blocks, threads, s);
    case 2: return by_shape<T, 2>(r, u, y, x, k, w, n, b, blocks, threads, s);
    case 4: return by_shape<T, 4>(r, u, y, x, k, w, n, b, blocks, threads, s);
    case 8: return by_shape<T, 8>(r, u, y, x, k, w, n, b, blocks, threads, s);
    case 16: return by_shape<T, 16>(r, u, y, x, k, w, n, b, blocks, threads, s);
  }
  return 2;
}


// The same layer on tensor cores: mma.sync m16n8k16, fp32 sums, M <= 8 x NB. A block owns RG x 16 rows
// of W and its warps split K in chunks of 32 columns. A dot product's terms may be summed in any order,
// so lane (g, t) = (lane / 4, lane % 4) loads 16 contiguous bytes, columns 8t..8t+7 of a chunk, of
// W's rows g and g + 8 and of x's row g, and those eight columns serve as the fragment's k slots
// {2t, 2t+1, 2t+8, 2t+9} of two MMAs: A and B see the same permutation, and every load is a whole
// vector with no shared memory and no pre-layout of W.
template <class T>
__device__ inline void mma16816(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                unsigned b1);
#define CS_MMA16816(T_, TYPE_)                                                                                 \
  template <>                                                                                                  \
  __device__ inline void mma16816<T_>(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,       \
                                      unsigned b0, unsigned b1) {                                              \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TYPE_ "." TYPE_ ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, " \
                 "{%8,%9}, {%0,%1,%2,%3};\n"                                                                  \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                             \
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));                                     \
  }
CS_MMA16816(__half, "f16")
CS_MMA16816(__nv_bfloat16, "bf16")
#undef CS_MMA16816

template <class T, int NB, int U, int RG>
__global__ void __launch_bounds__(512) gemv_mma(T* __restrict__ y, const T* __restrict__ x, int m, int k,
                                                const T* __restrict__ w, int n, const T* __restrict__ bias) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int vectors = k / 8;
  const int chunks = (k + 31) / 32;
  const long long row0 = (long long)blockIdx.x * 16 * RG;  // RG groups of 16 rows: each x vector serves RG
  const uint4* wv = reinterpret_cast<const uint4*>(w);
  float d[RG][NB][4] = {};
  // A cluster of S blocks (gridDim.y) splits K further where W has few row groups; the blocks'
  // sums meet in the first block's shared memory.
  const int slot = blockIdx.y * warps + warp, slots = gridDim.y * warps;
  for (int c0 = slot * U; c0 < chunks; c0 += slots * U) {
    uint4 va[U][RG], vb[U][RG], xv[U][NB];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int v = (c0 + u) * 4 + t;
      const bool in = c0 + u < chunks && v < vectors;
#pragma unroll
      for (int q = 0; q < RG; ++q) {
        const long long ra = row0 + 16 * q + g, rb = ra + 8;
        va[u][q] = in && ra < n ? __ldcs(wv + ra * vectors + v) : make_uint4(0, 0, 0, 0);
        vb[u][q] = in && rb < n ? __ldcs(wv + rb * vectors + v) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int j = 0; j < NB; ++j)
        xv[u][j] = in && g + 8 * j < m ? __ldg(reinterpret_cast<const uint4*>(x) + (long long)(g + 8 * j) * vectors + v)
                                       : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int q = 0; q < RG; ++q)
#pragma unroll
        for (int j = 0; j < NB; ++j) {
          mma16816<T>(d[q][j], va[u][q].x, vb[u][q].x, va[u][q].y, vb[u][q].y, xv[u][j].x, xv[u][j].y);
          mma16816<T>(d[q][j], va[u][q].z, vb[u][q].z, va[u][q].w, vb[u][q].w, xv[u][j].z, xv[u][j].w);
        }
  }
  // The warps' partial sums, added in warp order, then the cluster's blocks' in rank order: the same
  // bits every launch. Shared memory holds one row group's at a time.
  __shared__ float part[16][32][NB * 4];
  __shared__ float block_sum[RG][32][NB * 4];
  cg::cluster_group cluster = cg::this_cluster();
#pragma unroll
  for (int q = 0; q < RG; ++q) {
#pragma unroll
    for (int j = 0; j < NB; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) part[warp][lane][j * 4 + e] = d[q][j][e];
    __syncthreads();
    if (warp == 0)
#pragma unroll
      for (int c = 0; c < NB * 4; ++c) {
        float sum = 0.f;
        for (int i = 0; i < warps; ++i) sum += part[i][lane][c];
        block_sum[q][lane][c] = sum;
      }
    __syncthreads();
  }
  cluster.sync();
  if (blockIdx.y == 0 && warp == 0) {
#pragma unroll
    for (int q = 0; q < RG; ++q)
#pragma unroll
      for (int j = 0; j < NB; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float sum = 0.f;
          for (unsigned r = 0; r < gridDim.y; ++r)
            sum += cluster.map_shared_rank(&block_sum[0][0][0], r)[(q * 32 + lane) * NB * 4 + j * 4 + e];
          const long long row = row0 + 16 * q + g + (e >= 2 ? 8 : 0);  // W's row: y's column
          const int col = 8 * j + 2 * t + (e & 1);                       // x's row: y's row
          if (row < n && col < m) y[(long long)col * n + row] = T(sum + (bias ? float(bias[row]) : 0.f));
        }
  }
  cluster.sync();  // the peers' shared memory stays until the first block has read it
}

template <class T, int NB>
static int launch_mma(int u, int rg, int splits, void* y, const void* x, int m, int k, const void* w, int n,
                      const void* b, int threads, cudaStream_t s) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = splits;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3((n + 16 * rg - 1) / (16 * rg), splits);
  config.blockDim = dim3(threads);
  config.stream = s;
  config.attrs = attr;
  config.numAttrs = 1;
  auto yt = static_cast<T*>(y);
  auto xt = static_cast<const T*>(x);
  auto wt = static_cast<const T*>(w);
  auto bt = static_cast<const T*>(b);
  cudaError_t e = cudaErrorInvalidValue;
#define CS_CASE(U_, RG_) \
  if (u == U_ && rg == RG_) e = cudaLaunchKernelEx(&config, gemv_mma<T, NB, U_, RG_>, yt, xt, m, k, wt, n, bt);
  CS_CASE(1, 1) CS_CASE(2, 1) CS_CASE(4, 1) CS_CASE(1, 2) CS_CASE(2, 2) CS_CASE(1, 4) CS_CASE(2, 4)
#undef CS_CASE
  if (e == cudaSuccess) return 0;
  cudaGetLastError();  // a cluster that cannot be placed is not sticky: clear it
  return 1;
}

extern "C" {
int cs_abi_version(void) { return 0; }

// 0 on success, 2 for a shape the probe was not built for.
int gemv_probe(int bf16, int m, int r, int u, void* y, const void* x, int k, const void* w, int n, const void* b,
               int blocks, int threads, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  return bf16 ? by_rows<__nv_bfloat16>(m, r, u, y, x, k, w, n, b, blocks, threads, s)
              : by_rows<__half>(m, r, u, y, x, k, w, n, b, blocks, threads, s);
}

// The tensor-core probe: `threads` = 32 x the warps that split K (at most 16), `splits` blocks a
// cluster splitting it further (at most 8), `u` chunks in flight, `rg` groups of 16 rows of W a block.
int gemv_mma_probe(int bf16, int m, int u, int rg, int splits, void* y, const void* x, int k, const void* w, int n,
                   const void* b, int threads, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (m < 1 || m > 16 || threads % 32 || threads > 512 || splits < 1 || splits > 8) return 2;
  if (bf16) return m <= 8 ? launch_mma<__nv_bfloat16, 1>(u, rg, splits, y, x, m, k, w, n, b, threads, s)
                          : launch_mma<__nv_bfloat16, 2>(u, rg, splits, y, x, m, k, w, n, b, threads, s);
  return m <= 8 ? launch_mma<__half, 1>(u, rg, splits, y, x, m, k, w, n, b, threads, s)
                : launch_mma<__half, 2>(u, rg, splits, y, x, m, k, w, n, b, threads, s);
}
}
