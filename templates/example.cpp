// Calls the exported layer once from C++: y = act(x @ W^T (+ b)) on the default stream.
#include <cstdio>
#include <vector>

#include <cuda_runtime.h>

#include "cutsearch_fc.h"

#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
  std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_)); return 1; } } while (0)

int main() {
  const int m = CUTSEARCH_FC_M, n = CUTSEARCH_FC_N, k = CUTSEARCH_FC_K;
  const int pad_n = CUTSEARCH_FC_PAD_N, pad_k = CUTSEARCH_FC_PAD_K;
  const size_t e = 2;  // fp16 or bf16
  void *x, *w, *b, *y, *ws;
  CHECK(cudaMalloc(&x, size_t(m) * k * e));
  CHECK(cudaMalloc(&w, size_t(pad_n) * pad_k * e));   // W, zero-padded to [pad_n, pad_k]
  CHECK(cudaMalloc(&b, size_t(pad_n) * e));
  CHECK(cudaMalloc(&y, size_t(m) * n * e));
  CHECK(cudaMemset(x, 0, size_t(m) * k * e));
  CHECK(cudaMemset(w, 0, size_t(pad_n) * pad_k * e));
  CHECK(cudaMemset(b, 0, size_t(pad_n) * e));

  cs_layer* layer = nullptr;
  if (cs_create(&layer, m, n, k, pad_n, pad_k, /*device=*/0, CUTSEARCH_FC_RASTER, CUTSEARCH_FC_SWIZZLE,
                CUTSEARCH_FC_SPLITS, CUTSEARCH_FC_DECOMPOSITION, CUTSEARCH_FC_REDUCTION)) {
    std::fprintf(stderr, "cs_create failed\n");
    return 1;
  }
  CHECK(cudaMalloc(&ws, cs_workspace_size(layer) + 1));
  if (cs_bind(layer, x, w, b, y, ws) || cs_run(layer, /*stream=*/nullptr)) {
    std::fprintf(stderr, "%s\n", cs_error(layer));
    return 1;
  }
  CHECK(cudaDeviceSynchronize());
  std::printf("ran %s on %dx%dx%d\n", cs_kernel_name(), m, n, k);
  cs_destroy(layer);
  cudaFree(x); cudaFree(w); cudaFree(b); cudaFree(y); cudaFree(ws);
  return 0;
}
