// GrammarMatcher: masks, token acceptance, rollback.
#include "grammar/grammar_matcher.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/check.h"

namespace mimo {

void MaskLogits(const uint32_t* bitmask, float* logits, int64_t vocab) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t w = 0; w * 32 < vocab; ++w) {
    const uint32_t bits = bitmask[w];
    if (bits == 0xFFFFFFFFu) continue;
    const int64_t end = std::min<int64_t>(vocab, w * 32 + 32);
    for (int64_t i = w * 32; i < end; ++i)
      if (!((bits >> (i & 31)) & 1u)) logits[i] = kNegInf;
  }
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar)
    : grammar_(std::move(grammar)), pda_(&grammar_->pda()), arena_(pda_) {
  arena_.set_interning(true);
  Position start;
  arena_.Close(arena_.Make(pda_->rule(pda_->root_rule()).start, 0, -1), &start.set);
  arena_.set_interning(false);
  history_.push_back(std::move(start));
  levels_.resize(grammar_->vocab().trie().max_depth() + 2);
  scratch_.resize(grammar_->vocab().mask_words());
  marks_.resize(levels_.size());
}

bool GrammarMatcher::CanTerminate() const {
  const Position& p = history_.back();
  return p.eos || p.set.complete;
}

bool GrammarMatcher::IsTerminated() const {
  const Position& p = history_.back();
  if (p.eos) return true;
  if (!p.set.complete) return false;
  for (int32_t id : p.set.nodes)
    if (pda_->state(arena_.node(id).state).consumes) return false;
  return true;
}

void GrammarMatcher::FillNextTokenMask(uint32_t* bitmask, std::span<const int32_t> eos_ids) {
  const int32_t words = grammar_->vocab().mask_words();
  std::memset(bitmask, 0, sizeof(uint32_t) * words);
  last_eos_.assign(eos_ids.begin(), eos_ids.end());
  const Position& p = history_.back();
  if (p.eos) return;
  const size_t base = arena_.size();
  for (int32_t id : p.set.nodes) {
    const PdaState& st = pda_->state(arena_.node(id).state);
    if (!st.consumes) continue;
    if (st.text >= 0) {
      AddTextTokens(id, bitmask);
    } else {
      AddGeneralTokens(id, bitmask);
    }
  }
  arena_.Truncate(base);
  SetEosBits(bitmask, eos_ids, p.set.complete);
}

// An eos id ends the output wherever it is sampled, even one that is also ordinary text (a model
// whose eos is a byte token): allowed only where the grammar may end.
void GrammarMatcher::SetEosBits(uint32_t* bitmask, std::span<const int32_t> eos_ids,
                                bool may_end) const {
  for (int32_t e : eos_ids) {
    if (e < 0 || e >= grammar_->vocab().size()) continue;
    if (may_end) {
      bitmask[e >> 5] |= 1u << (e & 31);
    } else {
      bitmask[e >> 5] &= ~(1u << (e & 31));
    }
  }
}

