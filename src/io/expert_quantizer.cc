// MXFP4 rewrite of a checkpoint's routed experts (expert_quantizer.h; spec section 4).
#include "io/expert_quantizer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "io/safetensors.h"

namespace mimo {

using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

void Mxfp4ErrorStats::Add(const Mxfp4ErrorStats& o) {
  sum_sq_weight += o.sum_sq_weight;
  sum_sq_error += o.sum_sq_error;
  sum_sq_error_max_rule += o.sum_sq_error_max_rule;
  blocks += o.blocks;
  blocks_not_max += o.blocks_not_max;
}

// E2M1 magnitudes by code: {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
uint8_t RoundToE2M1Magnitude(double y) {
  // Midpoints between consecutive codes. At a tie the even code wins: the step from an even
  // code k to k + 1 needs y above the midpoint, from an odd code y at or above it.
  static constexpr double kMid[7] = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0};
  uint8_t code = 0;
  for (int k = 0; k < 7; ++k) {
    const bool up = (k % 2 == 0) ? y > kMid[k] : y >= kMid[k];
    if (!up) break;
    code = static_cast<uint8_t>(k + 1);
  }
  return code;
}

namespace {

constexpr double kE2M1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};

// Rounds x[0..n) at exponent byte e into codes[], returning the squared error (summed in order).
// |x| / scale is exact (a power of two, in double); the code is the number of midpoints passed,
// which is RoundToE2M1Magnitude's (its conditions are monotone in y), without its branches.
double RoundBlock(const float* x, int n, int e, uint8_t* codes) {
  const double scale = std::ldexp(1.0, e - 127), inv = std::ldexp(1.0, 127 - e);
  double err = 0;
  for (int i = 0; i < n; ++i) {
    const double v = x[i], y = std::fabs(v) * inv;
    const int mag =
        (y > 0.25) + (y >= 0.75) + (y > 1.25) + (y >= 1.75) + (y > 2.5) + (y >= 3.5) + (y > 5.0);
    const double d = std::fabs(v) - kE2M1[mag] * scale;
    err += d * d;
    codes[i] = static_cast<uint8_t>(mag | (v < 0 && mag != 0 ? 8 : 0));  // zero is +0
  }
  return err;
}

}  // namespace

uint8_t QuantizeMxfp4Block(const float* x, int n, Mxfp4ScaleRule rule, uint8_t* packed,
                           Mxfp4ErrorStats* stats) {
  float amax = 0;
  double sum_sq = 0;
  for (int i = 0; i < n; ++i) {
    amax = std::max(amax, std::fabs(x[i]));
    sum_sq += static_cast<double>(x[i]) * x[i];
  }
  uint8_t codes[kMxfp4Block] = {0};
  int best_e = 127;  // an all-zero block: any exponent, codes 0
  double best_err = 0, max_rule_err = 0;
  if (amax > 0) {
    int k = 0;
    std::frexp(amax, &k);  // amax = m 2^k, m in [0.5, 1): floor(log2 amax) = k - 1
    const int e_max_rule = std::clamp(k - 1 - 2 + 127, 0, 254);
    uint8_t trial[kMxfp4Block];
    best_e = e_max_rule;
    best_err = max_rule_err = RoundBlock(x, n, e_max_rule, codes);
    if (rule == Mxfp4ScaleRule::kMse) {
      for (int delta : {1, -1}) {
        const int e = e_max_rule + delta;
        if (e < 0 || e > 254) continue;
        const double err = RoundBlock(x, n, e, trial);
        if (err < best_err) {
          best_err = err;
          best_e = e;
          std::copy(trial, trial + n, codes);
        }
      }
    }
  }
  for (int i = 0; i < n; i += 2) {
    const uint8_t hi = i + 1 < n ? codes[i + 1] : 0;
    packed[i / 2] = static_cast<uint8_t>(codes[i] | (hi << 4));
  }
  if (stats) {
    stats->sum_sq_weight += sum_sq;
    stats->sum_sq_error += best_err;
    stats->sum_sq_error_max_rule += max_rule_err;
    stats->blocks++;
    if (amax > 0 && best_err < max_rule_err) stats->blocks_not_max++;
  }
  return static_cast<uint8_t>(best_e);
}

bool IsRoutedExpertWeight(const std::string& name) {
  static const std::regex kExpert(
      R"(model\.(mtp\.)?layers\.\d+\.mlp\.experts\.\d+\.(gate|up|down)_proj\.weight)");
  return std::regex_match(name, kExpert);
}

