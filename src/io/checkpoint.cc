// Checkpoint binding: tensor lookup with expected-vs-actual errors, FP8 linear weights on the
// uniform grid, and q/k/v in every layout of spec section 4 (separate uniform, the per-TP-section
// Flash K/V grid, fused qkv_proj). The FP8 grid is decided from the scale tensor shapes alone.
#include "io/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/log.h"

namespace mimo {
namespace {

std::string Describe(const SafetensorsEntry& e) {
  return std::string(DTypeName(e.dtype)) + " " + ShapeToString(e.shape);
}

std::string DTypeList(std::initializer_list<DType> allowed) {
  std::string s;
  for (DType d : allowed) s += (s.empty() ? "" : "/") + std::string(DTypeName(d));
  return s.empty() ? "any" : s;
}

bool ShapeMatches(const Shape& actual, const Shape& expected) {
  if (actual.size() != expected.size()) return false;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (expected[i] != -1 && expected[i] != actual[i]) return false;
  }
  return true;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Whatever a MatrixWeight needs kept alive beyond the mmap: re-laid-out rows and/or scales.
struct OwnedBuffers {
  std::vector<uint8_t> data;
  std::vector<float> scale;
};

// A scale tensor as fp32 rows: points into the mapping when it is aligned F32, else a copy.
struct ScaleData {
  const float* ptr = nullptr;  // [rows, cols]
  int64_t rows = 0, cols = 0;
  std::vector<float> copy;  // filled when ptr could not point into the mapping
};

ScaleData ReadScale(const SafetensorsTensor& t) {
  ScaleData s;
  s.rows = t.entry->shape[0];
  s.cols = t.entry->shape[1];
  const int64_t n = s.rows * s.cols;
  if (t.entry->dtype == DType::kF32 && reinterpret_cast<uintptr_t>(t.data) % alignof(float) == 0) {
    s.ptr = static_cast<const float*>(t.data);
    return s;
  }
  s.copy.resize(n);
  if (t.entry->dtype == DType::kF32) {
    std::memcpy(s.copy.data(), t.data, n * sizeof(float));
  } else {  // BF16 (the only other dtype CheckTensor lets through for scales)
    const auto* src = static_cast<const uint8_t*>(t.data);
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      s.copy[i] = BF16ToF32(h);
    }
  }
  s.ptr = s.copy.data();
  return s;
}

// Points `w` at `scale`, taking ownership of a copy when there is one.
void AttachScale(ScaleData scale, MatrixWeight* w, std::shared_ptr<OwnedBuffers>* owned) {
  w->num_scale_rows = scale.rows;
  w->scale_cols = scale.cols;
  if (scale.copy.empty()) {
    w->scale_inv = scale.ptr;
    return;
  }
  if (!*owned) *owned = std::make_shared<OwnedBuffers>();
  (*owned)->scale = std::move(scale.copy);
  w->scale_inv = (*owned)->scale.data();
}

const char* kPartName[3] = {"q_proj", "k_proj", "v_proj"};

}  // namespace

bool IsLanguageModelTensor(const std::string& name) {
  for (const char* p :
       {"model.layers.", "model.embed_tokens.", "model.norm.", "lm_head.", "model.mtp."}) {
    if (name.rfind(p, 0) == 0) return true;
  }
  return false;
}

struct Checkpoint::QkvPlan {
  std::string prefix;
  bool fused = false;
  bool fp8 = false;
  Fp8Layout layout = Fp8Layout::kUniform;
  QkvSections g;  // tp sections of the layer's heads
  int64_t hidden = 0;
  const SafetensorsTensor* w[3] = {nullptr, nullptr, nullptr};  // q, k, v (w[0] alone if fused)
  const SafetensorsTensor* s[3] = {nullptr, nullptr, nullptr};  // their weight_scale_inv
};

StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  std::unique_ptr<Checkpoint> ck(new Checkpoint());
  ck->dir_ = dir;
  auto config = LoadModelConfig((std::filesystem::path(dir) / "config.json").string());
  if (!config.ok()) return config.status();
  ck->config_ = std::move(config).value();
  auto set = SafetensorsSet::OpenDir(dir);
  if (!set.ok()) return set.status();
  ck->set_ = std::move(set).value();

  std::set<int> mtp_layers;
  for (const std::string& name : ck->set_->Names()) {
    if (!IsLanguageModelTensor(name)) {
      ck->skipped_.push_back(name);
      continue;
    }
    static const std::string kMtp = "model.mtp.layers.";
    if (name.rfind(kMtp, 0) == 0) {
      size_t end = name.find('.', kMtp.size());
      const std::string idx = name.substr(kMtp.size(), end - kMtp.size());
      if (!idx.empty() && idx.size() < 6 &&
          idx.find_first_not_of("0123456789") == std::string::npos) {
        mtp_layers.insert(std::stoi(idx));
      }
    }
  }
  if (!ck->skipped_.empty()) {
    std::string groups;
    for (const SkippedGroup& g : ck->SkippedGroups()) {
      groups += (groups.empty() ? "" : ", ") + g.prefix + "* " + std::to_string(g.tensors);
    }
    MIMO_LOG_INFO(
        "%s: skipping %zu tensors outside the language model (vision/audio towers: %s); only "
        "text is run",
        dir.c_str(), ck->skipped_.size(), groups.c_str());
  }
  // MTP layers count only when they are numbered 0..N-1 without gaps.
  int found = 0;
  while (mtp_layers.count(found)) ++found;
  ck->num_mtp_layers_found_ = found;
  int& nextn = ck->config_.num_nextn_predict_layers;
  if (nextn == 0 && found > 0) {
    nextn = found;
    ck->config_.parse_notes.push_back("num_nextn_predict_layers absent: " + std::to_string(found) +
                                      " MTP layers found in the checkpoint");
  } else if (nextn > found) {
    MIMO_LOG_WARN(
        "%s: config says num_nextn_predict_layers=%d but the checkpoint has %d MTP "
        "layers; using %d",
        dir.c_str(), nextn, found, found);
    nextn = found;
  }
  return ck;
}

const SafetensorsTensor* Checkpoint::FindTensor(const std::string& name) const {
  if (!IsLanguageModelTensor(name)) return nullptr;
  return set_->Find(name);
}

bool Checkpoint::Has(const std::string& name) const { return FindTensor(name) != nullptr; }

Status Checkpoint::CheckTensor(const std::string& name, const Shape& expected,
                               std::initializer_list<DType> allowed,
                               const SafetensorsTensor** out) const {
  const SafetensorsTensor* t = FindTensor(name);
  if (!t) {
    return NotFound("tensor '%s' not found in checkpoint '%s' (expected %s %s)", name.c_str(),
                    dir_.c_str(), DTypeList(allowed).c_str(), ShapeToString(expected).c_str());
  }
  const bool dtype_ok = allowed.size() == 0 ||
                        std::find(allowed.begin(), allowed.end(), t->entry->dtype) != allowed.end();
  if (!dtype_ok || !ShapeMatches(t->entry->shape, expected)) {
    return InvalidArgument("tensor '%s' in '%s': expected %s %s, got %s", name.c_str(),
                           t->file->path().c_str(), DTypeList(allowed).c_str(),
                           ShapeToString(expected).c_str(), Describe(*t->entry).c_str());
  }
  *out = t;
  return Status::Ok();
}

StatusOr<TensorView> Checkpoint::Get(const std::string& name, const Shape& expected,
                                     std::initializer_list<DType> allowed) const {
  const SafetensorsTensor* t = nullptr;
  MIMO_RETURN_IF_ERROR(CheckTensor(name, expected, allowed, &t));
  return TensorView{const_cast<void*>(t->data), t->entry->dtype, t->entry->shape};
}

int64_t Checkpoint::block_rows() const {
  return config_.weight_block_size.size() == 2 ? config_.weight_block_size[0] : 128;
}
int64_t Checkpoint::block_cols() const {
  return config_.weight_block_size.size() == 2 ? config_.weight_block_size[1] : 128;
}

StatusOr<MatrixWeight> Checkpoint::GetLinear(const std::string& prefix, int64_t rows,
                                             int64_t cols) const {
  const SafetensorsTensor* raw = FindTensor(prefix + ".weight");
  if (raw && raw->entry->dtype == DType::kU8) return GetMxfp4Linear(prefix, rows, cols);
  const SafetensorsTensor* t = nullptr;
  MIMO_RETURN_IF_ERROR(CheckTensor(prefix + ".weight", {rows, cols},
                                   {DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3}, &t));
  MatrixWeight w;
  w.dtype = t->entry->dtype;
  w.rows = rows;
  w.cols = cols;
  w.data = t->data;
  if (w.dtype != DType::kF8E4M3) return w;
  const SafetensorsTensor* s = nullptr;
  MIMO_RETURN_IF_ERROR(CheckTensor(prefix + ".weight_scale_inv",
                                   {CeilDiv(rows, block_rows()), CeilDiv(cols, block_cols())},
                                   {DType::kF32, DType::kBF16}, &s));
  std::shared_ptr<OwnedBuffers> owned;
  AttachScale(ReadScale(*s), &w, &owned);
  w.block_cols = block_cols();
  w.block_rows = block_rows();  // uniform grid: no per-row map
  w.owned = owned;
  return w;
}

