// `reference`: the obviously-correct attention. For every query row and head it gathers the
// visible keys through the block table, computes all scores, and does one max-subtracted fp32
// softmax with the sink in the denominator. Slow; it is the oracle the other backends match.
#include <algorithm>
#include <cmath>
#include <vector>

#include "attention/kv_element.h"
#include "attention/registry.h"
#include "core/check.h"

namespace mimo {
namespace {

class ReferenceBackend final : public AttentionBackend {
 public:
  ReferenceBackend() {
    caps_.head_dims = HeadDimSupport::kAny;
    caps_.sinks = true;
    caps_.sliding_window = true;
    caps_.kv_dtypes = {DType::kF32, DType::kBF16, DType::kF8E4M3};
    caps_.block_sizes = {};  // any
    caps_.multi_token_queries = true;
    caps_.paged = true;
  }
  const char* name() const override { return "reference"; }
  const AttentionCapabilities& capabilities() const override { return caps_; }

  void Run(ExecContext&, const AttentionGeometry& g, const PagedKvView& kv,
           const AttentionBatch& batch, const float* q, const float* sinks,
           float* out) const override {
    bool ok = DispatchKvDType(
        kv.layout.dtype, [&](auto tag) { RunTyped<decltype(tag)>(g, kv, batch, q, sinks, out); });
    MIMO_CHECK(ok, "reference attention: unsupported KV dtype");
  }

 private:
  template <typename Tag>
  static void RunTyped(const AttentionGeometry& g, const PagedKvView& kv,
                       const AttentionBatch& batch, const float* q, const float* sinks,
                       float* out) {
    const PagedKvLayout& L = kv.layout;
    MIMO_CHECK(L.num_kv_heads == g.num_kv_heads && L.head_dim == g.head_dim &&
                   L.v_head_dim == g.v_head_dim && g.num_heads % g.num_kv_heads == 0,
               "KV layout (kv heads %d, K %d, V %d) does not match the layer geometry",
               L.num_kv_heads, L.head_dim, L.v_head_dim);
    const int group = g.num_heads / g.num_kv_heads;
    std::vector<float> k_row(g.head_dim), v_row(g.v_head_dim), scores;
    for (const AttentionSequence& s : batch.seqs) {
      for (int i = 0; i < s.num_queries; ++i) {
        const int p = s.start_pos + i;
        const int lo = g.sliding_window > 0 ? std::max(0, p - g.sliding_window + 1) : 0;
        for (int h = 0; h < g.num_heads; ++h) {
          const int kvh = h / group;
          const float* qh = q + (int64_t{s.query_begin + i} * g.num_heads + h) * g.head_dim;
          float* oh = out + (int64_t{s.query_begin + i} * g.num_heads + h) * g.v_head_dim;
          float kscale = kv.k_scale ? kv.k_scale[kvh] : 1.0f;
          float vscale = kv.v_scale ? kv.v_scale[kvh] : 1.0f;
          scores.assign(p - lo + 1, 0.0f);
          float m = sinks ? sinks[h] : -INFINITY;
          for (int j = lo; j <= p; ++j) {
            LoadKvRow<Tag>(kv.k, L.KIndex(Slot(s, batch.table(s), L, j), kvh), g.head_dim, kscale,
                           k_row.data());
            float dot = 0.0f;
            for (int d = 0; d < g.head_dim; ++d) dot += qh[d] * k_row[d];
            scores[j - lo] = dot * g.scale;
            m = std::max(m, scores[j - lo]);
          }
          float denom = sinks ? std::exp(sinks[h] - m) : 0.0f;
          for (float& x : scores) {
            x = std::exp(x - m);
            denom += x;
          }
          std::fill(oh, oh + g.v_head_dim, 0.0f);
          for (int j = lo; j <= p; ++j) {
            LoadKvRow<Tag>(kv.v, L.VIndex(Slot(s, batch.table(s), L, j), kvh), g.v_head_dim, vscale,
                           v_row.data());
            float w = scores[j - lo] / denom;
            for (int d = 0; d < g.v_head_dim; ++d) oh[d] += w * v_row[d];
          }
        }
      }
    }
  }

  static int64_t Slot(const AttentionSequence& s, const int32_t* block_table,
                      const PagedKvLayout& L, int pos) {
    int b = pos / L.block_size;
    MIMO_CHECK(b < s.num_table_blocks, "position %d beyond the block table (%d blocks)", pos,
               s.num_table_blocks);
    return int64_t{block_table[b]} * L.block_size + pos % L.block_size;
  }

  AttentionCapabilities caps_;
};

}  // namespace

std::unique_ptr<AttentionBackend> MakeReferenceAttentionBackend() {
  return std::make_unique<ReferenceBackend>();
}

}  // namespace mimo