namespace {

constexpr char kScaleInv[] = "_scale_inv";

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Drops the pages of a read-only mapping range we are done with (they are file-backed: this only
// keeps the resident set to about one tensor on checkpoints larger than memory).
void ReleasePages(const void* p, size_t n) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + n) & ~(page - 1);
  if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

// One tensor of an output shard: copied from `src`, or an expert's packed codes / exponents.
struct OutTensor {
  std::string name;
  std::string dtype;  // safetensors name
  std::vector<int64_t> shape;
  uint64_t nbytes = 0;
  const SafetensorsTensor* src = nullptr;     // copied unchanged
  const SafetensorsTensor* expert = nullptr;  // .weight quantized: codes, then (next) exponents
  bool exponents = false;                     // this entry is the expert's .weight_scale
};

struct Shard {
  std::string file_name;
  std::vector<OutTensor> tensors;
};

// Row r of w as fp32: FP8 times its block scale (an fp32 product, as the engine's
// dequantization), the float dtypes widened.   out [w.cols]
void DequantizeRow(const MatrixWeight& w, int64_t r, float* out) {
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  const int64_t cols = w.cols;
  switch (w.dtype) {
    case DType::kF8E4M3: {
      const float* scale = w.scale_inv + w.ScaleRow(r) * w.scale_cols;
      const uint8_t* row = base + r * cols;
      for (int64_t cb = 0, j = 0; cb < cols; cb += w.block_cols, ++j) {
        const int64_t ce = std::min(cols, cb + w.block_cols);
        for (int64_t c = cb; c < ce; ++c) out[c] = F8E4M3ToF32(row[c]) * scale[j];
      }
      break;
    }
    case DType::kBF16:
    case DType::kF16:
      for (int64_t c = 0; c < cols; ++c) {
        uint16_t h;
        std::memcpy(&h, base + 2 * (r * cols + c), 2);
        out[c] = w.dtype == DType::kBF16 ? BF16ToF32(h) : F16ToF32(h);
      }
      break;
    default:
      std::memcpy(out, base + 4 * r * cols, 4 * cols);
  }
}

// Quantizes every row of w (not MXFP4) into codes [rows, ceil(cols / 2)] and exponents [rows,
// ceil(cols / 32)], rows split over the pool. Returns the first row holding a NaN or infinity, or
// -1.
int64_t QuantizeRows(const MatrixWeight& w, Mxfp4ScaleRule rule, ThreadPool* pool, uint8_t* codes,
                     uint8_t* exps, Mxfp4ErrorStats* stats) {
  const int64_t rows = w.rows, cols = w.cols;
  const int64_t row_bytes = (cols + 1) / 2, blocks = (cols + kMxfp4Block - 1) / kMxfp4Block;
  const int threads = pool ? pool->num_threads() : 1;
  std::vector<Mxfp4ErrorStats> st(threads);
  std::atomic<int64_t> bad_row{-1};
  auto body = [&](int64_t r0, int64_t r1, int t) {
    std::vector<float> row(cols);
    for (int64_t r = r0; r < r1; ++r) {
      DequantizeRow(w, r, row.data());
      for (float v : row) {
        if (!std::isfinite(v)) {
          int64_t none = -1;
          bad_row.compare_exchange_strong(none, r);
          return;
        }
      }
      for (int64_t b = 0; b < blocks; ++b) {
        const int n = static_cast<int>(std::min<int64_t>(kMxfp4Block, cols - b * kMxfp4Block));
        exps[r * blocks + b] =
            QuantizeMxfp4Block(row.data() + b * kMxfp4Block, n, rule,
                               codes + r * row_bytes + b * (kMxfp4Block / 2), &st[t]);
      }
    }
  };
  if (pool) {
    pool->ParallelFor(rows, body);
  } else {
    body(0, rows, 0);
  }
  if (stats)
    for (const auto& x : st) stats->Add(x);
  return bad_row.load();
}

StatusOr<ojson> ReadJsonFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return NotFound("cannot open '%s'", p.string().c_str());
  std::stringstream ss;
  ss << in.rdbuf();
  ojson j = ojson::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return DataLoss("'%s' is not a valid JSON object", p.string().c_str());
  return j;
}

Status WriteJsonFile(const fs::path& p, const ojson& j) {
  std::ofstream out(p, std::ios::binary);
  out << j.dump(2) << "\n";
  if (!out) return Internal("cannot write '%s'", p.string().c_str());
  return Status::Ok();
}

