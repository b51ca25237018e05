// RmsNorm, RoPE, SiluMul and Embedding on every probed ISA against the scalar reference; RoPE also
// against a float64 formula at positions up to 300000.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "core/check.h"
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

// `bytes` copied to the end of a mapping followed by an inaccessible page: reading past them
// faults.
class GuardedCopy {
 public:
  explicit GuardedCopy(const std::vector<uint8_t>& bytes) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t body = (bytes.size() + page - 1) / page * page;
    len_ = body + page;
    map_ = mmap(nullptr, len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    MIMO_CHECK(map_ != MAP_FAILED, "mmap failed");
    MIMO_CHECK(mprotect(static_cast<char*>(map_) + body, page, PROT_NONE) == 0, "mprotect failed");
    data_ = static_cast<uint8_t*>(map_) + body - bytes.size();
    std::memcpy(data_, bytes.data(), bytes.size());
  }
  ~GuardedCopy() { munmap(map_, len_); }
  GuardedCopy(const GuardedCopy&) = delete;
  GuardedCopy& operator=(const GuardedCopy&) = delete;
  const uint8_t* data() const { return data_; }

 private:
  void* map_ = nullptr;
  size_t len_ = 0;
  uint8_t* data_ = nullptr;
};

// The fused block update against float64, on every ISA: keys read in place (rows k_stride
// apart with NaN between them, the last row's end against an inaccessible page, so a wrong
// stride or a key past n shows), F32, BF16 and scaled FP8
// rows, state counts with every quad tail, key counts across the 16-key groups, and states that
// start empty, from a sink, or mid-segment. Checked through the update's invariants with the
// kernel's own final max m: l = l0 e^(m0 - m) + sum_j e^(s_j - m), acc likewise, and
// m = max(m0, s_j).
TEST(AttentionBlock, AttendKeysMatchesFloat64OnEveryIsa) {
  std::mt19937 rng(31);
  const float nan = std::nanf("");
  struct Shape {
    int64_t dk, dv;
  };
  for (Shape sh : {Shape{192, 128}, Shape{128, 128}, Shape{67, 35}}) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
      for (int S : {1, 3, 4, 5, 8, 16}) {
        for (int64_t n : {1, 4, 5, 16, 17, 40}) {
          const int64_t ks = 3 * sh.dk + 5, vs = 2 * sh.dv + 3;  // other heads' rows between
          const size_t elem = DTypeSize(dt);
          // Storage up to the end of key n - 1's row, NaN but the used elements of rows [0, n).
          std::vector<float> kf(static_cast<size_t>((n - 1) * ks + sh.dk), nan);
          std::vector<float> vf(static_cast<size_t>((n - 1) * vs + sh.dv), nan);
          for (int64_t j = 0; j < n; ++j) {
            for (int64_t c = 0; c < sh.dk; ++c) kf[j * ks + c] = RandomVector(1, rng)[0];
            for (int64_t c = 0; c < sh.dv; ++c) vf[j * vs + c] = RandomVector(1, rng)[0];
          }
          std::vector<uint8_t> kb(kf.size() * elem), vb(vf.size() * elem);
          // fp8 rows hold value / scale (per-head scales, as the cache keeps them).
          const float k_scale = 3.0f / 448.0f, v_scale = 5.0f / 448.0f;
          auto store = [&](const std::vector<float>& f, std::vector<uint8_t>* b,
                           std::vector<float>* exact, float fp8_scale) {
            for (size_t i = 0; i < f.size(); ++i) {
              if (dt == DType::kF8E4M3) {
                // NaN (gaps) stays the NaN code; values round to e4m3.
                const uint8_t e = std::isnan(f[i]) ? uint8_t{0x7f} : F32ToF8E4M3(f[i] / fp8_scale);
                (*b)[i] = e;
                (*exact)[i] = F8E4M3ToF32(e) * fp8_scale;
              } else if (dt == DType::kBF16) {
                const uint16_t h = F32ToBF16(f[i]);
                std::memcpy(b->data() + 2 * i, &h, 2);
                (*exact)[i] = BF16ToF32(h);
              } else {
                std::memcpy(b->data() + 4 * i, &f[i], 4);
              }
            }
          };
          store(kf, &kb, &kf, k_scale);
          store(vf, &vb, &vf, v_scale);
          const std::vector<float> q = RandomVector(S * sh.dk, rng, -2.0f, 2.0f);
          std::vector<float> m0(S), l0(S), acc0 = RandomVector(S * sh.dv, rng);
          for (int s = 0; s < S; ++s) {
            if (s % 3 == 0) {  // empty: a segment's first block
              m0[s] = -INFINITY, l0[s] = 0.0f;
              std::fill(acc0.begin() + s * sh.dv, acc0.begin() + (s + 1) * sh.dv, 0.0f);
            } else if (s % 3 == 1) {  // a sink's state
              m0[s] = 0.7f, l0[s] = 1.0f;
              std::fill(acc0.begin() + s * sh.dv, acc0.begin() + (s + 1) * sh.dv, 0.0f);
            } else {  // mid-segment, max above or below this block's scores
              m0[s] = RandomVector(1, rng, -3.0f, 3.0f)[0],
              l0[s] = RandomVector(1, rng, 0.5f, 4.0f)[0];
            }
          }
          std::vector<float> next(64 * 16, 0.0f);  // rows to request ahead: any readable memory
          const GuardedCopy kg(kb), vg(vb);
          for (Isa isa : AvailableIsas()) {
            AttendKeyRows rows;
            rows.k = kg.data(), rows.v = vg.data(), rows.k_stride = ks, rows.v_stride = vs;
            rows.dtype = dt, rows.n = n, rows.k_scale = k_scale, rows.v_scale = v_scale;
            if (n % 2 == 0) rows.k_next = rows.v_next = next.data(), rows.n_next = 2;
            std::vector<float> m = m0, l = l0, acc = acc0;
            KernelsFor(isa)->attend_keys(q.data(), S, rows, sh.dk, sh.dv, 0.125f, m.data(),
                                         l.data(), acc.data());
            const std::string where = std::string(IsaName(isa)) + " " + std::string(DTypeName(dt)) +
                                      " dk=" + std::to_string(sh.dk) + " S=" + std::to_string(S) +
                                      " n=" + std::to_string(n);
            for (int s = 0; s < S; ++s) {
              std::vector<double> sc(n);
              double smax = m0[s], mag_s = 0;
              for (int64_t j = 0; j < n; ++j) {
                double d = 0, mag = 0;
                for (int64_t c = 0; c < sh.dk; ++c) {
                  d += static_cast<double>(q[s * sh.dk + c]) * kf[j * ks + c];
                  mag += std::fabs(static_cast<double>(q[s * sh.dk + c]) * kf[j * ks + c]);
                }
                sc[j] = d * 0.125;
                smax = std::max(smax, sc[j]);
                mag_s = std::max(mag_s, mag * 0.125);
              }
              ASSERT_NEAR(m[s], smax, 1e-6 * mag_s + 1e-6) << where << " state " << s;
              const double mk = m[s];
              const double c0 = l0[s] == 0.0f ? 0.0 : std::exp(m0[s] - mk);
              double want_l = l0[s] * c0;
              for (int64_t j = 0; j < n; ++j) want_l += std::exp(sc[j] - mk);
              // An exponent off by delta changes a weight by a factor e^delta.
              const double tol = 4e-6 * (mag_s + 1.0);
              ASSERT_NEAR(l[s], want_l, tol * want_l) << where << " state " << s;
              for (int64_t c = 0; c < sh.dv; ++c) {
                double want = acc0[s * sh.dv + c] * c0, mag = std::fabs(want);
                for (int64_t j = 0; j < n; ++j) {
                  const double e = std::exp(sc[j] - mk);
                  want += e * vf[j * vs + c];
                  mag += std::fabs(e * vf[j * vs + c]);
                }
                ASSERT_NEAR(acc[s * sh.dv + c], want, tol * mag + 1e-30)
                    << where << " state " << s << " column " << c;
              }
            }
            // A NaN key makes every state's sum NaN: a bad cache value is never hidden.
            std::vector<float> bad_k = kf;
            bad_k[(n - 1) * ks] = nan;
            std::vector<uint8_t> bad_kb(kb.size());
            store(bad_k, &bad_kb, &bad_k, k_scale);
            const GuardedCopy bad_kg(bad_kb);
            rows.k = bad_kg.data();
            m = m0, l = l0, acc = acc0;
            KernelsFor(isa)->attend_keys(q.data(), S, rows, sh.dk, sh.dv, 0.125f, m.data(),
                                         l.data(), acc.data());
            for (int s = 0; s < S; ++s) EXPECT_TRUE(std::isnan(l[s])) << where << " state " << s;
          }
        }
      }
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
