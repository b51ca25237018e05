// `cpu_paged`: tiled paged attention for CPUs. Work items are (sequence, kv head, tile of up to
// kQueryTile query rows); each dequantizes a block's K and V rows for its kv head once and uses
// them for every query row of the tile and all query heads of the GQA group. Softmax is online
// (running max m, denominator l, unnormalized accumulator) with the sink folded in as the
// initial state m = sink, l = 1; the window is applied per query row.
#include <algorithm>
#include <cmath>
#include <vector>

#include "attention/kv_element.h"
#include "attention/registry.h"
#include "core/check.h"
#include "kernels/dispatch.h"

namespace mimo {
namespace {

constexpr int kQueryTile = 16;

// A prefetch GCC keeps: it deletes a loop whose body is only __builtin_prefetch calls.
inline void PrefetchLine(const char* p) {
#if defined(__x86_64__)
  asm volatile("prefetcht0 %0" : : "m"(*p));
#else
  __builtin_prefetch(p);
#endif
}

struct WorkItem {
  int seq;
  int kv_head;
  int row_begin;  // within the sequence's queries
  int row_end;
};

class CpuPagedBackend final : public AttentionBackend {
 public:
  CpuPagedBackend() {
    caps_.head_dims = HeadDimSupport::kAny;
    caps_.sinks = true;
    caps_.sliding_window = true;
    caps_.kv_dtypes = {DType::kF32, DType::kBF16, DType::kF8E4M3};
    caps_.block_sizes = {};  // any
    caps_.multi_token_queries = true;
    caps_.paged = true;
  }
  const char* name() const override { return "cpu_paged"; }
  const AttentionCapabilities& capabilities() const override { return caps_; }

  void Run(ExecContext& ctx, const AttentionGeometry& g, const PagedKvView& kv,
           const AttentionBatch& batch, const float* q, const float* sinks,
           float* out) const override {
    const PagedKvLayout& L = kv.layout;
    MIMO_CHECK(L.num_kv_heads == g.num_kv_heads && L.head_dim == g.head_dim &&
                   L.v_head_dim == g.v_head_dim && g.num_heads % g.num_kv_heads == 0,
               "KV layout (kv heads %d, K %d, V %d) does not match the layer geometry",
               L.num_kv_heads, L.head_dim, L.v_head_dim);
    std::vector<WorkItem> items;
    for (int s = 0; s < static_cast<int>(batch.seqs.size()); ++s) {
      for (int h = 0; h < g.num_kv_heads; ++h) {
        for (int r = 0; r < batch.seqs[s].num_queries; r += kQueryTile) {
          items.push_back({s, h, r, std::min(r + kQueryTile, batch.seqs[s].num_queries)});
        }
      }
    }
    const KernelTable& k = ActiveKernels();  // the block dot products and value sums
    bool ok = DispatchKvDType(L.dtype, [&](auto tag) {
      auto fn = [&](int64_t b, int64_t e, int) {
        Scratch scratch;
        for (int64_t i = b; i < e; ++i) {
          RunItem<decltype(tag)>(k, g, kv, batch.seqs[items[i].seq], items[i], q, sinks, out,
                                 &scratch);
        }
      };
      if (ctx.pool != nullptr) {
        ctx.pool->ParallelFor(static_cast<int64_t>(items.size()), fn);
      } else {
        fn(0, static_cast<int64_t>(items.size()), 0);
      }
    });
    MIMO_CHECK(ok, "cpu_paged attention: unsupported KV dtype");
  }

 private:
  struct Scratch {
    std::vector<float> k_tile;  // [block_size, head_dim]
    std::vector<float> v_tile;  // [block_size, v_head_dim]
    std::vector<float> m, l;    // [rows * group]
    std::vector<float> acc;     // [rows * group, v_head_dim]
    std::vector<float> scores;  // [block_size]
  };

