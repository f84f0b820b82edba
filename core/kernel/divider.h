// File: core/kernel/divider.h
// Division of an element index by a dim's extent, the step every strided
// kernel takes per dim and per operand to turn a linear index into an offset.
// A 64-bit division is a software loop on the GPU (tens of instructions), which
// made the strided copy, pad and elementwise kernels compute-bound at a fraction
// of the memory bandwidth. When every index of a launch is below 2^31, a
// divisor fixed for the launch divides as a multiply-high, an add and a shift
// (the round-up method of Granlund and Montgomery): `magic` and `shift` are
// chosen on the host, once per dim, and the quotient is exact for every
// dividend below 2^31.
#pragma once

#include <cstdint>

#include "core/kernel/host_device.h"

namespace loom::kernel::math {

// Indices below this bound divide in 32 bits.
constexpr int64_t kNarrowIndexLimit = int64_t{1} << 31;

struct Divider {
  uint32_t magic = 1;  // divides by 1 (mulhi(n, 1) is 0)
  uint32_t shift = 0;
};

// The divider for `divisor` (1 <= divisor < 2^31). With s the smallest shift
// such that 2^s >= divisor, magic = floor(2^32 (2^s - divisor) / divisor) + 1;
// then floor(n / divisor) = (mulhi(n, magic) + n) >> s for n < 2^31, and the
// sum cannot overflow 32 bits since mulhi(n, magic) <= n.
inline Divider divider_for(int64_t divisor) {
  Divider d;
  while ((int64_t{1} << d.shift) < divisor) ++d.shift;
  const uint64_t excess = (uint64_t{1} << d.shift) - static_cast<uint64_t>(divisor);
  d.magic = static_cast<uint32_t>((excess << 32) / static_cast<uint64_t>(divisor) + 1);
  return d;
}

// floor(n / divisor) for n < 2^31.
LOOM_HOST_DEVICE inline uint32_t divide(uint32_t n, Divider d) {
#ifdef __CUDA_ARCH__
  const uint32_t high = __umulhi(n, d.magic);
#else
  const uint32_t high = static_cast<uint32_t>((uint64_t{n} * d.magic) >> 32);
#endif
  return (high + n) >> d.shift;
}

// The remainder of *linear by `size`, leaving the quotient in *linear: in 32
// bits by `divider` (divider_for(size)) when `narrow`, that is when every index
// the caller splits is below 2^31, else in 64.
LOOM_HOST_DEVICE inline int64_t split_index(int64_t* linear, int64_t size, Divider divider,
                                            bool narrow) {
  if (narrow) {
    const uint32_t n = static_cast<uint32_t>(*linear);
    const uint32_t quotient = divide(n, divider);
    *linear = quotient;
    return n - quotient * static_cast<uint32_t>(size);
  }
  const int64_t remainder = *linear % size;
  *linear /= size;
  return remainder;
}

}  // namespace loom::kernel::math
