// cutsearch's cuBLAS fallback: the same C ABI as an exported kernel, for layers where the
// search found nothing faster than cuBLAS. y[M,N] = act(x[M,K] @ W[N,K]^T (+ b[N])).
// It calls cuBLASLt with the bias fused into the GEMM's epilogue, as F.linear does: a GEMM
// followed by its own bias pass reads and writes y twice, and lost to F.linear on the H200.
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <new>

#include <cublasLt.h>
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

// cuBLASLt's epilogue adds a bias along D's rows: y's columns, so not for y^T. It fuses ReLU
// too; GELU (erf) and SiLU run in a second kernel, as they do after F.linear.
static constexpr bool kFusedBias = CS_HAS_BIAS && !CS_OUT_T;
static constexpr bool kFusedRelu = CS_ACT == 1 && !CS_OUT_T;
static constexpr bool kPostBias = CS_HAS_BIAS && !kFusedBias;
static constexpr bool kPostAct = CS_ACT != 0 && !kFusedRelu;
static constexpr size_t kLtWorkspace = size_t(32) << 20;  // what torch gives cuBLASLt on Hopper

struct cs_layer {
  int m, n, k, x_ld, y_ld;
  cublasLtHandle_t lt = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  unsigned aligned = 0;  // the pointers' alignment the algorithm was chosen for; 0: none chosen
  const void *x = nullptr, *w = nullptr, *bias = nullptr;
  void* y = nullptr;
  void* ws = nullptr;
  char error[256] = {0};
};

${activations}

${abi_checks}

__device__ __forceinline__ float activate(float v) { return cutsearch_act::activate<CS_ACT>(v); }

// The activation alone over a contiguous, 16-byte-aligned y: 16-byte vectors, no indexing.
__global__ void act_flat(T* y, long long count) {
  constexpr int V = 16 / sizeof(T);
  long long i = (blockIdx.x * (long long)blockDim.x + threadIdx.x) * V;
  if (i + V <= count) {
    uint4 raw = *reinterpret_cast<const uint4*>(y + i);
    T* v = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = T(activate(float(v[j])));
    *reinterpret_cast<uint4*>(y + i) = raw;
  } else {
    for (; i < count; ++i) y[i] = T(activate(float(y[i])));
  }
}

// Bias (where cuBLASLt could not fuse it) and activation, element by element.
__global__ void bias_act(T* y, const T* b, long long rows, long long cols, long long ld) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  long long r = i / cols, c = i - r * cols;
  T* p = y + r * ld + c;
  float v = float(*p);
  if (kPostBias) v += float(b[CS_OUT_T ? r : c]);
  if (kPostAct) v = activate(v);
  *p = T(v);
}

static int lt_fail(cs_layer* h, const char* what, cublasStatus_t st) {
  std::snprintf(h->error, sizeof(h->error), "%s failed: cuBLAS status %d", what, int(st));
  return 1;
}

static unsigned alignment_of(const void* p) {
  unsigned a = 256;
  while (a > 1 && reinterpret_cast<uintptr_t>(p) % a) a /= 2;
  return a;
}

// The fastest algorithm cuBLASLt's heuristic knows for the bound pointers' alignment.
static int choose_algo(cs_layer* h) {
  unsigned ax = alignment_of(h->x), aw = alignment_of(h->w), ay = alignment_of(h->y);
  unsigned key = ax | aw << 9 | ay << 18;
  if (key == h->aligned) return 0;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasStatus_t st = cublasLtMatmulPreferenceCreate(&pref);
  if (st != CUBLAS_STATUS_SUCCESS) return lt_fail(h, "cublasLtMatmulPreferenceCreate", st);
  uint32_t a32 = aw, b32 = ax, d32 = ay;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kLtWorkspace,
                                       sizeof(kLtWorkspace));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a32, sizeof(a32));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b32, sizeof(b32));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &d32, sizeof(d32));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &d32, sizeof(d32));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  st = cublasLtMatmulAlgoGetHeuristic(h->lt, h->op, h->a, h->b, h->d, h->d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS) return lt_fail(h, "cublasLtMatmulAlgoGetHeuristic", st);
  if (!found) {
    std::snprintf(h->error, sizeof(h->error), "cuBLASLt has no algorithm for this layer");
    return 1;
  }
  h->algo = result.algo;
  h->aligned = key;
  return 0;
}

