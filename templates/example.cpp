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
  cs_layer* layer = nullptr;
  if (cs_create(&layer, m, n, k, pad_n, pad_k, /*device=*/0, CUTSEARCH_FC_RASTER, CUTSEARCH_FC_SWIZZLE,
                CUTSEARCH_FC_SPLITS, CUTSEARCH_FC_DECOMPOSITION, CUTSEARCH_FC_REDUCTION, CUTSEARCH_FC_IO)) {
    std::fprintf(stderr, "%s\n", cs_error(nullptr));
    return 1;
  }
  void *x, *w, *b, *y, *ws;
  const size_t x_bytes = size_t(m) * CUTSEARCH_FC_X_PITCH * e;
  const size_t y_bytes = size_t(CUTSEARCH_FC_Y_ROWS) * CUTSEARCH_FC_Y_PITCH * e;
  CHECK(cudaMalloc(&x, x_bytes));
  CHECK(cudaMalloc(&w, size_t(pad_n) * pad_k * e));   // W, zero-padded to [pad_n, pad_k]
  CHECK(cudaMalloc(&b, size_t(pad_n) * e));
  CHECK(cudaMalloc(&y, y_bytes));
  CHECK(cudaMemset(x, 0, x_bytes));
  CHECK(cudaMemset(w, 0, size_t(pad_n) * pad_k * e));
  CHECK(cudaMemset(b, 0, size_t(pad_n) * e));

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
