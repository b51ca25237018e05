// What the CPU claims (CPUID and XCR0 on x86, the kernel's HWCAP words on AArch64) versus what
// actually executes: each SIMD level is run once
// under a SIGILL guard (sigsetjmp/siglongjmp, previous handler restored). Our VMs claim AMX in
// CPUID but fault on it, so nothing is ever enabled from CPUID alone.
#pragma once

#include <string>

namespace mimo {

struct CpuFeatures {
  // CPUID claims.
  bool cpuid_avx2 = false, cpuid_fma = false, cpuid_f16c = false;
  bool cpuid_avx512f = false, cpuid_avx512bw = false, cpuid_avx512vl = false,
       cpuid_avx512dq = false;
  bool cpuid_amx_tile = false;
  bool cpuid_avx512bf16 = false;  // leaf 7 subleaf 1: vdpbf16ps, vcvtne2ps2bf16
  bool cpuid_avx512vnni = false;  // leaf 7 subleaf 0 ECX bit 11: vpdpbusd
  // OS state-saving enabled in XCR0 (ymm, zmm/opmask, tile data).
  bool os_ymm = false, os_zmm = false, os_amx = false;
  // Linux permission request for AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM) succeeded.
  bool amx_permission = false;
  // A probe sequence of the ISA executed without SIGILL (AVX2/AVX-512 only attempted when CPUID
  // claims them; AMX always attempted, for the report only).
  bool ran_avx2 = false, ran_avx512 = false, ran_amx = false;
  bool ran_avx512bf16 = false;  // attempted only where AVX-512 is usable and CPUID claims it
  bool ran_avx512vnni = false;  // likewise

  // AArch64: getauxval(AT_HWCAP) claims Advanced SIMD (ASIMD), AT_HWCAP2 FEAT_BF16; the NEON
  // probe (FMLA, FCVTL) is attempted only when ASIMD is claimed, the BF16 one only after it ran.
  bool hwcap_asimd = false, hwcap_bf16 = false;
  bool ran_neon = false, ran_neon_bf16 = false;

  bool avx2_usable() const { return cpuid_avx2 && cpuid_fma && cpuid_f16c && ran_avx2; }
  bool avx512_usable() const {
    return cpuid_avx512f && cpuid_avx512bw && cpuid_avx512vl && cpuid_avx512dq && cpuid_f16c &&
           cpuid_fma && ran_avx512;
  }
  // The opt-in bf16 kernels (ExecContext::precision).
  bool avx512bf16_usable() const { return avx512_usable() && cpuid_avx512bf16 && ran_avx512bf16; }
  // The opt-in int8-activation kernels (ExecContext::precision kInt8).
  bool avx512vnni_usable() const { return avx512_usable() && cpuid_avx512vnni && ran_avx512vnni; }
  bool neon_usable() const { return hwcap_asimd && ran_neon; }
  // BFDOT/BFMMLA execute (reported; no NEON bf16 kernel uses them yet).
  bool neon_bf16_usable() const { return neon_usable() && hwcap_bf16 && ran_neon_bf16; }
};

// Probed once (thread-safe), then cached.
const CpuFeatures& GetCpuFeatures();
// Runs fn with SIGILL caught (sigsetjmp/siglongjmp); false if it faulted. The previous SIGILL
// handler is restored. Serialized by a mutex; fn must not block on other threads.
bool RunUnderSigillGuard(bool (*fn)());

// Multi-line human-readable report: claimed / OS-enabled / executed, per ISA.
std::string CpuFeatureReport();

}  // namespace mimo
