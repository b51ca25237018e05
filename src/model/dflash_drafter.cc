// DFlashDrafter (see dflash_drafter.h). Each step cites shared/spec/dflash.md section 3.
#include "model/dflash_drafter.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/thread_pool.h"
#include "io/torch_pickle.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"

namespace mimo {
namespace {

// Element i of an F32 / BF16 / F16 array.
float ElementAsFloat(const void* data, DType dt, int64_t i) {
  if (dt == DType::kF32) return static_cast<const float*>(data)[i];
  const uint16_t h = static_cast<const uint16_t*>(data)[i];
  return dt == DType::kBF16 ? BF16ToF32(h) : F16ToF32(h);
}

// The drafter's tensors, with or without the `model.` prefix some checkpoints carry (Pro).
class DraftTensors {
 public:
  DraftTensors(const SafetensorsSet& set, std::string dir) : set_(set), dir_(std::move(dir)) {}

  StatusOr<const SafetensorsTensor*> Find(const std::string& name, const Shape& shape) const {
    const SafetensorsTensor* t = set_.Find(name);
    if (!t) t = set_.Find("model." + name);
    if (!t)
      return NotFound("%s: the DFlash drafter has no tensor '%s'", dir_.c_str(), name.c_str());
    if (t->entry->shape != shape) {
      return InvalidArgument("%s: DFlash tensor '%s' has shape %s, expected %s", dir_.c_str(),
                             t->entry->name.c_str(), ShapeToString(t->entry->shape).c_str(),
                             ShapeToString(shape).c_str());
    }
    const DType dt = t->entry->dtype;
    if (dt != DType::kBF16 && dt != DType::kF32 && dt != DType::kF16) {
      return InvalidArgument("%s: DFlash tensor '%s' is %s (expected BF16, F16 or F32)",
                             dir_.c_str(), t->entry->name.c_str(), DTypeName(dt));
    }
    return t;
  }
  StatusOr<TensorView> Vector(const std::string& name, int64_t n) const {
    MIMO_ASSIGN_OR_RETURN(const SafetensorsTensor* t, Find(name, {n}));
    return TensorView{const_cast<void*>(t->data), t->entry->dtype, {n}};
  }
  StatusOr<MatrixWeight> Matrix(const std::string& name, int64_t rows, int64_t cols) const {
    MIMO_ASSIGN_OR_RETURN(const SafetensorsTensor* t, Find(name, {rows, cols}));
    MatrixWeight w;
    w.dtype = t->entry->dtype;
    w.rows = rows;
    w.cols = cols;
    w.data = t->data;
    return w;
  }
  StatusOr<std::vector<float>> Floats(const std::string& name, int64_t n) const {
    MIMO_ASSIGN_OR_RETURN(TensorView v, Vector(name, n));
    std::vector<float> out(n);
    for (int64_t i = 0; i < n; ++i) out[i] = ElementAsFloat(v.data, v.dtype, i);
    return out;
  }