// Spec section 4, MXFP4: `prefix`.weight uint8 [rows, ceil(cols / 2)] of E2M1 pairs and
// `prefix`.weight_scale (not _scale_inv) uint8 [rows, ceil(cols / 32)] of E8M0 exponents, both
// left in the mapping.
StatusOr<MatrixWeight> Checkpoint::GetMxfp4Linear(const std::string& prefix, int64_t rows,
                                                  int64_t cols) const {
  const SafetensorsTensor* t = FindTensor(prefix + ".weight");
  if (!config_.mxfp4) {
    return InvalidArgument(
        "tensor '%s.weight' in '%s' is U8 %s (packed MXFP4?) but config.json "
        "quantization_config.store_dtype is not \"mxfp4\"",
        prefix.c_str(), t->file->path().c_str(), ShapeToString(t->entry->shape).c_str());
  }
  const int64_t block = config_.mxfp4_block_size;
  MIMO_RETURN_IF_ERROR(CheckTensor(prefix + ".weight", {rows, CeilDiv(cols, 2)}, {DType::kU8}, &t));
  const std::string scale = prefix + ".weight_scale";
  if (!Has(scale) && Has(prefix + ".weight_scale_inv")) {
    return InvalidArgument(
        "tensor '%s' not found in checkpoint '%s': MXFP4 weight '%s.weight' has a "
        "weight_scale_inv (FP8's fp32 scales) instead of E8M0 exponents U8 [%lld, %lld]",
        scale.c_str(), dir_.c_str(), prefix.c_str(), static_cast<long long>(rows),
        static_cast<long long>(CeilDiv(cols, block)));
  }
  const SafetensorsTensor* s = nullptr;
  MIMO_RETURN_IF_ERROR(CheckTensor(scale, {rows, CeilDiv(cols, block)}, {DType::kU8}, &s));
  MatrixWeight w;
  w.dtype = DType::kMxfp4;
  w.rows = rows;
  w.cols = cols;
  w.data = t->data;
  w.scale_e8m0 = static_cast<const uint8_t*>(s->data);
  w.num_scale_rows = rows;
  w.scale_cols = CeilDiv(cols, block);
  w.block_cols = block;
  w.block_rows = 1;  // one exponent row per weight row: no per-row map
  return w;
}

