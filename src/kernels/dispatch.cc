// Builds the per-ISA kernel tables once, from the runtime probe, and picks the active one.
#include "kernels/dispatch.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/log.h"
#include "kernels/attend_keys_composed.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu_features.h"
#include "kernels/ref/ref_kernels.h"

namespace mimo {

#if defined(__x86_64__) || defined(__i386__)
namespace {
// --precision int8 on AVX-512 without VNNI: the AVX2 int8 kernels for int8 weights, this table's
// exact AVX-512 kernels for every other matrix (as with VNNI).
void Avx512Int8WithoutVnni(const float* x, int64_t T, const MatrixWeight& w, int64_t row_begin,
                           int64_t row_end, float* y) {
  if (w.dtype == DType::kInt8) return avx2::LinearRowsInt8(x, T, w, row_begin, row_end, y);
  avx512::LinearRows(x, T, w, row_begin, row_end, y);
}
}  // namespace
#endif
namespace {

struct Tables {
  KernelTable table[static_cast<int>(Isa::kCount)];
  bool usable[static_cast<int>(Isa::kCount)] = {};
  Isa best = Isa::kScalar;
  Isa active = Isa::kScalar;
};

Tables BuildTables() {
  Tables t;
  KernelTable& s = t.table[static_cast<int>(Isa::kScalar)];
  s.isa = Isa::kScalar;
  s.linear_rows = &ref::LinearRows;
  s.rms_norm = &ref::RmsNorm;
  s.rope_rotate = &ref::RopeRotate;
  s.silu_mul = &ref::SiluMul;
  s.convert_row = &ref::ConvertRow;
  s.dot_rows = &ref::DotRows;
  s.axpy_rows = &ref::AxpyRows;
  s.exp_shifted = &ref::ExpShifted;
  s.attend_keys =
      &AttendKeysComposed<&ref::ConvertRow, &ref::DotRows, &ref::ExpShifted, &ref::AxpyRows>;
  s.read_probe = &ref::ReadProbe;
  s.fma_probe = &ref::FmaProbe;
  t.usable[static_cast<int>(Isa::kScalar)] = true;

  const CpuFeatures& f = GetCpuFeatures();
#if defined(__x86_64__) || defined(__i386__)
  if (f.avx2_usable()) {
    avx2::FillTable(&t.table[static_cast<int>(Isa::kAvx2)]);
    t.table[static_cast<int>(Isa::kAvx2)].linear_rows_int8 = &avx2::LinearRowsInt8;
    t.table[static_cast<int>(Isa::kAvx2)].quantize_int8_grouped = &avx2::QuantizeInt8Grouped;
    t.table[static_cast<int>(Isa::kAvx2)].linear_rows_int8_grouped = &avx2::LinearRowsInt8Grouped;
    t.usable[static_cast<int>(Isa::kAvx2)] = true;
    t.best = Isa::kAvx2;
  }
  if (f.avx512_usable()) {
    avx512::FillTable(&t.table[static_cast<int>(Isa::kAvx512)]);
    if (f.avx512bf16_usable()) {
      t.table[static_cast<int>(Isa::kAvx512)].linear_rows_bf16 = &avx512::LinearRowsBf16;
      t.table[static_cast<int>(Isa::kAvx512)].bf16_dot_probe = &avx512::Bf16DotProbe;
    }
    if (f.avx512vnni_usable()) {
      t.table[static_cast<int>(Isa::kAvx512)].linear_rows_int8 = &avx512::LinearRowsInt8;
      t.table[static_cast<int>(Isa::kAvx512)].quantize_int8_grouped = &avx512::QuantizeInt8Grouped;
      t.table[static_cast<int>(Isa::kAvx512)].linear_rows_int8_grouped =
          &avx512::LinearRowsInt8Grouped;
      t.table[static_cast<int>(Isa::kAvx512)].int8_dot_probe = &avx512::Int8DotProbe;
    } else if (f.avx2_usable()) {
      t.table[static_cast<int>(Isa::kAvx512)].linear_rows_int8 = &Avx512Int8WithoutVnni;
      t.table[static_cast<int>(Isa::kAvx512)].quantize_int8_grouped = &avx2::QuantizeInt8Grouped;
      t.table[static_cast<int>(Isa::kAvx512)].linear_rows_int8_grouped =
          &avx2::LinearRowsInt8Grouped;
    }
    t.usable[static_cast<int>(Isa::kAvx512)] = true;
    t.best = Isa::kAvx512;
  }
#elif defined(__aarch64__)
  if (f.neon_usable()) {
    neon::FillTable(&t.table[static_cast<int>(Isa::kNeon)]);
    t.table[static_cast<int>(Isa::kNeon)].linear_rows_int8 = &neon::LinearRowsInt8;
    t.table[static_cast<int>(Isa::kNeon)].quantize_int8_grouped = &neon::QuantizeInt8Grouped;
    t.table[static_cast<int>(Isa::kNeon)].linear_rows_int8_grouped = &neon::LinearRowsInt8Grouped;
    t.usable[static_cast<int>(Isa::kNeon)] = true;
    t.best = Isa::kNeon;
  }
#endif
  t.active = SelectIsa(t.best, std::getenv("MIMO_ISA"));
  if (!t.usable[static_cast<int>(t.active)]) {  // below best but not this architecture's
    MIMO_LOG_WARN("MIMO_ISA=%s does not run on this CPU; using %s", IsaName(t.active),
                  IsaName(t.best));
    t.active = t.best;
  }
  MIMO_LOG_DEBUG("kernels: using %s (best probed %s)", IsaName(t.active), IsaName(t.best));
  return t;
}

const Tables& GetTables() {
  static std::once_flag once;
  static Tables tables;
  std::call_once(once, [] { tables = BuildTables(); });
  return tables;
}

}  // namespace

Isa SelectIsa(Isa best_probed, const char* env_value) {
  if (env_value == nullptr || *env_value == '\0') return best_probed;
  Isa want;
  if (!ParseIsa(env_value, &want)) {
    MIMO_LOG_WARN("MIMO_ISA=%s is not one of scalar|avx2|avx512|neon; using %s", env_value,
                  IsaName(best_probed));
    return best_probed;
  }
  if (want > best_probed) {
    MIMO_LOG_WARN("MIMO_ISA=%s is above what this CPU runs; using %s", env_value,
                  IsaName(best_probed));
    return best_probed;
  }
  return want;
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kNeon:
      return "neon";
    default:
      return "?";
  }
}

bool ParseIsa(const char* name, Isa* out) {
  for (int i = 0; i < static_cast<int>(Isa::kCount); ++i) {
    if (std::strcmp(name, IsaName(static_cast<Isa>(i))) == 0) {
      *out = static_cast<Isa>(i);
      return true;
    }
  }
  return false;
}

const KernelTable& ActiveKernels() {
  const Tables& t = GetTables();
  return t.table[static_cast<int>(t.active)];
}

const KernelTable* KernelsFor(Isa isa) {
  const Tables& t = GetTables();
  const int i = static_cast<int>(isa);
  return i < static_cast<int>(Isa::kCount) && t.usable[i] ? &t.table[i] : nullptr;
}

std::vector<Isa> AvailableIsas() {
  std::vector<Isa> out;
  for (int i = 0; i < static_cast<int>(Isa::kCount); ++i) {
    if (KernelsFor(static_cast<Isa>(i)) != nullptr) out.push_back(static_cast<Isa>(i));
  }
  return out;
}

}  // namespace mimo