 private:
  const SafetensorsSet& set_;
  std::string dir_;
};

// NeoX RoPE of rows [n, heads, head_dim] at positions first, first + 1, ...
void Rope(float* x, int n, int heads, const DFlashConfig& c, float theta, int first) {
  std::vector<int32_t> pos(n);
  for (int i = 0; i < n; ++i) pos[i] = first + i;
  RopeNeox(x, n, heads, c.head_dim, c.rotary_dim, theta, pos.data());
}

}  // namespace

StatusOr<std::unique_ptr<DFlashDrafter>> DFlashDrafter::Load(const std::string& dir,
                                                             const MimoV2Model& target,
                                                             DFlashRope rope) {
  std::unique_ptr<DFlashDrafter> d(new DFlashDrafter());
  MIMO_ASSIGN_OR_RETURN(d->cfg_, LoadDFlashConfig(dir + "/config.json"));
  d->cfg_.rope = rope;
  const DFlashConfig& c = d->cfg_;
  {
    const Status st = CheckDFlashMatchesTarget(c, target.config());
    if (!st.ok()) return Status(st.code(), dir + ": " + st.message());
  }
  d->target_ = &target;
  MIMO_ASSIGN_OR_RETURN(d->files_, SafetensorsSet::OpenDir(dir));
  const DraftTensors t(*d->files_, dir);
  const int64_t H = c.hidden_size, I = c.intermediate_size, hd = c.head_dim;
  const int64_t q_rows = int64_t{c.num_attention_heads} * hd;
  const int64_t kv_rows = int64_t{c.num_key_value_heads} * hd;
  MIMO_ASSIGN_OR_RETURN(d->fc_, t.Matrix("fc.weight", H, d->feature_width()));
  MIMO_ASSIGN_OR_RETURN(d->hidden_norm_, t.Vector("hidden_norm.weight", H));
  MIMO_ASSIGN_OR_RETURN(d->norm_, t.Vector("norm.weight", H));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    DFlashLayerWeights w;
    MIMO_ASSIGN_OR_RETURN(w.input_layernorm, t.Vector(p + "input_layernorm.weight", H));
    MIMO_ASSIGN_OR_RETURN(w.post_attention_layernorm,
                          t.Vector(p + "post_attention_layernorm.weight", H));
    MIMO_ASSIGN_OR_RETURN(w.q_proj, t.Matrix(p + "self_attn.q_proj.weight", q_rows, H));
    MIMO_ASSIGN_OR_RETURN(w.k_proj, t.Matrix(p + "self_attn.k_proj.weight", kv_rows, H));
    MIMO_ASSIGN_OR_RETURN(w.v_proj, t.Matrix(p + "self_attn.v_proj.weight", kv_rows, H));
    MIMO_ASSIGN_OR_RETURN(w.o_proj, t.Matrix(p + "self_attn.o_proj.weight", H, q_rows));
    MIMO_ASSIGN_OR_RETURN(w.q_norm, t.Vector(p + "self_attn.q_norm.weight", hd));
    MIMO_ASSIGN_OR_RETURN(w.k_norm, t.Vector(p + "self_attn.k_norm.weight", hd));
    if (c.attention_sink_bias) {
      MIMO_ASSIGN_OR_RETURN(w.sinks,
                            t.Floats(p + "self_attn.attention_sink_bias", c.num_attention_heads));
    }
    MIMO_ASSIGN_OR_RETURN(w.gate_proj, t.Matrix(p + "mlp.gate_proj.weight", I, H));
    MIMO_ASSIGN_OR_RETURN(w.up_proj, t.Matrix(p + "mlp.up_proj.weight", I, H));
    MIMO_ASSIGN_OR_RETURN(w.down_proj, t.Matrix(p + "mlp.down_proj.weight", H, I));
    d->layers_.push_back(std::move(w));
  }
  // §2: the mask slots use mask_embedding.pt, never the vocabulary row (~zero in the releases).
  const std::string mask_path = dir + "/mask_embedding.pt";
  MIMO_ASSIGN_OR_RETURN(MaskEmbeddingFile mask, ReadMaskEmbeddingPt(mask_path));
  int64_t numel = 1;
  for (int64_t n : mask.embedding.shape) numel *= n;
  if (numel != H) {
    return InvalidArgument(
        "%s: the mask embedding has %lld values, the drafter's hidden size is %lld",
        mask_path.c_str(), static_cast<long long>(numel), static_cast<long long>(H));
  }
  if (mask.mask_token_id && *mask.mask_token_id != c.mask_token_id) {
    return InvalidArgument("%s: mask_token_id %lld, but the drafter's config says %d",
                           mask_path.c_str(), static_cast<long long>(*mask.mask_token_id),
                           c.mask_token_id);
  }
  d->mask_embedding_.resize(H);
  for (int64_t i = 0; i < H; ++i) {
    d->mask_embedding_[i] = ElementAsFloat(mask.embedding.data.data(), mask.embedding.dtype, i);
  }
  return d;
}

void DFlashDrafter::AppendContext(ExecContext& ctx, DFlashContext& dc, const float* features,
                                  int n) const {
  const DFlashConfig& c = cfg_;
  const int64_t H = c.hidden_size, kvw = int64_t{c.num_key_value_heads} * c.head_dim;
  if (dc.k.empty()) {
    dc.k.resize(layers_.size());
    dc.v.resize(layers_.size());
  }
  std::vector<float> h(n * H), k(n * kvw), v(n * kvw);  // [n, H], [n, kv_heads * head_dim] x 2
  Linear(ctx, features, n, fc_, h.data());              // fc
  RmsNorm(h.data(), n, H, hidden_norm_, c.rms_norm_eps, h.data());  // hidden_norm
  for (size_t l = 0; l < layers_.size(); ++l) {
    const DFlashLayerWeights& w = layers_[l];
    const LinearJob kv[2] = {{h.data(), n, &w.k_proj, k.data()},
                             {h.data(), n, &w.v_proj, v.data()}};
    LinearMany(ctx, kv, 2);
    RmsNorm(k.data(), int64_t{n} * c.num_key_value_heads, c.head_dim, w.k_norm, c.rms_norm_eps,
            k.data());                                                      // k_norm per head
    Rope(k.data(), n, c.num_key_value_heads, c, c.ContextTheta(), dc.end);  // at positions t
    for (float& x : v) x *= c.attention_value_scale;
    dc.k[l].insert(dc.k[l].end(), k.begin(), k.end());
    dc.v[l].insert(dc.v[l].end(), v.begin(), v.end());
  }
  dc.end += n;
  // A block's first query sits at `end`: it sees keys from end - (W - 1) on.
  if (c.sliding_window > 0 && dc.end - (c.sliding_window - 1) > dc.begin) {
    const int drop = dc.end - (c.sliding_window - 1) - dc.begin;
    for (size_t l = 0; l < layers_.size(); ++l) {
      dc.k[l].erase(dc.k[l].begin(), dc.k[l].begin() + drop * kvw);
      dc.v[l].erase(dc.v[l].begin(), dc.v[l].begin() + drop * kvw);
    }
    dc.begin += drop;
  }
}

