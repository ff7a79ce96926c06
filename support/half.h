// IEEE binary16 and bfloat16 storage formats, converted with round-to-nearest-even as CUDA and PyTorch do.
#pragma once

#include <cstdint>

namespace emmy {

uint16_t floatToHalfBits(float value);
float halfBitsToFloat(uint16_t bits);
uint16_t floatToBFloat16Bits(float value);
float bfloat16BitsToFloat(uint16_t bits);

}  // namespace emmy
