// Compiles a kernel file of this folder as plain C++ for the CPU (kernels/host.py), so that
// its logic is tested on machines without a GPU: a kernel is an ordinary function, called
// once per (block, thread) in order by a launcher that host.py writes; atomics are plain
// read-modify-writes (one thread at a time). Not used by NVRTC.
#include <cmath>
#include <cstring>

#define __global__
#define __device__
#define __forceinline__ inline

struct HostDim {
  unsigned x, y, z;
};
static HostDim threadIdx = {0, 0, 0}, blockIdx = {0, 0, 0}, blockDim = {1, 1, 1}, gridDim = {1, 1, 1};

static inline unsigned atomicAdd(unsigned* p, unsigned v) {
  unsigned old = *p;
  *p = old + v;
  return old;
}
static inline int atomicCAS(int* p, int expected, int desired) {
  int old = *p;
  if (old == expected) *p = desired;
  return old;
}
static inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long expected,
                                           unsigned long long desired) {
  unsigned long long old = *p;
  if (old == expected) *p = desired;
  return old;
}
static inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
static inline void __threadfence() {}
using std::isnan;
using std::sqrt;
