// A stand-in for templates/launcher.cu with planted faults, for testing the GPU worker.
// It exports the same C ABI (cs_create / cs_workspace_size / cs_bind / cs_run / cs_error /
// cs_destroy) around a naive FC kernel, y = x W^T (+ b), fp16 in, fp32 accumulate, and needs
// no CUTLASS, so it builds in seconds. CS_FAULT picks the behaviour:
//   0 correct   1 hang (spins for ever)   2 out-of-bounds write (illegal address)
//   3 wrong result   4 fails to compile   5 asks for more shared memory than a block may have
// Rendered with string.Template (the fault number and a tag); -DCS_FAULT=n on the command line wins.
#include <cstdint>
#include <cstdio>
#include <new>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#ifndef CS_FAULT
#define CS_FAULT ${fault}
#endif
// Distinct tags give distinct sources, hence distinct cache entries, for the same fault.
#define CS_TAG "${tag}"

#if CS_FAULT == 4
#error "planted compile error (CS_FAULT == 4)"
#endif

namespace {

constexpr int kThreads = 256;
// Over the 227 KiB of dynamic shared memory an SM90 block can opt in to.
constexpr size_t kTooMuchSmem = 300 * 1024;

__global__ void fc_kernel(const __half* __restrict__ x, const __half* __restrict__ w,
                          const __half* __restrict__ bias, __half* __restrict__ y,
                          int m, int n, int k, int ldw, volatile int* flag) {
#if CS_FAULT == 1
  // Spin until a flag that nobody sets: a kernel that never finishes.
  while (*flag == 0) {
    __nanosleep(1000);
  }
#endif
  int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(m) * n) return;
  int i = int(idx / n), j = int(idx % n);
  float acc = 0.f;
  for (int p = 0; p < k; ++p) acc += __half2float(x[int64_t(i) * k + p]) * __half2float(w[int64_t(j) * ldw + p]);
  if (bias) acc += __half2float(bias[j]);
#if CS_FAULT == 3
  acc = 2.f * acc + 1.f;
#endif
#if CS_FAULT == 2
  // Far outside any allocation: the SM raises an illegal address.
  y[idx + (int64_t(1) << 40)] = __float2half(acc);
#else
  y[idx] = __float2half(acc);
#endif
}

}  // namespace

struct cs_layer {
  int m, n, k, pad_n, pad_k;
  const void* x = nullptr;
  const void* w = nullptr;
  const void* bias = nullptr;
  void* y = nullptr;
  void* ws = nullptr;
  char error[512] = {0};
};

static int fail(cs_layer* h, const char* what, const char* detail) {
  if (h) std::snprintf(h->error, sizeof(h->error), "%s: %s", what, detail);
  return 1;
}

extern "C" {

int cs_abi_version(void) { return 3; }
const char* cs_kernel_name(void) { return "cs_fault_" CS_TAG; }
int cs_fault_mode(void) { return CS_FAULT; }
const char* cs_error(const cs_layer* h) { return h ? h->error : "null handle"; }
size_t cs_workspace_size(const cs_layer* h) { return h ? 256 : 0; }

int cs_create(cs_layer** out, int m, int n, int k, int pad_n, int pad_k, int device,
              int raster, int swizzle, int splits, int decomposition, int reduction, int io) {
  (void)device; (void)raster; (void)swizzle; (void)splits; (void)decomposition; (void)reduction; (void)io;
  *out = nullptr;
  cs_layer* h = new (std::nothrow) cs_layer();
  if (!h) return 1;
  h->m = m; h->n = n; h->k = k; h->pad_n = pad_n; h->pad_k = pad_k;
  *out = h;
  return 0;
}

int cs_bind(cs_layer* h, const void* x, const void* w, const void* bias, void* y, void* workspace) {
  if (!h) return 1;
  if (h->pad_n != h->n || h->pad_k < h->k) return fail(h, "cs_bind", "this kernel does not pad N");
  h->x = x; h->w = w; h->bias = bias; h->y = y; h->ws = workspace;
  return 0;
}

int cs_run(cs_layer* h, void* stream) {
  if (!h || !h->y) return fail(h, "cs_run", "cs_bind was not called");
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaError_t e = cudaMemsetAsync(h->ws, 0, sizeof(int), s);
  if (e != cudaSuccess) return fail(h, "cudaMemsetAsync", cudaGetErrorString(e));
  int64_t total = int64_t(h->m) * h->n;
  unsigned blocks = unsigned((total + kThreads - 1) / kThreads);
  size_t smem = CS_FAULT == 5 ? kTooMuchSmem : 0;
  fc_kernel<<<blocks, kThreads, smem, s>>>(
      static_cast<const __half*>(h->x), static_cast<const __half*>(h->w), static_cast<const __half*>(h->bias),
      static_cast<__half*>(h->y), h->m, h->n, h->k, h->pad_k, static_cast<volatile int*>(h->ws));
  e = cudaGetLastError();
  if (e != cudaSuccess) return fail(h, "launch", cudaGetErrorString(e));
  return 0;
}

void cs_destroy(cs_layer* h) { delete h; }

}  // extern "C"
