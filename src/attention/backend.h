// AttentionBackend: one attention implementation over the paged K/V layout, registered with the
// capabilities it declares. Backends are chosen per layer from those capabilities (registry.h),
// never from model names.
#pragma once

#include <string>
#include <vector>

#include "attention/kv_attention.h"
#include "attention/paged_kv_view.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

namespace mimo {

// Which K/V head-dim relations a backend serves.
enum class HeadDimSupport { kEqual, kVNotLargerThanK, kAny, kCount };
const char* HeadDimSupportName(HeadDimSupport s);  // "equal" | "v<=k" | "any"

struct AttentionCapabilities {
  HeadDimSupport head_dims = HeadDimSupport::kEqual;
  bool sinks = false;                // per-query-head sink logit in the softmax denominator
  bool sliding_window = false;       // per-query window of W keys including the current one
  std::vector<DType> kv_dtypes;      // cache element types it reads
  std::vector<int> block_sizes;      // paged block sizes it supports; empty = any
  bool multi_token_queries = false;  // several queries per sequence (prefill chunks, spec verify)
  bool paged = true;                 // reads a paged cache through block tables
  bool contiguous = false;           // reads a contiguous per-sequence cache
};

// What one layer needs from a backend (derived from its LayerConfig and the cache options).
struct AttentionRequirements {
  int head_dim = 0;
  int v_head_dim = 0;
  bool sinks = false;
  bool sliding_window = false;
  DType kv_dtype = DType::kF32;
  int block_size = 16;
  bool multi_token_queries = true;
  bool paged = true;
};

// Empty when `caps` serve `req`; otherwise one line naming the first unmet requirement.
std::string WhyIncapable(const AttentionCapabilities& caps, const AttentionRequirements& req);

// Interface. Implementations are stateless between calls (all state is in the arguments), so
// one instance serves every layer. Run is called from the engine thread; it may fan out over
// ctx.pool (null pool = run on the caller).
class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  virtual const char* name() const = 0;
  virtual const AttentionCapabilities& capabilities() const = 0;

  // Causal (windowed when g.sliding_window > 0) attention of every query in `batch` over its
  // sequence's cached keys: query at position p sees keys j with j <= p and, with a window W,
  // p - j < W. Scores are (q.k) * g.scale; with sinks, sinks[h] joins the softmax denominator
  // and contributes no value. GQA: query head h reads kv head h / (num_heads / num_kv_heads).
  //   q [batch.num_tokens, num_heads, head_dim]; sinks [num_heads] or nullptr;
  //   out [batch.num_tokens, num_heads, v_head_dim].
  virtual void Run(ExecContext& ctx, const AttentionGeometry& g, const PagedKvView& kv,
                   const AttentionBatch& batch, const float* q, const float* sinks,
                   float* out) const = 0;
};

}  // namespace mimo
