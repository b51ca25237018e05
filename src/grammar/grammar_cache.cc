// GrammarCache: an LRU map from SHA-256(kind, options, text) to compiled grammars, bounded in
// entries and bytes (see grammar_cache.h).
#include "grammar/grammar_cache.h"

#include <chrono>

#include "core/sha256.h"

namespace mimo {
namespace {

// What of the options changes the grammar (the limits only decide whether it compiles).
std::string OptionsKey(const GrammarOptions& o) {
  return std::to_string(static_cast<int>(o.whitespace)) + "," +
         std::to_string(o.max_string_length) + "," + std::to_string(o.max_text_chars) + "|";
}

std::string Digest(std::initializer_list<std::string_view> parts) {
  Sha256 h;
  for (std::string_view p : parts) {
    const std::string len = std::to_string(p.size()) + ":";  // unambiguous concatenation
    h.Update(len);
    h.Update(p);
  }
  const Sha256Digest d = h.Finish();
  return std::string(d.begin(), d.end());
}

}  // namespace

GrammarCache::GrammarCache(std::shared_ptr<const TokenVocabulary> vocab, size_t max_entries,
                           size_t max_bytes)
    : vocab_(std::move(vocab)), max_entries_(max_entries), max_bytes_(max_bytes) {}

template <typename Compile>
GrammarCache::Result GrammarCache::Get(const std::string& key, const CompileControl& control,
                                       Compile&& compile) {
  for (;;) {
    std::shared_ptr<Pending> mine;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto it = index_.find(key);
      if (it != index_.end()) {
        lru_.splice(lru_.begin(), lru_, it->second);
        ++hits_;
        return it->second->grammar;
      }
      if (auto f = failed_.find(key); f != failed_.end()) {
        ++hits_;
        return f->second;
      }
      if (control.cached_only) return NotFound("grammar not compiled yet");
      auto p = pending_.find(key);
      if (p != pending_.end()) {
        // Compiling on another thread: wait for it (while this requester is still there).
        std::shared_ptr<Pending> other = p->second;
        while (!other->done) {
          if (control.cancel != nullptr && control.cancel->load())
            return CancelledCompile();
          done_.wait_for(lock, std::chrono::milliseconds(100));
        }
        if (other->result.ok() || !IsCancelledCompile(other->result.status()))
          return other->result;
        continue;  // its requester went away: compile for this one
      }
      ++misses_;
      mine = std::make_shared<Pending>();
      pending_[key] = mine;
    }
    Result g = compile();
    std::lock_guard<std::mutex> lock(mu_);
    pending_.erase(key);
    mine->result = g;
    mine->done = true;
    done_.notify_all();
    if (!g.ok()) {
      if (!IsCancelledCompile(g.status()) && !IsDeadlineCompile(g.status()) &&
          failed_.emplace(key, Status(g.status().code(), g.status().message().substr(0, 1024)))
              .second) {
        failed_order_.push_back(key);
        if (failed_order_.size() > kMaxFailures) {
          failed_.erase(failed_order_.front());
          failed_order_.pop_front();
        }
      }
      return g;
    }
    const size_t bytes = (*g)->bytes() + key.size() + sizeof(Entry);
    if (max_entries_ == 0 || bytes > max_bytes_) return g;  // used once, not kept
    lru_.push_front({key, *g, bytes});
    index_[key] = lru_.begin();
    bytes_ += bytes;
    while (lru_.size() > max_entries_ || bytes_ > max_bytes_) {
      bytes_ -= lru_.back().bytes;
      index_.erase(lru_.back().key);
      lru_.pop_back();
    }
    return g;
  }
}

StatusOr<std::shared_ptr<const Grammar>> GrammarCache::JsonSchema(std::string_view schema_json,
                                                                  const GrammarOptions& options,
                                                                  const CompileControl& control) {
  return Get(Digest({"schema", OptionsKey(options), schema_json}), control, [&] {
    return Grammar::FromJsonSchema(schema_json, vocab_, options, control.cancel);
  });
}

StatusOr<std::shared_ptr<const Grammar>> GrammarCache::JsonObject(const GrammarOptions& options,
                                                                  const CompileControl& control) {
  return Get(Digest({"object", OptionsKey(options)}), control,
             [&] { return Grammar::JsonObject(vocab_, options, control.cancel); });
}

StatusOr<std::shared_ptr<const Grammar>> GrammarCache::ToolCalls(std::string_view tools_json,
                                                                 const std::string& only_function,
                                                                 bool parallel,
                                                                 const GrammarOptions& options,
                                                                 const CompileControl& control) {
  return Get(Digest({"tools", OptionsKey(options), parallel ? "p" : "1", only_function,
                     tools_json}),
             control, [&] {
               return Grammar::ToolCalls(tools_json, only_function, parallel, vocab_, options,
                                         control.cancel);
             });
}

int64_t GrammarCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

int64_t GrammarCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

size_t GrammarCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace mimo
