// Backend selection from declared capabilities: automatic choice, explicit capable requests,
// explicit incapable requests (one warning + capable fallback, or an error in strict mode).
#include "attention/registry.h"

#include <gtest/gtest.h>

namespace mimo {
namespace {

// A deliberately limited backend: equal K/V dims only, no sinks, no window, f32, block 16.
class LimitedBackend final : public AttentionBackend {
 public:
  LimitedBackend(const char* name, AttentionCapabilities caps) : name_(name), caps_(caps) {}
  const char* name() const override { return name_; }
  const AttentionCapabilities& capabilities() const override { return caps_; }
  void Run(ExecContext&, const AttentionGeometry&, const PagedKvView&, const AttentionBatch&,
           const float*, const float*, float*) const override {
    ADD_FAILURE() << "test backend must not run";
  }

 private:
  const char* name_;
  AttentionCapabilities caps_;
};

AttentionCapabilities SymmetricOnly() {
  AttentionCapabilities c;
  c.head_dims = HeadDimSupport::kEqual;
  c.kv_dtypes = {DType::kF32};
  c.block_sizes = {16};
  c.multi_token_queries = true;
  return c;
}

// Registry where the limited backend has the highest priority, so automatic selection must
// skip it whenever it cannot serve the layer.
AttentionBackendRegistry MakeRegistry() {
  AttentionBackendRegistry r;
  r.Register(MakeReferenceAttentionBackend(), 10);
  r.Register(std::make_unique<LimitedBackend>("symmetric_only", SymmetricOnly()), 1000);
  return r;
}

AttentionRequirements Layer(int dk, int dv, bool sinks, bool window) {
  AttentionRequirements r;
  r.head_dim = dk;
  r.v_head_dim = dv;
  r.sinks = sinks;
  r.sliding_window = window;
  r.kv_dtype = DType::kF32;
  r.block_size = 16;
  return r;
}

TEST(Registry, AutoPicksCapableByPriority) {
  auto reg = MakeRegistry();
  // Symmetric, no sinks, no window: the limited backend serves it and wins on priority.
  auto sym = reg.Select(Layer(128, 128, false, false), {});
  ASSERT_TRUE(sym.ok());
  EXPECT_STREQ(sym->backend->name(), "symmetric_only");
  EXPECT_TRUE(sym->warning.empty());
  // Asymmetric (MiMo 192/128): skipped with the reason recorded.
  auto asym = reg.Select(Layer(192, 128, false, false), {});
  ASSERT_TRUE(asym.ok());
  EXPECT_STREQ(asym->backend->name(), "reference");
  EXPECT_NE(asym->reason.find("symmetric_only"), std::string::npos) << asym->reason;
  EXPECT_NE(asym->reason.find("equal"), std::string::npos) << asym->reason;
  // Symmetric but with sinks / with a window: also skipped.
  EXPECT_STREQ(reg.Select(Layer(128, 128, true, false), {})->backend->name(), "reference");
  EXPECT_STREQ(reg.Select(Layer(128, 128, false, true), {})->backend->name(), "reference");
  // Other dtypes or block sizes than declared.
  auto bf16 = Layer(128, 128, false, false);
  bf16.kv_dtype = DType::kBF16;
  EXPECT_STREQ(reg.Select(bf16, {})->backend->name(), "reference");
  auto bs64 = Layer(128, 128, false, false);
  bs64.block_size = 64;
  EXPECT_STREQ(reg.Select(bs64, {})->backend->name(), "reference");
}

TEST(Registry, ExplicitCapableIsHonoured) {
  auto reg = MakeRegistry();
  auto c = reg.Select(Layer(192, 128, true, true), {"reference", true});
  ASSERT_TRUE(c.ok());
  EXPECT_STREQ(c->backend->name(), "reference");
  EXPECT_TRUE(c->warning.empty());
  auto s = reg.Select(Layer(64, 64, false, false), {"symmetric_only", true});
  ASSERT_TRUE(s.ok());
  EXPECT_STREQ(s->backend->name(), "symmetric_only");
}

TEST(Registry, ExplicitIncapableWarnsAndFallsBack) {
  auto reg = MakeRegistry();
  auto c = reg.Select(Layer(192, 128, true, true), {"symmetric_only", false});
  ASSERT_TRUE(c.ok());
  EXPECT_STREQ(c->backend->name(), "reference");
  EXPECT_NE(c->warning.find("symmetric_only"), std::string::npos) << c->warning;
  EXPECT_NE(c->warning.find("K 192 / V 128"), std::string::npos) << c->warning;
  EXPECT_NE(c->warning.find("'reference'"), std::string::npos) << c->warning;
}

TEST(Registry, ExplicitIncapableIsErrorInStrictMode) {
  auto reg = MakeRegistry();
  auto c = reg.Select(Layer(192, 128, false, false), {"symmetric_only", true});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("symmetric_only"), std::string::npos);
  // Sinks refused by name too.
  auto s = reg.Select(Layer(64, 64, true, false), {"symmetric_only", true});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("sinks"), std::string::npos) << s.status().message();
}

TEST(Registry, UnknownNameIsAnError) {
  auto c = BuiltinAttentionBackends().Select(Layer(192, 128, true, true), {"flash", false});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("cpu_paged"), std::string::npos);  // lists known names
}

TEST(Registry, NoCapableBackendIsAnError) {
  AttentionBackendRegistry r;
  r.Register(std::make_unique<LimitedBackend>("symmetric_only", SymmetricOnly()), 1);
  auto c = r.Select(Layer(192, 128, false, false), {});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("192"), std::string::npos);
}

TEST(Registry, BuiltinsServeMimoLayers) {
  const auto& reg = BuiltinAttentionBackends();
  for (DType t : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
    for (int bs : {16, 64, 128}) {
      auto r = Layer(192, 128, true, true);
      r.kv_dtype = t;
      r.block_size = bs;
      auto c = reg.Select(r, {});
      ASSERT_TRUE(c.ok()) << c.status().message();
      EXPECT_STREQ(c->backend->name(), "cpu_paged");
    }
  }
}

TEST(Registry, WhyIncapableHeadDimRelations) {
  AttentionCapabilities c = SymmetricOnly();
  c.block_sizes = {};
  c.head_dims = HeadDimSupport::kVNotLargerThanK;
  EXPECT_EQ(WhyIncapable(c, Layer(192, 128, false, false)), "");
  EXPECT_NE(WhyIncapable(c, Layer(128, 192, false, false)), "");
  c.head_dims = HeadDimSupport::kAny;
  EXPECT_EQ(WhyIncapable(c, Layer(128, 192, false, false)), "");
}

}  // namespace
}  // namespace mimo
