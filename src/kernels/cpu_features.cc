// CPUID/XCR0 reading and SIGILL-guarded execution probes.
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
    f.cpuid_amx_tile = (d >> 24) & 1;
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.cpuid_avx512bf16 = (a >> 5) & 1;
  if (f.cpuid_avx2 && f.cpuid_fma && f.cpuid_f16c)
    f.ran_avx2 = RunGuarded(&avx2::ProbeInstructions);
  if (f.cpuid_avx512f && f.cpuid_avx512bw && f.cpuid_avx512vl && f.cpuid_avx512dq) {
    f.ran_avx512 = RunGuarded(&avx512::ProbeInstructions);
    if (f.ran_avx512 && f.cpuid_avx512bf16) f.ran_avx512bf16 = RunGuarded(&avx512::ProbeBf16);
  }
  // AMX is never used, but it is always probed (harmless under the guard) so the report shows
  // what a CPUID-only check would have enabled on hosts that claim it.
#ifdef SYS_arch_prctl
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  f.amx_permission = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#endif
  f.ran_amx = RunGuarded(&AmxProbe);
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
  std::snprintf(buf, sizeof(buf),
                "isa     cpuid  os-state  executed  usable\n"
                "avx2    %-5s  %-8s  %-8s  %s   (cpuid fma=%s f16c=%s)\n"
                "avx512  %-5s  %-8s  %-8s  %s   (f/bw/vl/dq = %s/%s/%s/%s)\n"
                "bf16    %-5s  %-8s  %-8s  %s   (avx512_bf16: opt-in bf16 prefill only)\n"
                "amx     %-5s  %-8s  %-8s  no    (arch_prctl permission: %s; never used)\n",
                YesNo(f.cpuid_avx2), YesNo(f.os_ymm), Ran(f.cpuid_avx2, f.ran_avx2),
                YesNo(f.avx2_usable()), YesNo(f.cpuid_fma), YesNo(f.cpuid_f16c),
                YesNo(f.cpuid_avx512f), YesNo(f.os_zmm), Ran(f.cpuid_avx512f, f.ran_avx512),
                YesNo(f.avx512_usable()), YesNo(f.cpuid_avx512f), YesNo(f.cpuid_avx512bw),
                YesNo(f.cpuid_avx512vl), YesNo(f.cpuid_avx512dq), YesNo(f.cpuid_avx512bf16),
                YesNo(f.os_zmm), Ran(f.cpuid_avx512bf16 && f.ran_avx512, f.ran_avx512bf16),
                YesNo(f.avx512bf16_usable()), YesNo(f.cpuid_amx_tile), YesNo(f.os_amx),
                f.ran_amx ? "yes" : "SIGILL", YesNo(f.amx_permission));
  return buf;
}

}  // namespace mimo