void DFlashDrafter::Layer(ExecContext& ctx, int l, std::span<const Block> blocks,
                          const std::vector<int>& row_begin, int n, float* x) const {
  const DFlashConfig& c = cfg_;
  const DFlashLayerWeights& w = layers_[l];
  const int64_t H = c.hidden_size, hd = c.head_dim;
  const int nh = c.num_attention_heads, nkv = c.num_key_value_heads, group = nh / nkv;
  const int64_t qw = int64_t{nh} * hd, kvw = int64_t{nkv} * hd;
  std::vector<float> h(n * H), q(n * qw), k(n * kvw), v(n * kvw), o(n * qw), y(n * H);
  RmsNorm(x, n, H, w.input_layernorm, c.rms_norm_eps, h.data());  // input_layernorm
  const LinearJob qkv[3] = {{h.data(), n, &w.q_proj, q.data()},
                            {h.data(), n, &w.k_proj, k.data()},
                            {h.data(), n, &w.v_proj, v.data()}};
  LinearMany(ctx, qkv, 3);
  RmsNorm(q.data(), int64_t{n} * nh, hd, w.q_norm, c.rms_norm_eps, q.data());   // q_norm
  RmsNorm(k.data(), int64_t{n} * nkv, hd, w.k_norm, c.rms_norm_eps, k.data());  // k_norm
  for (size_t b = 0; b < blocks.size(); ++b) {  // each block at its own positions dc.end ..
    const int r0 = row_begin[b], rows = blocks[b].num_drafts + 1, first = blocks[b].context->end;
    Rope(q.data() + r0 * qw, rows, nh, c, c.BlockTheta(), first);
    Rope(k.data() + r0 * kvw, rows, nkv, c, c.BlockTheta(), first);
  }
  for (float& e : v) e *= c.attention_value_scale;
  // Attention of each block over [its context | its block], non-causal, symmetric window, sink
  // in the denominator: per block and kv group, the group's query heads of every block row are
  // one set of states of KernelTable::attend_keys (online softmax from the sink state m = sink,
  // l = 1). Block row i at position dc.end + i sees keys at positions >= dc.end + i - (W - 1);
  // the keys every row sees go in one call, each row's extra leading keys in calls of its own.
  const int W = c.sliding_window;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const KernelTable& kern = ActiveKernels();
  const int64_t jobs = static_cast<int64_t>(blocks.size()) * nkv;
  auto attend = [&](int64_t job) {
    const size_t b = static_cast<size_t>(job / nkv);
    const int g = static_cast<int>(job % nkv);
    const DFlashContext& dc = *blocks[b].context;
    const int r0 = row_begin[b], rows = blocks[b].num_drafts + 1;
    const int states = rows * group;
    std::vector<float> qg(int64_t{states} * hd), acc(int64_t{states} * hd, 0.0f);
    std::vector<float> m(states), den(states);
    for (int i = 0; i < rows; ++i) {
      for (int t = 0; t < group; ++t) {
        const int st = i * group + t, head = g * group + t;
        const float* qh = q.data() + ((r0 + i) * nh + head) * hd;
        std::copy(qh, qh + hd, qg.begin() + int64_t{st} * hd);
        m[st] = w.sinks.empty() ? -INFINITY : w.sinks[head];
        den[st] = w.sinks.empty() ? 0.0f : 1.0f;
      }
    }
    // Context key j sits at position dc.begin + j; the first a row may see is lo(i).
    auto lo = [&](int i) {
      return W > 0 ? std::clamp(dc.end + i - (W - 1) - dc.begin, 0, dc.end - dc.begin) : 0;
    };
    auto context_rows = [&](int j0, int j1) {
      AttendKeyRows kr;
      kr.k = dc.k[l].data() + (int64_t{j0} * nkv + g) * hd;
      kr.v = dc.v[l].data() + (int64_t{j0} * nkv + g) * hd;
      kr.k_stride = kr.v_stride = kvw;
      kr.n = j1 - j0;
      return kr;
    };
    const int common = lo(rows - 1);
    for (int i = 0; i < rows - 1; ++i) {
      if (lo(i) >= common) continue;
      kern.attend_keys(qg.data() + int64_t{i} * group * hd, group, context_rows(lo(i), common), hd,
                       hd, scale, &m[i * group], &den[i * group],
                       acc.data() + int64_t{i} * group * hd);
    }
    if (common < dc.end - dc.begin) {
      kern.attend_keys(qg.data(), states, context_rows(common, dc.end - dc.begin), hd, hd, scale,
                       m.data(), den.data(), acc.data());
    }
    AttendKeyRows br;  // the block's own rows, seen by every row (|i - j| < B <= W)
    br.k = k.data() + (int64_t{r0} * nkv + g) * hd;
    br.v = v.data() + (int64_t{r0} * nkv + g) * hd;
    br.k_stride = br.v_stride = kvw;
    br.n = rows;
    kern.attend_keys(qg.data(), states, br, hd, hd, scale, m.data(), den.data(), acc.data());
    for (int i = 0; i < rows; ++i) {
      for (int t = 0; t < group; ++t) {
        const int st = i * group + t;
        float* oh = o.data() + ((r0 + i) * nh + g * group + t) * hd;
        for (int64_t d = 0; d < hd; ++d) oh[d] = acc[int64_t{st} * hd + d] / den[st];
      }
    }
  };
  if (ctx.pool != nullptr && jobs > 1) {
    ctx.pool->ParallelFor(jobs, [&](int64_t a, int64_t e, int) {
      for (int64_t j = a; j < e; ++j) attend(j);
    });
  } else {
    for (int64_t j = 0; j < jobs; ++j) attend(j);
  }
  Linear(ctx, o.data(), n, w.o_proj, y.data());                            // o_proj
  for (int64_t i = 0; i < n * H; ++i) x[i] += y[i];                        // residual
  RmsNorm(x, n, H, w.post_attention_layernorm, c.rms_norm_eps, h.data());  // post norm
  const int64_t I = c.intermediate_size;
  std::vector<float> gate(n * I), up(n * I);
  const LinearJob gu[2] = {{h.data(), n, &w.gate_proj, gate.data()},
                           {h.data(), n, &w.up_proj, up.data()}};
  LinearMany(ctx, gu, 2);
  SiluMul(gate.data(), up.data(), gate.data(), n * I);  // SwiGLU
  Linear(ctx, gate.data(), n, w.down_proj, y.data());   // down_proj
  for (int64_t i = 0; i < n * H; ++i) x[i] += y[i];     // residual
}

