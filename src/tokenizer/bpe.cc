// Byte-level BPE tokenizer from tokenizer.json: loading (model, normalizer, pre-tokenizer,
// decoder, added tokens) and the encode/decode paths.
#include "tokenizer/bpe.h"

#include <algorithm>
#include <climits>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>

#include "core/utf8.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/regex_splitter.h"
#include "tokenizer/unicode_nfc.h"

namespace mimo {
namespace {

using Json = nlohmann::json;

// The regex HF's ByteLevel pre-tokenizer applies itself when "use_regex" is true (GPT-2's).
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

std::string TypeOf(const Json& j) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) return "";
  return j["type"].get<std::string>();
}

bool GetBool(const Json& j, const char* key, bool def) {
  auto it = j.find(key);
  return (it != j.end() && it->is_boolean()) ? it->get<bool>() : def;
}

// Quotes a literal for PCRE2 (\Q...\E cannot contain "\E", so escape every metacharacter).
std::string QuoteRegex(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}-/").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

}  // namespace

Tokenizer::Tokenizer()
    : cache_(new CacheSlot[kCacheSlots]), cache_mu_(new std::mutex[kCacheLocks]) {
  std::fill(std::begin(byte_id_), std::end(byte_id_), -1);
}
Tokenizer::~Tokenizer() = default;

bool Tokenizer::regex_jit() const {
  for (const auto& s : splitters_) {
    if (!s->jit()) return false;
  }
  return true;
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cannot open tokenizer file '%s'", path.c_str());
  std::stringstream ss;
  ss << f.rdbuf();
  auto t = FromJson(ss.str());
  if (!t.ok()) return Status(t.status().code(), path + ": " + t.status().message());
  return t;
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view json_text) {
  Json root = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return InvalidArgument("tokenizer.json is not valid JSON");
  if (!root.is_object()) return InvalidArgument("tokenizer.json: top level is not an object");
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  MIMO_RETURN_IF_ERROR(t->LoadModel(&root));
  MIMO_RETURN_IF_ERROR(t->LoadAddedTokens(&root));
  MIMO_RETURN_IF_ERROR(t->LoadPipeline(&root));
  return t;
}

// The id tables are indexed by id, so a file that names a few tokens with huge ids would make them
// gigabytes. Real vocabularies are dense (Qwen/MiMo: ids 0..151642, added tokens right after); a
// gap of up to kMaxUnusedIds ids is accepted.
constexpr size_t kMaxUnusedIds = size_t{1} << 16;

static Status CheckIdSpace(const char* where, int32_t max_id, size_t defined) {
  if (max_id >= 0 && static_cast<size_t>(max_id) + 1 > defined + kMaxUnusedIds) {
    return InvalidArgument(
        "tokenizer.json: %s id %d leaves more than %zu ids unused (%zu tokens defined); token "
        "ids must be nearly dense",
        where, max_id, kMaxUnusedIds, defined);
  }
  return Status::Ok();
}

