// RmsNorm, RoPE, SiluMul and Embedding on every probed ISA against the scalar reference; RoPE also
// against a float64 formula at positions up to 300000.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "kernels/dispatch.h"
#include "kernels/kernel_test_util.h"
#include "kernels/kernels.h"
#include "kernels/ref/ref_kernels.h"

namespace mimo {
namespace {

using test::RandomVector;

// A [n] weight vector stored as dtype, with values near 1 (like trained norm weights).
struct OwnedVector {
  std::vector<uint8_t> bytes;
  TensorView view;
};
OwnedVector MakeVector(DType dt, int64_t n, std::mt19937& rng, int64_t rows = 0) {
  const int64_t total = rows > 0 ? rows * n : n;
  const std::vector<float> v = RandomVector(total, rng, 0.5f, 1.5f);
  OwnedVector o;
  o.bytes.resize(total * DTypeSize(dt));
  for (int64_t i = 0; i < total; ++i) {
    if (dt == DType::kF32) std::memcpy(o.bytes.data() + 4 * i, &v[i], 4);
    uint16_t h = 0;
    if (dt == DType::kBF16) h = F32ToBF16(v[i]);
    if (dt == DType::kF16) {  // exact: v has few mantissa bits after rounding to bf16 first
      const float f = BF16ToF32(F32ToBF16(v[i]));
      const uint32_t b = F32ToBits(f);
      h = static_cast<uint16_t>((((b >> 23) & 0xff) - 112) << 10 | ((b >> 13) & 0x3ff));
    }
    if (dt != DType::kF32) std::memcpy(o.bytes.data() + 2 * i, &h, 2);
  }
  o.view.data = o.bytes.data();
  o.view.dtype = dt;
  o.view.shape = rows > 0 ? Shape{rows, n} : Shape{n};
  return o;
}

TEST(RmsNorm, EveryIsaMatchesReference) {
  std::mt19937 rng(7);
  for (Isa isa : AvailableIsas()) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (int64_t dim : {1, 7, 16, 33, 300, 4096}) {
        const int64_t T = 3;
        const OwnedVector w = MakeVector(dt, dim, rng);
        std::vector<float> x = RandomVector(T * dim, rng, -3.0f, 3.0f);
        std::vector<float> want(T * dim), got(T * dim);
        ref::RmsNorm(x.data(), T, dim, w.view, 1e-6f, want.data());
        KernelsFor(isa)->rms_norm(x.data(), T, dim, w.view, 1e-6f, got.data());
        for (int64_t i = 0; i < T * dim; ++i) {
          ASSERT_NEAR(got[i], want[i], 1e-5 * std::fabs(want[i]) + 1e-30)
              << IsaName(isa) << " " << DTypeName(dt) << " dim=" << dim << " i=" << i;
        }
        // In place (out aliases x) gives the same result.
        KernelsFor(isa)->rms_norm(x.data(), T, dim, w.view, 1e-6f, x.data());
        for (int64_t i = 0; i < T * dim; ++i) ASSERT_EQ(x[i], got[i]);
      }
    }
  }
}

TEST(RmsNorm, ReferenceMatchesDefinition) {
  const float x[4] = {1, 2, 3, 4};  // mean square 7.5
  const float wv[4] = {1, 0.5f, 2, -1};
  TensorView w{const_cast<float*>(wv), DType::kF32, {4}};
  float out[4];
  RmsNorm(x, 1, 4, w, 0.5f, out);  // public entry, active ISA
  const double inv = 1.0 / std::sqrt(8.0);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], x[i] * inv * wv[i], 1e-6);
}

TEST(Rope, EveryIsaRotationMatchesReference) {
  std::mt19937 rng(11);
  for (Isa isa : AvailableIsas()) {
    for (auto [heads, head_dim, rotary_dim] : {std::tuple{3, 192, 64}, std::tuple{2, 20, 18},
                                               std::tuple{1, 64, 64}, std::tuple{4, 40, 34}}) {
      const int64_t T = 5;
      const int half = rotary_dim / 2;
      std::vector<float> x = RandomVector(T * heads * head_dim, rng);
      const std::vector<float> ang = RandomVector(T * half, rng, -3.2f, 3.2f);
      std::vector<float> c(T * half), s(T * half);
      for (size_t i = 0; i < ang.size(); ++i) {
        c[i] = std::cos(ang[i]);
        s[i] = std::sin(ang[i]);
      }
      std::vector<float> want = x, got = x;
      ref::RopeRotate(want.data(), T, heads, head_dim, rotary_dim, c.data(), s.data());
      KernelsFor(isa)->rope_rotate(got.data(), T, heads, head_dim, rotary_dim, c.data(), s.data());
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-6) << IsaName(isa) << " rd=" << rotary_dim << " i=" << i;
        if (static_cast<int>(i % head_dim) >= rotary_dim) {
          ASSERT_EQ(got[i], x[i]);
        }
      }
    }
  }
}

