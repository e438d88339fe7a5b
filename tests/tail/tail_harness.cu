// Test-only: the views' tail kernel of templates/tail.cuh behind a C entry point, so that it can
// be checked against numpy on any row count, K, N and pitch without a CUTLASS kernel.
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

${copy_kernels}

template <class T>
static int run(void* y, long long y_pitch, const void* x, int rows, int k, const void* w, long long w_pitch, int n,
               const void* bias, int act, int sm_count) {
  auto* yt = static_cast<T*>(y);
  auto* xt = static_cast<const T*>(x);
  auto* wt = static_cast<const T*>(w);
  auto* bt = static_cast<const T*>(bias);
  cudaError_t e = cudaErrorInvalidValue;
  if (act == 0) e = cutsearch_tail::launch_tail_rows<0>(yt, y_pitch, xt, rows, k, wt, w_pitch, n, bt, sm_count, nullptr, false);
  if (act == 1) e = cutsearch_tail::launch_tail_rows<1>(yt, y_pitch, xt, rows, k, wt, w_pitch, n, bt, sm_count, nullptr, false);
  if (act == 3) e = cutsearch_tail::launch_tail_rows<3>(yt, y_pitch, xt, rows, k, wt, w_pitch, n, bt, sm_count, nullptr, false);
  if (e != cudaSuccess) return 1;
  return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
}

extern "C" {
int cs_abi_version(void) { return 0; }

// y[r][c] = act(sum over j < k of x[r][j] w[c][j] (+ bias[c])) for r < rows, c < n; x's rows k
// apart from any 2-byte-aligned start, w's w_pitch apart; bf16 where `bf16`; synchronous.
int test_tail_rows(void* y, long long y_pitch, const void* x, int rows, int k, const void* w, long long w_pitch,
                   int n, const void* bias, int act, int bf16, int sm_count) {
  return bf16 ? run<__nv_bfloat16>(y, y_pitch, x, rows, k, w, w_pitch, n, bias, act, sm_count)
              : run<__half>(y, y_pitch, x, rows, k, w, w_pitch, n, bias, act, sm_count);
}
}
