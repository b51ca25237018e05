// Slicing and the step message of tensor/expert parallelism (see tensor_parallel.h).
#include "model/tensor_parallel.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "core/check.h"
#include "kernels/kernels.h"

namespace mimo {

RowRange EvenSplit(int64_t n, int rank, int size) {
  const int64_t chunk = (n + size - 1) / size;
  const int64_t begin = std::min<int64_t>(n, chunk * rank);
  return {begin, std::min<int64_t>(n, begin + chunk) - begin};
}

std::vector<int> SplitCounts(int64_t n, int size, int64_t scale) {
  std::vector<int> out(size);
  for (int r = 0; r < size; ++r) out[r] = static_cast<int>(EvenSplit(n, r, size).count * scale);
  return out;
}

StatusOr<HeadSlice> SliceHeads(const LayerConfig& l, int rank, int size) {
  const int nh = l.num_attention_heads, nkv = l.num_key_value_heads;
  if (nh % size != 0 || (nkv % size != 0 && size % nkv != 0)) {
    return InvalidArgument(
        "--tensor-parallel-size %d does not split a layer with %d query / %d kv heads (N must "
        "divide the query heads, and N and the kv heads must divide one another)",
        size, nh, nkv);
  }
  HeadSlice s;
  const int group = nh / nkv;  // query heads per kv head
  s.num_q = nh / size;
  s.q_begin = rank * s.num_q;
  s.kv_begin = s.q_begin / group;
  s.num_kv = (s.q_begin + s.num_q - 1) / group + 1 - s.kv_begin;
  return s;
}

LayerConfig LocalLayerConfig(const LayerConfig& layer, const HeadSlice& s) {
  LayerConfig l = layer;
  l.num_attention_heads = s.num_q;
  l.num_key_value_heads = s.num_kv;
  return l;
}

namespace {
struct SliceBuffers {
  std::vector<uint8_t> data;
  std::vector<float> scale_inv;
  std::vector<uint8_t> scale_e8m0;
};
}  // namespace

MatrixWeight SliceRows(const MatrixWeight& w, int64_t begin, int64_t count) {
  MIMO_CHECK(begin >= 0 && count > 0 && begin + count <= w.rows, "SliceRows [%lld, +%lld) of %lld",
             static_cast<long long>(begin), static_cast<long long>(count),
             static_cast<long long>(w.rows));
  if (begin == 0 && count == w.rows) return w;
  MatrixWeight s = w;
  s.rows = count;
  s.scale_row.clear();
  auto buf = std::make_shared<SliceBuffers>();
  const auto* src = static_cast<const uint8_t*>(w.data) + begin * w.RowBytes();
  if (w.owned) {  // a re-laid-out copy (fused qkv): keep only our rows, drop the rest
    buf->data.assign(src, src + count * w.RowBytes());
    s.data = buf->data.data();
  } else {
    s.data = src;  // in the mapping
  }
  const bool fp8 = w.dtype == DType::kF8E4M3, mxfp4 = w.dtype == DType::kMxfp4;
  if (fp8 || mxfp4) {
    // The scale rows this slice uses, in first-use order, copied and renumbered.
    std::map<int64_t, int32_t> remap;
    std::vector<int32_t> rows(count);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t sr = w.ScaleRow(begin + i);
      auto it = remap.find(sr);
      if (it == remap.end()) it = remap.emplace(sr, static_cast<int32_t>(remap.size())).first;
      rows[i] = it->second;
    }
    std::vector<int64_t> order(remap.size());
    for (const auto& [sr, idx] : remap) order[idx] = sr;
    const int64_t sc = w.scale_cols;
    for (int64_t sr : order) {
      if (fp8) {
        buf->scale_inv.insert(buf->scale_inv.end(), w.scale_inv + sr * sc, w.scale_inv + (sr + 1) * sc);
      } else {
        buf->scale_e8m0.insert(buf->scale_e8m0.end(), w.scale_e8m0 + sr * sc,
                               w.scale_e8m0 + (sr + 1) * sc);
      }
    }
    s.num_scale_rows = static_cast<int64_t>(order.size());
    if (fp8) s.scale_inv = buf->scale_inv.data();
    if (mxfp4) s.scale_e8m0 = buf->scale_e8m0.data();
    bool uniform = w.block_rows > 0;  // the compacted map may again be plain r / block_rows
    for (int64_t i = 0; i < count && uniform; ++i) uniform = rows[i] == i / w.block_rows;
    if (!uniform) s.scale_row = std::move(rows);
  }
  s.owned = buf;
  return s;
}

void GatherColumns(Communicator& comm, const float* local, int64_t T, const std::vector<int>& cols,
                   float* out, const char* what) {
  const int n = comm.size();
  std::vector<int> counts(n);
  int64_t total_cols = 0;
  for (int r = 0; r < n; ++r) {
    counts[r] = static_cast<int>(T * cols[r]);
    total_cols += cols[r];
  }
  thread_local std::vector<float> recv;
  recv.resize(T * total_cols);
  comm.AllGatherV(local, counts, recv.data(), what);
  int64_t base = 0, col0 = 0;
  for (int r = 0; r < n; ++r) {
    const int64_t c = cols[r];
    for (int64_t t = 0; t < T; ++t) {
      std::memcpy(out + t * total_cols + col0, recv.data() + base + t * c, sizeof(float) * c);
    }
    base += T * c;
    col0 += c;
  }
}