// Public RopeNeox (active ISA) against an independent float64 formula, including positions where
// a float32 angle would be off by ~1e-2 rad.
TEST(Rope, MatchesFloat64AtLargePositions) {
  std::mt19937 rng(13);
  const int heads = 2, head_dim = 192, rotary_dim = 64, half = 32;
  const int32_t positions[] = {0, 1, 127, 4095, 65537, 131071, 262143, 300000};
  const int64_t T = 8;
  for (float theta : {10000.0f, 640000.0f, 5000000.0f}) {
    const std::vector<float> x = RandomVector(T * heads * head_dim, rng);
    std::vector<float> got = x;
    RopeNeox(got.data(), T, heads, head_dim, rotary_dim, theta, positions);
    for (int64_t t = 0; t < T; ++t) {
      for (int h = 0; h < heads; ++h) {
        const float* v = x.data() + (t * heads + h) * head_dim;
        const float* g = got.data() + (t * heads + h) * head_dim;
        for (int i = 0; i < half; ++i) {
          const double inv_freq = 1.0 / std::pow(double(theta), (2.0 * i) / rotary_dim);
          const double a = positions[t] * inv_freq;
          const double x1 = v[i], x2 = v[i + half];
          const double norm = std::hypot(x1, x2);
          EXPECT_NEAR(g[i], x1 * std::cos(a) - x2 * std::sin(a), 1e-6 * norm + 1e-30)
              << "theta " << theta << " pos " << positions[t] << " i " << i;
          EXPECT_NEAR(g[i + half], x2 * std::cos(a) + x1 * std::sin(a), 1e-6 * norm + 1e-30)
              << "theta " << theta << " pos " << positions[t] << " i " << i;
        }
        for (int i = rotary_dim; i < head_dim; ++i) ASSERT_EQ(g[i], v[i]);
      }
    }
  }
}

