// The runtime probe and ISA selection: only ISAs that executed are offered, MIMO_ISA can only
// lower the level, and the SIGILL guard really catches a faulting instruction.
#include "kernels/dispatch.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <cstring>

#include "kernels/cpu_features.h"
#include "kernels/kernels.h"

namespace mimo {
namespace {

bool ExecuteUd2() {  // an instruction that is undefined on purpose
#if defined(__aarch64__)
  __asm__ volatile("udf #0");
#else
  __asm__ volatile("ud2");
#endif
  return true;
}

bool ReturnTrue() { return true; }

TEST(CpuFeatures, SigillGuardCatchesFaultAndRestoresHandler) {
  struct sigaction before = {}, after = {};
  sigaction(SIGILL, nullptr, &before);
  EXPECT_FALSE(RunUnderSigillGuard(&ExecuteUd2));
  EXPECT_TRUE(RunUnderSigillGuard(&ReturnTrue));
  sigaction(SIGILL, nullptr, &after);
  EXPECT_EQ(before.sa_handler, after.sa_handler);
}

TEST(CpuFeatures, UsableImpliesClaimedAndExecuted) {
  const CpuFeatures& f = GetCpuFeatures();
  std::printf("%s", CpuFeatureReport().c_str());
  if (f.avx2_usable()) {
    EXPECT_TRUE(f.cpuid_avx2 && f.ran_avx2);
  }
  if (f.avx512_usable()) {
    EXPECT_TRUE(f.cpuid_avx512f && f.ran_avx512);
  }
  EXPECT_EQ(KernelsFor(Isa::kAvx2) != nullptr, f.avx2_usable());
  EXPECT_EQ(KernelsFor(Isa::kAvx512) != nullptr, f.avx512_usable());
#if defined(__x86_64__) || defined(__i386__)
  // AMX is never a dispatch level; if CPUID claims it, the probe result is reported either way.
  EXPECT_NE(CpuFeatureReport().find("amx"), std::string::npos);
  if (!f.ran_amx) {
    EXPECT_NE(CpuFeatureReport().find("SIGILL"), std::string::npos);
  }
#endif
  if (f.neon_usable()) {
    EXPECT_TRUE(f.hwcap_asimd && f.ran_neon);
  }
  if (f.neon_bf16_usable()) {
    EXPECT_TRUE(f.hwcap_bf16 && f.ran_neon_bf16);
  }
  EXPECT_EQ(KernelsFor(Isa::kNeon) != nullptr, f.neon_usable());
}

TEST(Dispatch, TablesAreCompleteAndScalarAlwaysAvailable) {
  const std::vector<Isa> isas = AvailableIsas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), Isa::kScalar);
  for (Isa isa : isas) {
    const KernelTable* k = KernelsFor(isa);
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k->isa, isa);
    EXPECT_TRUE(k->linear_rows && k->rms_norm && k->rope_rotate && k->silu_mul && k->convert_row &&
                k->dot_rows && k->axpy_rows && k->exp_shifted);
  }
  EXPECT_NE(KernelsFor(ActiveKernels().isa), nullptr);
  EXPECT_STREQ(KernelIsaName(), IsaName(ActiveKernels().isa));
}

TEST(Dispatch, MimoIsaOnlyLowersTheLevel) {
  EXPECT_EQ(SelectIsa(Isa::kAvx512, nullptr), Isa::kAvx512);
  EXPECT_EQ(SelectIsa(Isa::kAvx512, ""), Isa::kAvx512);
  EXPECT_EQ(SelectIsa(Isa::kAvx512, "avx2"), Isa::kAvx2);
  EXPECT_EQ(SelectIsa(Isa::kAvx512, "scalar"), Isa::kScalar);
  EXPECT_EQ(SelectIsa(Isa::kAvx2, "avx512"), Isa::kAvx2);
  EXPECT_EQ(SelectIsa(Isa::kScalar, "avx2"), Isa::kScalar);
  EXPECT_EQ(SelectIsa(Isa::kAvx2, "sse9"), Isa::kAvx2);
  Isa parsed;
  EXPECT_FALSE(ParseIsa("AVX2", &parsed));
  EXPECT_TRUE(ParseIsa("avx512", &parsed));
  EXPECT_EQ(parsed, Isa::kAvx512);
}

}  // namespace
}  // namespace mimo
