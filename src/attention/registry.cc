// Capability matching and per-layer backend choice.
#include "attention/registry.h"

#include <algorithm>

#include "core/check.h"

namespace mimo {

const char* HeadDimSupportName(HeadDimSupport s) {
  switch (s) {
    case HeadDimSupport::kEqual:
      return "equal";
    case HeadDimSupport::kVNotLargerThanK:
      return "v<=k";
    case HeadDimSupport::kAny:
      return "any";
    default:
      return "?";
  }
}

const char* KvDTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF8E4M3:
      return "fp8";
    default:
      return "?";
  }
}

std::string DescribeRequirements(const AttentionRequirements& r) {
  std::string s = StrFormat("head_dim %d / v_head_dim %d", r.head_dim, r.v_head_dim);
  if (r.sinks) s += ", sinks";
  if (r.sliding_window) s += ", sliding window";
  s += StrFormat(", %s KV, block %d", KvDTypeName(r.kv_dtype), r.block_size);
  if (r.multi_token_queries) s += ", multi-token queries";
  s += r.paged ? ", paged" : ", contiguous";
  return s;
}

std::string WhyIncapable(const AttentionCapabilities& c, const AttentionRequirements& r) {
  bool dims_ok = c.head_dims == HeadDimSupport::kAny ||
                 (c.head_dims == HeadDimSupport::kEqual && r.head_dim == r.v_head_dim) ||
                 (c.head_dims == HeadDimSupport::kVNotLargerThanK && r.v_head_dim <= r.head_dim);
  if (!dims_ok) {
    return StrFormat("serves only %s K/V head dims, layer has K %d / V %d",
                     HeadDimSupportName(c.head_dims), r.head_dim, r.v_head_dim);
  }
  if (r.sinks && !c.sinks) return "no attention sinks";
  if (r.sliding_window && !c.sliding_window) return "no sliding window";
  if (std::find(c.kv_dtypes.begin(), c.kv_dtypes.end(), r.kv_dtype) == c.kv_dtypes.end()) {
    return StrFormat("no %s KV cache", KvDTypeName(r.kv_dtype));
  }
  if (r.paged && !c.block_sizes.empty() &&
      std::find(c.block_sizes.begin(), c.block_sizes.end(), r.block_size) == c.block_sizes.end()) {
    return StrFormat("no block size %d", r.block_size);
  }
  if (r.multi_token_queries && !c.multi_token_queries) return "single-token queries only";
  if (r.paged && !c.paged) return "no paged cache";
  if (!r.paged && !c.contiguous) return "no contiguous cache";
  return "";
}

void AttentionBackendRegistry::Register(std::unique_ptr<AttentionBackend> backend, int priority) {
  MIMO_CHECK(backend != nullptr, "null backend");
  MIMO_CHECK(Find(backend->name()) == nullptr, "backend '%s' registered twice", backend->name());
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [&](const Entry& e) { return e.priority < priority; });
  entries_.insert(it, Entry{std::move(backend), priority});
}

const AttentionBackend* AttentionBackendRegistry::Find(std::string_view name) const {
  for (const Entry& e : entries_) {
    if (name == e.backend->name()) return e.backend.get();
  }
  return nullptr;
}

std::vector<const AttentionBackend*> AttentionBackendRegistry::backends() const {
  std::vector<const AttentionBackend*> out;
  for (const Entry& e : entries_) out.push_back(e.backend.get());
  return out;
}

std::string AttentionBackendRegistry::Names() const {
  std::string s;
  for (const Entry& e : entries_) s += (s.empty() ? "" : ", ") + std::string(e.backend->name());
  return s;
}

StatusOr<BackendChoice> AttentionBackendRegistry::Select(const AttentionRequirements& req,
                                                         const BackendSelectOptions& opts) const {
  BackendChoice choice;
  std::string refusal;  // why the explicit request was refused
  if (!opts.requested.empty()) {
    const AttentionBackend* want = Find(opts.requested);
    if (want == nullptr) {
      return InvalidArgument("unknown attention backend '%s' (registered: %s)",
                             opts.requested.c_str(), Names().c_str());
    }
    refusal = WhyIncapable(want->capabilities(), req);
    if (refusal.empty()) {
      choice.backend = want;
      choice.reason = "requested";
      return choice;
    }
    if (opts.strict) {
      return InvalidArgument("attention backend '%s' cannot serve this layer (%s): %s",
                             opts.requested.c_str(), DescribeRequirements(req).c_str(),
                             refusal.c_str());
    }
  }
  std::string rejected;  // "name: why; ..." for the error message
  for (const Entry& e : entries_) {
    std::string why = WhyIncapable(e.backend->capabilities(), req);
    if (!why.empty()) {
      rejected +=
          StrFormat("%s%s: %s", rejected.empty() ? "" : "; ", e.backend->name(), why.c_str());
      continue;
    }
    choice.backend = e.backend.get();
    if (opts.requested.empty()) {
      choice.reason = rejected.empty()
                          ? "highest-priority backend that serves " + DescribeRequirements(req)
                          : "first capable by priority (" + rejected + ")";
    } else {
      choice.reason = StrFormat("fallback: '%s' %s", opts.requested.c_str(), refusal.c_str());
      choice.warning = StrFormat(
          "attention backend '%s' cannot serve %s (%s); using '%s' instead "
          "(--strict-attention-backend makes this an error)",
          opts.requested.c_str(), DescribeRequirements(req).c_str(), refusal.c_str(),
          e.backend->name());
    }
    return choice;
  }
  return Unimplemented("no attention backend serves %s (%s)", DescribeRequirements(req).c_str(),
                       rejected.c_str());
}

const AttentionBackendRegistry& BuiltinAttentionBackends() {
  static const AttentionBackendRegistry* registry = [] {
    auto* r = new AttentionBackendRegistry();
    r->Register(MakeCpuPagedAttentionBackend(), 100);
    r->Register(MakeReferenceAttentionBackend(), 10);
    return r;
  }();
  return *registry;
}

}  // namespace mimo