void GrammarMatcher::AddGeneralTokens(int32_t node, uint32_t* mask) {
  const StateMaskTable::Entry& e = grammar_->masks().entry(arena_.node(node).state);
  if (!e.accept_bits.empty()) {
    const int32_t words = grammar_->vocab().mask_words();
    for (int32_t w = 0; w < words; ++w) mask[w] |= e.accept_bits[w];
  } else {
    for (int32_t id : e.accept_ids) SetBit(mask, id);
  }
  if (e.uncertain.empty()) return;
  // Context-dependent tokens, in trie order: reuse the stack sets of the common prefix with the
  // previous token; a prefix that died kills every token that shares it.
  const TokenVocabulary& vocab = grammar_->vocab();
  const size_t base = arena_.size();
  levels_[0].Clear();
  levels_[0].nodes.push_back(node);
  marks_[0] = base;
  std::string_view prev;
  size_t valid = 0;      // levels_[0..valid] hold prev's prefixes
  size_t dead_at = 0;    // 0: prev did not die; else the level at which it died
  for (int32_t id : e.uncertain) {
    const std::string_view bytes = vocab.bytes(id);
    size_t lcp = 0;
    while (lcp < prev.size() && lcp < bytes.size() && prev[lcp] == bytes[lcp]) ++lcp;
    prev = bytes;
    if (dead_at > 0 && lcp >= dead_at) continue;  // same dead prefix
    size_t d = std::min(lcp, valid);
    dead_at = 0;
    for (; d < bytes.size(); ++d) {
      arena_.Truncate(marks_[d]);
      arena_.Step(levels_[d], static_cast<uint8_t>(bytes[d]), &levels_[d + 1]);
      marks_[d + 1] = arena_.size();
      if (levels_[d + 1].nodes.empty() && !levels_[d + 1].complete) {
        dead_at = d + 1;
        break;
      }
      // A stack that finished the grammar cannot take more bytes.
      if (levels_[d + 1].nodes.empty() && d + 1 < bytes.size()) {
        dead_at = d + 1;
        break;
      }
    }
    valid = dead_at > 0 ? dead_at : bytes.size();
    if (dead_at == 0) SetBit(mask, id);
  }
  arena_.Truncate(base);
}

bool GrammarMatcher::Simulate(int32_t node, std::string_view bytes) {
  const size_t base = arena_.size();
  StackSet cur, next;
  cur.nodes.push_back(node);
  bool ok = true;
  for (char c : bytes) {
    arena_.Step(cur, static_cast<uint8_t>(c), &next);
    if (next.nodes.empty()) {
      ok = false;
      break;
    }
    std::swap(cur, next);
  }
  arena_.Truncate(base);
  return ok;
}

const std::vector<uint8_t>& GrammarMatcher::SuffixResults(const TextProfile* profile,
                                                           int32_t parent) {
  if (suffix_cache_.size() >= kMaxSuffixCache) suffix_cache_.clear();  // long outputs: bounded
  auto [it, fresh] = suffix_cache_.try_emplace(SuffixKey{profile, parent});
  std::vector<uint8_t>& ok = it->second;
  if (!fresh) return ok;
  ok.assign(profile->num_suffixes(), 0);
  if (parent < 0) return ok;  // the grammar ended: nothing may follow
  // A pruned walk of the suffix trie from the parent's closure (as in StateMaskTable).
  const TokenTrie& trie = profile->suffix_trie();
  const auto ids = trie.ids();
  const size_t base = arena_.size();
  levels_[0].Clear();
  arena_.Close(parent, &levels_[0]);
  marks_[0] = arena_.size();
  int32_t n = 1;
  while (n < trie.num_nodes()) {
    const int32_t d = trie.depth(n);
    arena_.Truncate(marks_[d - 1]);
    arena_.Step(levels_[d - 1], trie.byte(n), &levels_[d]);
    marks_[d] = arena_.size();
    if (levels_[d].nodes.empty()) {
      n = trie.subtree_end(n);
      continue;
    }
    for (int32_t i = trie.token_begin(n); i < trie.token_begin(n + 1); ++i) ok[ids[i]] = 1;
    ++n;
  }
  arena_.Truncate(base);
  return ok;
}

void GrammarMatcher::AddTextTokens(int32_t node, uint32_t* mask) {
  const StackNode n = arena_.node(node);
  const PdaState& st = pda_->state(n.state);
  const PdaTextRule& tr = pda_->text_rule(st.text);
  const TextProfile* profile = tr.profile.get();
  const std::vector<uint8_t>& ok = SuffixResults(profile, n.parent);
  profile->FillMask(*tr.dfa, st.local, n.count, tr.bounds(),
                    [&](int32_t s) { return ok[s] != 0; }, mask, scratch_.data());
}