TEST(SiluMul, EveryIsaMatchesReference) {
  std::mt19937 rng(17);
  for (Isa isa : AvailableIsas()) {
    for (int64_t n : {1, 7, 8, 17, 300, 1029}) {
      std::vector<float> g = RandomVector(n, rng, -20.0f, 20.0f);
      const std::vector<float> u = RandomVector(n, rng, -2.0f, 2.0f);
      if (n > 5) {
        g[0] = -100.0f;
        g[1] = 100.0f;
        g[2] = 0.0f;
        g[3] = -87.0f;
        g[4] = 1e-8f;
      }
      std::vector<float> want(n), got(n);
      ref::SiluMul(g.data(), u.data(), want.data(), n);
      KernelsFor(isa)->silu_mul(g.data(), u.data(), got.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(got[i], want[i], 2e-6 * std::fabs(want[i]) + 1e-30)
            << IsaName(isa) << " n=" << n << " gate=" << g[i];
      }
      // out aliases gate.
      KernelsFor(isa)->silu_mul(g.data(), u.data(), g.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(g[i], got[i]);
    }
  }
}

// Attention's block kernels (dot_rows / axpy_rows) on every ISA against float64 sums, at MiMo's
// head dims (192 / 128), a head dim with a vector tail, and key counts with every key-tile tail.
TEST(AttentionBlock, DotAndValueSumsMatchFloat64OnEveryIsa) {
  std::mt19937 rng(23);
  for (int64_t d : {192, 128, 67}) {
    for (int64_t n : {1, 2, 3, 4, 5, 16, 61}) {
      const std::vector<float> q = RandomVector(d, rng), k = RandomVector(n * d, rng);
      const std::vector<float> e = RandomVector(n, rng, 0.0f, 1.0f);
      const std::vector<float> v = RandomVector(n * d, rng), acc0 = RandomVector(d, rng);
      for (Isa isa : AvailableIsas()) {
        const KernelTable& kt = *KernelsFor(isa);
        std::vector<float> scores(n), acc = acc0;
        kt.dot_rows(q.data(), k.data(), n, d, 0.125f, scores.data());
        kt.axpy_rows(e.data(), v.data(), n, d, acc.data());
        for (int64_t j = 0; j < n; ++j) {
          double want = 0, mag = 0;
          for (int64_t c = 0; c < d; ++c) {
            want += static_cast<double>(q[c]) * k[j * d + c];
            mag += std::fabs(static_cast<double>(q[c]) * k[j * d + c]);
          }
          ASSERT_NEAR(scores[j], want * 0.125, 1e-6 * mag * 0.125 + 1e-30)
              << IsaName(isa) << " d=" << d << " n=" << n << " key " << j;
        }
        for (int64_t c = 0; c < d; ++c) {
          double want = acc0[c], mag = std::fabs(acc0[c]);
          for (int64_t j = 0; j < n; ++j) {
            want += static_cast<double>(e[j]) * v[j * d + c];
            mag += std::fabs(static_cast<double>(e[j]) * v[j * d + c]);
          }
          ASSERT_NEAR(acc[c], want, 1e-6 * mag + 1e-30)
              << IsaName(isa) << " d=" << d << " n=" << n << " column " << c;
        }
      }
    }
  }
}

// The softmax weights of a block: exp(s - m) on every ISA within 4 ulp of float64, at the
// softmax's arguments (s <= m, down to underflow), tails of every length, NaN kept.
TEST(AttentionBlock, ExpShiftedMatchesFloat64OnEveryIsa) {
  std::mt19937 rng(29);
  for (int64_t n : {1, 7, 16, 23, 64}) {
    std::vector<float> s = RandomVector(n, rng, -40.0f, 3.0f);
    s[0] = 3.0f;  // the max: exp(0) = 1
    if (n > 2) s[1] = -200.0f;  // underflows to 0
    const float m = 3.0f;
    for (Isa isa : AvailableIsas()) {
      std::vector<float> e(n);
      KernelsFor(isa)->exp_shifted(s.data(), n, m, e.data());
      for (int64_t j = 0; j < n; ++j) {
        // The argument is the fp32 difference, as the backend forms it.
        const double want = std::exp(static_cast<double>(s[j] - m));
        ASSERT_NEAR(e[j], want, 4 * 1.2e-7 * want + 1e-37) << IsaName(isa) << " n=" << n << " s=" << s[j];
      }
      std::vector<float> bad = s;
      bad[n - 1] = std::nanf("");
      KernelsFor(isa)->exp_shifted(bad.data(), n, m, e.data());
      EXPECT_TRUE(std::isnan(e[n - 1])) << IsaName(isa) << " n=" << n;
    }
  }
}

TEST(SiluMul, ReferenceMatchesDefinition) {
  float g[3] = {0.0f, 1.0f, -2.0f}, u[3] = {5.0f, 2.0f, 3.0f}, out[3];
  SiluMul(g, u, out, 3);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[1], 2.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(out[2], 3.0 * -2.0 / (1.0 + std::exp(2.0)), 1e-6);
}

TEST(Embedding, ConvertRowExactOnEveryIsaAndLookupByDefinition) {
  std::mt19937 rng(19);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    const int64_t vocab = 11, dim = 37;
    const OwnedVector table = MakeVector(dt, dim, rng, vocab);
    for (Isa isa : AvailableIsas()) {
      std::vector<float> want(dim), got(dim);
      ref::ConvertRow(table.bytes.data(), dt, dim, want.data());
      KernelsFor(isa)->convert_row(table.bytes.data(), dt, dim, got.data());
      for (int64_t i = 0; i < dim; ++i) ASSERT_EQ(got[i], want[i]) << IsaName(isa) << " " << i;
    }
    const int32_t ids[4] = {10, 0, 3, 10};
    std::vector<float> out(4 * dim);
    Embedding(table.view, ids, 4, out.data());
    for (int t = 0; t < 4; ++t) {
      for (int64_t i = 0; i < dim; ++i) {
        const uint8_t* p = table.bytes.data() + (ids[t] * dim + i) * DTypeSize(dt);
        float want;
        if (dt == DType::kF32) {
          std::memcpy(&want, p, 4);
        } else {
          uint16_t h;
          std::memcpy(&h, p, 2);
          want = dt == DType::kBF16 ? BitsToF32(uint32_t{h} << 16) : F16ToF32(h);
        }
        ASSERT_EQ(out[t * dim + i], want) << DTypeName(dt) << " t=" << t << " i=" << i;
      }
    }
  }
}

TEST(EmbeddingDeathTest, OutOfRangeIdAbortsWithMessage) {
  float table[6] = {};
  TensorView view{table, DType::kF32, {3, 2}};
  const int32_t ids[1] = {3};
  float out[2];
  EXPECT_DEATH(Embedding(view, ids, 1, out), "token id 3 outside");
}

}  // namespace
}  // namespace mimo
