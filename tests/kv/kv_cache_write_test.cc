// The cache-write kernel at MiMo-V2 geometry (K 192 / V 128, kv heads 4 and 8), block sizes 16
// and 64, many token counts and page crossings, every KV dtype. The pools sit inside larger
// buffers whose slack before and after is a canary pattern; untouched slots keep a fill pattern.
// Expected bytes are computed here with this test's own index math and core's conversions.
#include "kv/kv_cache_write.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kv/kv_storage.h"

namespace mimo {
namespace {

constexpr uint8_t kCanary = 0xA5;
constexpr uint8_t kFill = 0x3C;
constexpr size_t kSlack = 8192;  // bytes of canary before and after each pool

struct GuardedPool {
  std::vector<uint8_t> buf;
  size_t bytes;
  explicit GuardedPool(size_t n) : buf(n + 2 * kSlack, kCanary), bytes(n) {
    std::fill(buf.begin() + kSlack, buf.begin() + kSlack + n, kFill);
  }
  uint8_t* data() { return buf.data() + kSlack; }
  bool CanariesIntact() const {
    for (size_t i = 0; i < kSlack; ++i) {
      if (buf[i] != kCanary || buf[kSlack + bytes + i] != kCanary) return false;
    }
    return true;
  }
};

// Bytes the cache must hold for value x (this test's encoding, via core conversions).
void Encode(float x, DType t, float scale, uint8_t* out) {
  if (t == DType::kF32) {
    std::memcpy(out, &x, 4);
  } else if (t == DType::kBF16) {
    uint16_t h = F32ToBF16(x);
    std::memcpy(out, &h, 2);
  } else {
    out[0] = F32ToF8E4M3(x / scale);
  }
}

void CheckWrite(int kv_heads, int bs, DType dtype, int num_tokens, int start_pos, uint32_t seed) {
  constexpr int kDk = 192, kDv = 128;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const int seq_blocks = (start_pos + num_tokens + bs - 1) / bs;
  const int num_blocks = seq_blocks + 3;  // some blocks nobody writes
  PagedKvLayout L{num_blocks, bs, kv_heads, kDk, kDv, dtype};
  const size_t es = DTypeSize(dtype);
  // Sizes from the test's own arithmetic (not the layout's helpers).
  GuardedPool kpool(size_t{1} * num_blocks * bs * kv_heads * kDk * es);
  GuardedPool vpool(size_t{1} * num_blocks * bs * kv_heads * kDv * es);
  // A shuffled block table, so consecutive tokens cross into non-adjacent pages.
  std::vector<int> table(num_blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<int64_t> slots(num_tokens);
  for (int t = 0; t < num_tokens; ++t) {
    int pos = start_pos + t;
    slots[t] = int64_t{table[pos / bs]} * bs + pos % bs;
  }
  std::vector<float> k(size_t{1} * num_tokens * kv_heads * kDk),
      v(size_t{1} * num_tokens * kv_heads * kDv);
  for (float& x : k) x = nd(rng);
  for (float& x : v) x = nd(rng);
  std::vector<float> ks(kv_heads), vs(kv_heads);
  for (int h = 0; h < kv_heads; ++h) {
    ks[h] = 0.02f * (h + 1);
    vs[h] = 0.03f * (h + 2);
  }
  KvCacheWriteTarget dst{L, kpool.data(), vpool.data(), ks.data(), vs.data()};
  WriteKvCache(dst, k.data(), v.data(), slots.data(), num_tokens);

  SCOPED_TRACE(testing::Message() << "kv_heads=" << kv_heads << " bs=" << bs
                                  << " dtype=" << DTypeName(dtype) << " T=" << num_tokens
                                  << " start=" << start_pos);
  ASSERT_TRUE(kpool.CanariesIntact()) << "K write outside the K pool";
  ASSERT_TRUE(vpool.CanariesIntact()) << "V write outside the V pool";
  std::vector<uint8_t> kexp(kpool.bytes, kFill), vexp(vpool.bytes, kFill);
  for (int t = 0; t < num_tokens; ++t) {
    for (int h = 0; h < kv_heads; ++h) {
      for (int d = 0; d < kDk; ++d) {
        Encode(k[(size_t{1} * t * kv_heads + h) * kDk + d], dtype, ks[h],
               &kexp[((slots[t] * kv_heads + h) * kDk + d) * es]);
      }
      for (int d = 0; d < kDv; ++d) {
        Encode(v[(size_t{1} * t * kv_heads + h) * kDv + d], dtype, vs[h],
               &vexp[((slots[t] * kv_heads + h) * kDv + d) * es]);
      }
    }
  }
  ASSERT_EQ(0, std::memcmp(kexp.data(), kpool.data(), kpool.bytes)) << "K pool contents";
  ASSERT_EQ(0, std::memcmp(vexp.data(), vpool.data(), vpool.bytes)) << "V pool contents";
}

class CacheWriteTest : public ::testing::TestWithParam<std::tuple<int, int, DType>> {};

TEST_P(CacheWriteTest, WritesExactlyTheSlotsAtMimoGeometry) {
  auto [kv_heads, bs, dtype] = GetParam();
  uint32_t seed = 1;
  // Token counts around page sizes, starting at page starts, mid-page and just before a page end.
  const int counts[] = {1, 2, 15, 16, 17, 63, 64, 65, 130};
  const int starts[] = {0, 1, bs - 1, bs, 3 * bs + 5};
  for (int n : counts) {
    for (int s : starts) {
      if (dtype == DType::kF8E4M3 && n > 17 && s != 0) continue;  // core's fp8 encode is slow
      CheckWrite(kv_heads, bs, dtype, n, s, seed++);
      if (HasFatalFailure()) return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Mimo, CacheWriteTest,
                         ::testing::Combine(::testing::Values(4, 8), ::testing::Values(16, 64),
                                            ::testing::Values(DType::kF32, DType::kBF16,
                                                              DType::kF8E4M3)),
                         [](const auto& info) {
                           return "kvh" + std::to_string(std::get<0>(info.param)) + "_bs" +
                                  std::to_string(std::get<1>(info.param)) + "_" +
                                  std::string(DTypeName(std::get<2>(info.param)));
                         });

TEST(EncodeF8E4M3, MatchesCoreConversion) {
  std::mt19937 rng(3);
  std::vector<float> xs = {0.0f,          -0.0f,         448.0f,    449.0f,        464.0f,
                           1e6f,          -1e6f,         0.015625f, 0.0146484375f, 0.001953125f,
                           0.0009765625f, 0.0029296875f, 1.0625f,   1.1875f,       240.0f,
                           256.0f,        272.0f};
  std::uniform_real_distribution<float> e(-12.0f, 9.5f);
  for (int i = 0; i < 20000; ++i) {
    float x = std::exp2(e(rng)) * (i % 2 ? -1.0f : 1.0f);
    xs.push_back(x);
  }
  // Every code's value and the midpoints between neighbours (ties to even).
  for (int c = 0; c < 0x7e; ++c) {
    float a = F8E4M3ToF32(c), b = F8E4M3ToF32(c + 1);
    xs.push_back(a);
    xs.push_back((a + b) / 2);
  }
  for (float x : xs) ASSERT_EQ(EncodeF8E4M3(x), F32ToF8E4M3(x)) << x;
}

TEST(KvLayerStorage, Fp8PerHeadScalesFromFirstWrite) {
  PagedKvLayout L{4, 16, 2, 8, 4, DType::kF8E4M3};
  KvLayerStorage s(L, KvStorageOptions{DType::kF8E4M3, Fp8ScaleMode::kPerHeadFirstWrite, 2.0f, 1});
  std::vector<float> k(2 * 2 * 8, 0.5f), v(2 * 2 * 4, 0.25f);
  k[3] = -10.0f;      // token 0, head 0
  k[16 + 8 + 1] = 3;  // token 1, head 1
  v[4 + 2] = 7.0f;    // token 0, head 1
  int64_t slots[2] = {5, 17};
  s.Write(k.data(), v.data(), slots, 2);
  EXPECT_FLOAT_EQ(s.k_scale()[0], 10.0f * 2 / 448);
  EXPECT_FLOAT_EQ(s.k_scale()[1], 3.0f * 2 / 448);
  EXPECT_FLOAT_EQ(s.v_scale()[0], 0.25f * 2 / 448);
  EXPECT_FLOAT_EQ(s.v_scale()[1], 7.0f * 2 / 448);
  // Fixed after the first write.
  std::vector<float> big(2 * 8, 100.0f), bigv(2 * 4, 100.0f);
  int64_t slot = 6;
  s.Write(big.data(), bigv.data(), &slot, 1);
  EXPECT_FLOAT_EQ(s.k_scale()[0], 10.0f * 2 / 448);
  // Round trip of the first write within e4m3's relative step (2^-4) of the value.
  PagedKvView view = s.view();
  const uint8_t* kb = static_cast<const uint8_t*>(view.k);
  float back = F8E4M3ToF32(kb[L.KIndex(5, 0) + 3]) * view.k_scale[0];
  EXPECT_NEAR(back, -10.0f, 10.0f / 16);
  // Saturated later value: 448 * scale = 20, not 100.
  float sat = F8E4M3ToF32(kb[L.KIndex(6, 0)]) * view.k_scale[0];
  EXPECT_FLOAT_EQ(sat, 20.0f);
}

TEST(KvLayerStorage, PerTensorAndConfiguredScales) {
  PagedKvLayout L{2, 16, 2, 4, 4, DType::kF8E4M3};
  KvLayerStorage pt(L,
                    KvStorageOptions{DType::kF8E4M3, Fp8ScaleMode::kPerTensorFirstWrite, 1.0f, 1});
  std::vector<float> k = {1, 1, 1, 1, 5, 1, 1, 1}, v = {2, 2, 2, 2, 2, 2, 2, 2};
  int64_t slot = 0;
  pt.Write(k.data(), v.data(), &slot, 1);
  EXPECT_FLOAT_EQ(pt.k_scale()[0], 5.0f / 448);
  EXPECT_FLOAT_EQ(pt.k_scale()[1], 5.0f / 448);
  KvLayerStorage cf(L, KvStorageOptions{DType::kF8E4M3, Fp8ScaleMode::kConfigured, 1.0f, 0.5f});
  cf.Write(k.data(), v.data(), &slot, 1);
  EXPECT_FLOAT_EQ(cf.k_scale()[1], 0.5f);
  EXPECT_FLOAT_EQ(cf.v_scale()[0], 0.5f);
}

}  // namespace
}  // namespace mimo