StatusOr<int> Checkpoint::Mxfp4WeightCount() const {
  static const std::string kScale = ".weight_scale", kWeight = ".weight";
  auto ends_with = [](const std::string& n, const std::string& suffix) {
    return n.size() > suffix.size() &&
           n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  int count = 0;
  for (const std::string& n : TensorNames()) {
    const SafetensorsTensor* t = FindTensor(n);
    if (ends_with(n, kScale)) {
      const std::string base = n.substr(0, n.size() - kScale.size());
      const SafetensorsTensor* w = FindTensor(base + kWeight);
      if (!w || w->entry->dtype != DType::kU8) {
        return InvalidArgument(
            "tensor '%s' in '%s': an E8M0 weight_scale belongs to a U8 (MXFP4) weight, but "
            "'%s.weight' is %s",
            n.c_str(), t->file->path().c_str(), base.c_str(),
            w ? Describe(*w->entry).c_str() : "absent");
      }
      continue;
    }
    if (!ends_with(n, kWeight) || t->entry->dtype != DType::kU8) continue;
    const std::string base = n.substr(0, n.size() - kWeight.size());
    const Shape& shape = t->entry->shape;
    if (shape.size() != 2) {
      return InvalidArgument("tensor '%s' in '%s': a U8 (MXFP4) weight must be 2-D, got %s",
                             n.c_str(), t->file->path().c_str(), Describe(*t->entry).c_str());
    }
    // Shape checks only (nothing is read): the same tensors GetMxfp4Linear binds, with
    // cols = 2 x the packed columns.
    auto bound = GetMxfp4Linear(base, shape[0], 2 * shape[1]);
    if (!bound.ok()) return bound.status();
    ++count;
  }
  return count;
}

// Decides fused vs separate and the FP8 grid from names and shapes; binds nothing.
StatusOr<Checkpoint::QkvPlan> Checkpoint::PlanQkv(const std::string& prefix,
                                                  const LayerConfig& layer, int tp) const {
  QkvPlan p;
  p.prefix = prefix;
  p.hidden = config_.hidden_size;
  const int64_t nh = layer.num_attention_heads, nkv = layer.num_key_value_heads;
  const int64_t dqk = layer.head_dim, dv = layer.v_head_dim;
  const bool sections_ok = tp > 0 && nh % tp == 0 && nkv % tp == 0;
  p.g.tp = sections_ok ? tp : 1;
  p.g.q_rows = nh * dqk / p.g.tp;
  p.g.k_rows = nkv * dqk / p.g.tp;
  p.g.v_rows = nkv * dv / p.g.tp;
  p.g.block_rows = block_rows();
  const int64_t bc = CeilDiv(p.hidden, block_cols());
  const std::initializer_list<DType> kWeightTypes = {DType::kF32, DType::kBF16, DType::kF16,
                                                     DType::kF8E4M3};

  const std::string fused = prefix + ".qkv_proj";
  if (Has(fused + ".weight")) {
    p.fused = true;
    if (!sections_ok) {
      return InvalidArgument(
          "tensor '%s.weight': heads (%lld q, %lld kv) are not divisible into "
          "%d TP sections",
          fused.c_str(), static_cast<long long>(nh), static_cast<long long>(nkv), tp);
    }
    MIMO_RETURN_IF_ERROR(CheckTensor(fused + ".weight", {p.g.tp * p.g.section_rows(), p.hidden},
                                     kWeightTypes, &p.w[0]));
    if (p.w[0]->entry->dtype != DType::kF8E4M3) return p;
    p.fp8 = true;
    MIMO_RETURN_IF_ERROR(
        CheckTensor(fused + ".weight_scale_inv", {-1, bc}, {DType::kF32, DType::kBF16}, &p.s[0]));
    const int64_t have = p.s[0]->entry->shape[0];
    const int64_t sectioned = p.g.tp * p.g.blocks_per_section();
    const int64_t flat = CeilDiv(p.g.tp * p.g.section_rows(), p.g.block_rows);
    if (have == sectioned) {
      p.layout = Fp8Layout::kFusedQkvTpSection;
    } else if (have == flat) {
      p.layout = Fp8Layout::kFusedQkvUniform;
    } else {
      return InvalidArgument(
          "tensor '%s.weight_scale_inv' in '%s': shape %s matches no FP8 layout; tried "
          "fused-qkv-tp-section (%lld sections x %lld = %lld rows) and fused-qkv-uniform (%lld "
          "rows)",
          fused.c_str(), p.s[0]->file->path().c_str(), ShapeToString(p.s[0]->entry->shape).c_str(),
          static_cast<long long>(p.g.tp), static_cast<long long>(p.g.blocks_per_section()),
          static_cast<long long>(sectioned), static_cast<long long>(flat));
    }
    return p;
  }

  for (int i = 0; i < 3; ++i) {
    const QkvPart part = static_cast<QkvPart>(i);
    MIMO_RETURN_IF_ERROR(CheckTensor(prefix + "." + kPartName[i] + ".weight",
                                     {p.g.tp * p.g.rows(part), p.hidden}, kWeightTypes, &p.w[i]));
  }
  p.fp8 = p.w[0]->entry->dtype == DType::kF8E4M3 && p.w[1]->entry->dtype == DType::kF8E4M3 &&
          p.w[2]->entry->dtype == DType::kF8E4M3;
  if (!p.fp8) return p;  // each tensor binds on its own (uniform grid if it is FP8)
  int64_t have[3], uniform[3], section[3];
  bool is_uniform = true, is_section = sections_ok;
  for (int i = 0; i < 3; ++i) {
    const QkvPart part = static_cast<QkvPart>(i);
    MIMO_RETURN_IF_ERROR(CheckTensor(prefix + "." + kPartName[i] + ".weight_scale_inv", {-1, bc},
                                     {DType::kF32, DType::kBF16}, &p.s[i]));
    have[i] = p.s[i]->entry->shape[0];
    uniform[i] = CeilDiv(p.g.tp * p.g.rows(part), p.g.block_rows);
    section[i] = SectionScaleRowCount(p.g, part);
    is_uniform = is_uniform && have[i] == uniform[i];
    is_section = is_section && have[i] == section[i];
  }
  if (is_uniform) {
    p.layout = Fp8Layout::kUniform;
    if (is_section && (uniform[0] != section[0] || uniform[1] != section[1])) {
      MIMO_LOG_WARN(
          "%s: FP8 scale shapes fit both the uniform and the TP-section grid; using "
          "uniform",
          prefix.c_str());
    }
  } else if (is_section) {
    p.layout = Fp8Layout::kKvTpSection;
  } else {
    return InvalidArgument(
        "attention '%s' in '%s': FP8 scale rows q/k/v = %lld/%lld/%lld (k_proj.weight_scale_inv "
        "shape %s) match no layout; tried uniform (%lld/%lld/%lld) and kv-tp-section with TP=%d "
        "(%lld/%lld/%lld)",
        prefix.c_str(), p.s[1]->file->path().c_str(), static_cast<long long>(have[0]),
        static_cast<long long>(have[1]), static_cast<long long>(have[2]),
        ShapeToString(p.s[1]->entry->shape).c_str(), static_cast<long long>(uniform[0]),
        static_cast<long long>(uniform[1]), static_cast<long long>(uniform[2]), tp,
        static_cast<long long>(section[0]), static_cast<long long>(section[1]),
        static_cast<long long>(section[2]));
  }
  return p;
}

StatusOr<QkvWeights> Checkpoint::GetQkv(const std::string& attn_prefix, const LayerConfig& layer,
                                        int num_key_value_heads_for_tp) const {
  auto plan = PlanQkv(attn_prefix, layer, num_key_value_heads_for_tp);
  if (!plan.ok()) return plan.status();
  const QkvPlan& p = *plan;
  if (p.fused) return BindFusedQkv(p);
  if (p.fp8 && p.layout == Fp8Layout::kKvTpSection) return BindSectionQkv(p);
  QkvWeights out;
  out.fp8 = p.fp8;
  out.layout = p.layout;
  MatrixWeight* dst[3] = {&out.q, &out.k, &out.v};
  for (int i = 0; i < 3; ++i) {
    auto w = GetLinear(attn_prefix + "." + kPartName[i], p.g.tp * p.g.rows(QkvPart(i)), p.hidden);
    if (!w.ok()) return w.status();
    *dst[i] = std::move(w).value();
  }
  return out;
}

// Fused qkv_proj: copies each part's rows out of the TP sections into its own buffer; the
// scales stay in the mapping and each row indexes its section's block.
StatusOr<QkvWeights> Checkpoint::BindFusedQkv(const QkvPlan& p) const {
  QkvWeights out;
  out.fused = true;
  out.fp8 = p.fp8;
  out.layout = p.layout;
  const DType dtype = p.w[0]->entry->dtype;
  const size_t row_bytes = static_cast<size_t>(p.hidden) * DTypeSize(dtype);
  const auto* src = static_cast<const uint8_t*>(p.w[0]->data);
  std::shared_ptr<ScaleData> scale;
  if (p.fp8) scale = std::make_shared<ScaleData>(ReadScale(*p.s[0]));
  MatrixWeight* dst[3] = {&out.q, &out.k, &out.v};
  for (int i = 0; i < 3; ++i) {
    const QkvPart part = static_cast<QkvPart>(i);
    const int64_t rows = p.g.tp * p.g.rows(part);
    auto owned = std::make_shared<OwnedBuffers>();
    owned->data.resize(rows * row_bytes);
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(owned->data.data() + r * row_bytes, src + FusedRowOf(p.g, part, r) * row_bytes,
                  row_bytes);
    }
    MatrixWeight& w = *dst[i];
    w.dtype = dtype;
    w.rows = rows;
    w.cols = p.hidden;
    w.data = owned->data.data();
    if (p.fp8) {
      w.num_scale_rows = scale->rows;
      w.scale_cols = scale->cols;
      if (scale->copy.empty()) {
        w.scale_inv = scale->ptr;
      } else {
        owned->scale = scale->copy;
        w.scale_inv = owned->scale.data();
      }
      w.block_cols = block_cols();
      w.scale_row = p.layout == Fp8Layout::kFusedQkvTpSection ? FusedSectionScaleRows(p.g, part)
                                                              : FusedUniformScaleRows(p.g, part);
    }
    w.owned = owned;
  }
  return out;
}

