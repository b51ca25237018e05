// GrammarCache: compiled grammars by request text, so that a schema or tool list seen before
// costs a hash lookup instead of a compile. Requests that repeat one response_format or one
// `tools` array (the common case for an API client) compile once.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "grammar/grammar.h"

namespace mimo {

// Thread-safe (one mutex; compiles run outside it). Holds at most `capacity` grammars, dropping
// the least recently used; errors are not cached.
class GrammarCache {
 public:
  GrammarCache(std::shared_ptr<const TokenVocabulary> vocab, size_t capacity = 64);

  StatusOr<std::shared_ptr<const Grammar>> JsonSchema(std::string_view schema_json,
                                                      const GrammarOptions& options = {});
  StatusOr<std::shared_ptr<const Grammar>> JsonObject(const GrammarOptions& options = {});
  StatusOr<std::shared_ptr<const Grammar>> ToolCalls(std::string_view tools_json,
                                                     const std::string& only_function,
                                                     bool parallel,
                                                     const GrammarOptions& options = {});
  const std::shared_ptr<const TokenVocabulary>& vocab() const { return vocab_; }
  int64_t hits() const;
  int64_t misses() const;

 private:
  template <typename Compile>
  StatusOr<std::shared_ptr<const Grammar>> Get(std::string key, Compile&& compile);

  std::shared_ptr<const TokenVocabulary> vocab_;
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<const Grammar>>> lru_;  // most recent first
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
  int64_t hits_ = 0, misses_ = 0;
};

}  // namespace mimo