Status Tokenizer::LoadModel(const void* json) {
  const Json& root = *static_cast<const Json*>(json);
  auto mit = root.find("model");
  if (mit == root.end() || !mit->is_object())
    return InvalidArgument("tokenizer.json: no \"model\"");
  const Json& model = *mit;
  const std::string type = TypeOf(model);
  if (!type.empty() && type != "BPE") {
    return Unimplemented("tokenizer.json: model.type \"%s\" is not supported (only BPE)",
                         type.c_str());
  }
  if (GetBool(model, "byte_fallback", false)) {
    return Unimplemented("tokenizer.json: model.byte_fallback=true is not supported");
  }
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(k) && model[k].is_string() && !model[k].get<std::string>().empty()) {
      return Unimplemented("tokenizer.json: model.%s is not supported", k);
    }
  }
  if (model.contains("dropout") && model["dropout"].is_number() &&
      model["dropout"].get<double>() > 0) {
    return Unimplemented("tokenizer.json: model.dropout > 0 (training-time BPE) is not supported");
  }
  ignore_merges_ = GetBool(model, "ignore_merges", false);

  auto vit = model.find("vocab");
  if (vit == model.end() || !vit->is_object())
    return InvalidArgument("tokenizer.json: model.vocab is not an object");
  int32_t max_id = -1;
  for (auto it = vit->begin(); it != vit->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > INT32_MAX - 1) {
      return InvalidArgument("tokenizer.json: vocab entry \"%s\" has no valid id",
                             it.key().c_str());
    }
    max_id = std::max(max_id, it.value().get<int32_t>());
  }
  MIMO_RETURN_IF_ERROR(CheckIdSpace("model.vocab", max_id, vit->size()));
  id_to_token_.assign(max_id + 1, "");
  id_to_bytes_.assign(max_id + 1, "");
  known_.assign(max_id + 1, 0);
  special_.assign(max_id + 1, 0);
  token_to_id_.reserve(vit->size() * 2);
  for (auto it = vit->begin(); it != vit->end(); ++it) {
    const int32_t id = it.value().get<int32_t>();
    id_to_token_[id] = it.key();
    id_to_bytes_[id] = ByteLevelDecode(it.key());
    known_[id] = 1;
    token_to_id_[it.key()] = id;
  }
  int32_t unk = -1;
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    unk = TokenToId(model["unk_token"].get<std::string>());
  }
  for (int b = 0; b < 256; ++b) {
    const int32_t id = TokenToId(ByteLevelChar(static_cast<uint8_t>(b)));
    byte_id_[b] = id >= 0 ? id : unk;  // HF drops a character with no token and no unk
  }

  auto mg = model.find("merges");
  if (mg == model.end() || !mg->is_array())
    return InvalidArgument("tokenizer.json: model.merges is not an array");
  size_t cap = 16;
  while (cap < mg->size() * 2 + 16) cap <<= 1;
  merge_keys_.assign(cap, 0);
  merge_vals_.assign(cap, Merge{0, 0});
  merge_mask_ = cap - 1;
  int32_t rank = 0;
  for (const Json& m : *mg) {
    std::string a, b;
    if (m.is_string()) {  // legacy "a b"
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return InvalidArgument("tokenizer.json: merge #%d \"%s\" is not two space-separated tokens",
                               rank, s.c_str());
      }
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      return InvalidArgument("tokenizer.json: merge #%d is neither \"a b\" nor [\"a\", \"b\"]",
                             rank);
    }
    const int32_t ia = TokenToId(a), ib = TokenToId(b), im = TokenToId(a + b);
    if (ia < 0 || ib < 0 || im < 0) {
      return InvalidArgument(
          "tokenizer.json: merge #%d (\"%s\", \"%s\") uses a token missing from the vocab", rank,
          a.c_str(), b.c_str());
    }
    const uint64_t key = ((static_cast<uint64_t>(ia) << 32) | static_cast<uint32_t>(ib)) + 1;
    uint64_t h = (key * 0x9E3779B97F4A7C15ull) >> 20;
    while (true) {
      h &= merge_mask_;
      if (merge_keys_[h] == 0) {
        merge_keys_[h] = key;
        merge_vals_[h] = Merge{rank, im};
        break;
      }
      if (merge_keys_[h] == key) break;  // duplicate merge: the first (lowest rank) wins
      ++h;
    }
    ++rank;
  }
  return Status::Ok();
}

const Tokenizer::Merge* Tokenizer::FindMerge(int32_t a, int32_t b) const {
  const uint64_t key = ((static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b)) + 1;
  uint64_t h = (key * 0x9E3779B97F4A7C15ull) >> 20;
  while (true) {
    h &= merge_mask_;
    const uint64_t k = merge_keys_[h];
    if (k == key) return &merge_vals_[h];
    if (k == 0) return nullptr;
    ++h;
  }
}

