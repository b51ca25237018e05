// GrammarCache: compiled grammars by request text, so that a schema or tool list seen before
// costs a hash lookup instead of a compile. Requests that repeat one response_format or one
// `tools` array (the common case for an API client) compile once.
//
// Bounded in memory, whatever the requests: entries are keyed by the SHA-256 of (kind, options,
// text), so a 60 MB tools array costs 32 bytes of key, not 60 MB; the grammars kept are bounded
// in number and in bytes (Grammar::bytes(): automaton, masks, distances, string profiles), the
// least recently used dropped first, and one larger than the byte bound alone is used once and
// not kept. A compile that fails - a bad schema, over its budget (compile_budget.h), cancelled -
// leaves no grammar behind; its error is remembered (by key, the last kMaxFailures, messages cut
// to 1 KiB) when it would fail the same way again, so a refused schema sent again is refused at
// once (a deadline or a cancel depends on the moment: not remembered). Concurrent misses on one
// key compile once; the others wait for it (and compile themselves if it was cancelled because
// its own client went away).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "grammar/grammar.h"

namespace mimo {

// How one lookup may proceed.
struct CompileControl {
  const std::atomic<bool>* cancel = nullptr;  // set: the requester went away; stop compiling
  // Only a cached grammar: a miss returns kNotFound without compiling (the server compiles
  // misses on a pool of their own, see server/http_server.h).
  bool cached_only = false;
};

// Thread-safe (one mutex; compiles run outside it).
class GrammarCache {
 public:
  GrammarCache(std::shared_ptr<const TokenVocabulary> vocab, size_t max_entries = 64,
               size_t max_bytes = size_t{512} << 20);

  StatusOr<std::shared_ptr<const Grammar>> JsonSchema(std::string_view schema_json,
                                                      const GrammarOptions& options = {},
                                                      const CompileControl& control = {});
  StatusOr<std::shared_ptr<const Grammar>> JsonObject(const GrammarOptions& options = {},
                                                      const CompileControl& control = {});
  StatusOr<std::shared_ptr<const Grammar>> ToolCalls(std::string_view tools_json,
                                                     const std::string& only_function,
                                                     bool parallel,
                                                     const GrammarOptions& options = {},
                                                     const CompileControl& control = {});
  const std::shared_ptr<const TokenVocabulary>& vocab() const { return vocab_; }
  int64_t hits() const;  // grammars and remembered failures found
  int64_t misses() const;
  size_t size() const;   // grammars kept
  size_t bytes() const;  // their bytes

  // The status of a cached_only lookup that missed.
  static bool IsMiss(const Status& s) { return s.code() == StatusCode::kNotFound; }

 private:
  using Result = StatusOr<std::shared_ptr<const Grammar>>;
  struct Pending {  // a compile in progress, for the lookups of the same key meanwhile
    bool done = false;
    Result result = Internal("pending");
  };
  struct Entry {
    std::string key;
    std::shared_ptr<const Grammar> grammar;
    size_t bytes;
  };
  template <typename Compile>
  Result Get(const std::string& key, const CompileControl& control, Compile&& compile);

  std::shared_ptr<const TokenVocabulary> vocab_;
  size_t max_entries_, max_bytes_;
  mutable std::mutex mu_;
  std::condition_variable done_;  // a Pending finished
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  std::unordered_map<std::string, std::shared_ptr<Pending>> pending_;
  static constexpr size_t kMaxFailures = 256;
  std::unordered_map<std::string, Status> failed_;
  std::list<std::string> failed_order_;  // oldest first
  size_t bytes_ = 0;
  int64_t hits_ = 0, misses_ = 0;
};

}  // namespace mimo
