// TextProfile: for every state q of a TextDfa, what each vocabulary token does from q: stays inside
// the text (ending in state r after starting c characters), reaches the terminator (with the rest
// of the token, its suffix, left to the enclosing rule), or dies. Built by one trie walk per state;
// a text stack node's mask is then a few bitset copies, a length filter, and one check per
// distinct suffix.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "grammar/compile_budget.h"
#include "grammar/text_dfa.h"
#include "grammar/token_trie.h"

namespace mimo {

inline void SetBit(uint32_t* mask, int32_t id) { mask[id >> 5] |= 1u << (id & 31); }

// Immutable; shared between grammars and threads.
class TextProfile {
 public:
  // Null when the budget ran out part-way (its status says why).
  static std::shared_ptr<const TextProfile> Build(const TextDfa& dfa, const TokenTrie& trie,
                                                  int32_t vocab_size,
                                                  CompileBudget* budget = nullptr);

  // Tokens staying inside and ending in one state.
  struct InsideGroup {
    int32_t end_state;
    int32_t begin, end;  // range of inside_ids / inside_chars, sorted by characters started
    int32_t bits;        // index into group_bits (the same set) or -1 when small
    // Large groups: prefix_bits[c] = index into group_bits of the tokens starting at most c
    // characters, for c < kPrefixLevels (length-bounded strings near their bound).
    std::vector<int32_t> prefix_bits;
  };
  static constexpr int kPrefixLevels = 16;
  // Tokens reaching the terminator, grouped by the suffix left after it.
  struct ExitGroup {
    int32_t suffix;      // index into suffixes(); 0 is the empty suffix
    int32_t begin, end;  // range of exit_ids / exit_value, sorted by value
  };
  struct StateTokens {
    std::vector<InsideGroup> inside;
    std::vector<int32_t> inside_ids;
    std::vector<int16_t> inside_chars;
    std::vector<std::vector<uint32_t>> group_bits;  // [mask words] each
    std::vector<ExitGroup> exits;
    std::vector<int32_t> exit_ids;
    std::vector<int16_t> exit_value;  // characters the token adds to the value
  };

  // How a text stack node's length bounds are checked: alive(state, count) when a table exists,
  // else count - pending(state) <= max_chars (TextDfa::counts_freely).
  struct Bounds {
    int32_t min_chars = 0;
    int32_t max_chars = -1;
    const uint8_t* alive = nullptr;  // [states * (cap + 1)] or null
    int32_t cap = 0;
  };

  const StateTokens& state(int32_t q) const { return states_[q]; }
  std::string_view suffix(int32_t s) const { return suffixes_[s]; }
  int32_t num_suffixes() const { return static_cast<int32_t>(suffixes_.size()); }
  // The non-empty suffixes as a trie (ids are suffix indices), so that the enclosing rules can
  // check them all in one pruned walk.
  const TokenTrie& suffix_trie() const { return suffix_trie_; }
  size_t bytes() const;  // memory held

  // ORs into `mask` the tokens allowed from text state q with k characters started. suffix_ok(s)
  // tells whether the enclosing rules accept suffix s (asked at most once per exit group).
  // scratch: [mask words] of working space. inside_ok(r, k2), when given, further keeps only the
  // tokens staying inside that end in state r with k2 characters started (asked once per such
  // pair of an inside group).
  template <typename SuffixOk>
  void FillMask(const TextDfa& dfa, int32_t q, int32_t k, const Bounds& b, SuffixOk&& suffix_ok,
                uint32_t* mask, uint32_t* scratch) const {
    FillMask(dfa, q, k, b, suffix_ok, mask, scratch, nullptr);
  }
  template <typename SuffixOk, typename InsideOk>
  void FillMask(const TextDfa& dfa, int32_t q, int32_t k, const Bounds& b, SuffixOk&& suffix_ok,
                uint32_t* mask, uint32_t* scratch, InsideOk&& inside_ok) const;

 private:
  void Finish(const TextDfa& dfa, std::vector<std::vector<std::pair<int16_t, int32_t>>>* inside,
              std::map<int32_t, std::vector<std::pair<int16_t, int32_t>>>* exits,
              StateTokens* st) const;

