// IEEE half <-> float conversion. Uses F16C when the CPU has it (checked once
// at run time), else exact bit manipulation; both round to nearest even.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tierkv::kernels {

float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
void HalfToFloatN(const uint16_t* in, float* out, size_t n);
void FloatToHalfN(const float* in, uint16_t* out, size_t n);

}  // namespace tierkv::kernels