  template <typename Tag>
  static void RunItem(const KernelTable& kern, const AttentionGeometry& g, const PagedKvView& kv, const AttentionSequence& s,
                      const WorkItem& w, const float* q, const float* sinks, float* out,
                      Scratch* sc) {
    const PagedKvLayout& L = kv.layout;
    const int bs = L.block_size, dk = g.head_dim, dv = g.v_head_dim;
    const int group = g.num_heads / g.num_kv_heads;
    const int rows = w.row_end - w.row_begin;
    const int n_states = rows * group;
    const float kscale = kv.k_scale ? kv.k_scale[w.kv_head] : 1.0f;
    const float vscale = kv.v_scale ? kv.v_scale[w.kv_head] : 1.0f;
    sc->k_tile.resize(static_cast<size_t>(bs) * dk);
    sc->v_tile.resize(static_cast<size_t>(bs) * dv);
    sc->scores.resize(bs);
    sc->m.resize(n_states);
    sc->l.resize(n_states);
    sc->acc.assign(static_cast<size_t>(n_states) * dv, 0.0f);
    for (int r = 0; r < rows; ++r) {
      for (int gi = 0; gi < group; ++gi) {
        const int h = w.kv_head * group + gi;
        // The sink is a key with logit sinks[h] and no value: start from it.
        sc->m[r * group + gi] = sinks ? sinks[h] : -INFINITY;
        sc->l[r * group + gi] = sinks ? 1.0f : 0.0f;
      }
    }
    auto window_lo = [&](int p) {
      return g.sliding_window > 0 ? std::max(0, p - g.sliding_window + 1) : 0;
    };
    const int p_first = s.start_pos + w.row_begin;
    const int p_last = s.start_pos + w.row_end - 1;
    const int key_lo = window_lo(p_first);
    MIMO_CHECK(p_last / bs < s.num_table_blocks, "position %d beyond the block table (%d blocks)",
               p_last, s.num_table_blocks);
    using S = typename Tag::Storage;
    // This head's K and V rows of keys [j0, j1] of block b, requested ahead of use: a long
    // context streams them from DRAM in 384- and 256-byte pieces (one kv head of each slot),
    // which the hardware prefetchers follow poorly (decode at 8k context spent a quarter of
    // its time waiting in the row conversion without this).
    auto prefetch_block = [&](int b, int j0, int j1) {
      const int64_t slot0 = int64_t{s.block_table[b]} * bs;
      for (int j = j0; j <= j1; ++j) {
        const int64_t slot = slot0 + (j - b * bs);
        const char* kp = reinterpret_cast<const char*>(static_cast<const S*>(kv.k) +
                                                       L.KIndex(slot, w.kv_head));
        const char* vp = reinterpret_cast<const char*>(static_cast<const S*>(kv.v) +
                                                       L.VIndex(slot, w.kv_head));
        for (size_t o = 0; o < dk * sizeof(S); o += 64) PrefetchLine(kp + o);
        for (size_t o = 0; o < dv * sizeof(S); o += 64) PrefetchLine(vp + o);
      }
    };
    const int b_last = p_last / bs;
    for (int b = key_lo / bs; b <= b_last; ++b) {
      const int j0 = std::max(b * bs, key_lo);
      const int j1 = std::min(b * bs + bs - 1, p_last);  // keys [j0, j1] of this block are used
      const int64_t slot0 = int64_t{s.block_table[b]} * bs;
      if (b < b_last) prefetch_block(b + 1, (b + 1) * bs, std::min((b + 1) * bs + bs - 1, p_last));
      for (int j = j0; j <= j1; ++j) {
        const int64_t slot = slot0 + (j - b * bs);
        float* kr = &sc->k_tile[(j - j0) * dk];  // [dk]
        float* vr = &sc->v_tile[(j - j0) * dv];  // [dv]
        if constexpr (Tag::kDType == DType::kF8E4M3) {
          LoadKvRow<Tag>(kv.k, L.KIndex(slot, w.kv_head), dk, kscale, kr);
          LoadKvRow<Tag>(kv.v, L.VIndex(slot, w.kv_head), dv, vscale, vr);
        } else {  // F32 / BF16: the vectorized row conversion gives the same values
          kern.convert_row(static_cast<const S*>(kv.k) + L.KIndex(slot, w.kv_head), Tag::kDType,
                           dk, kr);
          kern.convert_row(static_cast<const S*>(kv.v) + L.VIndex(slot, w.kv_head), Tag::kDType,
                           dv, vr);
        }
      }
      for (int r = 0; r < rows; ++r) {
        const int p = s.start_pos + w.row_begin + r;
        const int a = std::max(j0, window_lo(p)), z = std::min(j1, p);
        if (a > z) continue;
        for (int gi = 0; gi < group; ++gi) {
          const int h = w.kv_head * group + gi;
          const int row = s.query_begin + w.row_begin + r;
          const float* qh = q + (int64_t{row} * g.num_heads + h) * dk;
          const int n = z - a + 1;
          float* scores = sc->scores.data();  // [n]
          kern.dot_rows(qh, &sc->k_tile[(a - j0) * dk], n, dk, g.scale, scores);
          float block_max = -INFINITY;
          for (int j = 0; j < n; ++j) block_max = std::max(block_max, scores[j]);
          const int st = r * group + gi;
          float* acc = &sc->acc[static_cast<size_t>(st) * dv];
          if (block_max > sc->m[st]) {
            const float c = std::exp(sc->m[st] - block_max);  // 0 when m was -inf
            sc->l[st] *= c;
            for (int d = 0; d < dv; ++d) acc[d] *= c;
            sc->m[st] = block_max;
          }
          kern.exp_shifted(scores, n, sc->m[st], scores);  // now the weights e[j]
          for (int j = 0; j < n; ++j) sc->l[st] += scores[j];
          kern.axpy_rows(scores, &sc->v_tile[(a - j0) * dv], n, dv, acc);
        }
      }
    }
    for (int r = 0; r < rows; ++r) {
      for (int gi = 0; gi < group; ++gi) {
        const int h = w.kv_head * group + gi;
        const int row = s.query_begin + w.row_begin + r;
        const int st = r * group + gi;
        const float inv = 1.0f / sc->l[st];
        float* o = out + (int64_t{row} * g.num_heads + h) * dv;
        const float* acc = &sc->acc[static_cast<size_t>(st) * dv];
        for (int d = 0; d < dv; ++d) o[d] = acc[d] * inv;
      }
    }
  }

  AttentionCapabilities caps_;
};

}  // namespace

std::unique_ptr<AttentionBackend> MakeCpuPagedAttentionBackend() {
  return std::make_unique<CpuPagedBackend>();
}

}  // namespace mimo