std::string ShapeText(const Shape& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

class Writer {
 public:
  explicit Writer(const QuantizeOptions& o) : o_(o) {}

  StatusOr<QuantizeReport> Run() {
    const fs::path in(o_.in_dir), out(o_.out_dir);
    std::error_code ec;
    if (!fs::is_directory(in, ec)) return NotFound("'%s' is not a directory", o_.in_dir.c_str());
    if (fs::exists(out, ec)) {
      if (fs::equivalent(in, out, ec))
        return InvalidArgument("--out '%s' is the input directory", o_.out_dir.c_str());
      if (!fs::is_directory(out, ec) || !fs::is_empty(out, ec))
        return InvalidArgument("--out '%s' exists and is not an empty directory",
                               o_.out_dir.c_str());
    }
    MIMO_ASSIGN_OR_RETURN(ojson config, ReadJsonFile(in / "config.json"));
    MIMO_RETURN_IF_ERROR(ReadBlockSize(config));
    MIMO_ASSIGN_OR_RETURN(set_, SafetensorsSet::OpenDir(o_.in_dir));
    MIMO_RETURN_IF_ERROR(Plan());
    fs::create_directories(out, ec);
    if (ec) return Internal("cannot create '%s': %s", o_.out_dir.c_str(), ec.message().c_str());
    Status st = WriteAll(in, out, config);
    if (!st.ok()) {
      fs::remove_all(out, ec);  // it was empty or absent: no half-written checkpoint is left
      return st;
    }
    return report_;
  }

 private:
  Status WriteAll(const fs::path& in, const fs::path& out, const ojson& config) {
    for (const Shard& s : shards_) MIMO_RETURN_IF_ERROR(WriteShard(s, out));
    MIMO_RETURN_IF_ERROR(WriteIndex(in, out));
    MIMO_RETURN_IF_ERROR(CopyOtherFiles(in, out));
    return WriteConfig(config, out);
  }

 private:
  Status ReadBlockSize(const ojson& config) {
    auto q = config.find("quantization_config");
    if (q == config.end() || !q->is_object()) return Status::Ok();
    quant_config_ = *q;
    auto b = q->find("weight_block_size");
    if (b != q->end()) {
      if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number_integer() ||
          !(*b)[1].is_number_integer() || (*b)[0].get<int64_t>() <= 0 ||
          (*b)[1].get<int64_t>() <= 0)
        return InvalidArgument(
            "config.json: 'quantization_config.weight_block_size' must be two positive integers");
      block_rows_ = (*b)[0].get<int64_t>();
      block_cols_ = (*b)[1].get<int64_t>();
    }
    return Status::Ok();
  }

  // Which output shard holds what: each file keeps its name and tensor order; an expert's
  // weight_scale_inv is dropped and its .weight becomes .weight + .weight_scale in place.
  Status Plan() {
    std::set<std::string> froms;  // the source formats seen
    for (const auto& file : set_->files()) {
      Shard shard;
      shard.file_name = fs::path(file->path()).filename().string();
      std::vector<const SafetensorsEntry*> entries;
      for (const auto& e : file->entries()) entries.push_back(&e);
      std::stable_sort(entries.begin(), entries.end(),
                       [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
                         return a->offset < b->offset;
                       });
      for (const SafetensorsEntry* e : entries) {
        const SafetensorsTensor* t = set_->Find(e->name);
        report_.bytes_in += e->nbytes;
        if (EndsWith(e->name, kScaleInv)) {
          const std::string weight = e->name.substr(0, e->name.size() - std::strlen(kScaleInv));
          const SafetensorsTensor* w = set_->Find(weight);
          if (IsRoutedExpertWeight(weight) && w && w->entry->dtype == DType::kF8E4M3) {
            continue;  // folded into the MXFP4 copy
          }
        }
        const bool expert = IsRoutedExpertWeight(e->name);
        if (!expert || e->dtype == DType::kU8) {
          report_.tensors_kept_mxfp4 += expert;
          OutTensor o;
          o.name = e->name;
          o.dtype = std::string(DTypeName(e->dtype));
          o.shape.assign(e->shape.begin(), e->shape.end());
          o.nbytes = e->nbytes;
          o.src = t;
          shard.tensors.push_back(o);
          report_.tensors_copied += !expert;
          continue;
        }
        MIMO_RETURN_IF_ERROR(CheckExpert(*t, &froms));
        const int64_t rows = e->shape[0], cols = e->shape[1];
        const std::string base = e->name.substr(0, e->name.size() - std::strlen(".weight"));
        OutTensor codes;
        codes.name = e->name;
        codes.dtype = "U8";
        codes.shape = {rows, cols / 2};
        codes.nbytes = static_cast<uint64_t>(rows) * (cols / 2);
        codes.expert = t;
        OutTensor exps = codes;
        exps.name = base + ".weight_scale";
        exps.shape = {rows, cols / kMxfp4Block};
        exps.nbytes = static_cast<uint64_t>(rows) * (cols / kMxfp4Block);
        exps.exponents = true;
        shard.tensors.push_back(codes);
        shard.tensors.push_back(exps);
        report_.tensors_converted++;
      }
      shards_.push_back(std::move(shard));
    }
    for (const std::string& from : froms) {
      report_.converted_from += (report_.converted_from.empty() ? "" : ", ") + from;
    }
    return Status::Ok();
  }

  Status CheckExpert(const SafetensorsTensor& t, std::set<std::string>* froms) {
    const SafetensorsEntry& e = *t.entry;
    if (e.shape.size() != 2)
      return InvalidArgument("tensor '%s' in '%s': an expert weight must be 2-D, got %s",
                             e.name.c_str(), t.file->path().c_str(), ShapeText(e.shape).c_str());
    if (e.shape[1] % kMxfp4Block != 0)
      return InvalidArgument(
          "tensor '%s' in '%s': %s has %lld columns, not a multiple of the MXFP4 block (32)",
          e.name.c_str(), t.file->path().c_str(), ShapeText(e.shape).c_str(),
          static_cast<long long>(e.shape[1]));
    switch (e.dtype) {
      case DType::kF8E4M3: {
        const std::string sname = e.name + kScaleInv;
        const SafetensorsTensor* s = set_->Find(sname);
        const Shape want = {(e.shape[0] + block_rows_ - 1) / block_rows_,
                            (e.shape[1] + block_cols_ - 1) / block_cols_};
        if (!s)
          return NotFound("tensor '%s' not found: FP8 expert weight '%s' needs its block scales",
                          sname.c_str(), e.name.c_str());
        if ((s->entry->dtype != DType::kF32 && s->entry->dtype != DType::kBF16) ||
            s->entry->shape != want)
          return InvalidArgument("tensor '%s' in '%s': expected F32|BF16 %s, got %s %s",
                                 sname.c_str(), s->file->path().c_str(), ShapeText(want).c_str(),
                                 std::string(DTypeName(s->entry->dtype)).c_str(),
                                 ShapeText(s->entry->shape).c_str());
        froms->insert("F8_E4M3 with [" + std::to_string(block_rows_) + ", " +
                      std::to_string(block_cols_) + "] block scales");
        return Status::Ok();
      }
      case DType::kBF16:
      case DType::kF16:
      case DType::kF32:
        froms->insert(std::string(DTypeName(e.dtype)));
        return Status::Ok();
      default:
        return InvalidArgument("tensor '%s' in '%s': expert weight dtype %s cannot be quantized",
                               e.name.c_str(), t.file->path().c_str(),
                               std::string(DTypeName(e.dtype)).c_str());
    }
  }

  Status WriteShard(const Shard& shard, const fs::path& out) {
    ojson header = ojson::object();
    header["__metadata__"] = {{"format", "pt"}};
    uint64_t off = 0;
    for (const OutTensor& t : shard.tensors) {
      header[t.name] = {
          {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.nbytes}}};
      off += t.nbytes;
    }
    std::string text = header.dump();
    while ((8 + text.size()) % 8) text += ' ';  // data area 8-byte aligned
    const fs::path final_path = out / shard.file_name;
    const fs::path tmp = out / (shard.file_name + ".partial");
    FILE* f = std::fopen(tmp.string().c_str(), "wb");
    if (!f) return Internal("cannot create '%s': %s", tmp.string().c_str(), std::strerror(errno));
    auto fail = [&](const std::string& what) {
      std::fclose(f);
      return Internal("writing '%s': %s", tmp.string().c_str(), what.c_str());
    };
    uint8_t len[8];
    for (int i = 0; i < 8; ++i)
      len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
    if (std::fwrite(len, 1, 8, f) != 8 ||
        std::fwrite(text.data(), 1, text.size(), f) != text.size())
      return fail(std::strerror(errno));
    std::vector<uint8_t> codes, exps;
    for (const OutTensor& t : shard.tensors) {
      if (t.src) {
        if (t.nbytes && std::fwrite(t.src->data, 1, t.nbytes, f) != t.nbytes)
          return fail(std::strerror(errno));
        ReleasePages(t.src->data, t.nbytes);
        Progress(t.nbytes);
        report_.bytes_out += t.nbytes;
        continue;
      }
      if (!t.exponents) {
        MIMO_RETURN_IF_ERROR(QuantizeTensor(*t.expert, &codes, &exps));
        if (std::fwrite(codes.data(), 1, codes.size(), f) != codes.size())
          return fail(std::strerror(errno));
      } else {
        if (std::fwrite(exps.data(), 1, exps.size(), f) != exps.size())
          return fail(std::strerror(errno));
        ReleasePages(t.expert->data, t.expert->entry->nbytes);
        uint64_t in_bytes = t.expert->entry->nbytes;
        if (const SafetensorsTensor* s = set_->Find(t.expert->entry->name + kScaleInv);
            s && t.expert->entry->dtype == DType::kF8E4M3)
          in_bytes += s->entry->nbytes;
        Progress(in_bytes);
      }
      report_.bytes_out += t.nbytes;
    }
    if (std::fclose(f) != 0)
      return Internal("closing '%s': %s", tmp.string().c_str(), std::strerror(errno));
    std::error_code ec;
    fs::rename(tmp, final_path, ec);
    if (ec) return Internal("cannot rename '%s': %s", tmp.string().c_str(), ec.message().c_str());
    return Status::Ok();
  }

  Status QuantizeTensor(const SafetensorsTensor& t, std::vector<uint8_t>* codes,
                        std::vector<uint8_t>* exps) {
    const int64_t rows = t.entry->shape[0], cols = t.entry->shape[1];
    MatrixWeight w;
    w.dtype = t.entry->dtype;
    w.rows = rows;
    w.cols = cols;
    w.data = t.data;
    std::vector<float> scale;  // the FP8 block scales as fp32 (BF16 ones widened)
    if (w.dtype == DType::kF8E4M3) {
      const SafetensorsTensor* s = set_->Find(t.entry->name + kScaleInv);
      const int64_t n = s->entry->shape[0] * s->entry->shape[1];
      scale.resize(n);
      for (int64_t i = 0; i < n; ++i) {
        if (s->entry->dtype == DType::kF32) {
          std::memcpy(&scale[i], static_cast<const uint8_t*>(s->data) + 4 * i, 4);
        } else {
          uint16_t h;
          std::memcpy(&h, static_cast<const uint8_t*>(s->data) + 2 * i, 2);
          scale[i] = BF16ToF32(h);
        }
      }
      w.scale_inv = scale.data();
      w.num_scale_rows = s->entry->shape[0];
      w.scale_cols = s->entry->shape[1];
      w.block_rows = block_rows_;
      w.block_cols = block_cols_;
    }
    codes->assign(static_cast<size_t>(rows * cols / 2), 0);
    exps->assign(static_cast<size_t>(rows * cols / kMxfp4Block), 0);
    const int64_t bad =
        QuantizeRows(w, o_.rule, o_.pool, codes->data(), exps->data(), &report_.error);
    if (bad >= 0)
      return InvalidArgument("tensor '%s' in '%s': row %lld holds a NaN or infinite value",
                             t.entry->name.c_str(), t.file->path().c_str(),
                             static_cast<long long>(bad));
    return Status::Ok();
  }

  Status WriteIndex(const fs::path& in, const fs::path& out) {
    const fs::path index = in / "model.safetensors.index.json";
    std::error_code ec;
    if (!fs::exists(index, ec)) return Status::Ok();
    MIMO_ASSIGN_OR_RETURN(ojson j, ReadJsonFile(index));
    ojson map = ojson::object();
    uint64_t total = 0;
    for (const Shard& s : shards_) {
      for (const OutTensor& t : s.tensors) {
        map[t.name] = s.file_name;
        total += t.nbytes;
      }
    }
    j["weight_map"] = map;
    if (!j.contains("metadata") || !j["metadata"].is_object()) j["metadata"] = ojson::object();
    j["metadata"]["total_size"] = total;
    return WriteJsonFile(out / "model.safetensors.index.json", j);
  }

  Status CopyOtherFiles(const fs::path& in, const fs::path& out) {
    std::error_code ec;
    for (const auto& de : fs::directory_iterator(in, ec)) {
      const std::string name = de.path().filename().string();
      if (name == "config.json" || name == "model.safetensors.index.json") continue;
      bool is_shard = false;
      for (const Shard& s : shards_) is_shard |= s.file_name == name;
      if (is_shard) continue;
      fs::copy(de.path(), out / name, fs::copy_options::recursive, ec);
      if (ec)
        return Internal("cannot copy '%s' to '%s': %s", de.path().string().c_str(),
                        out.string().c_str(), ec.message().c_str());
    }
    if (ec) return Internal("cannot list '%s': %s", in.string().c_str(), ec.message().c_str());
    return Status::Ok();
  }

  Status WriteConfig(ojson config, const fs::path& out) {
    ojson q = quant_config_.is_object() ? quant_config_ : ojson::object();
    if (!q.contains("quant_method")) {
      // A float checkpoint: V2.6's keys (FP8 for the rest, none of which is FP8 here: the loader
      // binds each tensor by its stored dtype).
      q["quant_method"] = "fp8";
      q["fmt"] = "e4m3";
      q["weight_block_size"] = {block_rows_, block_cols_};
    }
    q["store_dtype"] = "mxfp4";
    q["mxfp4_block_size"] = kMxfp4Block;
    config["quantization_config"] = q;
    const Mxfp4ErrorStats& e = report_.error;
    auto rel = [&](double sq) {
      return e.sum_sq_weight > 0 ? std::sqrt(sq / e.sum_sq_weight) : 0.0;
    };
    ojson note = {
        {"tool", "mimo quantize"},
        {"experts", "mxfp4"},
        {"converted_from",
         report_.converted_from.empty() ? "none (already MXFP4)" : report_.converted_from},
        {"scale_rule", o_.rule == Mxfp4ScaleRule::kMse ? "mse" : "max"},
        {"tensors_converted", report_.tensors_converted},
        {"relative_rms_error", rel(e.sum_sq_error)},
        {"relative_rms_error_max_rule", rel(e.sum_sq_error_max_rule)},
    };
    config["quantization"] = note;
    return WriteJsonFile(out / "config.json", config);
  }

  void Progress(uint64_t bytes) {
    done_ += bytes;
    if (o_.progress) o_.progress(done_, report_.bytes_in);
  }

  const QuantizeOptions& o_;
  std::unique_ptr<SafetensorsSet> set_;
  ojson quant_config_;
  int64_t block_rows_ = 128, block_cols_ = 128;
  std::vector<Shard> shards_;
  QuantizeReport report_;
  uint64_t done_ = 0;
};