// Separate FP8 q/k/v on the per-TP-section grid. Weights stay in the mapping; a part whose rows
// use scale rows stored in another part's tensor gets an owned scale buffer [own; others].
StatusOr<QkvWeights> Checkpoint::BindSectionQkv(const QkvPlan& p) const {
  QkvWeights out;
  out.fp8 = true;
  out.layout = Fp8Layout::kKvTpSection;
  ScaleData scales[3];
  for (int i = 0; i < 3; ++i) scales[i] = ReadScale(*p.s[i]);
  MatrixWeight* dst[3] = {&out.q, &out.k, &out.v};
  for (int i = 0; i < 3; ++i) {
    const QkvPart part = static_cast<QkvPart>(i);
    const std::vector<ScaleRowRef> refs = SectionScaleRows(p.g, part);
    MatrixWeight& w = *dst[i];
    w.dtype = DType::kF8E4M3;
    w.rows = static_cast<int64_t>(refs.size());
    w.cols = p.hidden;
    w.data = p.w[i]->data;
    w.block_cols = block_cols();
    w.scale_cols = scales[i].cols;
    w.scale_row.resize(refs.size());
    bool foreign = false;
    for (const ScaleRowRef& ref : refs) foreign = foreign || ref.part != part;
    if (!foreign) {
      for (size_t r = 0; r < refs.size(); ++r) w.scale_row[r] = refs[r].row;
      std::shared_ptr<OwnedBuffers> owned;
      AttachScale(scales[i], &w, &owned);  // by value: a converted copy moves into `owned`
      w.owned = owned;
      continue;
    }
    // Concatenate [own part; the other parts in q, k, v order] and offset each reference.
    auto owned = std::make_shared<OwnedBuffers>();
    int64_t offset[3] = {0, 0, 0};
    int order[3] = {i, i == 0 ? 1 : 0, i == 2 ? 1 : 2};
    for (int j : order) {
      offset[j] = static_cast<int64_t>(owned->scale.size()) / scales[j].cols;
      owned->scale.insert(owned->scale.end(), scales[j].ptr,
                          scales[j].ptr + scales[j].rows * scales[j].cols);
    }
    for (size_t r = 0; r < refs.size(); ++r) {
      w.scale_row[r] = static_cast<int32_t>(offset[static_cast<int>(refs[r].part)] + refs[r].row);
    }
    w.scale_inv = owned->scale.data();
    w.num_scale_rows = static_cast<int64_t>(owned->scale.size()) / w.scale_cols;
    w.owned = owned;
  }
  return out;
}

