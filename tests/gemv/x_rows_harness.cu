// Test-only, appended to a rendered gemv kernel (templates/gemv.cu): how its lanes read x,
// run on the CPU, so that every row alignment is checked without a GPU.
#include <cstring>

extern "C" {

// For each row r < m of x (rows x_ld elements apart, from any element) and each vector v of K:
// the kVec elements that the kernel's blocks of kTileM rows multiply with W's vector v, into
// out[r][v * kVec...].
int test_x_rows(const void* x, int m, long long x_ld, int k, unsigned short* out) {
  using namespace ${namespace};
  const int vectors = (k + kVec - 1) / kVec;
  int off;
  const uint4* xv = x_vectors(x, &off);
  for (int m0 = 0; m0 < m; m0 += kTileM) {
    const XRows rows = x_rows(m0, m, x_ld, k, off);
    for (int i = 0; i < kTileM && m0 + i < m; ++i)
      for (int v = 0; v < vectors; ++v) {
        const uint4 got = x_vector(xv, rows, i, v, vectors);
        std::memcpy(out + ((long long)(m0 + i) * vectors + v) * kVec, &got, 16);
      }
  }
  return 0;
}

}  // extern "C"
