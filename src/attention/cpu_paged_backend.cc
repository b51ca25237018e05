// `cpu_paged`: tiled paged attention for CPUs.
//
// Arithmetic (fixed by each query row's own positions, never by the batch, the tiling or the
// thread count, so a row's output is the same however it is scheduled): a row's visible keys are
// cut into segments of kSegmentKeys at absolute positions (0, 1024, 2048, ...). Each segment is
// an online softmax (running max m, denominator l, unnormalized value sum) started empty and fed
// block by block through KernelTable::attend_keys; the row's result is the sink state
// (m = sink, l = 1) merged with its segments in ascending order.
//
// Work: a prompt tile (more than kSplitRows queries of a sequence) is one item per (kv head,
// tile of kQueryTile rows) that walks and merges all its segments. A decode row (or a short
// verify step) is one item per (segment, kv-head group): a 32k-token context gives 32 items
// that stream disjoint slices of the cache, each block's rows of every head in the group read
// together; their segment states are merged after all items finish.
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
constexpr int kSegmentKeys = 1024;
// Sequences with at most this many queries in the step split their keys across items.
constexpr int kSplitRows = 4;

// One online-softmax state per (row, query head): m, l and the unnormalized value sum.
struct SoftmaxStates {
  std::vector<float> m, l;  // [n]
  std::vector<float> acc;   // [n, dv]
  void Reset(int n, int dv, float m0, float l0) {
    m.assign(n, m0);
    l.assign(n, l0);
    acc.assign(static_cast<size_t>(n) * dv, 0.0f);
  }
};

// Folds segment state (m2, l2, acc2) into (m, l, acc). A segment that saw no key is skipped;
// NaN anywhere stays NaN.
inline void MergeState(float m2, float l2, const float* acc2, int dv, float* m, float* l,
                       float* acc) {
  if (m2 == -INFINITY && l2 == 0.0f) return;
  const float mm = std::max(*m, m2);
  const float c1 = std::exp(*m - mm), c2 = std::exp(m2 - mm);  // 0 for a -inf max
  *l = *l * c1 + l2 * c2;
  for (int d = 0; d < dv; ++d) acc[d] = acc[d] * c1 + acc2[d] * c2;
  *m = mm;
}

