// Shared helpers for the kernel tests: random weights of every dtype (FP8 with block scales and a
// non-uniform scale_row map), tolerances, and the e4m3 decode written from its definition.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/matrix_weight.h"

namespace mimo::test {

// e4m3fn by definition: (-1)^s * 2^(e-7) * (1 + m/8) for e > 0, (-1)^s * 2^-6 * (m/8) for e == 0,
// NaN for S.1111.111; no infinities.
inline double E4M3ByDefinition(uint8_t code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

// E2M1 (OCP MX) by definition: bit 3 sign, bits 2-1 exponent (bias 1), bit 0 mantissa;
// exponent 0 is subnormal (m * 0.5), else 2^(e-1) * (1 + m/2). No NaN, no infinity.
inline double E2M1ByDefinition(uint8_t code) {
  const int s = (code >> 3) & 1, e = (code >> 1) & 3, m = code & 1;
  const double mag = e == 0 ? m * 0.5 : std::ldexp(1.0 + m / 2.0, e - 1);
  return s ? -mag : mag;
}

// E8M0 by definition: 2^(e - 127), e = 255 NaN.
inline double E8M0ByDefinition(uint8_t e) {
  return e == 255 ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, e - 127);
}

// A MatrixWeight together with the storage it points into.
struct OwnedWeight {
  std::vector<uint8_t> bytes;  // [rows, cols] stored dtype (MXFP4: [rows, ceil(cols / 2)])
  std::vector<float> scales;   // [num_scale_rows, scale_cols] (FP8 and int8)
  std::vector<uint8_t> exps;   // [rows, ceil(cols / 32)] E8M0 exponents (MXFP4 only)
  MatrixWeight w;
};

// Random weights with values ~U(-1, 1) (FP8: random non-NaN codes). FP8 scales are powers of two
// spread over 2^-12 .. 2^4 so that a wrong block or scale-row lookup changes the result grossly;
// scale_row is a random map onto num_scale_rows = rows / 2 + 1 scale rows. MXFP4: random codes
// (the spare high nibble of an odd column count random too, which the kernels must ignore) and
// exponents 2^-12 .. 2^4, laid out as a checkpoint binds them: one exponent row per weight row.
// int8: random codes in [-127, 127] and random positive fp32 scales (2^-12 .. 2^4 times a random
// mantissa), one scale per 32 columns of each row (block_cols is always 32).
inline OwnedWeight MakeWeight(DType dtype, int64_t rows, int64_t cols, std::mt19937& rng,
                              int64_t block_cols = 128) {
  OwnedWeight o;
  MatrixWeight& w = o.w;
  w.dtype = dtype;
  w.rows = rows;
  w.cols = cols;
  o.bytes.resize(dtype == DType::kMxfp4 ? static_cast<size_t>(rows * ((cols + 1) / 2))
                                        : static_cast<size_t>(rows * cols) * DTypeSize(dtype));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t n = rows * cols;
  switch (dtype) {
    case DType::kF32: {
      auto* p = reinterpret_cast<float*>(o.bytes.data());
      for (int64_t i = 0; i < n; ++i) p[i] = u(rng);
      break;
    }
    case DType::kBF16: {
      auto* p = reinterpret_cast<uint16_t*>(o.bytes.data());
      for (int64_t i = 0; i < n; ++i) p[i] = F32ToBF16(u(rng));
      break;
    }
    case DType::kF16: {
      auto* p = reinterpret_cast<uint16_t*>(o.bytes.data());
      for (int64_t i = 0; i < n; ++i) {
        // f16 by truncating an fp32 in the normal f16 range: sign | rebased exponent | mantissa.
        const float f = u(rng);
        const uint32_t b = F32ToBits(f);
        const int e = static_cast<int>((b >> 23) & 0xff) - 127;
        uint16_t h = static_cast<uint16_t>((b >> 16) & 0x8000);
        if (e >= -14) h |= static_cast<uint16_t>(((e + 15) << 10) | ((b >> 13) & 0x3ff));
        p[i] = h;
      }
      break;
    }
    case DType::kF8E4M3: {
      std::uniform_int_distribution<int> code(0, 255);
      for (int64_t i = 0; i < n; ++i) {
        int c;
        do c = code(rng);
        while ((c & 0x7f) == 0x7f);
        o.bytes[i] = static_cast<uint8_t>(c);
      }
      w.block_cols = block_cols;
      w.scale_cols = (cols + block_cols - 1) / block_cols;
      w.num_scale_rows = rows / 2 + 1;
      std::uniform_int_distribution<int> ex(-12, 4);
      o.scales.resize(w.num_scale_rows * w.scale_cols);
      for (float& s : o.scales) s = std::ldexp(1.0f, ex(rng)) * (1.0f + 0.25f * (u(rng) > 0));
      std::uniform_int_distribution<int> sr(0, static_cast<int>(w.num_scale_rows) - 1);
      w.scale_row.resize(rows);
      for (auto& s : w.scale_row) s = sr(rng);
      w.scale_inv = o.scales.data();
      break;
    }
    case DType::kMxfp4: {
      std::uniform_int_distribution<int> byte(0, 255), ex(127 - 12, 127 + 4);
      for (uint8_t& b : o.bytes) b = static_cast<uint8_t>(byte(rng));
      w.block_cols = 32;
      w.block_rows = 1;
      w.scale_cols = (cols + 31) / 32;
      w.num_scale_rows = rows;
      o.exps.resize(rows * w.scale_cols);
      for (uint8_t& e : o.exps) e = static_cast<uint8_t>(ex(rng));
      w.scale_e8m0 = o.exps.data();
      break;
    }
    case DType::kInt8: {
      std::uniform_int_distribution<int> code(-127, 127), ex(-12, 4);
      for (uint8_t& b : o.bytes) b = static_cast<uint8_t>(static_cast<int8_t>(code(rng)));
      w.block_cols = 32;
      w.block_rows = 1;
      w.scale_cols = (cols + 31) / 32;
      w.num_scale_rows = rows;
      o.scales.resize(rows * w.scale_cols);
      // bf16 values, as the int8 rule's scales are (the grouped layout stores them so).
      for (float& s : o.scales)
        s = BF16ToF32(F32ToBF16(std::ldexp(1.0f + 0.5f * (u(rng) + 1.0f), ex(rng))));
      w.scale_inv = o.scales.data();
      break;
    }
    default:
      break;
  }
  w.data = o.bytes.data();
  return o;
}

inline std::vector<float> RandomVector(int64_t n, std::mt19937& rng, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng);
  return v;
}

}  // namespace mimo::test
