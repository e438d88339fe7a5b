// Rendered into every kernel's and the cuBLAS fallback's translation unit.
#pragma once
#include <cstdarg>
#include <cstdint>
#include <cstdio>

#include <cuda_runtime.h>

// The C ABI's argument checks: a caller's mistake is a reason cs_error gives, not a fault on the GPU.
namespace cutsearch_abi {

// The io flags cs_create knows (cutsearch_fc.h's CS_IO_*).
constexpr int kKnownIo = 127;
constexpr int kXPadded = 1, kXAligned = 64;

// A failed cs_create has no handle to hold its reason: it waits here, one per thread, for cs_error(NULL).
inline thread_local char create_error[256];

inline int refuse(const char* format, ...) {
  va_list args;
  va_start(args, format);
  std::vsnprintf(create_error, sizeof(create_error), format, args);
  va_end(args);
  return 1;
}

// A call on handle h failed: its reason, for cs_error(h), and the C ABI's failure code.
template <class Handle>
int fail(Handle* h, const char* what, const char* detail) {
  if (h) std::snprintf(h->error, sizeof(h->error), "%s: %s", what, detail);
  return 1;
}

// 0 where cs_create can make this layer; otherwise 1, with the reason for cs_error(NULL).
inline int check_create(int m, int n, int k, int pad_n, int pad_k, int device, int io) {
  create_error[0] = '\0';
  if (m < 1 || n < 1 || k < 1) return refuse("cs_create: m, n and k must be positive, not %d, %d, %d", m, n, k);
  if (pad_n < n || pad_k < k)
    return refuse("cs_create: pad_n and pad_k (%d, %d) must be at least n and k (%d, %d)", pad_n, pad_k, n, k);
  if (io & ~kKnownIo) return refuse("cs_create: unknown io flags 0x%x", io & ~kKnownIo);
  if ((io & kXPadded) && (io & kXAligned))
    return refuse("cs_create: x comes at pitch pad_k (CS_IO_X_PADDED) or K's 16-byte rows (CS_IO_X_ALIGNED), not both");
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess) return refuse("cs_create: %s", cudaGetErrorString(e));
  if (device < 0 || device >= devices) return refuse("cs_create: there is no device %d (%d devices)", device, devices);
  return 0;
}

inline const char* cs_error_of(const char* handle_error, bool has_handle) {
  return has_handle ? handle_error : create_error[0] ? create_error : "null handle";
}

// Why cs_bind cannot take these pointers, or null. align: the bytes TMA needs every base aligned
// to (1: none), and x's unless x is copied, where its elements' x_align does.
inline const char* bind_problem(const void* x, const void* w, const void* bias, bool reads_bias, const void* y,
                                const void* workspace, size_t workspace_bytes, size_t x_align, size_t align) {
  if (!x || !w || !y) return "x, w and y must not be null";
  if (reads_bias && !bias) return "this layer adds a bias: b must not be null";
  if (workspace_bytes && !workspace) return "the workspace must not be null (cs_workspace_size bytes)";
  auto off = [](const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a != 0; };
  if (off(x, x_align)) return x_align == align ? "x must be 16-byte aligned" : "x must be aligned to its elements";
  if (off(w, align)) return "w must be 16-byte aligned";
  if (off(y, align)) return "y must be 16-byte aligned";
  if (reads_bias && off(bias, align)) return "b must be 16-byte aligned";
  if (workspace_bytes && off(workspace, align)) return "the workspace must be 16-byte aligned";
  return nullptr;
}

}  // namespace cutsearch_abi