  int32_t words_ = 0;
  std::vector<StateTokens> states_;
  std::vector<std::string> suffixes_;
  TokenTrie suffix_trie_;
};

template <typename SuffixOk, typename InsideOk>
void TextProfile::FillMask(const TextDfa& dfa, int32_t q, int32_t k, const Bounds& b,
                           SuffixOk&& suffix_ok, uint32_t* mask, uint32_t* scratch,
                           InsideOk&& inside_ok) const {
  constexpr bool kFiltered = !std::is_same_v<std::decay_t<InsideOk>, std::nullptr_t>;
  (void)inside_ok;
  const StateTokens& st = states_[q];
  auto or_bits = [&](const std::vector<uint32_t>& bits) {
    for (int32_t w = 0; w < words_; ++w) mask[w] |= bits[w];
  };
  for (const InsideGroup& g : st.inside) {
    // The allowed tokens of a group: those whose character count keeps the node alive.
    auto first = st.inside_chars.begin() + g.begin, last = st.inside_chars.begin() + g.end;
    auto set_range = [&](std::vector<int16_t>::const_iterator lo,
                         std::vector<int16_t>::const_iterator hi) {
      if (lo == hi) return;
      if (g.bits >= 0 && lo == first) {
        if (hi == last) return or_bits(st.group_bits[g.bits]);
        const int16_t c = *(hi - 1);  // every token with at most c characters
        if (c >= 0 && c < static_cast<int16_t>(g.prefix_bits.size()) && (hi == last || *hi > c))
          return or_bits(st.group_bits[g.prefix_bits[c]]);
        if (last - hi < hi - lo) {  // most of the group: copy it, drop the longer ones
          std::copy(st.group_bits[g.bits].begin(), st.group_bits[g.bits].end(), scratch);
          for (auto it = hi; it != last; ++it) {
            const int32_t id = st.inside_ids[it - st.inside_chars.begin()];
            scratch[id >> 5] &= ~(1u << (id & 31));
          }
          for (int32_t w = 0; w < words_; ++w) mask[w] |= scratch[w];
          return;
        }
      }
      for (auto it = lo; it != hi; ++it) SetBit(mask, st.inside_ids[it - st.inside_chars.begin()]);
    };
    if (b.alive == nullptr && !kFiltered) {
      if (b.max_chars < 0) {
        set_range(first, last);
      } else {
        const int room = b.max_chars - k + dfa.pending(g.end_state);
        set_range(first, std::upper_bound(first, last, room));
      }
      continue;
    }
    const size_t stride = static_cast<size_t>(b.cap) + 1;
    auto alive = [&](int16_t c) {
      int64_t k2 = static_cast<int64_t>(k) + c;
      if (b.max_chars < 0) k2 = std::min<int64_t>(k2, b.cap);
      bool ok;
      if (b.alive == nullptr) {
        ok = b.max_chars < 0 || k2 - dfa.pending(g.end_state) <= b.max_chars;
      } else {
        ok = k2 <= b.cap && b.alive[g.end_state * stride + k2];
      }
      if constexpr (kFiltered) ok = ok && inside_ok(g.end_state, static_cast<int32_t>(k2));
      return ok;
    };
    for (auto it = first; it != last;) {
      auto run_end = std::upper_bound(it, last, *it);
      if (alive(*it)) {
        // Extend over following counts that are alive too, to set one range.
        while (run_end != last && alive(*run_end)) run_end = std::upper_bound(run_end, last, *run_end);
        set_range(it, run_end);
      }
      it = run_end;
    }
  }
  // Exits need min <= k + value <= max.
  const int lo = b.min_chars - k;
  const int hi = b.max_chars >= 0 ? b.max_chars - k : 1 << 30;
  for (const ExitGroup& g : st.exits) {
    auto first = st.exit_value.begin() + g.begin, last = st.exit_value.begin() + g.end;
    auto lo_it = std::lower_bound(first, last, lo);
    auto hi_it = std::upper_bound(lo_it, last, hi);
    if (lo_it == hi_it) continue;
    // Unfiltered, the empty suffix (the token ends with the string) is always taken; filtered,
    // it is asked too.
    if ((kFiltered || g.suffix != 0) && !suffix_ok(g.suffix)) continue;
    for (auto it = lo_it; it != hi_it; ++it) SetBit(mask, st.exit_ids[it - st.exit_value.begin()]);
  }
}

}  // namespace mimo