extern "C" {

int cs_abi_version(void) { return 3; }
const char* cs_kernel_name(void) { return "cublas_fallback"; }
const char* cs_error(const cs_layer* h) { return cutsearch_abi::cs_error_of(h ? h->error : nullptr, h); }
size_t cs_workspace_size(const cs_layer*) { return kLtWorkspace; }

void cs_destroy(cs_layer* h);

int cs_create(cs_layer** out, int m, int n, int k, int pad_n, int pad_k, int device, int, int, int, int, int, int io) {
  if (!out) return cutsearch_abi::refuse("cs_create: out is null");
  *out = nullptr;
  if (cutsearch_abi::check_create(m, n, k, pad_n, pad_k, device, io)) return 1;
  const cudaError_t set = cudaSetDevice(device);
  if (set != cudaSuccess) return cutsearch_abi::refuse("cs_create: cudaSetDevice: %s", cudaGetErrorString(set));
  cs_layer* h = new (std::nothrow) cs_layer();
  if (!h) return cutsearch_abi::refuse("cs_create: out of host memory");
  h->m = m; h->n = n; h->k = k;
  h->x_ld = io & (cutsearch_abi::kXPadded | cutsearch_abi::kXAligned) ? (k + 7) / 8 * 8 : k;
  h->y_ld = CS_OUT_T ? m : io & 2 ? (n + 7) / 8 * 8 : n;
  // Column-major, as cuBLASLt sees it. y: D = W^T' x^T, N x M with y's pitch; y^T: D = x W^T... as
  // M x N with pitch M. A is the transposed operand, K-major either way.
  const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
  const int rows = CS_OUT_T ? m : n, cols = CS_OUT_T ? n : m;
  const int lda = CS_OUT_T ? h->x_ld : k, ldb = CS_OUT_T ? k : h->x_ld;
  cublasLtEpilogue_t epilogue = kFusedBias ? (kFusedRelu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                           : (kFusedRelu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
  bool ok = cublasLtCreate(&h->lt) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulDescCreate(&h->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulDescSetAttribute(h->op, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof(opT)) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulDescSetAttribute(h->op, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof(opN)) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulDescSetAttribute(h->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)) ==
                CUBLAS_STATUS_SUCCESS &&
            cublasLtMatrixLayoutCreate(&h->a, kType, k, rows, lda) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatrixLayoutCreate(&h->b, kType, k, cols, ldb) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatrixLayoutCreate(&h->d, kType, rows, cols, h->y_ld) == CUBLAS_STATUS_SUCCESS;
  if (!ok) {
    cs_destroy(h);
    return cutsearch_abi::refuse("cs_create: cuBLASLt could not describe this layer");
  }
  *out = h;
  return 0;
}

int cs_bind(cs_layer* h, const void* x, const void* w, const void* bias, void* y, void* workspace) {
  if (!h) return 1;
  // Most calls repeat the previous pointers: nothing to set, and no cuBLASLt call on the host.
  if (h->aligned && x == h->x && w == h->w && bias == h->bias && y == h->y && workspace == h->ws) return 0;
  // cuBLASLt takes any element alignment: only missing pointers are refused.
  if (const char* problem = cutsearch_abi::bind_problem(x, w, bias, CS_HAS_BIAS, y, workspace, kLtWorkspace, 1, 1)) {
    std::snprintf(h->error, sizeof(h->error), "cs_bind: %s", problem);
    h->aligned = 0;  // a refused binding leaves none (here and below)
    return 1;
  }
  const bool new_bias = !h->aligned || bias != h->bias;
  h->x = x; h->w = w; h->bias = bias; h->y = y; h->ws = workspace;
  if (kFusedBias && new_bias) {
    cublasStatus_t st = cublasLtMatmulDescSetAttribute(h->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &h->bias,
                                                       sizeof(h->bias));
    if (st != CUBLAS_STATUS_SUCCESS) {
      h->aligned = 0;
      return lt_fail(h, "setting the bias pointer", st);
    }
  }
  if (choose_algo(h)) {
    h->aligned = 0;
    return 1;
  }
  return 0;
}

int cs_run(cs_layer* h, void* stream) {
  if (!h) return 1;
  if (!h->aligned) {
    std::snprintf(h->error, sizeof(h->error), "cs_bind was not called");
    return 1;
  }
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const float one = 1.f, zero = 0.f;
  const void* a = CS_OUT_T ? h->x : h->w;
  const void* b = CS_OUT_T ? h->w : h->x;
  cublasStatus_t st = cublasLtMatmul(h->lt, h->op, &one, a, h->a, b, h->b, &zero, h->y, h->d, h->y, h->d,
                                     &h->algo, h->ws, kLtWorkspace, s);
  if (st != CUBLAS_STATUS_SUCCESS) return lt_fail(h, "cublasLtMatmul", st);
  long long rows = CS_OUT_T ? h->n : h->m, cols = CS_OUT_T ? h->m : h->n;
  if (!kPostBias && kPostAct && h->y_ld == cols && reinterpret_cast<uintptr_t>(h->y) % 16 == 0) {
    const long long vectors = (rows * cols + 16 / sizeof(T) - 1) / (16 / sizeof(T));
    act_flat<<<unsigned((vectors + 255) / 256), 256, 0, s>>>(static_cast<T*>(h->y), rows * cols);
  } else if (kPostBias || kPostAct) {
    bias_act<<<unsigned((rows * cols + 255) / 256), 256, 0, s>>>(static_cast<T*>(h->y),
                                                                 static_cast<const T*>(h->bias), rows, cols, h->y_ld);
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    std::snprintf(h->error, sizeof(h->error), "%s", cudaGetErrorString(e));
    return 1;
  }
  return 0;
}

void cs_destroy(cs_layer* h) {
  if (!h) return;
  if (h->d) cublasLtMatrixLayoutDestroy(h->d);
  if (h->b) cublasLtMatrixLayoutDestroy(h->b);
  if (h->a) cublasLtMatrixLayoutDestroy(h->a);
  if (h->op) cublasLtMatmulDescDestroy(h->op);
  if (h->lt) cublasLtDestroy(h->lt);
  delete h;
}

}  // extern "C"
