// Element types of checkpoint tensors and activations, with scalar conversions to/from fp32.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace mimo {

// kMxfp4 and kInt8 are not storage dtypes (safetensors stores MXFP4 as U8 bytes): they are
// formats of a MatrixWeight, kMxfp4 packed E2M1 pairs with E8M0 block exponents, kInt8 int8
// codes with a scale per 32 columns of a row, a bf16 value (the load-time --experts/--dense/
// --lm-head int8; core/matrix_weight.h).
enum class DType : uint8_t { kF32, kBF16, kF16, kF8E4M3, kU8, kI32, kI64, kMxfp4, kInt8, kCount };

// Bytes per element; 0 for kMxfp4 (two elements per byte: see MatrixWeight::DataBytes).
inline constexpr size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kF8E4M3: return 1;
    case DType::kU8: return 1;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kInt8: return 1;
    default: return 0;
  }
}

// Names as safetensors writes them.
inline constexpr std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kU8: return "U8";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kMxfp4: return "MXFP4";
    case DType::kInt8: return "INT8";
    default: return "?";
  }
}

// A safetensors dtype name -> DType; false for an unknown name (and for "MXFP4" and "INT8",
// weight formats rather than storage dtypes).
inline bool ParseDType(std::string_view s, DType* out) {
  for (int i = 0; i < static_cast<int>(DType::kCount); ++i) {
    const DType t = static_cast<DType>(i);
    if (DTypeSize(t) != 0 && t != DType::kInt8 && DTypeName(t) == s) {
      *out = static_cast<DType>(i);
      return true;
    }
  }
  return false;
}

inline float BitsToF32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t F32ToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float BF16ToF32(uint16_t h) { return BitsToF32(static_cast<uint32_t>(h) << 16); }

// Round-to-nearest-even, NaN kept quiet.
inline uint16_t F32ToBF16(float f) {
  uint32_t u = F32ToBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// The smallest bf16 value at or above f, for finite f >= 0 (below bf16's largest finite value).
inline uint16_t F32ToBF16Up(float f) {
  const uint32_t u = F32ToBits(f);
  return static_cast<uint16_t>((u >> 16) + ((u & 0xffffu) != 0));
}

inline float F16ToF32(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return BitsToF32(sign);
    // subnormal: value = man * 2^-24
    float v = static_cast<float>(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return BitsToF32(sign | 0x7f800000u | (man << 13));
  return BitsToF32(sign | ((exp + 112u) << 23) | (man << 13));
}

// float8_e4m3fn (OCP): 1 sign, 4 exponent (bias 7), 3 mantissa; no infinities; S.1111.111 = NaN.
inline float F8E4M3ToF32(uint8_t b) {
  uint32_t sign = b >> 7;
  uint32_t exp = (b >> 3) & 0xfu;
  uint32_t man = b & 0x7u;
  float v;
  if (exp == 0xf && man == 0x7) {
    v = __builtin_nanf("");
  } else if (exp == 0) {
    v = static_cast<float>(man) * 0.001953125f;  // man/8 * 2^-6
  } else {
    v = BitsToF32(((exp + 120u) << 23) | (man << 20));
  }
  return sign ? -v : v;
}

// Round-to-nearest-even with saturation to +-448 (how checkpoints are produced).
uint8_t F32ToF8E4M3(float f);
// The same results as F32ToF8E4M3 by bit arithmetic (the fp8 KV cache, FP8 quantization at load);
// F32ToF8E4M3's exhaustive search is its test oracle.
uint8_t EncodeF8E4M3(float x);

// MXFP4 element (OCP MX, spec section 4): a 4-bit E2M1 code, bit 3 the sign, bits 0-2 indexing
// {0, 0.5, 1, 1.5, 2, 3, 4, 6}; no NaN or infinity (code 8 is -0).
inline float E2M1ToF32(uint8_t code) {
  static constexpr float kMagnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = kMagnitude[code & 7];
  return (code & 8) ? -v : v;
}

// E8M0 block scale: 2^(e - 127); e = 255 is NaN. e = 0 gives 2^-127, an fp32 subnormal.
inline float E8M0ToF32(uint8_t e) {
  if (e == 255) return __builtin_nanf("");
  if (e == 0) return BitsToF32(0x00400000u);
  return BitsToF32(static_cast<uint32_t>(e) << 23);
}

}  // namespace mimo
