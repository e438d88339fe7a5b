/* C ABI of one exported cutsearch layer: y[M,N] = act(x[M,K] @ W[N,K]^T (+ b[N])).
 *
 * Layer: ${shape} ${dtype}, bias ${bias}, activation ${activation}; kernel ${kernel_name}.
 * Weights must be laid out once before binding: W as [pad_n, pad_k] row-major, zero-padded,
 * and b as [pad_n] (pad_n = ${pad_n}, pad_k = ${pad_k} for this layer).
 * All pointers are device pointers, 16-byte aligned, on the handle's device; y must not overlap
 * x. Every call runs on the stream it is given. A handle and its workspace serve one stream and
 * one thread at a time: give each stream or thread its own. Every export defines the same cs_*
 * symbols: to use two layers in one program, dlopen each library with RTLD_LOCAL.
 */
#ifndef CUTSEARCH_FC_H
#define CUTSEARCH_FC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUTSEARCH_FC_M ${m}
#define CUTSEARCH_FC_N ${n}
#define CUTSEARCH_FC_K ${k}
#define CUTSEARCH_FC_PAD_N ${pad_n}
#define CUTSEARCH_FC_PAD_K ${pad_k}
/* The layouts this layer was searched for: x row pitch, y row pitch, and whether y is y^T. */
#define CUTSEARCH_FC_IO ${io}
#define CUTSEARCH_FC_X_PITCH ${x_pitch}
#define CUTSEARCH_FC_Y_ROWS ${y_rows}
#define CUTSEARCH_FC_Y_PITCH ${y_pitch}
#define CUTSEARCH_FC_Y_TRANSPOSED ${transposed}
/* Run-time arguments the search chose for this kernel. */
#define CUTSEARCH_FC_RASTER ${raster}
#define CUTSEARCH_FC_SWIZZLE ${swizzle}
#define CUTSEARCH_FC_SPLITS ${splits}
#define CUTSEARCH_FC_DECOMPOSITION ${decomposition}
#define CUTSEARCH_FC_REDUCTION ${reduction}

typedef struct cs_layer cs_layer;

int cs_abi_version(void);
const char* cs_kernel_name(void);
/* Returns 0 on success; otherwise cs_error(NULL) says why, on the calling thread. m may differ
   from CUTSEARCH_FC_M (correct, but not tuned for it). */
/* io: CS_IO_X_PADDED when x arrives with row pitch pad_k (padding columns finite),
   CS_IO_X_ALIGNED when it arrives with K rounded up to 16-byte rows (CUTSEARCH_FC_X_PITCH), to be
   copied to pad_k where that is longer (split-K's pitch; not with CS_IO_X_PADDED),
   CS_IO_Y_PADDED when y may be written with row pitch pad_n, CS_IO_PDL to overlap the call's
   kernels, copies, GEMM and the views' tail (programmatic dependent launch), CS_IO_X_VIEWS to
   read an x whose rows are not 16-byte aligned in place instead of copying it (x 16-byte
   aligned and finite: a non-finite element also reaches its neighbouring rows; the first cs_run
   after cs_bind builds shifted copies of W in the workspace; where the views' count P does not
   divide m, a second kernel computes the last m mod P rows, and where 1 < m < P, x is copied;
   where m is 1, its one row is read up to k and W as it is), CS_IO_W_PREFETCH (with CS_IO_PDL,
   where x is copied) for the GEMM to pull W into L2 while it waits for the copy,
   CS_IO_X_OWN_COPY (where x is copied) for the GEMM to copy x itself, with no copy kernel
   (ignored by kernels not built for it). CUTSEARCH_FC_IO is what the search chose. */
#define CS_IO_X_PADDED 1
#define CS_IO_Y_PADDED 2
#define CS_IO_PDL 4
#define CS_IO_X_VIEWS 8
#define CS_IO_W_PREFETCH 16
#define CS_IO_X_OWN_COPY 32
#define CS_IO_X_ALIGNED 64
int cs_create(cs_layer** out, int m, int n, int k, int pad_n, int pad_k, int device,
              int raster, int swizzle, int splits, int decomposition, int reduction, int io);
/* Bytes of device workspace the caller provides to cs_bind. Keep it for this layer alone while
   bound: a kernel that sums split-K slices in its epilogue keeps tile counters there between
   calls (they return to zero after each call; a newly bound workspace is zeroed by the next
   cs_run). */
size_t cs_workspace_size(const cs_layer* layer);
/* Prepares the kernel's arguments; cheap when the pointers are the same as last time. W is
   [pad_n, pad_k], bias [pad_n] (not read where the layer has no bias: it may be null). Returns
   1, with the reason in cs_error(layer), for a null or misaligned pointer; the layer is then
   unbound until a cs_bind succeeds. It queues no work on the GPU. */
int cs_bind(cs_layer* layer, const void* x, const void* w, const void* bias, void* y, void* workspace);
/* One layer call on `stream` (a cudaStream_t). The first cs_run after cs_bind also zeroes the
   workspace's counters and, with CS_IO_X_VIEWS, builds W's shifted copies: run it once outside
   a CUDA graph before capturing cs_run into one. */
int cs_run(cs_layer* layer, void* stream);
/* The reason the handle's last call failed; for NULL, why this thread's last cs_create did. */
const char* cs_error(const cs_layer* layer);
void cs_destroy(cs_layer* layer);

#ifdef __cplusplus
}
#endif

#endif /* CUTSEARCH_FC_H */