// What FP8 and int8 quantization share: the output codes and fp32 block scales (owned by the
// weight they become), the error sums of each pool thread and the first row holding a NaN or
// infinity. Run calls body(i0, i1, thread) over [0, n) work items on the pool (inline without
// one); Finish turns a bad row into an error naming `what`, adds the sums to *stats (may be
// null) and assembles the weight.
template <class Code>
struct BlockQuantizer {
  struct Buffers {
    std::vector<Code> codes;
    std::vector<float> scales;
  };
  std::shared_ptr<Buffers> buf = std::make_shared<Buffers>();
  std::vector<Mxfp4ErrorStats> st;
  std::atomic<int64_t> bad_row{-1};
  ThreadPool* pool;

  BlockQuantizer(int64_t codes, int64_t scales, ThreadPool* p)
      : st(p ? p->num_threads() : 1), pool(p) {
    buf->codes.assign(static_cast<size_t>(codes), 0);
    buf->scales.assign(static_cast<size_t>(scales), 1.0f);
  }
  void MarkBad(int64_t row) {
    int64_t none = -1;
    bad_row.compare_exchange_strong(none, row);
  }
  void Run(int64_t n, const std::function<void(int64_t, int64_t, int)>& body) {
    if (pool) {
      pool->ParallelFor(n, body);
    } else {
      body(0, n, 0);
    }
  }
  StatusOr<MatrixWeight> Finish(const std::string& what, Mxfp4ErrorStats* stats, DType dtype,
                                int64_t rows, int64_t cols, int64_t num_scale_rows,
                                int64_t scale_cols, int64_t block_rows, int64_t block_cols) {
    if (bad_row.load() >= 0)
      return InvalidArgument("%s: row %lld holds a NaN or infinite value", what.c_str(),
                             static_cast<long long>(bad_row.load()));
    if (stats)
      for (const auto& x : st) stats->Add(x);
    MatrixWeight q;
    q.dtype = dtype;
    q.rows = rows;
    q.cols = cols;
    q.data = buf->codes.data();
    q.scale_inv = buf->scales.data();
    q.num_scale_rows = num_scale_rows;
    q.scale_cols = scale_cols;
    q.block_cols = block_cols;
    q.block_rows = block_rows;
    q.owned = buf;
    return q;
  }
};

}  // namespace