Status Tokenizer::LoadAddedTokens(const void* json) {
  const Json& root = *static_cast<const Json*>(json);
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return Status::Ok();
  if (!it->is_array()) return InvalidArgument("tokenizer.json: added_tokens is not an array");
  for (const Json& a : *it) {
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
        !a.contains("content") || !a["content"].is_string()) {
      return InvalidArgument(
          "tokenizer.json: an added_tokens entry lacks an integer id or a content string");
    }
    AddedToken t;
    const int64_t id = a["id"].get<int64_t>();
    if (id < 0 || id > INT32_MAX - 1)
      return InvalidArgument("tokenizer.json: added token id %lld out of range",
                             static_cast<long long>(id));
    t.id = static_cast<int32_t>(id);
    t.content = a["content"].get<std::string>();
    if (t.content.empty())
      return InvalidArgument("tokenizer.json: added token %d has empty content", t.id);
    t.special = GetBool(a, "special", false);
    t.lstrip = GetBool(a, "lstrip", false);
    t.rstrip = GetBool(a, "rstrip", false);
    if (t.id >= vocab_size()) {
      MIMO_RETURN_IF_ERROR(CheckIdSpace("added_tokens", t.id, token_to_id_.size() + 1));
      id_to_token_.resize(t.id + 1);
      id_to_bytes_.resize(t.id + 1);
      known_.resize(t.id + 1, 0);
      special_.resize(t.id + 1, 0);
    }
    id_to_token_[t.id] = t.content;
    id_to_bytes_[t.id] = t.content;  // added tokens decode to their content verbatim
    known_[t.id] = 1;
    special_[t.id] = t.special ? 1 : 0;
    token_to_id_[t.content] = t.id;
    added_.push_back(std::move(t));
  }
  added_by_first_byte_.assign(256, {});
  for (size_t i = 0; i < added_.size(); ++i) {
    added_by_first_byte_[static_cast<uint8_t>(added_[i].content[0])].push_back(
        static_cast<int32_t>(i));
  }
  for (auto& v : added_by_first_byte_) {
    std::stable_sort(v.begin(), v.end(), [&](int32_t x, int32_t y) {
      return added_[x].content.size() > added_[y].content.size();
    });
  }
  return Status::Ok();
}

Status Tokenizer::LoadPipeline(const void* json) {
  const Json& root = *static_cast<const Json*>(json);
  // Normalizer: none, NFC, or a Sequence of NFC.
  if (auto n = root.find("normalizer"); n != root.end() && !n->is_null()) {
    std::vector<const Json*> list;
    if (TypeOf(*n) == "Sequence" && n->contains("normalizers") && (*n)["normalizers"].is_array()) {
      for (const Json& x : (*n)["normalizers"]) list.push_back(&x);
    } else {
      list.push_back(&*n);
    }
    for (const Json* x : list) {
      const std::string t = TypeOf(*x);
      if (t != "NFC")
        return Unimplemented("tokenizer.json: normalizer type \"%s\" is not supported (only NFC)",
                             t.c_str());
      nfc_ = true;
    }
  }
  // Pre-tokenizer: Split (Isolated) and ByteLevel steps, alone or in a Sequence.
  bool byte_level = false;
  if (auto p = root.find("pre_tokenizer"); p != root.end() && !p->is_null()) {
    std::vector<const Json*> list;
    if (TypeOf(*p) == "Sequence" && p->contains("pretokenizers") &&
        (*p)["pretokenizers"].is_array()) {
      for (const Json& x : (*p)["pretokenizers"]) list.push_back(&x);
    } else {
      list.push_back(&*p);
    }
    for (const Json* x : list) {
      const std::string t = TypeOf(*x);
      std::string pattern;
      if (t == "ByteLevel") {
        byte_level = true;
        if (GetBool(*x, "add_prefix_space", false)) {
          return Unimplemented("tokenizer.json: ByteLevel add_prefix_space=true is not supported");
        }
        if (!GetBool(*x, "use_regex", true)) continue;
        pattern = kGpt2Pattern;
      } else if (t == "Split") {
        const std::string behavior = x->value("behavior", "");
        if (behavior != "Isolated") {
          return Unimplemented(
              "tokenizer.json: Split behavior \"%s\" is not supported (only Isolated)",
              behavior.c_str());
        }
        if (GetBool(*x, "invert", false))
          return Unimplemented("tokenizer.json: Split invert=true is not supported");
        const Json& pat = x->value("pattern", Json());
        if (pat.contains("Regex") && pat["Regex"].is_string()) {
          pattern = pat["Regex"].get<std::string>();
        } else if (pat.contains("String") && pat["String"].is_string()) {
          pattern = QuoteRegex(pat["String"].get<std::string>());
        } else {
          return InvalidArgument(
              "tokenizer.json: Split pre-tokenizer has no Regex or String pattern");
        }
      } else {
        return Unimplemented("tokenizer.json: pre-tokenizer type \"%s\" is not supported",
                             t.c_str());
      }
      auto s = RegexSplitter::Create(pattern);
      if (!s.ok()) return s.status();
      splitters_.push_back(std::move(s).value());
    }
  }
  if (!byte_level)
    return Unimplemented(
        "tokenizer.json: only byte-level BPE (a ByteLevel pre-tokenizer) is supported");
  if (auto d = root.find("decoder");
      d != root.end() && !d->is_null() && TypeOf(*d) != "ByteLevel") {
    return Unimplemented("tokenizer.json: decoder type \"%s\" is not supported (only ByteLevel)",
                         TypeOf(*d).c_str());
  }
  return Status::Ok();
}