void SplitLinear(ExecContext& ctx, const TpContext& tp, const float* x, int64_t T,
                 const MatrixWeight& w, int64_t full_rows, float* y, const char* what) {
  if (!tp.active()) {
    Linear(ctx, x, T, w, y);
    return;
  }
  std::vector<float> local(T * w.rows);  // [T, this rank's rows]
  Linear(ctx, x, T, w, local.data());
  GatherColumns(*tp.comm, local.data(), T, SplitCounts(full_rows, tp.slice.size), y, what);
}

const float* GatherEqualColumns(const TpContext& tp, const float* local, int64_t T, int cols,
                                std::vector<float>* buffer, const char* what) {
  if (!tp.active()) return local;
  buffer->resize(T * cols * tp.slice.size);
  GatherColumns(*tp.comm, local, T, std::vector<int>(tp.slice.size, cols), buffer->data(), what);
  return buffer->data();
}

StatusOr<std::vector<double>> TpWeightBytesPerRank(const Checkpoint& ck, int size,
                                                   bool expert_parallel) {
  const ModelConfig& cfg = ck.config();
  std::vector<double> out(size, 0.0);
  auto ends = [](const std::string& n, const char* suffix) {
    const size_t k = std::strlen(suffix);
    return n.size() >= k && n.compare(n.size() - k, k, suffix) == 0;
  };
  auto has = [](const std::string& n, const char* part) { return n.find(part) != std::string::npos; };
  for (const std::string& name : ck.TensorNames()) {
    const SafetensorsTensor* t = ck.FindTensor(name);
    const double bytes = static_cast<double>(t->entry->nbytes);
    // The layer geometry the tensor belongs to (MTP layers use mtp_layer).
    const LayerConfig* layer = nullptr;
    int layer_index = -1;
    if (std::sscanf(name.c_str(), "model.layers.%d.", &layer_index) == 1 && layer_index >= 0 &&
        layer_index < static_cast<int>(cfg.layers.size())) {
      layer = &cfg.layers[layer_index];
    } else if (name.rfind("model.mtp.layers.", 0) == 0) {
      layer = &cfg.mtp_layer;
    }
    int expert = -1;
    const size_t ex = name.find(".experts.");
    if (ex != std::string::npos) expert = std::atoi(name.c_str() + ex + 9);
    for (int r = 0; r < size; ++r) {
      double share = 1.0;  // embeddings, norms, router: whole on every rank
      auto rows_share = [&](int64_t n) {
        return static_cast<double>(EvenSplit(n, r, size).count) / static_cast<double>(n);
      };
      if (expert >= 0) {
        share = expert_parallel
                    ? (expert >= EvenSplit(cfg.n_routed_experts, r, size).begin &&
                               expert < EvenSplit(cfg.n_routed_experts, r, size).begin +
                                            EvenSplit(cfg.n_routed_experts, r, size).count
                           ? 1.0
                           : 0.0)
                    : rows_share(has(name, "down_proj") ? cfg.hidden_size
                                                         : cfg.moe_intermediate_size);
      } else if (layer && (has(name, ".q_proj.") || has(name, ".k_proj.") ||
                           has(name, ".v_proj.") || has(name, ".qkv_proj.") ||
                           ends(name, "attention_sink_bias"))) {
        MIMO_ASSIGN_OR_RETURN(HeadSlice hs, SliceHeads(*layer, r, size));
        const double q = static_cast<double>(hs.num_q) / layer->num_attention_heads;
        const double kv = static_cast<double>(hs.num_kv) / layer->num_key_value_heads;
        if (has(name, ".qkv_proj.")) {
          const double qr = double{1} * layer->num_attention_heads * layer->head_dim;
          const double kr = double{1} * layer->num_key_value_heads * layer->head_dim;
          const double vr = double{1} * layer->num_key_value_heads * layer->v_head_dim;
          share = (q * qr + kv * (kr + vr)) / (qr + kr + vr);
        } else {
          share = has(name, ".q_proj.") || ends(name, "attention_sink_bias") ? q : kv;
        }
      } else if (has(name, ".o_proj.") || has(name, ".down_proj.") || has(name, "eh_proj.")) {
        share = rows_share(cfg.hidden_size);
      } else if (has(name, ".gate_proj.") || has(name, ".up_proj.")) {
        share = rows_share(cfg.intermediate_size);
      } else if (name.rfind("lm_head.", 0) == 0) {
        share = rows_share(cfg.vocab_size);
      }
      out[r] += share * bytes;
    }
  }
  return out;
}

StatusOr<std::vector<LayerConfig>> TpKvLayerConfigs(const ModelConfig& cfg, int num_mtp, int rank,
                                                    int size) {
  std::vector<LayerConfig> out = cfg.layers;
  for (int i = 0; i < num_mtp; ++i) out.push_back(cfg.mtp_layer);  // as inspect plans them
  for (LayerConfig& l : out) {
    MIMO_ASSIGN_OR_RETURN(HeadSlice hs, SliceHeads(l, rank, size));
    l = LocalLayerConfig(l, hs);
  }
  return out;
}

}  // namespace mimo