StatusOr<MatrixWeight> QuantizeWeightToMxfp4(const MatrixWeight& w, Mxfp4ScaleRule rule,
                                             ThreadPool* pool, const std::string& what,
                                             Mxfp4ErrorStats* stats) {
  if (w.dtype == DType::kMxfp4 || w.empty()) return w;
  if (w.dtype != DType::kF32 && w.dtype != DType::kBF16 && w.dtype != DType::kF16 &&
      w.dtype != DType::kF8E4M3)
    return InvalidArgument("%s: dtype %s cannot be quantized to MXFP4", what.c_str(),
                           std::string(DTypeName(w.dtype)).c_str());
  struct Buffers {
    std::vector<uint8_t> codes, exps;
  };
  auto buf = std::make_shared<Buffers>();
  const int64_t blocks = (w.cols + kMxfp4Block - 1) / kMxfp4Block;
  buf->codes.assign(static_cast<size_t>(w.rows * ((w.cols + 1) / 2)), 0);
  buf->exps.assign(static_cast<size_t>(w.rows * blocks), 0);
  const int64_t bad = QuantizeRows(w, rule, pool, buf->codes.data(), buf->exps.data(), stats);
  if (bad >= 0)
    return InvalidArgument("%s: row %lld holds a NaN or infinite value", what.c_str(),
                           static_cast<long long>(bad));
  MatrixWeight q;
  q.dtype = DType::kMxfp4;
  q.rows = w.rows;
  q.cols = w.cols;
  q.data = buf->codes.data();
  q.scale_e8m0 = buf->exps.data();
  q.num_scale_rows = w.rows;
  q.scale_cols = blocks;
  q.block_cols = kMxfp4Block;
  q.block_rows = 1;
  q.owned = buf;
  return q;
}

