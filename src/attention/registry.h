// The attention backends this build knows, with their declared capabilities, and the per-layer
// choice among them. Choice is from capabilities only: an explicit request is honoured when the
// backend can serve the layer; otherwise (non-strict) a capable fallback is used and the caller
// gets one warning line to print, or (strict) an error.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attention/backend.h"
#include "core/status.h"

namespace mimo {

struct BackendSelectOptions {
  std::string requested;  // "" = automatic
  bool strict = false;    // an incapable explicit request is an error instead of a fallback
};

struct BackendChoice {
  const AttentionBackend* backend = nullptr;
  std::string reason;   // why this backend serves the layer (one line, for `mimo backends`)
  std::string warning;  // non-empty when the explicit request could not be honoured
};

// Owns backends. Not thread-safe for Register; Select/Find are const and may run anywhere.
class AttentionBackendRegistry {
 public:
  // Higher priority wins in automatic selection; ties keep registration order.
  void Register(std::unique_ptr<AttentionBackend> backend, int priority);
  const AttentionBackend* Find(std::string_view name) const;
  std::vector<const AttentionBackend*> backends() const;  // by descending priority
  std::string Names() const;                              // "cpu_paged, reference"

  StatusOr<BackendChoice> Select(const AttentionRequirements& req,
                                 const BackendSelectOptions& opts) const;

 private:
  struct Entry {
    std::unique_ptr<AttentionBackend> backend;
    int priority;
  };
  std::vector<Entry> entries_;  // sorted by descending priority
};

// The built-in backends: `cpu_paged` (preferred) and `reference`. Built once, immutable.
const AttentionBackendRegistry& BuiltinAttentionBackends();

std::unique_ptr<AttentionBackend> MakeReferenceAttentionBackend();
std::unique_ptr<AttentionBackend> MakeCpuPagedAttentionBackend();

// "head_dim 192 / v_head_dim 128, sinks, window, bf16 KV, block 16, multi-token".
std::string DescribeRequirements(const AttentionRequirements& req);
// "f32" | "bf16" | "fp8" (the --kv-cache-dtype spelling).
const char* KvDTypeName(DType t);

}  // namespace mimo
