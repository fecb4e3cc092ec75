// The forest walk of readability_triton/forest/arrays.py (ArrayForestRunner) as one kernel,
// equal to Treelite's GTIL: one thread per (row, tree) walks its tree to a leaf; the last
// thread of a row to finish (an integer counter per row) sums the row's leaves in tree order,
// in double, as GTIL does, and writes the float score. Self-contained: NVRTC compiles it with
// no header; tests compile it as C++ for the CPU (kernels/host.py) and compare with NumPy.

typedef unsigned char u8;
typedef int i32;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

// A float32 feature in double, from its bits: CuPy compiles with -ftz=true, which would read a
// subnormal float32 as zero; GTIL reads its exact value.
__device__ __forceinline__ double widen(u32 bits) {
  u32 exponent = (bits >> 23) & 0xFF, mantissa = bits & 0x7FFFFF;
  if (exponent == 0 && mantissa != 0) {
    double v = (double)mantissa * 0x1p-149;  // exact: a 23-bit integer times a power of two
    return (bits >> 31) ? -v : v;
  }
  return (double)__uint_as_float(bits);
}

extern "C" __global__ void walk_forest(const u32* features, i32 rows, i32 n_features, const i64* roots,
                                       i32 trees, i32 depth, const i64* feature, const double* threshold,
                                       const u8* less_equal, const u8* default_left, const i64* left,
                                       const i64* right, const u8* leaf, const double* value, i32 average,
                                       double base_score, double* leaves, u32* finished, float* scores) {
  i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= (i64)rows * trees) return;
  i64 row = k / trees, tree = k % trees;
  const u32* x = features + row * n_features;
  i64 node = roots[tree];
  for (i32 level = 0; level < depth && !leaf[node]; ++level) {
    double v = widen(x[feature[node]]);
    bool go_left = isnan(v) ? default_left[node] != 0
                            : (less_equal[node] ? v <= threshold[node] : v < threshold[node]);
    node = go_left ? left[node] : right[node];
  }
  leaves[k] = value[node];
  __threadfence();  // this leaf is visible before the counter says so
  if (atomicAdd(&finished[row], 1u) != (u32)(trees - 1)) return;
  __threadfence();
  const volatile double* mine = leaves + row * trees;
  double total = 0.0;
  for (i32 t = 0; t < trees; ++t) total += mine[t];
  if (average) total /= (double)trees;
  total += base_score;
  scores[row] = (float)total;
}