uint64_t Checkpoint::TotalFileBytes() const {
  uint64_t total = 0;
  for (const auto& f : set_->files()) total += f->size();
  return total;
}

void Checkpoint::ReadThrough(
    ThreadPool* pool, const std::function<void(uint64_t done, uint64_t total)>& progress) const {
  constexpr uint64_t kChunk = uint64_t{32} << 20;  // bytes per work item
  constexpr uint64_t kPage = 4096;
  const uint64_t total = TotalFileBytes();
  const int threads = pool ? pool->num_threads() : 1;
  uint64_t done = 0;
  std::vector<uint64_t> sums(threads, 0);
  for (const auto& f : set_->files()) {
    const uint8_t* base = f->base();
    const uint64_t size = f->size();
    uint8_t* copy = f->BeginAnonymousCopy();  // nullptr: touch the mapped pages instead
    // Rounds of one chunk per thread, so progress is reported between rounds.
    for (uint64_t off = 0; off < size; off += kChunk * threads) {
      const int64_t n = static_cast<int64_t>(
          std::min<uint64_t>(threads, (size - off + kChunk - 1) / kChunk));
      auto touch = [&](int64_t b, int64_t e, int t) {
        for (int64_t i = b; i < e; ++i) {
          const uint64_t lo = off + i * kChunk, hi = std::min(size, lo + kChunk);
          if (copy != nullptr) {
            std::memcpy(copy + lo, base + lo, hi - lo);
            continue;
          }
          uint64_t s = 0;
          for (uint64_t p = lo; p < hi; p += kPage) s += base[p];
          sums[t] += s;
        }
      };
      if (pool) {
        pool->ParallelFor(n, touch);
      } else {
        touch(0, n, 0);
      }
      done = std::min(total, done + std::min<uint64_t>(size - off, kChunk * threads));
      if (progress) progress(done, total);
    }
    f->EndAnonymousCopy(copy);  // on failure the file mapping, now read through, stays
  }
  // Keep the reads observable so they are not optimised away.
  volatile uint64_t sink = 0;
  for (uint64_t s : sums) sink = sink + s;
}

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> out;
  for (const std::string& n : set_->Names()) {
    if (IsLanguageModelTensor(n)) out.push_back(n);
  }
  return out;
}