StatusOr<WeightFormat> ParseWeightFormat(const std::string& s) {
  if (s.empty()) return WeightFormat::kKeep;
  if (s == "fp8") return WeightFormat::kFp8;
  if (s == "int8") return WeightFormat::kInt8;
  if (s == "mxfp4") return WeightFormat::kMxfp4;
  return InvalidArgument("'%s' is not a weight format (fp8, int8 or mxfp4)", s.c_str());
}

std::string WeightFormats::Flags() const {
  std::string s;
  auto add = [&](const char* flag, WeightFormat f) {
    if (f == WeightFormat::kKeep) return;
    s += std::string(s.empty() ? "" : " ") + "--" + flag + " " + WeightFormatName(f);
  };
  add("experts", experts);
  add("dense", dense);
  add("lm-head", lm_head);
  return s;
}

StatusOr<WeightFormats> ParseWeightFormatFlags(
    const std::function<std::optional<std::string>(const char* flag)>& value_of) {
  WeightFormats f;
  for (auto [flag, format] : {std::pair<const char*, WeightFormat*>{"experts", &f.experts},
                              {"dense", &f.dense},
                              {"lm-head", &f.lm_head}}) {
    const std::optional<std::string> v = value_of(flag);
    if (!v) continue;
    auto parsed = ParseWeightFormat(*v);
    if (!parsed.ok() || *parsed == WeightFormat::kKeep) {
      return InvalidArgument("--%s '%s' is not supported (fp8, int8 or mxfp4)", flag, v->c_str());
    }
    *format = *parsed;
  }
  return f;
}

