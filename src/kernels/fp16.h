// IEEE half <-> float conversion. Uses F16C when the CPU has it (checked once
// at run time), else exact bit manipulation; both round to nearest even.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tierkv::kernels {

float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
void HalfToFloatN(const uint16_t* in, float* out, size_t n);
// `rows` rows of `width` halves, `in_stride` halves apart, into dense rows of
// `width` floats: one CPU dispatch for all rows (a call per row of 16 costs as
// much as the conversion).
void HalfToFloatRows(const uint16_t* in, size_t in_stride, size_t rows, size_t width, float* out);
void FloatToHalfN(const float* in, uint16_t* out, size_t n);

}  // namespace tierkv::kernels