int32_t GrammarMatcher::TokensAfter(int32_t node, int32_t carry) {
  if (node < 0) return carry == 0 ? 1 : kNoEnd;  // the bottom: only the end may follow
  const uint64_t key = static_cast<uint64_t>(node) << 32 | static_cast<uint32_t>(carry);
  if (auto it = after_memo_.find(key); it != after_memo_.end()) return it->second;
  const StackNode n = arena_.node(node);
  const TokenDistance& d = grammar_->distance();
  int32_t best = kNoEnd;
  auto take = [&](const CostMap& m) {
    for (const CarryCost& e : m)
      if (e.tokens < best) best = std::min(best, e.tokens + TokensAfter(n.parent, e.carry));
  };
  if (carry == 0) {
    if (d.ExitsNow(n.state)) best = TokensAfter(n.parent, 0);
    take(d.Exit(n.state));
  } else if (const CostMap* m = d.After(n.state, carry)) {
    take(*m);
  }
  if (after_memo_.size() >= kMaxDistanceMemo) after_memo_.clear();
  after_memo_.emplace(key, best);
  return best;
}

const std::vector<int32_t>& GrammarMatcher::SigBest(int32_t text_rule, int32_t parent) {
  const uint64_t key = static_cast<uint64_t>(text_rule) << 32 | static_cast<uint32_t>(parent);
  if (auto it = sig_best_.find(key); it != sig_best_.end()) return it->second;
  const TokenDistance::TextTable& tt = grammar_->distance().text(text_rule);
  std::vector<int32_t> best(tt.num_sigs, kNoEnd);
  for (size_t i = 0; i < tt.carries.size(); ++i) {
    int32_t& b = best[tt.sig_of[i]];
    b = std::min(b, TokensAfter(parent, tt.carries[i]));
  }
  if (sig_best_.size() >= kMaxSuffixCache) sig_best_.clear();
  return sig_best_.emplace(key, std::move(best)).first->second;
}

int32_t GrammarMatcher::NodeTokensToEnd(int32_t node) {
  const StackNode n = arena_.node(node);
  const PdaState& st = pda_->state(n.state);
  int32_t best = kNoEnd;
  if (st.text >= 0) {
    const TokenDistance::TextTable& tt = grammar_->distance().text(st.text);
    const std::vector<int32_t>& after = SigBest(st.text, n.parent);
    const int32_t at = tt.node(st.local, n.count);
    for (int32_t sig = 0; sig < tt.num_sigs; ++sig)
      best = std::min(best, 1 + tt.at(sig, at) + after[sig]);
  } else {
    for (const CarryCost& e : grammar_->distance().Exit(n.state))
      if (e.tokens < best) best = std::min(best, e.tokens + TokensAfter(n.parent, e.carry));
  }
  return std::min(best, kNoEnd);
}

int32_t GrammarMatcher::TokensToEnd() {
  const Position& p = history_.back();
  if (p.eos) return 0;
  int32_t best = p.set.complete ? 1 : kNoEnd;
  for (int32_t id : p.set.nodes)
    if (pda_->state(arena_.node(id).state).consumes) best = std::min(best, NodeTokensToEnd(id));
  return best;
}

void GrammarMatcher::AddGeneralTokensWithin(int32_t node, int32_t budget, uint32_t* mask) {
  const StackNode n = arena_.node(node);
  for (const TokenDistance::Group& g : grammar_->distance().groups(n.state)) {
    int32_t after = kNoEnd;  // fewest tokens after one of the group's
    for (const CarryCost& e : g.out)
      if (e.tokens <= budget) after = std::min(after, e.tokens + TokensAfter(n.parent, e.carry));
    if (after > budget) continue;
    for (int32_t id : g.tokens) SetBit(mask, id);
  }
}

