// cutsearch's cuBLAS fallback: the same C ABI as an exported kernel, for layers where the
// search found nothing faster than cuBLAS. y[M,N] = act(x[M,K] @ W[N,K]^T (+ b[N])).
#include <cstdio>
#include <new>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define CS_BF16 ${is_bf16}
#define CS_HAS_BIAS ${has_bias}
#define CS_ACT ${act}  // 0 none, 1 relu, 2 gelu, 3 silu
#define CS_OUT_T ${transposed}  // y^T (N x M) instead of y

#if CS_BF16
using T = __nv_bfloat16;
static constexpr cudaDataType_t kType = CUDA_R_16BF;
#else
using T = __half;
static constexpr cudaDataType_t kType = CUDA_R_16F;
#endif

struct cs_layer {
  int m, n, k, x_ld, y_ld;
  cublasHandle_t blas = nullptr;
  const void *x = nullptr, *w = nullptr, *bias = nullptr;
  void* y = nullptr;
  char error[256] = {0};
};

// y is rows x cols with row pitch ld; the bias runs along y's N, which is y^T's rows.
__global__ void bias_act(T* y, const T* b, long long rows, long long cols, long long ld) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  long long r = i / cols, c = i - r * cols;
  T* p = y + r * ld + c;
  float v = float(*p);
#if CS_HAS_BIAS
  v += float(b[CS_OUT_T ? r : c]);
#endif
#if CS_ACT == 1
  v = v > 0.f ? v : 0.f;
#elif CS_ACT == 2
  v = 0.5f * v * (1.f + erff(v * 0.70710678f));
#elif CS_ACT == 3
  v = v / (1.f + __expf(-v));
#endif
  *p = T(v);
}

extern "C" {

int cs_abi_version(void) { return 3; }
const char* cs_kernel_name(void) { return "cublas_fallback"; }
const char* cs_error(const cs_layer* h) { return h ? h->error : "null handle"; }
size_t cs_workspace_size(const cs_layer*) { return 0; }

int cs_create(cs_layer** out, int m, int n, int k, int, int, int device, int, int, int, int, int, int io) {
  *out = nullptr;
  if (cudaSetDevice(device) != cudaSuccess) return 1;
  cs_layer* h = new (std::nothrow) cs_layer();
  if (!h) return 1;
  h->m = m; h->n = n; h->k = k;
  // Padded rows have a 16-byte pitch (io flags 1: x, 2: y); y^T's pitch is M.
  h->x_ld = io & 1 ? (k + 7) / 8 * 8 : k;
  h->y_ld = CS_OUT_T ? m : io & 2 ? (n + 7) / 8 * 8 : n;
  if (cublasCreate(&h->blas) != CUBLAS_STATUS_SUCCESS) { delete h; return 1; }
  *out = h;
  return 0;
}

int cs_bind(cs_layer* h, const void* x, const void* w, const void* bias, void* y, void*) {
  if (!h) return 1;
  h->x = x; h->w = w; h->bias = bias; h->y = y;
  return 0;
}

int cs_run(cs_layer* h, void* stream) {
  if (!h) return 1;
  cublasSetStream(h->blas, static_cast<cudaStream_t>(stream));
  const float one = 1.f, zero = 0.f;
#if CS_OUT_T
  // Row-major y^T is column-major y = x W^T: x as op T (ld x_ld), W as op N (ld k).
  cublasStatus_t st = cublasGemmEx(h->blas, CUBLAS_OP_T, CUBLAS_OP_N, h->m, h->n, h->k, &one,
                                   h->x, kType, h->x_ld, h->w, kType, h->k, &zero, h->y, kType, h->y_ld,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
#else
  // Row-major y = x W^T is column-major y^T = W x^T: W as op T (ld k), x as op N (ld x_ld).
  cublasStatus_t st = cublasGemmEx(h->blas, CUBLAS_OP_T, CUBLAS_OP_N, h->n, h->m, h->k, &one,
                                   h->w, kType, h->k, h->x, kType, h->x_ld, &zero, h->y, kType, h->y_ld,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
#endif
  if (st != CUBLAS_STATUS_SUCCESS) {
    std::snprintf(h->error, sizeof(h->error), "cublasGemmEx failed: %d", int(st));
    return 1;
  }
  if (CS_HAS_BIAS || CS_ACT) {
    long long rows = CS_OUT_T ? h->n : h->m, cols = CS_OUT_T ? h->m : h->n;
    bias_act<<<unsigned((rows * cols + 255) / 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<T*>(h->y), static_cast<const T*>(h->bias), rows, cols, h->y_ld);
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    std::snprintf(h->error, sizeof(h->error), "%s", cudaGetErrorString(e));
    return 1;
  }
  return 0;
}

void cs_destroy(cs_layer* h) {
  if (h && h->blas) cublasDestroy(h->blas);
  delete h;
}

}  // extern "C"