bool Tokenizer::FindAddedToken(std::string_view text, size_t from,
                               std::span<const TextRange> literal, size_t* next, size_t* start,
                               size_t* end, int32_t* id) const {
  for (size_t i = from; i < text.size(); ++i) {
    while (*next < literal.size() && literal[*next].end <= i) ++*next;
    size_t limit = text.size();  // a match ends by here: the next range's start
    if (*next < literal.size()) {
      if (literal[*next].begin <= i) {  // inside a range: go on after it
        i = literal[*next].end - 1;
        continue;
      }
      limit = literal[*next].begin;
    }
    const size_t floor = std::max(from, *next > 0 ? literal[*next - 1].end : size_t{0});
    const auto& cands = added_by_first_byte_[static_cast<uint8_t>(text[i])];
    for (int32_t c : cands) {
      const AddedToken& t = added_[c];
      if (t.content.size() > limit - i || text.compare(i, t.content.size(), t.content) != 0) {
        continue;
      }
      size_t s = i, e = i + t.content.size();
      if (t.lstrip)
        while (s > floor && IsAsciiSpace(text[s - 1])) --s;
      if (t.rstrip)
        while (e < limit && IsAsciiSpace(text[e])) ++e;
      *start = s;
      *end = e;
      *id = t.id;
      return true;
    }
  }
  return false;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool parse_special) const {
  return Encode(text, parse_special, {});
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool parse_special,
                                       std::span<const TextRange> literal) const {
  // The ranges clamped to the text, sorted and merged.
  std::vector<TextRange> ranges;
  for (const TextRange& r : literal) {
    const size_t b = std::min(r.begin, text.size()), e = std::min(r.end, text.size());
    if (b < e) ranges.push_back({b, e});
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const TextRange& x, const TextRange& y) { return x.begin < y.begin; });
  size_t kept = 0;
  for (const TextRange& r : ranges) {
    if (kept > 0 && r.begin <= ranges[kept - 1].end) {
      ranges[kept - 1].end = std::max(ranges[kept - 1].end, r.end);
    } else {
      ranges[kept++] = r;
    }
  }
  ranges.resize(kept);
  std::string repaired;
  if (!utf8::IsValid(text)) {  // repaired stretch by stretch, so the ranges stay in place
    size_t pos = 0;
    for (TextRange& r : ranges) {
      repaired += utf8::Repair(text.substr(pos, r.begin - pos));
      const size_t b = repaired.size();
      repaired += utf8::Repair(text.substr(r.begin, r.end - r.begin));
      pos = r.end;
      r = {b, repaired.size()};
    }
    repaired += utf8::Repair(text.substr(pos));
    text = repaired;
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  size_t pos = 0;
  if (parse_special && !added_.empty()) {
    size_t s, e, next = 0;
    int32_t id;
    while (FindAddedToken(text, pos, ranges, &next, &s, &e, &id)) {
      EncodeText(text.substr(pos, s - pos), &out);
      out.push_back(id);
      pos = e;
    }
  }
  EncodeText(text.substr(pos), &out);
  return out;
}

void Tokenizer::EncodeText(std::string_view text, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  std::string normalized;
  if (nfc_ && !IsNfcQuick(text)) {
    normalized = NfcNormalize(text);
    text = normalized;
  }
  // Each splitter re-splits the pieces of the previous one (HF applies a Sequence in order).
  std::function<void(size_t, std::string_view)> level = [&](size_t k, std::string_view piece) {
    if (k == splitters_.size()) {
      Bpe(piece, out);
      return;
    }
    splitters_[k]->Split(piece, [&](std::string_view sub) { level(k + 1, sub); });
  };
  if (splitters_.size() == 1) {  // the usual case, without the std::function hop per piece
    splitters_[0]->Split(text, [&](std::string_view piece) { Bpe(piece, out); });
  } else {
    level(0, text);
  }
}

