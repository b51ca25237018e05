// CPUID/XCR0 (x86) or HWCAP (AArch64) reading and SIGILL-guarded execution probes.
#include "kernels/cpu_features.h"

#include <setjmp.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <mutex>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define MIMO_X86 1
#endif
#if defined(__aarch64__)
#include <sys/auxv.h>
#endif

#include "kernels/cpu/cpu_kernels.h"

namespace mimo {
namespace {

#ifdef MIMO_X86
uint64_t ReadXcr0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

// AMX: request tile-data permission, load a palette-1 config with one 1x4-byte tile, zero it and
// release. Mnemonics are assembled by binutils regardless of -m flags; only the guard decides.
bool AmxProbe() {
  alignas(64) uint8_t cfg[64] = {};
  cfg[0] = 1;   // palette 1
  cfg[16] = 4;  // colsb[0] (bytes per row of tmm0)
  cfg[48] = 1;  // rows[0]
  __asm__ volatile(
      "ldtilecfg (%0)\n\t"
      "tilezero %%tmm0\n\t"
      "tilerelease\n\t" ::"r"(cfg)
      : "memory");
  return true;
}
#endif

#if defined(__aarch64__)
// HWCAP bits (asm/hwcap.h; spelled here so an older libc's headers still build).
constexpr unsigned long kHwcapAsimd = 1ul << 1, kHwcap2Bf16 = 1ul << 14;

// FEAT_BF16: BFCVTN (fp32 -> bf16, round to nearest even), BFDOT (pairs of bf16 products into
// fp32 lanes) and BFMMLA. Mnemonics assembled through .arch_extension whatever -march the unit
// has; only the guard decides. 1.5 x 2 + 2.5 x 2 per lane pair: lane 0 of BFDOT is 8.
bool NeonBf16Probe() {
  float out[4];
  __asm__ volatile(
      ".arch_extension bf16\n\t"
      "fmov v1.4s, #1.5\n\t"
      "fmov v2.4s, #2.0\n\t"
      "bfcvtn v1.4h, v1.4s\n\t"
      "bfcvtn2 v1.8h, v1.4s\n\t"
      "bfcvtn v2.4h, v2.4s\n\t"
      "bfcvtn2 v2.8h, v2.4s\n\t"
      "movi v0.4s, #0\n\t"
      "movi v3.4s, #0\n\t"
      "bfdot v0.4s, v1.8h, v2.8h\n\t"
      "bfmmla v3.4s, v1.8h, v2.8h\n\t"
      "fadd v0.4s, v0.4s, v3.4s\n\t"
      "st1 {v0.4s}, [%0]\n\t" ::"r"(out)
      : "v0", "v1", "v2", "v3", "memory");
  return out[0] == 6.0f + 12.0f;  // BFDOT: 2 x 1.5 x 2; BFMMLA: 4 x 1.5 x 2
}
#endif

sigjmp_buf g_probe_jmp;
volatile sig_atomic_t g_probe_active = 0;

void ProbeSigillHandler(int) {
  if (g_probe_active) siglongjmp(g_probe_jmp, 1);
}

std::mutex g_probe_mu;

bool RunGuarded(bool (*fn)()) {
  std::lock_guard<std::mutex> lock(g_probe_mu);
  struct sigaction sa = {}, old = {};
  sa.sa_handler = ProbeSigillHandler;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGILL, &sa, &old) != 0) return false;
  volatile bool ok = false;  // volatile: live across siglongjmp
  if (sigsetjmp(g_probe_jmp, /*savemask=*/1) == 0) {
    g_probe_active = 1;
    ok = fn();
  }
  g_probe_active = 0;
  sigaction(SIGILL, &old, nullptr);
  return ok;
}

