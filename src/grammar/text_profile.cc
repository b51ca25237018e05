// TextProfile construction: one preorder walk of the token trie per text state, stepping the
// TextDfa one byte per trie node and skipping the subtree of every dead prefix.
#include "grammar/text_profile.h"

#include <map>

namespace mimo {
namespace {

// Stable counting sort of (count, id) pairs by count (counts are small: token lengths).
void SortByCount(std::vector<std::pair<int16_t, int32_t>>* v) {
  if (v->empty()) return;
  int16_t lo = v->front().first, hi = lo;
  for (const auto& e : *v) {
    lo = std::min(lo, e.first);
    hi = std::max(hi, e.first);
  }
  std::vector<int32_t> start(hi - lo + 2, 0);
  for (const auto& e : *v) ++start[e.first - lo + 1];
  for (size_t i = 1; i < start.size(); ++i) start[i] += start[i - 1];
  std::vector<std::pair<int16_t, int32_t>> out(v->size());
  for (const auto& e : *v) out[start[e.first - lo]++] = e;
  v->swap(out);
}

}  // namespace

std::shared_ptr<const TextProfile> TextProfile::Build(const TextDfa& dfa, const TokenTrie& trie,
                                                      int32_t vocab_size, CompileBudget* budget) {
  auto p = std::make_shared<TextProfile>();
  p->words_ = (vocab_size + 31) / 32;
  p->suffixes_.push_back("");
  std::map<std::string, int32_t> suffix_ids;
  suffix_ids[""] = 0;
  const int32_t num_states = dfa.num_states();
  p->states_.resize(num_states);
  const auto ids = trie.ids();
  // First byte of every token: a donor state's results are reused for the first bytes on which
  // both states step alike.
  std::vector<uint8_t> first_byte(vocab_size, 0);
  for (int32_t n = 1; n < trie.num_nodes(); n = trie.subtree_end(n)) {
    for (int32_t i = trie.token_begin(n); i < trie.token_begin(trie.subtree_end(n)); ++i)
      first_byte[ids[i]] = trie.byte(n);
  }
  std::vector<int32_t> state_at(trie.max_depth() + 1);  // text state after depth d bytes
  std::vector<int16_t> chars_at(trie.max_depth() + 1);  // characters started in those bytes
  std::vector<std::vector<std::pair<int16_t, int32_t>>> inside(num_states);  // by end state
  std::string path;
  std::vector<int32_t> built;
  size_t charged = 0;  // bytes of the states built so far, charged to the budget
  for (int32_t q = 0; q < num_states; ++q) {
    if (q == dfa.end()) continue;
    if (budget != nullptr) {
      const size_t b = p->bytes();
      if (!budget->ChargeBytes(static_cast<int64_t>(b - charged)).ok() || !budget->Check().ok())
        return nullptr;
      charged = b;
    }
    StateTokens& st = p->states_[q];
    for (auto& v : inside) v.clear();
    std::map<int32_t, std::vector<std::pair<int16_t, int32_t>>> exits;  // suffix -> (value, id)
    // The built state that steps like q on the most first bytes (the states of a terminator
    // being matched differ from the body state on one byte each).
    bool walk_first[256];
    std::fill(walk_first, walk_first + 256, true);
    int32_t donor = -1, best_diff = 17;
    for (int32_t d : built) {
      int diff = 0;
      for (int b = 0; b < 256 && diff < best_diff; ++b)
        diff += dfa.Next(q, b) != dfa.Next(d, b) || dfa.Starts(q, b) != dfa.Starts(d, b);
      if (diff < best_diff) {
        best_diff = diff;
        donor = d;
      }
    }
    if (donor >= 0) {
      for (int b = 0; b < 256; ++b)
        walk_first[b] = dfa.Next(q, b) != dfa.Next(donor, b) || dfa.Starts(q, b) != dfa.Starts(donor, b);
      const StateTokens& ds = p->states_[donor];
      for (const InsideGroup& g : ds.inside) {
        for (int32_t i = g.begin; i < g.end; ++i) {
          if (!walk_first[first_byte[ds.inside_ids[i]]])
            inside[g.end_state].emplace_back(ds.inside_chars[i], ds.inside_ids[i]);
        }
      }
      for (const ExitGroup& g : ds.exits) {
        for (int32_t i = g.begin; i < g.end; ++i) {
          if (!walk_first[first_byte[ds.exit_ids[i]]])
            exits[g.suffix].emplace_back(ds.exit_value[i], ds.exit_ids[i]);
        }
      }
    }
    state_at[0] = q;
    chars_at[0] = 0;
    int32_t n = 1;
    while (n < trie.num_nodes()) {
      const int32_t d = trie.depth(n);
      const int32_t from = state_at[d - 1];
      const uint8_t b = trie.byte(n);
      const int32_t r = dfa.Next(from, b);
      if (r < 0 || (d == 1 && !walk_first[b])) {
        n = trie.subtree_end(n);
        continue;
      }
      const int16_t c = static_cast<int16_t>(chars_at[d - 1] + dfa.Starts(from, b));
      if (r == dfa.end()) {
        // Every token of this subtree ends the text here; the rest of it is a suffix.
        const int16_t value = static_cast<int16_t>(c - dfa.pending(r));
        path.clear();
        for (int32_t m = n; m < trie.subtree_end(n); ++m) {
          if (m > n) {
            path.resize(trie.depth(m) - d - 1);
            path.push_back(static_cast<char>(trie.byte(m)));
          }
          for (int32_t i = trie.token_begin(m); i < trie.token_begin(m + 1); ++i) {
            auto [it, fresh] = suffix_ids.emplace(path, static_cast<int32_t>(p->suffixes_.size()));
            if (fresh) p->suffixes_.push_back(path);
            exits[it->second].emplace_back(value, ids[i]);
          }
        }
        n = trie.subtree_end(n);
        continue;
      }
      state_at[d] = r;
      chars_at[d] = c;
      for (int32_t i = trie.token_begin(n); i < trie.token_begin(n + 1); ++i)
        inside[r].emplace_back(c, ids[i]);
      ++n;
    }
    p->Finish(dfa, &inside, &exits, &st);
    built.push_back(q);
  }
  std::vector<std::pair<int32_t, std::string>> entries;
  for (size_t i = 1; i < p->suffixes_.size(); ++i)
    entries.emplace_back(static_cast<int32_t>(i), p->suffixes_[i]);
  p->suffix_trie_ = TokenTrie::Build(std::move(entries));
  if (budget != nullptr && !budget->ChargeBytes(static_cast<int64_t>(p->bytes() - charged)).ok())
    return nullptr;
  return p;
}

// Sorts each state's tokens by character count into groups, with bitsets for large groups.
void TextProfile::Finish(
    const TextDfa& dfa, std::vector<std::vector<std::pair<int16_t, int32_t>>>* inside,
    std::map<int32_t, std::vector<std::pair<int16_t, int32_t>>>* exits, StateTokens* st) const {
  for (int32_t r = 0; r < dfa.num_states(); ++r) {
    auto& list = (*inside)[r];
    if (list.empty()) continue;
    SortByCount(&list);
    InsideGroup g{r, static_cast<int32_t>(st->inside_ids.size()), 0, -1, {}};
    for (auto [chars, id] : list) {
      st->inside_chars.push_back(chars);
      st->inside_ids.push_back(id);
    }
    g.end = static_cast<int32_t>(st->inside_ids.size());
    if (static_cast<int64_t>(list.size()) * 32 >= words_) {
      g.bits = static_cast<int32_t>(st->group_bits.size());
      st->group_bits.emplace_back(words_, 0);
      for (auto [chars, id] : list) SetBit(st->group_bits.back().data(), id);
      // Prefix sets by character count, while they differ from the whole group (for the
      // built-in strings, whose maxLength bounds are common; 16 bitsets per group).
      const int16_t max_chars = dfa.counts_freely() ? list.back().first : 0;
      std::vector<uint32_t> bits(words_, 0);
      size_t i = 0;
      for (int16_t c = 0; c < kPrefixLevels && c < max_chars; ++c) {
        while (i < list.size() && list[i].first <= c) SetBit(bits.data(), list[i++].second);
        g.prefix_bits.push_back(static_cast<int32_t>(st->group_bits.size()));
        st->group_bits.push_back(bits);
      }
    }
    st->inside.push_back(std::move(g));
  }
  for (auto& [suffix, list] : *exits) {
    SortByCount(&list);
    ExitGroup g{suffix, static_cast<int32_t>(st->exit_ids.size()), 0};
    for (auto [value, id] : list) {
      st->exit_value.push_back(value);
      st->exit_ids.push_back(id);
    }
    g.end = static_cast<int32_t>(st->exit_ids.size());
    st->exits.push_back(g);
  }
}

size_t TextProfile::bytes() const {
  size_t b = 0;
  for (const StateTokens& st : states_) {
    b += st.inside_ids.size() * 6 + st.exit_ids.size() * 6;
    for (const auto& bits : st.group_bits) b += bits.size() * 4;
  }
  for (const auto& s : suffixes_) b += s.size();
  return b;
}

}  // namespace mimo
