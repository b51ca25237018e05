// Slicing and the step message of tensor/expert parallelism (see tensor_parallel.h).
#include "model/tensor_parallel.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/check.h"
#include "kernels/kernels.h"

namespace mimo {

std::vector<int> SplitCounts(int64_t n, int size, int64_t scale) {
  std::vector<int> out(size);
  for (int r = 0; r < size; ++r) out[r] = static_cast<int>(EvenSplit(n, r, size).count * scale);
  return out;
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
  // FP8 and row-major int8 carry fp32 scales, MXFP4 E8M0 exponents.
  const bool fp8 = w.dtype == DType::kF8E4M3 || w.dtype == DType::kInt8,
             mxfp4 = w.dtype == DType::kMxfp4;
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
  for (const std::string& name : ck.TensorNames()) {
    const double bytes = static_cast<double>(ck.FindTensor(name)->entry->nbytes);
    const TensorId id = ClassifyTensor(name, cfg);
    for (int r = 0; r < size; ++r) {
      MIMO_ASSIGN_OR_RETURN(TensorShard s, ShardOf(id, cfg, TpSlice{r, size, expert_parallel}));
      out[r] += s.Fraction() * bytes;
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
