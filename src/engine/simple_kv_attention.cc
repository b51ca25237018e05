// Contiguous K/V cache + straightforward attention (causal, sliding window, sinks, GQA).
#include "engine/simple_kv_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace mimo {

void SimpleKvAttention::Truncate(int seq_id, int num_tokens) {
  for (auto& [key, c] : cache_) {
    if (key.first != seq_id || c.num_positions <= num_tokens) continue;
    c.num_positions = num_tokens;
    c.k.resize(static_cast<size_t>(num_tokens) * c.k_row);
    c.v.resize(static_cast<size_t>(num_tokens) * c.v_row);
  }
}

void SimpleKvAttention::Forward(ExecContext& ctx, int layer, const AttentionGeometry& g,
                                const StepBatch& batch, const float* q, const float* k,
                                const float* v, const float* sinks, float* out) {
  const int nh = g.num_heads, nkv = g.num_kv_heads, dqk = g.head_dim, dv = g.v_head_dim;
  const int group = nh / nkv;
  for (const SequenceChunk& ch : batch.chunks) {
    LayerCache& c = cache_[{ch.seq_id, layer}];
    c.k_row = nkv * dqk;
    c.v_row = nkv * dv;
    MIMO_CHECK(c.num_positions == ch.start_pos, "seq %d layer %d: cache has %d positions, chunk starts at %d",
               ch.seq_id, layer, c.num_positions, ch.start_pos);
    const size_t end = static_cast<size_t>(ch.start_pos + ch.num_tokens);
    c.k.resize(end * c.k_row);
    c.v.resize(end * c.v_row);
    std::copy(k + static_cast<size_t>(ch.token_begin) * c.k_row,
              k + static_cast<size_t>(ch.token_begin + ch.num_tokens) * c.k_row,
              c.k.begin() + static_cast<size_t>(ch.start_pos) * c.k_row);
    std::copy(v + static_cast<size_t>(ch.token_begin) * c.v_row,
              v + static_cast<size_t>(ch.token_begin + ch.num_tokens) * c.v_row,
              c.v.begin() + static_cast<size_t>(ch.start_pos) * c.v_row);
    c.num_positions = static_cast<int>(end);

    auto work = [&](int64_t b, int64_t e, int) {
      std::vector<float> s;
      for (int64_t job = b; job < e; ++job) {
        const int i = static_cast<int>(job / nh), h = static_cast<int>(job % nh);
        const int row = ch.token_begin + i, pos = ch.start_pos + i;
        const int kvh = h / group;
        const int lo = g.sliding_window > 0 ? std::max(0, pos - g.sliding_window + 1) : 0;
        const float* qh = q + (static_cast<size_t>(row) * nh + h) * dqk;
        s.resize(pos - lo + 1);
        float m = sinks ? sinks[h] : -std::numeric_limits<float>::infinity();
        for (int j = lo; j <= pos; ++j) {
          const float* kj = c.k.data() + static_cast<size_t>(j) * c.k_row + kvh * dqk;
          float dot = 0.0f;
          for (int d = 0; d < dqk; ++d) dot += qh[d] * kj[d];
          s[j - lo] = dot * g.scale;
          m = std::max(m, s[j - lo]);
        }
        float denom = sinks ? std::exp(sinks[h] - m) : 0.0f;  // the sink: denominator only
        for (float& x : s) {
          x = std::exp(x - m);
          denom += x;
        }
        float* oh = out + (static_cast<size_t>(row) * nh + h) * dv;
        std::fill(oh, oh + dv, 0.0f);
        for (int j = lo; j <= pos; ++j) {
          const float p = s[j - lo] / denom;
          const float* vj = c.v.data() + static_cast<size_t>(j) * c.v_row + kvh * dv;
          for (int d = 0; d < dv; ++d) oh[d] += p * vj[d];
        }
      }
    };
    const int64_t jobs = static_cast<int64_t>(ch.num_tokens) * nh;
    if (ctx.pool) {
      ctx.pool->ParallelFor(jobs, work);
    } else {
      work(0, jobs, 0);
    }
  }
}

}  // namespace mimo
