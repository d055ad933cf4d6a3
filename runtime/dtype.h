// Element types and the scalar conversions between them (bf16 and f16 <-> f32).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace dit {

enum class DType { F32, BF16 };

inline size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 2; }
inline const char* dtype_name(DType t) { return t == DType::F32 ? "f32" : "bf16"; }
// Parses "f32"/"float32" or "bf16"/"bfloat16"; throws dit::Error otherwise.
DType parse_dtype(const std::string& s);

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even without the NaN test, for vector loops (`#pragma omp simd`): the bits
// of f32_to_bf16 for every non-NaN value (a NaN may come out as infinity).
inline uint16_t f32_to_bf16_rne(float f) {
  uint32_t u = __builtin_bit_cast(uint32_t, f);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// Round to nearest even, NaN stays NaN (same as torch's float -> bfloat16).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  return f32_to_bf16_rne(f);
}

// IEEE half -> float (exact; subnormals, inf and NaN handled).
inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        man <<= 1;
        ++e;
      } while ((man & 0x400u) == 0);
      man &= 0x3ffu;
      u = sign | uint32_t(127 - 15 - e) << 23 | man << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | man << 13;
  } else {
    u = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace dit
