// GrammarCache: an LRU map from (kind, options, text) to compiled grammars.
#include "grammar/grammar_cache.h"

namespace mimo {
namespace {

std::string OptionsKey(const GrammarOptions& o) {
  return std::to_string(static_cast<int>(o.whitespace)) + "," +
         std::to_string(o.max_string_length) + "|";
}

}  // namespace

GrammarCache::GrammarCache(std::shared_ptr<const TokenVocabulary> vocab, size_t capacity)
    : vocab_(std::move(vocab)), capacity_(capacity) {}

template <typename Compile>
StatusOr<std::shared_ptr<const Grammar>> GrammarCache::Get(std::string key, Compile&& compile) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++hits_;
      return it->second->second;
    }
    ++misses_;
  }
  auto g = compile();
  if (!g.ok()) return g;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it != index_.end()) return it->second->second;  // compiled meanwhile by another thread
  lru_.emplace_front(key, *g);
  index_[std::move(key)] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return g;
}

StatusOr<std::shared_ptr<const Grammar>> GrammarCache::JsonSchema(std::string_view schema_json,
                                                                  const GrammarOptions& options) {
  return Get("schema|" + OptionsKey(options) + std::string(schema_json),
             [&] { return Grammar::FromJsonSchema(schema_json, vocab_, options); });
}

StatusOr<std::shared_ptr<const Grammar>> GrammarCache::JsonObject(const GrammarOptions& options) {
  return Get("object|" + OptionsKey(options), [&] { return Grammar::JsonObject(vocab_, options); });
}

StatusOr<std::shared_ptr<const Grammar>> GrammarCache::ToolCalls(std::string_view tools_json,
                                                                 const std::string& only_function,
                                                                 bool parallel,
                                                                 const GrammarOptions& options) {
  return Get("tools|" + OptionsKey(options) + (parallel ? "p|" : "1|") +
                 std::to_string(only_function.size()) + ":" + only_function +
                 std::string(tools_json),
             [&] { return Grammar::ToolCalls(tools_json, only_function, parallel, vocab_, options); });
}

int64_t GrammarCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

int64_t GrammarCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

}  // namespace mimo