void GrammarMatcher::AddTextTokensWithin(int32_t node, int32_t budget, uint32_t* mask) {
  const StackNode n = arena_.node(node);
  const PdaState& st = pda_->state(n.state);
  const PdaTextRule& tr = pda_->text_rule(st.text);
  const TokenDistance::TextTable& tt = grammar_->distance().text(st.text);
  const std::vector<int32_t>& after = SigBest(st.text, n.parent);
  // A token staying inside, to (r, k2), leaves the string's exits from there.
  auto inside_ok = [&](int32_t r, int32_t k2) {
    const int32_t at = tt.node(r, k2);
    for (int32_t sig = 0; sig < tt.num_sigs; ++sig)
      if (1 + tt.at(sig, at) + after[sig] <= budget) return true;
    return false;
  };
  // A token leaving it hands its suffix, as a carry, to the parent.
  auto suffix_ok = [&](int32_t s) {
    const int32_t c = tt.suffix_carry[s];
    return c >= 0 && TokensAfter(n.parent, c) <= budget;
  };
  tr.profile->FillMask(*tr.dfa, st.local, n.count, tr.bounds(), suffix_ok, mask, scratch_.data(),
                       inside_ok);
}

void GrammarMatcher::FillMaskWithin(uint32_t* bitmask, std::span<const int32_t> eos_ids,
                                    int32_t remaining) {
  const int32_t words = grammar_->vocab().mask_words();
  std::memset(bitmask, 0, sizeof(uint32_t) * words);
  last_eos_.assign(eos_ids.begin(), eos_ids.end());
  const Position& p = history_.back();
  if (p.eos || remaining < 1) return;
  const int32_t budget = remaining - 1;  // tokens after this one (the end takes at least one)
  if (budget >= 1) {
    for (int32_t id : p.set.nodes) {
      const PdaState& st = pda_->state(arena_.node(id).state);
      if (!st.consumes) continue;
      if (st.text >= 0) {
        AddTextTokensWithin(id, budget, bitmask);
      } else {
        AddGeneralTokensWithin(id, budget, bitmask);
      }
    }
  }
  SetEosBits(bitmask, eos_ids, p.set.complete);
}

bool GrammarMatcher::AcceptToken(int32_t id) {
  const Position& p = history_.back();
  if (p.eos) return false;
  const TokenVocabulary& vocab = grammar_->vocab();
  const bool is_eos = std::find(last_eos_.begin(), last_eos_.end(), id) != last_eos_.end();
  if (is_eos || !vocab.maskable(id)) {  // an eos id ends the match, even one that is also text
    if (!is_eos || !p.set.complete) return false;
    Position end;
    end.eos = true;
    history_.push_back(std::move(end));
    return true;
  }
  return AcceptString(vocab.bytes(id));
}

bool GrammarMatcher::AcceptString(std::string_view bytes) {
  const Position& p = history_.back();
  if (p.eos) return false;
  arena_.set_interning(true);
  StackSet cur = p.set, next;
  bool ok = true;
  for (char c : bytes) {
    arena_.Step(cur, static_cast<uint8_t>(c), &next);
    if (next.nodes.empty()) {
      ok = false;
      break;
    }
    std::swap(cur, next);
  }
  arena_.set_interning(false);
  if (!ok) return false;
  Position np;
  np.set = std::move(cur);
  history_.push_back(std::move(np));
  return true;
}

void GrammarMatcher::Rollback(int num_tokens) {
  MIMO_CHECK(num_tokens >= 0 && num_tokens <= num_accepted(), "Rollback(%d) with %d accepted",
             num_tokens, num_accepted());
  history_.resize(history_.size() - num_tokens);
}

std::string GrammarMatcher::PositionKey() const {
  const Position& p = history_.back();
  std::vector<int32_t> nodes = p.set.nodes;
  std::sort(nodes.begin(), nodes.end());
  std::string key(p.eos ? "E" : p.set.complete ? "C" : "-");
  key.append(reinterpret_cast<const char*>(nodes.data()), nodes.size() * sizeof(int32_t));
  return key;
}

int64_t GrammarMatcher::MinBytesToEnd() const {
  const Position& p = history_.back();
  if (p.eos || p.set.complete) return 0;
  int64_t best = -1;
  for (int32_t id : p.set.nodes) {
    const int64_t d = arena_.DistanceToEnd(id);
    if (best < 0 || d < best) best = d;
  }
  return best;
}

}  // namespace mimo