struct WorkItem {
  int seq;
  int head_begin, head_end;  // kv heads
  int row_begin, row_end;    // within the sequence's queries
  int segment;               // -1: every segment, merged by the item; else only this one
  int64_t partial;           // split items: first float of their states in the partial buffer
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
    const int threads = ctx.pool != nullptr ? ctx.pool->num_threads() : 1;
    const int dv = g.v_head_dim;
    const int64_t state_floats = dv + 2;  // acc, m, l of one (row, query head) in a segment
    std::vector<WorkItem> items;
    struct Split {
      int seq, num_segments;
      int64_t partial;  // [num_segments, num_queries, num_heads, state_floats]
    };
    std::vector<Split> splits;
    int64_t partial_floats = 0;
    for (int s = 0; s < static_cast<int>(batch.seqs.size()); ++s) {
      const AttentionSequence& sq = batch.seqs[s];
      if (sq.num_queries <= 0) continue;
      if (sq.num_queries > kSplitRows) {
        for (int h = 0; h < g.num_kv_heads; ++h) {
          for (int r = 0; r < sq.num_queries; r += kQueryTile) {
            items.push_back({s, h, h + 1, r, std::min(r + kQueryTile, sq.num_queries), -1, 0});
          }
        }
        continue;
      }
      const int seg0 = KeyLow(g, sq.start_pos) / kSegmentKeys;
      const int nseg = (sq.start_pos + sq.num_queries - 1) / kSegmentKeys - seg0 + 1;
      // Enough items for every thread: split the kv heads when the segments are few.
      const int head_groups = std::clamp((2 * threads + nseg - 1) / nseg, 1, g.num_kv_heads);
      const int64_t seg_floats = int64_t{sq.num_queries} * g.num_heads * state_floats;
      splits.push_back({s, nseg, partial_floats});
      for (int i = 0; i < nseg; ++i) {
        for (int hg = 0; hg < head_groups; ++hg) {
          const int hb = hg * g.num_kv_heads / head_groups;
          const int he = (hg + 1) * g.num_kv_heads / head_groups;
          items.push_back(
              {s, hb, he, 0, sq.num_queries, seg0 + i, partial_floats + i * seg_floats});
        }
      }
      partial_floats += nseg * seg_floats;
    }
    // Every split item overwrites all of its states, so the buffer is reused without clearing
    // (a fresh 0.5 MiB vector per layer at 32k keys cost page faults on every call).
    // The caller's buffer: the workers must not name the thread_local (each has its own).
    thread_local std::vector<float> partial_buffer;
    if (partial_buffer.size() < static_cast<size_t>(partial_floats)) {
      partial_buffer.resize(static_cast<size_t>(partial_floats));
    }
    float* const partial = partial_buffer.data();
    const KernelTable& k = ActiveKernels();  // the fused block update (attend_keys)
    bool ok = DispatchKvDType(L.dtype, [&](auto tag) {
      auto fn = [&](int64_t b, int64_t e, int) {
        Scratch scratch;
        for (int64_t i = b; i < e; ++i) {
          const AttentionSequence& sq = batch.seqs[items[i].seq];
          RunItem<decltype(tag)>(k, g, kv, sq, batch.table(sq), items[i], q, sinks, out, partial,
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
    // Split sequences: the sink state, then each segment in ascending order.
    for (const Split& sp : splits) {
      const AttentionSequence& sq = batch.seqs[sp.seq];
      for (int r = 0; r < sq.num_queries; ++r) {
        const int row = sq.query_begin + r;
        for (int h = 0; h < g.num_heads; ++h) {
          float m = sinks ? sinks[h] : -INFINITY, l = sinks ? 1.0f : 0.0f;
          float* o = out + (int64_t{row} * g.num_heads + h) * dv;  // the value sum, then output
          std::fill(o, o + dv, 0.0f);
          for (int i = 0; i < sp.num_segments; ++i) {
            const float* st = partial + sp.partial +
                              ((int64_t{i} * sq.num_queries + r) * g.num_heads + h) * state_floats;
            MergeState(st[dv], st[dv + 1], st, dv, &m, &l, o);
          }
          const float inv = 1.0f / l;
          for (int d = 0; d < dv; ++d) o[d] *= inv;
        }
      }
    }
  }

 private:
  struct Scratch {
    SoftmaxStates segment;  // [kv heads of the item, rows, group]
    SoftmaxStates total;    // same; items that merge their own segments
  };

  // First key any query at position p may see.
  static int KeyLow(const AttentionGeometry& g, int p) {
    return g.sliding_window > 0 ? std::max(0, p - g.sliding_window + 1) : 0;
  }

  template <typename Tag>
  static void RunItem(const KernelTable& kern, const AttentionGeometry& g, const PagedKvView& kv,
                      const AttentionSequence& s, const int32_t* block_table, const WorkItem& w,
                      const float* q, const float* sinks, float* out, float* partial, Scratch* sc) {
    const PagedKvLayout& L = kv.layout;
    const int bs = L.block_size, dk = g.head_dim, dv = g.v_head_dim;
    const int group = g.num_heads / g.num_kv_heads;
    const int rows = w.row_end - w.row_begin;
    const int heads = w.head_end - w.head_begin;
    // State (h, r, gi) is ((h - head_begin) * rows + r) * group + gi.
    const int n_states = heads * rows * group;
    const int p_first = s.start_pos + w.row_begin;
    const int p_last = s.start_pos + w.row_end - 1;
    const int key_lo = KeyLow(g, p_first);
    MIMO_CHECK(p_last / bs < s.num_table_blocks, "position %d beyond the block table (%d blocks)",
               p_last, s.num_table_blocks);
    if (w.segment < 0) {
      sc->total.Reset(n_states, dv, 0.0f, 0.0f);
      for (int h = w.head_begin; h < w.head_end; ++h) {
        for (int r = 0; r < rows; ++r) {
          for (int gi = 0; gi < group; ++gi) {
            const int st = ((h - w.head_begin) * rows + r) * group + gi;
            sc->total.m[st] = sinks ? sinks[h * group + gi] : -INFINITY;
            sc->total.l[st] = sinks ? 1.0f : 0.0f;
          }
        }
      }
    }
    using S = typename Tag::Storage;
    const int seg_first = w.segment >= 0 ? w.segment : key_lo / kSegmentKeys;
    const int seg_last = w.segment >= 0 ? w.segment : p_last / kSegmentKeys;
    for (int seg = seg_first; seg <= seg_last; ++seg) {
      sc->segment.Reset(n_states, dv, -INFINITY, 0.0f);
      const int kb = std::max(seg * kSegmentKeys, key_lo);
      const int ke = std::min(seg * kSegmentKeys + kSegmentKeys - 1, p_last);
      for (int b = kb / bs; b <= ke / bs; ++b) {
        const int j0 = std::max(b * bs, kb);
        const int j1 = std::min(b * bs + bs - 1, ke);  // keys [j0, j1] of this block are used
        const int64_t slot0 = int64_t{block_table[b]} * bs;
        // Next block's slot for offset o, while its key (b + 1) * bs + o is still used.
        const int next_keys = b < ke / bs ? std::min(bs, ke - (b + 1) * bs + 1) : 0;
        const int64_t next_slot0 = next_keys > 0 ? int64_t{block_table[b + 1]} * bs : 0;
        for (int h = w.head_begin; h < w.head_end; ++h) {
          // Keys [j0, j1] of this head, read in place (the kernel requests the same head's
          // rows of the next block as it goes).
          AttendKeyRows keys;
          const int64_t slot = slot0 + (j0 - b * bs);
          keys.k = static_cast<const S*>(kv.k) + L.KIndex(slot, h);
          keys.v = static_cast<const S*>(kv.v) + L.VIndex(slot, h);
          keys.k_stride = int64_t{L.num_kv_heads} * dk;
          keys.v_stride = int64_t{L.num_kv_heads} * dv;
          keys.dtype = Tag::kDType;
          if (kv.k_scale != nullptr) keys.k_scale = kv.k_scale[h];  // fp8 only
          if (kv.v_scale != nullptr) keys.v_scale = kv.v_scale[h];
          const size_t elem = DTypeSize(keys.dtype);
          const char* k_j0 = static_cast<const char*>(keys.k);
          const char* v_j0 = static_cast<const char*>(keys.v);
          // Each query row's heads of this group see the same keys [a, z] of the block: one
          // fused update for all of them (adjacent in q and in the states).
          for (int r = 0; r < rows; ++r) {
            const int p = s.start_pos + w.row_begin + r;
            const int a = std::max(j0, KeyLow(g, p)), z = std::min(j1, p);
            if (a > z) continue;
            keys.k = k_j0 + (a - j0) * keys.k_stride * elem;
            keys.v = v_j0 + (a - j0) * keys.v_stride * elem;
            keys.n = z - a + 1;
            if (r == rows - 1 && next_keys > 0) {
              keys.k_next = static_cast<const S*>(kv.k) + L.KIndex(next_slot0, h);
              keys.v_next = static_cast<const S*>(kv.v) + L.VIndex(next_slot0, h);
              keys.n_next = next_keys;
            }
            const int row = s.query_begin + w.row_begin + r;
            const float* qg = q + (int64_t{row} * g.num_heads + h * group) * dk;  // [group, dk]
            const int st = ((h - w.head_begin) * rows + r) * group;
            kern.attend_keys(qg, group, keys, dk, dv, g.scale, &sc->segment.m[st],
                             &sc->segment.l[st], &sc->segment.acc[static_cast<size_t>(st) * dv]);
          }
        }
      }
      for (int h = w.head_begin; h < w.head_end; ++h) {
        for (int r = 0; r < rows; ++r) {
          for (int gi = 0; gi < group; ++gi) {
            const int st = ((h - w.head_begin) * rows + r) * group + gi;
            const float* acc = &sc->segment.acc[static_cast<size_t>(st) * dv];
            if (w.segment < 0) {
              MergeState(sc->segment.m[st], sc->segment.l[st], acc, dv, &sc->total.m[st],
                         &sc->total.l[st], &sc->total.acc[static_cast<size_t>(st) * dv]);
              continue;
            }
            // Split item: [row, query head] of this segment's block of the partial buffer.
            float* dst = partial + w.partial +
                         (int64_t{w.row_begin + r} * g.num_heads + h * group + gi) * (dv + 2);
            std::copy(acc, acc + dv, dst);
            dst[dv] = sc->segment.m[st];
            dst[dv + 1] = sc->segment.l[st];
          }
        }
      }
    }
    if (w.segment >= 0) return;
    for (int h = w.head_begin; h < w.head_end; ++h) {
      for (int r = 0; r < rows; ++r) {
        for (int gi = 0; gi < group; ++gi) {
          const int st = ((h - w.head_begin) * rows + r) * group + gi;
          const int row = s.query_begin + w.row_begin + r;
          const float inv = 1.0f / sc->total.l[st];
          float* o = out + (int64_t{row} * g.num_heads + h * group + gi) * dv;
          const float* acc = &sc->total.acc[static_cast<size_t>(st) * dv];
          for (int d = 0; d < dv; ++d) o[d] = acc[d] * inv;
        }
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