void Tokenizer::Bpe(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.size() == 1) {
    if (int32_t id = byte_id_[static_cast<uint8_t>(piece[0])]; id >= 0) out->push_back(id);
    return;
  }
  const size_t slot = std::hash<std::string_view>()(piece) & (kCacheSlots - 1);
  CacheSlot& c = cache_[slot];
  std::mutex& mu = cache_mu_[slot % kCacheLocks];
  {
    std::lock_guard<std::mutex> lock(mu);
    if (c.key == piece) {
      out->insert(out->end(), c.ids.begin(), c.ids.end());
      return;
    }
  }
  const size_t before = out->size();
  BpeUncached(piece, out);
  std::lock_guard<std::mutex> lock(mu);
  c.key.assign(piece);
  c.ids.assign(out->begin() + before, out->end());
}

void Tokenizer::BpeUncached(std::string_view piece, std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    if (int32_t id = TokenToId(ByteLevelEncode(piece)); id >= 0) {
      out->push_back(id);
      return;
    }
  }
  std::vector<int32_t> sym;  // [n] current symbols
  sym.reserve(piece.size());
  for (char c : piece) {
    if (int32_t id = byte_id_[static_cast<uint8_t>(c)]; id >= 0) sym.push_back(id);
  }
  if (sym.size() > 48) {
    BpeLong(&sym);
    out->insert(out->end(), sym.begin(), sym.end());
    return;
  }
  // Short words: keep the rank of each adjacent pair and merge the lowest (leftmost on ties),
  // which is the order HF's priority queue produces.
  std::vector<int32_t> rank(sym.size(), INT32_MAX);  // [n] rank of pair (i, i+1)
  std::vector<int32_t> merged(sym.size(), -1);       // [n] id that pair merges into
  auto score = [&](size_t i) {
    const Merge* m = i + 1 < sym.size() ? FindMerge(sym[i], sym[i + 1]) : nullptr;
    rank[i] = m ? m->rank : INT32_MAX;
    merged[i] = m ? m->id : -1;
  };
  for (size_t i = 0; i < sym.size(); ++i) score(i);
  while (sym.size() > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < sym.size(); ++i) {
      if (rank[i] < rank[best]) best = i;
    }
    if (rank[best] == INT32_MAX) break;
    sym[best] = merged[best];
    sym.erase(sym.begin() + best + 1);
    rank.erase(rank.begin() + best + 1);
    merged.erase(merged.begin() + best + 1);
    score(best);
    if (best > 0) score(best - 1);
  }
  out->insert(out->end(), sym.begin(), sym.end());
}

// Long words (long digit-free letter runs, whitespace runs): a linked list of symbols and a
// min-heap of candidate pairs keyed by (rank, position), stale entries skipped on pop.
void Tokenizer::BpeLong(std::vector<int32_t>* sym_io) const {
  std::vector<int32_t>& sym = *sym_io;
  const int n = static_cast<int>(sym.size());
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) prev[i] = i - 1, next[i] = i + 1 < n ? i + 1 : -1;
  struct Cand {
    int32_t rank;
    int pos;
    int32_t left, right, id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int i) {
    if (i < 0 || next[i] < 0) return;
    if (const Merge* m = FindMerge(sym[i], sym[next[i]]))
      heap.push({m->rank, i, sym[i], sym[next[i]], m->id});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    const int j = next[c.pos];
    if (sym[c.pos] < 0 || j < 0 || sym[c.pos] != c.left || sym[j] != c.right) continue;  // stale
    sym[c.pos] = c.id;
    sym[j] = -1;
    next[c.pos] = next[j];
    if (next[j] >= 0) prev[next[j]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  sym.erase(std::remove(sym.begin(), sym.end(), -1), sym.end());
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (!IsValidId(id) || (skip_special && special_[id])) continue;
    bytes += id_to_bytes_[id];
  }
  return utf8::IsValid(bytes) ? bytes : utf8::Repair(bytes);
}

std::string_view Tokenizer::TokenBytes(int32_t id) const {
  return IsValidId(id) ? std::string_view(id_to_bytes_[id]) : std::string_view();
}

bool Tokenizer::IsSpecial(int32_t id) const { return IsValidId(id) && special_[id]; }

int32_t Tokenizer::TokenToId(std::string_view token) const {
  auto it = token_to_id_.find(std::string(token));
  return it == token_to_id_.end() ? -1 : it->second;
}

std::string Tokenizer::IdToToken(int32_t id) const { return IsValidId(id) ? id_to_token_[id] : ""; }

}  // namespace mimo
