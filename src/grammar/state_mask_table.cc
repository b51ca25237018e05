// Precomputation of the per-state token sets: one walk of the token trie per general state,
// simulating the stack from that state with an open bottom.
#include "grammar/state_mask_table.h"

#include <algorithm>

#include "grammar/stack_arena.h"

namespace mimo {
namespace {

// Walks the trie from state `s` and fills `e`.
void BuildEntry(const PushdownAutomaton& pda, const TokenVocabulary& vocab, int32_t s,
                StackArena* arena, std::vector<StackSet>* levels, std::vector<size_t>* marks,
                StateMaskTable::Entry* e) {
  const TokenTrie& trie = vocab.trie();
  const auto ids = trie.ids();
  arena->Truncate(0);
  StackSet& root = (*levels)[0];
  root.Clear();
  arena->Close(arena->Make(s, 0, -1), &root);
  (*marks)[0] = arena->size();
  const ByteSet& follow = pda.rule(pda.state(s).rule).follow;
  std::vector<int32_t> accepted;                     // trie positions, increasing
  std::vector<std::pair<int32_t, int32_t>> pending;  // trie position ranges to decide later
  int32_t n = 1;
  while (n < trie.num_nodes()) {
    const int32_t d = trie.depth(n);
    arena->Truncate((*marks)[d - 1]);
    StackSet& cur = (*levels)[d];
    arena->Step((*levels)[d - 1], trie.byte(n), &cur);
    (*marks)[d] = arena->size();
    if (cur.nodes.empty() && !cur.complete) {
      n = trie.subtree_end(n);
      continue;
    }
    for (int32_t i = trie.token_begin(n); i < trie.token_begin(n + 1); ++i) accepted.push_back(i);
    if (cur.complete) {
      // The frame returned here; longer tokens of this subtree continue in the caller, which
      // can only take a byte that may follow the rule.
      for (int32_t c = n + 1; c < trie.subtree_end(n); c = trie.subtree_end(c)) {
        const int32_t lo = trie.token_begin(c), hi = trie.token_begin(trie.subtree_end(c));
        if (lo < hi && follow.Has(trie.byte(c))) pending.emplace_back(lo, hi);
      }
    }
    n = cur.nodes.empty() ? trie.subtree_end(n) : n + 1;
  }
  // Context-dependent = pending ranges minus accepted positions.
  std::vector<int32_t> uncertain;
  size_t a = 0;
  int32_t covered = 0;
  for (auto [lo, hi] : pending) {
    lo = std::max(lo, covered);
    for (int32_t p = lo; p < hi; ++p) {
      while (a < accepted.size() && accepted[a] < p) ++a;
      if (a < accepted.size() && accepted[a] == p) continue;
      uncertain.push_back(p);
    }
    covered = std::max(covered, hi);
  }
  std::sort(uncertain.begin(), uncertain.end());
  for (int32_t p : uncertain) e->uncertain.push_back(ids[p]);
  if (static_cast<int64_t>(accepted.size()) * 32 >= vocab.mask_words()) {
    e->accept_bits.assign(vocab.mask_words(), 0);
    for (int32_t p : accepted) {
      const int32_t id = ids[p];
      e->accept_bits[id >> 5] |= 1u << (id & 31);
    }
  } else {
    for (int32_t p : accepted) e->accept_ids.push_back(ids[p]);
    std::sort(e->accept_ids.begin(), e->accept_ids.end());
  }
}

}  // namespace

std::unique_ptr<StateMaskTable> StateMaskTable::Build(const PushdownAutomaton& pda,
                                                      const TokenVocabulary& vocab,
                                                      CompileBudget* budget) {
  auto t = std::make_unique<StateMaskTable>();
  t->index_.assign(pda.num_states(), 0);
  t->entries_.emplace_back();
  StackArena arena(&pda);
  std::vector<StackSet> levels(vocab.trie().max_depth() + 1);
  std::vector<size_t> marks(vocab.trie().max_depth() + 1);
  for (int32_t s = 0; s < pda.num_states(); ++s) {
    const PdaState& st = pda.state(s);
    if (st.text >= 0 || !st.consumes) continue;
    t->index_[s] = static_cast<int32_t>(t->entries_.size());
    t->entries_.emplace_back();
    BuildEntry(pda, vocab, s, &arena, &levels, &marks, &t->entries_.back());
    if (budget != nullptr) {
      const Entry& e = t->entries_.back();
      const size_t b = (e.accept_bits.size() + e.accept_ids.size() + e.uncertain.size()) * 4;
      if (!budget->ChargeBytes(static_cast<int64_t>(b)).ok() || !budget->Check().ok())
        return nullptr;
    }
  }
  return t;
}

int64_t StateMaskTable::total_uncertain() const {
  int64_t n = 0;
  for (const Entry& e : entries_) n += static_cast<int64_t>(e.uncertain.size());
  return n;
}

int64_t StateMaskTable::max_uncertain() const {
  int64_t n = 0;
  for (const Entry& e : entries_) n = std::max<int64_t>(n, static_cast<int64_t>(e.uncertain.size()));
  return n;
}

size_t StateMaskTable::bytes() const {
  size_t b = index_.size() * sizeof(int32_t);
  for (const Entry& e : entries_)
    b += (e.accept_bits.size() + e.accept_ids.size() + e.uncertain.size()) * 4;
  return b;
}

}  // namespace mimo
