// Rendered into every kernel's translation unit (templates/launcher.cu); tests compile it alone.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

// Per-call layout copy (a named namespace: nvcc's host stubs cannot name kernels in an
// anonymous one): dst[r][c] = c < cols ? src[r][c] : 0 for c < dst_pitch. Padding x and
// unpadding y are both this. A block owns CHUNK consecutive elements of dst. Dropping or adding
// padding columns keeps order, so the source elements it needs are one contiguous range too:
// the block stages that range in shared memory with 16-byte loads, then writes its chunk with
// 16-byte stores. Both sides are coalesced whatever the rows' alignment; only the ragged ends
// of a range move element by element.
namespace cutsearch_copy {

constexpr int THREADS = 256;
// 16-byte vectors a thread loads before the block's barrier. Four put the unaligned layer's x
// copy in one wave; inside the call it cost 6.6 µs against 7.0 µs with one
// (studies/recorded/h200x2-2026-11-30-copy-unroll/).
constexpr int UNROLL = 4;

template <class T, int U = UNROLL>
constexpr int chunk() { return THREADS * U * (16 / int(sizeof(T))); }

// Programmatic dependent launch (PDL): a copy launched with it may start while the kernel before
// it finishes, so it first waits for that kernel's writes (`wait`); `trigger` lets the kernel
// after it start its prologue early. Both instructions are no-ops without the launch attribute.
// One block an SM at least: without it, ptxas capped the registers and spilled the held vectors.
template <class T, class I, int U>
__global__ void __launch_bounds__(THREADS, 1)
repitch(T* __restrict__ dst, I dst_pitch, const T* __restrict__ src, I src_pitch, I rows, I cols, bool wait,
        bool trigger) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (wait) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (trigger) asm volatile("griddepcontrol.launch_dependents;");
#endif
  constexpr int V = 16 / sizeof(T);
  constexpr int C = chunk<T, U>();
  constexpr int CAP = 2 * C + 2 * V;  // enough unless a row loses most of its pitch
  __shared__ alignas(16) T staged[CAP];
  const I total = rows * dst_pitch;
  const I q0 = I(blockIdx.x) * C;
  const I q1 = q0 + C < total ? q0 + C : total;
  const I ra = q0 / dst_pitch, ca = q0 - ra * dst_pitch;
  const I rb = (q1 - 1) / dst_pitch, cb = (q1 - 1) - rb * dst_pitch;
  const I s0 = ra * src_pitch + (ca < cols ? ca : cols);
  I s1 = rb * src_pitch + (cb + 1 < cols ? cb + 1 : cols);
  if (s1 < s0) s1 = s0;
  // Stage from the 16-byte boundary at or below s0, so aligned global vectors land aligned.
  const I lead = I((reinterpret_cast<uintptr_t>(src + s0) & 15) / sizeof(T));
  const I base = s0 - lead;
  const bool use_smem = s1 - base <= CAP;
  if (use_smem) {
    // All of a thread's loads first, then its stores: its vectors are in flight together.
    constexpr int PER = (CAP / V + THREADS - 1) / THREADS;
    uint4 held[PER];
#pragma unroll
    for (int j = 0; j < PER; ++j) {
      const I v = I(threadIdx.x) + I(j) * THREADS, e = base + v * V;
      if (v * V < s1 - base && e >= s0 && e + V <= s1) held[j] = *reinterpret_cast<const uint4*>(src + e);
    }
#pragma unroll
    for (int j = 0; j < PER; ++j) {
      const I v = I(threadIdx.x) + I(j) * THREADS, e = base + v * V;
      if (v * V >= s1 - base) break;
      if (e >= s0 && e + V <= s1) {
        reinterpret_cast<uint4*>(staged)[v] = held[j];
      } else {
#pragma unroll
        for (int k = 0; k < V; ++k)
          if (e + k >= s0 && e + k < s1) staged[v * V + k] = src[e + k];
      }
    }
    __syncthreads();
  }
  const I dlead = I((reinterpret_cast<uintptr_t>(dst + q0) & 15) / sizeof(T));
  for (I v = threadIdx.x; v * V < q1 - q0 + dlead; v += THREADS) {
    const I e = q0 - dlead + v * V;  // first dst element of this 16-byte vector
    const I first = e > q0 ? e : q0;
    I r = first / dst_pitch, c = first - r * dst_pitch;
    alignas(16) T out[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      if (e + j >= first && e + j < q1) {
        const I s = r * src_pitch + c;
        out[j] = c < cols ? (use_smem ? staged[s - base] : src[s]) : T(0);
        if (++c == dst_pitch) { c = 0; ++r; }
      }
    }
    if (e >= q0 && e + V <= q1) {
      *reinterpret_cast<uint4*>(dst + e) = *reinterpret_cast<const uint4*>(out);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (e + j >= q0 && e + j < q1) dst[e + j] = out[j];
    }
  }
}

template <class I, int U, class T>
cudaError_t launch(unsigned blocks, cudaStream_t s, bool pdl, T* dst, I dst_pitch, const T* src, I src_pitch, I rows,
                   I cols, bool trigger) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(THREADS);
  config.stream = s;
  config.attrs = attr;
  config.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&config, repitch<T, I, U>, dst, dst_pitch, src, src_pitch, rows, cols, pdl, trigger);
}

// 32-bit index arithmetic where it suffices: the divisions are a visible share of a copy.
// `pdl`: launch with programmatic dependent launch after the kernel before it on `s`;
// `trigger`: let the kernel after it launch early (it must wait on this one's writes itself).
template <class T, int U = UNROLL>
cudaError_t launch_repitch(T* dst, long long dst_pitch, const T* src, long long src_pitch, long long rows,
                           long long cols, cudaStream_t s, bool pdl = false, bool trigger = false) {
  const long long total = rows * dst_pitch;
  const unsigned blocks = unsigned((total + chunk<T, U>() - 1) / chunk<T, U>());
  if (total + chunk<T, U>() < (1LL << 31) && rows * src_pitch < (1LL << 31))
    return launch<int, U>(blocks, s, pdl, dst, int(dst_pitch), src, int(src_pitch), int(rows), int(cols), trigger);
  return launch<long long, U>(blocks, s, pdl, dst, dst_pitch, src, src_pitch, rows, cols, trigger);
}

}  // namespace cutsearch_copy