void DFlashDrafter::Draft(ExecContext& ctx, const DFlashContext& dc, int32_t anchor, int num_drafts,
                          float* logits, const MatrixWeight* head) const {
  const Block b{&dc, anchor, num_drafts};
  DraftBatch(ctx, std::span<const Block>(&b, 1), logits, head);
}

void DFlashDrafter::DraftBatch(ExecContext& ctx, std::span<const Block> blocks, float* logits,
                               const MatrixWeight* head) const {
  const int64_t H = cfg_.hidden_size;
  std::vector<int> row_begin;
  int n = 0, drafts = 0;
  for (const Block& b : blocks) {
    MIMO_CHECK(b.num_drafts >= 1 && b.num_drafts < cfg_.block_size,
               "DFlash: %d drafts in a block of %d", b.num_drafts, cfg_.block_size);
    row_begin.push_back(n);
    n += 1 + b.num_drafts;  // the anchor and the mask slots: a block shortened at its end
    drafts += b.num_drafts;
  }
  std::vector<float> x(n * H);  // [n, H]: each block [embed(anchor), mask x num_drafts]
  for (size_t b = 0; b < blocks.size(); ++b) {
    float* xb = x.data() + row_begin[b] * H;
    Embedding(target_->weights().embed_tokens, &blocks[b].anchor, 1, xb);  // the target's
    for (int i = 1; i <= blocks[b].num_drafts; ++i)
      std::copy(mask_embedding_.begin(), mask_embedding_.end(), xb + i * H);
  }
  for (int l = 0; l < static_cast<int>(layers_.size()); ++l) {
    Layer(ctx, l, blocks, row_begin, n, x.data());
  }
  std::vector<float> d(drafts * H);  // [drafts, H]: every block's rows 1 .. num_drafts
  for (size_t b = 0, r = 0; b < blocks.size(); r += blocks[b].num_drafts, ++b) {
    const float* src = x.data() + (row_begin[b] + 1) * H;
    std::copy(src, src + blocks[b].num_drafts * H, d.begin() + r * H);
  }
  RmsNorm(d.data(), drafts, H, norm_, cfg_.rms_norm_eps, d.data());  // norm
  Linear(ctx, d.data(), drafts, head ? *head : target_->weights().lm_head,
         logits);  // the target's lm_head (or its draft-vocabulary rows)
}

}  // namespace mimo