CpuFeatures Probe() {
  CpuFeatures f;
#ifdef MIMO_X86
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  f.cpuid_fma = (c >> 12) & 1;
  f.cpuid_f16c = (c >> 29) & 1;
  const bool osxsave = (c >> 27) & 1;
  if (osxsave) {
    const uint64_t xcr0 = ReadXcr0();
    f.os_ymm = (xcr0 & 0x6) == 0x6;
    f.os_zmm = f.os_ymm && (xcr0 & 0xe0) == 0xe0;
    f.os_amx = (xcr0 & 0x60000) == 0x60000;
  }
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.cpuid_avx2 = (b >> 5) & 1;
    f.cpuid_avx512f = (b >> 16) & 1;
    f.cpuid_avx512dq = (b >> 17) & 1;
    f.cpuid_avx512bw = (b >> 30) & 1;
    f.cpuid_avx512vl = (b >> 31) & 1;
    f.cpuid_avx512vnni = (c >> 11) & 1;
    f.cpuid_amx_tile = (d >> 24) & 1;
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.cpuid_avx512bf16 = (a >> 5) & 1;
  if (f.cpuid_avx2 && f.cpuid_fma && f.cpuid_f16c)
    f.ran_avx2 = RunGuarded(&avx2::ProbeInstructions);
  if (f.cpuid_avx512f && f.cpuid_avx512bw && f.cpuid_avx512vl && f.cpuid_avx512dq) {
    f.ran_avx512 = RunGuarded(&avx512::ProbeInstructions);
    if (f.ran_avx512 && f.cpuid_avx512bf16) f.ran_avx512bf16 = RunGuarded(&avx512::ProbeBf16);
    if (f.ran_avx512 && f.cpuid_avx512vnni) f.ran_avx512vnni = RunGuarded(&avx512::ProbeVnni);
  }
  // AMX is never used, but it is always probed (harmless under the guard) so the report shows
  // what a CPUID-only check would have enabled on hosts that claim it.
#ifdef SYS_arch_prctl
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  f.amx_permission = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#endif
  f.ran_amx = RunGuarded(&AmxProbe);
#endif
#if defined(__aarch64__)
  // HWCAP comes from the kernel, which reads the ID registers; still nothing is enabled before
  // its instructions ran here (a hypervisor or emulator may claim more than it executes).
  f.hwcap_asimd = (getauxval(AT_HWCAP) & kHwcapAsimd) != 0;
  f.hwcap_bf16 = (getauxval(AT_HWCAP2) & kHwcap2Bf16) != 0;
  if (f.hwcap_asimd) f.ran_neon = RunGuarded(&neon::ProbeInstructions);
  if (f.ran_neon && f.hwcap_bf16) f.ran_neon_bf16 = RunGuarded(&NeonBf16Probe);
#endif
  return f;
}

const char* YesNo(bool b) { return b ? "yes" : "no"; }
// "-" when not attempted (CPUID does not claim it), else whether it ran or faulted.
const char* Ran(bool claimed, bool ran) { return !claimed ? "-" : ran ? "yes" : "SIGILL"; }

}  // namespace

bool RunUnderSigillGuard(bool (*fn)()) { return RunGuarded(fn); }

const CpuFeatures& GetCpuFeatures() {
  static std::once_flag once;
  static CpuFeatures features;
  std::call_once(once, [] { features = Probe(); });
  return features;
}

std::string CpuFeatureReport() {
  const CpuFeatures& f = GetCpuFeatures();
  char buf[1024];
#if defined(__aarch64__)
  std::snprintf(buf, sizeof(buf),
                "isa     hwcap  executed  usable\n"
                "neon    %-5s  %-8s  %s   (asimd: fmla, fcvtl)\n"
                "bf16    %-5s  %-8s  %s   (bfdot, bfmmla: reported only)\n",
                YesNo(f.hwcap_asimd), Ran(f.hwcap_asimd, f.ran_neon), YesNo(f.neon_usable()),
                YesNo(f.hwcap_bf16), Ran(f.hwcap_bf16 && f.ran_neon, f.ran_neon_bf16),
                YesNo(f.neon_bf16_usable()));
  return buf;
#else
  std::snprintf(buf, sizeof(buf),
                "isa     cpuid  os-state  executed  usable\n"
                "avx2    %-5s  %-8s  %-8s  %s   (cpuid fma=%s f16c=%s)\n"
                "avx512  %-5s  %-8s  %-8s  %s   (f/bw/vl/dq = %s/%s/%s/%s)\n"
                "bf16    %-5s  %-8s  %-8s  %s   (avx512_bf16: --precision bf16)\n"
                "vnni    %-5s  %-8s  %-8s  %s   (avx512_vnni: --precision int8)\n"
                "amx     %-5s  %-8s  %-8s  no    (arch_prctl permission: %s; never used)\n",
                YesNo(f.cpuid_avx2), YesNo(f.os_ymm), Ran(f.cpuid_avx2, f.ran_avx2),
                YesNo(f.avx2_usable()), YesNo(f.cpuid_fma), YesNo(f.cpuid_f16c),
                YesNo(f.cpuid_avx512f), YesNo(f.os_zmm), Ran(f.cpuid_avx512f, f.ran_avx512),
                YesNo(f.avx512_usable()), YesNo(f.cpuid_avx512f), YesNo(f.cpuid_avx512bw),
                YesNo(f.cpuid_avx512vl), YesNo(f.cpuid_avx512dq), YesNo(f.cpuid_avx512bf16),
                YesNo(f.os_zmm), Ran(f.cpuid_avx512bf16 && f.ran_avx512, f.ran_avx512bf16),
                YesNo(f.avx512bf16_usable()), YesNo(f.cpuid_avx512vnni), YesNo(f.os_zmm),
                Ran(f.cpuid_avx512vnni && f.ran_avx512, f.ran_avx512vnni),
                YesNo(f.avx512vnni_usable()), YesNo(f.cpuid_amx_tile), YesNo(f.os_amx),
                f.ran_amx ? "yes" : "SIGILL", YesNo(f.amx_permission));
  return buf;
#endif
}

}  // namespace mimo
