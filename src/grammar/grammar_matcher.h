// GrammarMatcher: one request's position in a Grammar. Per step the engine asks for the mask of
// allowed next tokens, samples under it, and reports the token back.
//
// Mask computation: for every stack top that can consume a byte, the precomputed
// context-independent set is OR-ed in (StateMaskTable, or TextProfile for text states) and only
// the context-dependent tokens are run through the real stack, walking them in trie order so that
// shared prefixes are stepped once. A text state's tokens that finish the string leave a suffix;
// each distinct suffix is checked once against the stack below.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/stack_arena.h"

namespace mimo {

// Sets logits[i] = -infinity for every token i in [0, vocab) whose bit in `bitmask` is clear
// (bitmask as filled by GrammarMatcher::FillNextTokenMask).
void MaskLogits(const uint32_t* bitmask, float* logits, int64_t vocab);

// Per request; not thread-safe (the engine thread).
class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);

  // bitmask: [ceil(vocab/32)] uint32 words (Grammar::vocab().mask_words()); bit set = token
  // allowed next. When the grammar may end here the eos ids are allowed too (and only they when
  // it cannot continue); elsewhere they are not, even an eos id that is also ordinary text.
  void FillNextTokenMask(uint32_t* bitmask, std::span<const int32_t> eos_ids);
  // FillNextTokenMask restricted to the tokens after which the output can still end within
  // remaining - 1 more tokens (remaining counts this one; TokensToEnd after the token), plus the
  // eos ids where the grammar may end. When TokensToEnd() <= remaining the mask is not empty,
  // and an output that takes only such tokens ends, complete, within `remaining` tokens.
  // Nothing is cut while remaining - 1 is at least the most any allowed token leaves to do, so
  // far from max_tokens this is FillNextTokenMask.
  void FillMaskWithin(uint32_t* bitmask, std::span<const int32_t> eos_ids, int32_t remaining);
  // Fewest tokens of this vocabulary from here to the end of the output, the end itself counted
  // as one (the eos, or for an output that ends by itself the slot the engine needs after it;
  // see token_distance.h); kNoEnd when it cannot end. Exact, for any grammar.
  int32_t TokensToEnd();
  // Advances by one token; false (state unchanged) if it is not allowed. An EOS id passed to the
  // last FillNextTokenMask is accepted when CanTerminate() and ends the match.
  bool AcceptToken(int32_t id);
  // Advances by raw bytes, as one step for Rollback: text produced outside the grammar that it
  // must continue from, e.g. the `<tool_call>` (possibly split across tokens, or ending inside
  // one) that opened a call under tool_choice "auto". False (state unchanged) if not allowed.
  bool AcceptString(std::string_view bytes);
  // The grammar reached an accepting end and cannot continue (or EOS was accepted).
  bool IsTerminated() const;
  bool CanTerminate() const;  // accepting now (EOS allowed)
  // Undoes the last num_tokens accepted tokens (EOS included).
  void Rollback(int num_tokens);
  int num_accepted() const { return static_cast<int>(history_.size()) - 1; }
  // Identifies the current position within this matcher: equal keys, same stacks (so the same
  // future). For searches over positions, e.g. brute-force token distances in tests.
  std::string PositionKey() const;

  // Fewest bytes that would complete the grammar from here (for walks).
  int64_t MinBytesToEnd() const;
  const Grammar& grammar() const { return *grammar_; }

 private:
  struct Position {
    StackSet set;
    bool eos = false;  // EOS accepted: nothing more
  };
  void SetEosBits(uint32_t* bitmask, std::span<const int32_t> eos_ids, bool may_end) const;
  void AddGeneralTokens(int32_t node, uint32_t* mask);
  void AddTextTokens(int32_t node, uint32_t* mask);
  // Which suffixes of `profile` the stack below a text node (its parent) accepts: [suffixes],
  // computed by one walk of the profile's suffix trie and cached per (profile, parent) for the
  // rest of the request (the parent stays the same while a string is being written).
  const std::vector<uint8_t>& SuffixResults(const TextProfile* profile, int32_t parent);
  // Whether `bytes` can be consumed starting from the single node `node`.
  bool Simulate(int32_t node, std::string_view bytes);
  // Token distances (TokenDistance): G(node, carry), the fewest tokens to the end once the frame
  // above `node` returned with `carry` (memoized: interned nodes never change); g of a node that
  // consumes; per (text rule, parent) the least G over each exit signature's carries.
  int32_t TokensAfter(int32_t node, int32_t carry);
  int32_t NodeTokensToEnd(int32_t node);
  const std::vector<int32_t>& SigBest(int32_t text_rule, int32_t parent);
  void AddGeneralTokensWithin(int32_t node, int32_t budget, uint32_t* mask);
  void AddTextTokensWithin(int32_t node, int32_t budget, uint32_t* mask);

  std::shared_ptr<const Grammar> grammar_;
  const PushdownAutomaton* pda_;
  StackArena arena_;
  std::vector<Position> history_;  // history_[0] = start; back() = now
  std::vector<int32_t> last_eos_;
  // Scratch for masks.
  std::vector<StackSet> levels_;           // [max token length + 1]
  std::vector<uint32_t> scratch_;          // [mask words]
  std::vector<size_t> marks_;
  struct SuffixKey {
    const TextProfile* profile;
    int32_t parent;
    bool operator==(const SuffixKey&) const = default;
  };
  struct SuffixKeyHash {
    size_t operator()(const SuffixKey& k) const {
      return std::hash<const void*>()(k.profile) ^ (static_cast<size_t>(k.parent) * 0x9E3779B97F4A7C15ull);
    }
  };
  static constexpr size_t kMaxSuffixCache = 256;
  std::unordered_map<SuffixKey, std::vector<uint8_t>, SuffixKeyHash> suffix_cache_;
  static constexpr size_t kMaxDistanceMemo = 1 << 16;  // entries; dropped wholesale beyond
  std::unordered_map<uint64_t, int32_t> after_memo_;   // (node, carry) -> G
  std::unordered_map<uint64_t, std::vector<int32_t>> sig_best_;  // (text rule, parent)
};

}  // namespace mimo
