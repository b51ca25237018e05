// TokenVocabulary: the byte string of every token id as the grammar engine sees it, and the token
// trie every mask computation walks. Special tokens (and ids without bytes) are in no trie, so no
// grammar ever allows them; the caller's EOS ids are allowed separately when a grammar completes.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/compile_budget.h"
#include "grammar/token_trie.h"

namespace mimo {

class Tokenizer;
class TagTable;
class TextDfa;
class TextProfile;

// Immutable after construction (the lazily built text profiles are guarded by a mutex); share one
// instance between all grammars, requests and threads.
class TokenVocabulary {
 public:
  // mask_vocab_size: the number of ids a mask covers, the model's vocab_size (0 = the
  // tokenizer's vocab_size()). Larger than the tokenizer: the padding rows are never allowed.
  // Smaller (a test checkpoint with a cut vocabulary): ids beyond it are in no trie; grammars
  // still complete as long as the 256 single-byte tokens are below it (ids 0-255 in Qwen's).
  static std::shared_ptr<const TokenVocabulary> FromTokenizer(const Tokenizer& tok,
                                                              int32_t mask_vocab_size = 0);
  // For tests: bytes_by_id[i] is token i's bytes; excluded[i] marks special tokens.
  static std::shared_ptr<const TokenVocabulary> FromBytes(std::vector<std::string> bytes_by_id,
                                                          std::vector<bool> excluded);

  int32_t size() const { return size_; }  // ids [0, size) are covered by a mask
  int32_t mask_words() const { return (size_ + 31) / 32; }
  std::string_view bytes(int32_t id) const { return bytes_[id]; }
  // True when the id can ever be allowed by a grammar (has bytes, not special).
  bool maskable(int32_t id) const { return id >= 0 && id < size_ && maskable_[id]; }
  const TokenTrie& trie() const { return trie_; }
  // Position of a maskable id in trie order (lexicographic); -1 otherwise.
  int32_t rank(int32_t id) const { return rank_[id]; }

  // The TextProfile of a text language over this vocabulary, cached by the language's
  // fingerprint (the built-in string languages, and patterns or formats used by several
  // schemas, are profiled once per process; the cache keeps the last kMaxCachedProfiles, at
  // most kMaxCachedProfileBytes in all). A profile not cached is charged to `budget` (its states
  // and bytes); null when the budget ran out (nothing is cached then).
  std::shared_ptr<const TextProfile> ProfileFor(const TextDfa& dfa,
                                                CompileBudget* budget = nullptr) const;
  static constexpr size_t kMaxCachedProfiles = 256;
  static constexpr size_t kMaxCachedProfileBytes = size_t{256} << 20;
  // Where a tag (`</think>`, `<tool_call>`) can be completed by a token, computed once per tag.
  std::shared_ptr<const TagTable> TagTableFor(std::string_view tag) const;

 private:
  TokenVocabulary() = default;
  void BuildTrie();

  int32_t size_ = 0;
  std::vector<std::string> bytes_;  // [size]
  std::vector<uint8_t> maskable_;   // [size]
  std::vector<int32_t> rank_;       // [size]
  TokenTrie trie_;
  mutable std::mutex profiles_mu_;
  mutable std::unordered_map<std::string, std::shared_ptr<const TextProfile>> profiles_;
  mutable std::deque<std::string> profile_order_;  // insertion order, for eviction
  mutable size_t profile_bytes_ = 0;               // of the cached profiles and their keys
  mutable std::unordered_map<std::string, std::shared_ptr<const TagTable>> tags_;  // few tags
};

}  // namespace mimo