std::vector<Checkpoint::SkippedGroup> Checkpoint::SkippedGroups() const {
  std::map<std::string, SkippedGroup> groups;
  for (const std::string& n : skipped_) {
    // "visual.blocks.0.attn.qkv.weight" -> "visual."; "model.visual.x" -> "model.visual.".
    size_t end = n.find('.');
    if (end != std::string::npos && n.compare(0, end, "model") == 0) end = n.find('.', end + 1);
    const std::string prefix = end == std::string::npos ? n : n.substr(0, end + 1);
    SkippedGroup& g = groups[prefix];
    g.prefix = prefix;
    g.tensors++;
    if (const SafetensorsTensor* t = set_->Find(n)) g.bytes += t->entry->nbytes;
  }
  std::vector<SkippedGroup> out;
  for (auto& [prefix, g] : groups) out.push_back(g);
  return out;
}

ModelVariant Checkpoint::Variant() const {
  return RecogniseVariant(config_, Has("model.layers.0.self_attn.qkv_proj.weight"));
}

std::map<DType, uint64_t> Checkpoint::BytesByDType() const {
  std::map<DType, uint64_t> out;
  for (const auto& f : set_->files()) {
    for (const auto& e : f->entries()) out[e.dtype] += e.nbytes;
  }
  return out;
}

StatusOr<std::map<Fp8Layout, int>> Checkpoint::Fp8LayoutCounts() const {
  std::map<Fp8Layout, int> counts;
  std::set<std::string> attention_scales;  // scale tensors accounted for by an attention plan
  auto plan_one = [&](const std::string& prefix, const LayerConfig& layer) -> Status {
    if (!Has(prefix + ".qkv_proj.weight") && !Has(prefix + ".q_proj.weight")) return Status::Ok();
    auto plan = PlanQkv(prefix, layer, config_.num_key_value_heads);
    if (!plan.ok()) return plan.status();
    if (!plan->fp8) return Status::Ok();
    counts[plan->layout]++;
    for (const SafetensorsTensor* s : plan->s) {
      if (s) attention_scales.insert(s->entry->name);
    }
    return Status::Ok();
  };
  for (int l = 0; l < config_.num_hidden_layers; ++l) {
    MIMO_RETURN_IF_ERROR(
        plan_one("model.layers." + std::to_string(l) + ".self_attn", config_.layers[l]));
  }
  for (int l = 0; l < num_mtp_layers_found_; ++l) {
    MIMO_RETURN_IF_ERROR(
        plan_one("model.mtp.layers." + std::to_string(l) + ".self_attn", config_.mtp_layer));
  }
  static const std::string kSuffix = ".weight_scale_inv";
  for (const std::string& n : TensorNames()) {
    if (n.size() <= kSuffix.size() ||
        n.compare(n.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0 ||
        attention_scales.count(n)) {
      continue;
    }
    const SafetensorsTensor* w = FindTensor(n.substr(0, n.size() - kSuffix.size()) + ".weight");
    const SafetensorsTensor* s = FindTensor(n);
    if (!w || w->entry->dtype != DType::kF8E4M3 || w->entry->shape.size() != 2) continue;
    const Shape want = {CeilDiv(w->entry->shape[0], block_rows()),
                        CeilDiv(w->entry->shape[1], block_cols())};
    if (s->entry->shape != want) {
      return InvalidArgument("tensor '%s' in '%s': expected uniform scale grid %s, got %s",
                             n.c_str(), s->file->path().c_str(), ShapeToString(want).c_str(),
                             ShapeToString(s->entry->shape).c_str());
    }
    counts[Fp8Layout::kUniform]++;
  }
  return counts;
}

}  // namespace mimo