const char* WeightFormatName(WeightFormat f) {
  switch (f) {
    case WeightFormat::kFp8:
      return "fp8";
    case WeightFormat::kInt8:
      return "int8";
    case WeightFormat::kMxfp4:
      return "mxfp4";
    default:
      return "as stored";
  }
}

StatusOr<MatrixWeight> QuantizeWeightToFp8Block(const MatrixWeight& w, ThreadPool* pool,
                                                const std::string& what, Mxfp4ErrorStats* stats) {
  if (w.dtype == DType::kF8E4M3 || w.dtype == DType::kInt8 || w.dtype == DType::kMxfp4 ||
      w.empty())
    return w;
  if (w.dtype != DType::kF32 && w.dtype != DType::kBF16 && w.dtype != DType::kF16)
    return InvalidArgument("%s: dtype %s cannot be quantized to FP8", what.c_str(),
                           std::string(DTypeName(w.dtype)).c_str());
  constexpr int64_t B = kFp8QuantBlock;
  const int64_t rows = w.rows, cols = w.cols;
  const int64_t row_blocks = (rows + B - 1) / B, col_blocks = (cols + B - 1) / B;
  BlockQuantizer<uint8_t> bq(rows * cols, row_blocks * col_blocks, pool);
  auto& buf = bq.buf;
  auto& st = bq.st;
  // One work item is a band of 128 rows: dequantized once, then scaled block by block.
  auto body = [&](int64_t b0, int64_t b1, int t) {
    std::vector<float> band;  // [<= 128, cols]
    for (int64_t rb = b0; rb < b1; ++rb) {
      const int64_t r0 = rb * B, n = std::min(B, rows - r0);
      band.resize(static_cast<size_t>(n * cols));
      for (int64_t i = 0; i < n; ++i) {
        float* row = band.data() + i * cols;
        DequantizeRow(w, r0 + i, row);
        for (int64_t c = 0; c < cols; ++c) {
          if (!std::isfinite(row[c])) return bq.MarkBad(r0 + i);
        }
      }
      for (int64_t cb = 0; cb < col_blocks; ++cb) {
        const int64_t c0 = cb * B, c1 = std::min(cols, c0 + B);
        float amax = 0;
        for (int64_t i = 0; i < n; ++i)
          for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(band[i * cols + c]));
        const float s = amax > 0 ? amax / 448.0f : 1.0f;
        buf->scales[rb * col_blocks + cb] = s;
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t c = c0; c < c1; ++c) {
            const float x = band[i * cols + c];
            const uint8_t code = EncodeF8E4M3(x / s);
            buf->codes[(r0 + i) * cols + c] = code;
            const double e = static_cast<double>(x) - F8E4M3ToF32(code) * s;
            st[t].sum_sq_weight += static_cast<double>(x) * x;
            st[t].sum_sq_error += e * e;
          }
        }
        ++st[t].blocks;
      }
    }
  };
  bq.Run(row_blocks, body);
  return bq.Finish(what, stats, DType::kF8E4M3, rows, cols, row_blocks, col_blocks, B, B);
}

StatusOr<MatrixWeight> QuantizeWeightToInt8(const MatrixWeight& w, ThreadPool* pool,
                                            const std::string& what, Mxfp4ErrorStats* stats) {
  if (w.dtype == DType::kInt8 || w.dtype == DType::kMxfp4 || w.empty()) return w;
  if (w.dtype != DType::kF32 && w.dtype != DType::kBF16 && w.dtype != DType::kF16 &&
      w.dtype != DType::kF8E4M3)
    return InvalidArgument("%s: dtype %s cannot be quantized to int8", what.c_str(),
                           std::string(DTypeName(w.dtype)).c_str());
  constexpr int64_t B = kInt8Block;
  constexpr float kLeastSubnormal = std::numeric_limits<float>::denorm_min();
  const int64_t rows = w.rows, cols = w.cols, blocks = (cols + B - 1) / B;
  BlockQuantizer<int8_t> bq(rows * cols, rows * blocks, pool);
  auto& buf = bq.buf;
  auto& st = bq.st;
  auto body = [&](int64_t r0, int64_t r1, int t) {
    std::vector<float> row(static_cast<size_t>(cols));  // [cols]
    for (int64_t r = r0; r < r1; ++r) {
      DequantizeRow(w, r, row.data());
      for (float v : row) {
        if (!std::isfinite(v)) return bq.MarkBad(r);
      }
      for (int64_t j = 0; j < blocks; ++j) {
        const int64_t c0 = j * B, c1 = std::min(cols, c0 + B);
        float amax = 0;
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(row[c]));
        // The smallest bf16 value at or above amax / 127 (a tiny amax's quotient no lower than
        // fp32's least subnormal, so that it is never 0), so that the int8 mode's grouped
        // layout holds it in 16 bits exactly; |x| / s <= 127 still.
        const float s =
            amax > 0 ? BF16ToF32(F32ToBF16Up(std::max(amax / 127.0f, kLeastSubnormal))) : 1.0f;
        buf->scales[r * blocks + j] = s;
        for (int64_t c = c0; c < c1; ++c) {
          const float q = std::clamp(std::nearbyint(row[c] / s), -127.0f, 127.0f);
          buf->codes[r * cols + c] = static_cast<int8_t>(q);
          const double e = static_cast<double>(row[c]) - static_cast<double>(q) * s;
          st[t].sum_sq_weight += static_cast<double>(row[c]) * row[c];
          st[t].sum_sq_error += e * e;
        }
        ++st[t].blocks;
      }
    }
  };
  bq.Run(rows, body);
  return bq.Finish(what, stats, DType::kInt8, rows, cols, rows, blocks, 1, B);
}

StatusOr<QuantizeReport> QuantizeExpertsToMxfp4(const QuantizeOptions& options) {
  Writer w(options);
  return w.Run();
}

}  // namespace mimo
