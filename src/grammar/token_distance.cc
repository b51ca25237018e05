// TokenDistance construction: a table per text rule (exits by signature, breadth-first over the
// inside tokens), the outcome groups of every consuming general state (one pruned walk of the
// token trie each, as StateMaskTable), then the least fixed point of Exit and After.
#include "grammar/token_distance.h"

#include <algorithm>
#include <deque>
#include <map>
#include <unordered_map>

#include "core/check.h"
#include "grammar/stack_arena.h"

namespace mimo {
namespace {

constexpr int32_t kMaxSweeps = 256;  // a safety net; the tables are sound at any sweep

int32_t AddCost(int32_t a, int32_t b) { return std::min(kNoEnd, a + b); }

// dst[c] = min(dst[c], src[c] + add) for every entry of src.
void MinInto(CostMap* dst, const CostMap& src, int32_t add) {
  if (src.empty()) return;
  CostMap out;
  out.reserve(dst->size() + src.size());
  size_t i = 0, j = 0;
  while (i < dst->size() || j < src.size()) {
    if (j == src.size() || (i < dst->size() && (*dst)[i].carry < src[j].carry)) {
      out.push_back((*dst)[i++]);
    } else if (i == dst->size() || src[j].carry < (*dst)[i].carry) {
      out.push_back({src[j].carry, AddCost(src[j].tokens, add)});
      ++j;
    } else {
      out.push_back({src[j].carry, std::min((*dst)[i].tokens, AddCost(src[j].tokens, add))});
      ++i;
      ++j;
    }
  }
  dst->swap(out);
}

// Builds a CostMap from entries in any order, keeping the least per carry.
class CostAccumulator {
 public:
  void Add(int32_t carry, int32_t tokens) {
    if (carry >= static_cast<int32_t>(best_.size())) best_.resize(carry + 1, kNoEnd);
    if (best_[carry] == kNoEnd) touched_.push_back(carry);
    best_[carry] = std::min(best_[carry], std::min(tokens, kNoEnd));
  }
  void AddMap(const CostMap& m, int32_t add) {
    for (const CarryCost& e : m) Add(e.carry, AddCost(e.tokens, add));
  }
  CostMap Take() {
    std::sort(touched_.begin(), touched_.end());
    CostMap m;
    m.reserve(touched_.size());
    for (int32_t c : touched_) {
      if (best_[c] < kNoEnd) m.push_back({c, best_[c]});
      best_[c] = kNoEnd;
    }
    touched_.clear();
    return m;
  }

 private:
  std::vector<int32_t> best_;  // [carries] kNoEnd where untouched
  std::vector<int32_t> touched_;
};

// Ranges of node ids, or of counts: inclusive (lo, hi).
using NodeRanges = std::vector<std::pair<int32_t, int32_t>>;
// A text rule's inside moves reversed: [end state] (from state, characters added).
using ReversedMoves = std::vector<std::vector<std::pair<int32_t, int16_t>>>;

struct IdsHash {
  size_t operator()(const std::vector<int32_t>& v) const {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ v.size();
    for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 31);
  }
};

bool SameMap(const CostMap& a, const CostMap& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].carry != b[i].carry || a[i].tokens != b[i].tokens) return false;
  return true;
}

}  // namespace

const CostMap* TokenDistance::After(int32_t state, int32_t carry) const {
  const uint64_t key = static_cast<uint64_t>(state) << 32 | static_cast<uint32_t>(carry);
  auto it = std::lower_bound(after_keys_.begin(), after_keys_.end(), key);
  if (it == after_keys_.end() || *it != key) return nullptr;
  return &after_[it - after_keys_.begin()];
}

size_t TokenDistance::bytes() const {
  size_t b = 0;
  for (const auto& c : carries_) b += c.size() + sizeof(std::string);
  for (const auto& m : exit_) b += m.size() * sizeof(CarryCost);
  for (const auto& m : after_) b += m.size() * sizeof(CarryCost) + sizeof(uint64_t);
  for (const auto& t : texts_)
    b += (t.carries.size() + t.sig_of.size() + t.dist.size() + t.suffix_carry.size()) * 4;
  for (const auto& g : groups_) b += g.tokens.size() * 4 + g.out.size() * sizeof(CarryCost);
  return b;
}

// Single-use; builds one TokenDistance.
class TokenDistanceBuilder {
 public:
  TokenDistanceBuilder(const PushdownAutomaton& pda, const TokenVocabulary& vocab,
                       TokenDistance* out, CompileBudget* budget, int32_t band_from_counts)
      : pda_(pda),
        vocab_(vocab),
        out_(out),
        budget_(budget),
        band_from_counts_(band_from_counts),
        arena_(&pda) {
    out_->carries_.push_back("");
    carry_ids_.emplace("", 0);
    levels_.resize(vocab.trie().max_depth() + 2);
    marks_.resize(levels_.size());
  }

  void Run();

 private:
  struct Frame {
    int32_t state, count;
  };
  // What a token (or a carry) does to a frame: the stacks it leaves that can take the next byte
  // (chains of frames, top first, the last in the frame itself), the carries it leaves the frame
  // with, and whether it ends exactly where the frame returns.
  struct Outcome {
    std::vector<int32_t> chains;
    std::vector<int32_t> carries;
    bool complete = false;
  };
  struct AfterEntry {
    int32_t state, carry;
    Outcome outcome;
    CostMap value;
  };

  int32_t Intern(std::string_view bytes);
  int32_t ChainOf(int32_t node);
  void ChainsOf(const StackSet& set, std::vector<int32_t>* out);
  void BuildText(int32_t t);
  bool BuildTextBanded(int32_t t, const std::map<NodeRanges, int32_t>& sigs,
                       const ReversedMoves& into);
  void WalkState(int32_t s);
  int32_t AfterIndex(int32_t state, int32_t carry);
  CostMap TextExits(int32_t t, int32_t node) const;
  const std::vector<CostMap>& SigAfter(int32_t text_rule, int32_t state);
  CostMap ChainValue(int32_t chain);
  CostMap Compose(const CostMap& in, int32_t state);
  CostMap OutValue(const Outcome& o);
  bool Sweep();

  const PushdownAutomaton& pda_;
  const TokenVocabulary& vocab_;
  TokenDistance* out_;
  CompileBudget* budget_;  // null: unlimited
  int32_t band_from_counts_;
  StackArena arena_;
  std::vector<StackSet> levels_;
  std::vector<size_t> marks_;
  std::unordered_map<std::string, int32_t> carry_ids_;
  std::deque<std::vector<Frame>> chains_;  // a deque: ChainValue holds one while it grows
  std::unordered_map<std::vector<int32_t>, int32_t, IdsHash> chain_ids_;
  std::vector<Outcome> group_outcomes_;        // [out_->groups_]
  std::vector<std::vector<int32_t>> closure_;  // [num_states] chains of the closure
  std::deque<AfterEntry> afters_;
  std::unordered_map<uint64_t, int32_t> after_ids_;
  CostAccumulator compose_acc_, out_acc_;
  std::unordered_map<uint64_t, std::vector<CostMap>> sig_after_;  // (text rule, state), per sweep
};

int32_t TokenDistanceBuilder::Intern(std::string_view bytes) {
  auto [it, fresh] = carry_ids_.emplace(std::string(bytes), out_->num_carries());
  if (fresh) out_->carries_.emplace_back(bytes);
  return it->second;
}

int32_t TokenDistanceBuilder::ChainOf(int32_t node) {
  std::vector<Frame> frames;
  for (int32_t n = node; n >= 0; n = arena_.node(n).parent)
    frames.push_back({arena_.node(n).state, arena_.node(n).count});
  std::vector<int32_t> key;
  key.reserve(frames.size() * 2);
  for (const Frame& f : frames) {
    key.push_back(f.state);
    key.push_back(f.count);
  }
  auto [it, fresh] = chain_ids_.emplace(std::move(key), static_cast<int32_t>(chains_.size()));
  if (fresh) chains_.push_back(std::move(frames));
  return it->second;
}

// The chains of the nodes of a closed set that can take a byte (the others only lead to them).
void TokenDistanceBuilder::ChainsOf(const StackSet& set, std::vector<int32_t>* out) {
  out->clear();
  for (int32_t id : set.nodes)
    if (pda_.state(arena_.node(id).state).consumes) out->push_back(ChainOf(id));
  std::sort(out->begin(), out->end());
  out->erase(std::unique(out->begin(), out->end()), out->end());
}

// A text rule's exits: which (state, count) nodes can leave the string with which carry (a token
// reaching the terminator with the carry as its rest), then, per set of such nodes (signature),
// the fewest inside tokens to reach one, breadth-first on the reversed inside moves.
void TokenDistanceBuilder::BuildText(int32_t t) {
  const PdaTextRule& tr = pda_.text_rule(t);
  const TextDfa& dfa = *tr.dfa;
  const TextProfile& prof = *tr.profile;
  int32_t rule = -1;
  for (int32_t r = 0; r < pda_.num_rules() && rule < 0; ++r)
    if (pda_.rule(r).text == t) rule = r;
  MIMO_CHECK(rule >= 0, "text rule %d has no rule", t);
  const ByteSet& follow = pda_.rule(rule).follow;
  TokenDistance::TextTable& tt = out_->texts_[t];
  tt.cap = tr.max_chars >= 0 ? tr.max_chars + dfa.max_pending() : tr.count_cap;
  const int32_t width = tt.cap + 1;
  // The table has a node per (state, count): charged before anything is sized from it.
  if (budget_ != nullptr &&
      !budget_->ChargeTextNodes(static_cast<int64_t>(dfa.num_states()) * width).ok())
    return;
  tt.width = width;
  tt.nodes = dfa.num_states() * width;
  tt.suffix_carry.assign(prof.num_suffixes(), -1);
  tt.suffix_carry[0] = 0;
  for (int32_t s = 1; s < prof.num_suffixes(); ++s) {
    const std::string_view sv = prof.suffix(s);
    if (follow.Has(static_cast<uint8_t>(sv[0]))) tt.suffix_carry[s] = Intern(sv);
  }
  tt.carries = tt.suffix_carry;
  std::sort(tt.carries.begin(), tt.carries.end());
  tt.carries.erase(std::unique(tt.carries.begin(), tt.carries.end()), tt.carries.end());
  if (!tt.carries.empty() && tt.carries.front() < 0) tt.carries.erase(tt.carries.begin());
  std::unordered_map<int32_t, int32_t> index;  // carry id -> position in tt.carries
  for (size_t i = 0; i < tt.carries.size(); ++i) index[tt.carries[i]] = static_cast<int32_t>(i);
  auto alive = [&](int32_t q, int32_t k) { return q != dfa.end() && tr.Alive(q, k); };
  // Nodes from which each carry can be taken by one token, as increasing disjoint ranges of
  // node ids: from (q, k) a token of an exit group adding v characters leaves within the bounds
  // when min_chars <= k + v <= max_chars, so per state a carry's counts are a union of intervals
  // (a bitset per carry would cost carries x nodes bits: 250 MB for Claude Code's tools).
  using Ranges = NodeRanges;
  std::vector<Ranges> can(tt.carries.size());
  std::map<int32_t, Ranges> counts;  // carry position -> intervals of k, for one state
  // The inside moves reversed, per end state: (from state, characters). A move from node (q, k)
  // reaches (r, k + chars), the count held at count_cap when there is no maximum; the
  // breadth-first search below enumerates a node's predecessors from these (a per-node list
  // would cost a vector and tens of entries for every (state, count): gigabytes for long bounds).
  ReversedMoves into(dfa.num_states());
  std::vector<std::pair<int32_t, std::vector<int16_t>>> moves;  // (end state, distinct chars)
  std::vector<const TextProfile::ExitGroup*> exits;             // groups with a carry
  for (int32_t q = 0; q < dfa.num_states(); ++q) {
    if (q == dfa.end()) continue;
    const TextProfile::StateTokens& st = prof.state(q);
    moves.clear();
    for (const TextProfile::InsideGroup& g : st.inside) {
      moves.emplace_back(g.end_state, std::vector<int16_t>());
      auto it = st.inside_chars.begin() + g.begin, last = st.inside_chars.begin() + g.end;
      for (; it != last; it = std::upper_bound(it, last, *it)) moves.back().second.push_back(*it);
    }
    for (const auto& [r, counts] : moves)
      for (int16_t chars : counts) into[r].emplace_back(q, chars);
    exits.clear();
    for (const TextProfile::ExitGroup& g : st.exits)
      if (tt.suffix_carry[g.suffix] >= 0) exits.push_back(&g);
    if (exits.empty()) continue;
    counts.clear();
    for (const TextProfile::ExitGroup* g : exits) {
      Ranges& ks = counts[index[tt.suffix_carry[g->suffix]]];
      auto it = st.exit_value.begin() + g->begin, last = st.exit_value.begin() + g->end;
      for (; it != last; it = std::upper_bound(it, last, *it)) {
        const int64_t lo = std::max<int64_t>(0, int64_t{tr.min_chars} - *it);
        const int64_t hi =
            tr.max_chars >= 0 ? std::min<int64_t>(tt.cap, int64_t{tr.max_chars} - *it) : tt.cap;
        if (lo <= hi) ks.emplace_back(static_cast<int32_t>(lo), static_cast<int32_t>(hi));
      }
    }
    for (auto& [c, ks] : counts) {
      std::sort(ks.begin(), ks.end());
      Ranges merged;
      for (const auto& [lo, hi] : ks) {
        if (!merged.empty() && lo <= merged.back().second + 1) {
          merged.back().second = std::max(merged.back().second, hi);
        } else {
          merged.emplace_back(lo, hi);
        }
      }
      // Only the nodes that can still complete (a node not alive is in no table).
      for (const auto& [lo, hi] : merged) {
        if (tr.alive.empty()) {
          const int32_t top = tr.max_chars < 0 ? hi : std::min(hi, tr.max_chars + dfa.pending(q));
          if (lo <= top) can[c].emplace_back(tt.node(q, lo), tt.node(q, top));
          continue;
        }
        for (int32_t k = lo; k <= hi; ++k) {
          if (!alive(q, k)) continue;
          if (!can[c].empty() && can[c].back().second == tt.node(q, k) - 1) {
            ++can[c].back().second;
          } else {
            can[c].emplace_back(tt.node(q, k), tt.node(q, k));
          }
        }
      }
    }
  }
  for (auto& v : into) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }
  // Calls f(from node) for every node with an inside move to node (r, k2).
  const bool clamps = tr.max_chars < 0;  // counts above count_cap are held at it
  auto for_each_pred = [&](int32_t r, int32_t k2, auto&& f) {
    for (const auto& [q, chars] : into[r]) {
      int32_t k_lo = k2 - chars, k_hi = k2 - chars;
      if (clamps && k2 == tr.count_cap) k_hi = k2;  // any k with k + chars >= count_cap
      for (int32_t k = std::max(0, k_lo); k <= std::min(k_hi, tt.cap); ++k)
        if (alive(q, k)) f(tt.node(q, k));
    }
  };
  std::map<Ranges, int32_t> sigs;
  tt.sig_of.resize(tt.carries.size());
  for (size_t i = 0; i < tt.carries.size(); ++i) {
    auto [it, fresh] = sigs.emplace(can[i], static_cast<int32_t>(sigs.size()));
    tt.sig_of[i] = it->second;
  }
  tt.num_sigs = static_cast<int32_t>(sigs.size());
  if (BuildTextBanded(t, sigs, into)) return;
  if (budget_ != nullptr &&
      !budget_->ChargeBytes(static_cast<int64_t>(tt.num_sigs) * tt.nodes * 4).ok())
    return;
  tt.dist.assign(static_cast<size_t>(tt.num_sigs) * tt.nodes, kNoEnd);
  std::deque<int32_t> queue;
  for (const auto& [ranges, sig] : sigs) {
    if (budget_ != nullptr && !budget_->Check().ok()) return;
    int32_t* d = tt.dist.data() + static_cast<size_t>(sig) * tt.nodes;
    for (const auto& [lo, hi] : ranges) {
      for (int32_t n = lo; n <= hi; ++n) {
        d[n] = 0;
        queue.push_back(n);
      }
    }
    while (!queue.empty()) {
      const int32_t n = queue.front();
      queue.pop_front();
      for_each_pred(n / width, n % width, [&](int32_t p) {
        if (d[p] != kNoEnd) return;
        d[p] = d[n] + 1;
        queue.push_back(p);
      });
    }
  }
}

// The banded table of a long bounded string (TokenDistance::TextTable), or false when the string
// does not allow one: unbounded (its counts are already capped), an alive table (a language that
// does not count freely), fewer counts than band_from_counts_, or no band to share. sigs: each
// signature's nodes that exit in one token (node ids of the whole table, q * (cap + 1) + k).
//
// With k1 the first count where every exit range has started (min_chars or above) and k2 the last
// count up to which every state's exits are the same as at k1 (and <= max_chars, so every state
// but the end is alive), per signature b(q) is the fewest
// tokens from state q to an exit in the graph of states alone (counts ignored). For k1 <= k <=
// k2 - C * D (C: the most characters an inside token adds, D: the largest finite b), the
// distance from (q, k) is b(q): a shortest path of b(q) tokens stays within k2, and a shorter
// path from (q, k) would also stay within k2 and so be a path of the state graph. An infinite b
// stays infinite: an exit above k2 belongs to an exit range that starts at or below k1, so its
// state is an exit of the state graph. The counts above the band reach only counts above
// them, and those below reach the band or above: both are computed count by count from the top,
// each count's node taking 1 + the least successor (a token adding no characters stays in the
// same count: relaxed until nothing changes), exactly the breadth-first search's distances.
bool TokenDistanceBuilder::BuildTextBanded(int32_t t, const std::map<NodeRanges, int32_t>& sigs,
                                           const ReversedMoves& into) {
  const PdaTextRule& tr = pda_.text_rule(t);
  const TextDfa& dfa = *tr.dfa;
  TokenDistance::TextTable& tt = out_->texts_[t];
  const int32_t states = dfa.num_states(), full = tt.cap + 1;
  if (tr.max_chars < 0 || !tr.alive.empty() || full < band_from_counts_) return false;
  // [sig * states + q]: the counts from which state q exits to the signature in one token.
  std::vector<NodeRanges> exits(static_cast<size_t>(tt.num_sigs) * states);
  for (const auto& [ranges, sig] : sigs) {
    for (const auto& [lo, hi] : ranges) {
      for (int32_t q = lo / full; q <= hi / full; ++q) {
        exits[static_cast<size_t>(sig) * states + q].emplace_back(
            std::max(lo, q * full) - q * full, std::min(hi, q * full + full - 1) - q * full);
      }
    }
  }
  // The band starts where every exit range has started (a token that ends `</parameter>` after
  // its first characters takes them back: its range starts above min_chars) and ends where the
  // first of those reaching it ends.
  int32_t k1 = std::max(0, tr.min_chars);
  for (const NodeRanges& ranges : exits)
    for (const auto& [lo, hi] : ranges) k1 = std::max(k1, lo);
  int32_t k2 = tr.max_chars;
  for (const NodeRanges& ranges : exits)
    for (const auto& [lo, hi] : ranges)
      if (hi >= k1) k2 = std::min(k2, hi);
  auto alive = [&](int32_t q, int32_t k) { return q != dfa.end() && tr.Alive(q, k); };
  auto exits_at = [&](int32_t sig, int32_t q, int32_t k) {
    for (const auto& [lo, hi] : exits[static_cast<size_t>(sig) * states + q])
      if (lo <= k && k <= hi) return true;
    return false;
  };
  std::vector<std::vector<std::pair<int32_t, int16_t>>> succ(states);  // (to state, chars)
  int32_t most_chars = 0;
  for (int32_t r = 0; r < states; ++r) {
    for (const auto& [q, chars] : into[r]) {
      succ[q].emplace_back(r, chars);
      most_chars = std::max<int32_t>(most_chars, chars);
    }
  }
  // b(q) per signature: breadth-first on the state graph from the states that exit in the band.
  std::vector<int32_t> band(static_cast<size_t>(tt.num_sigs) * states, kNoEnd);
  int32_t deepest = 0;
  std::deque<int32_t> queue;
  for (int32_t sig = 0; sig < tt.num_sigs; ++sig) {
    int32_t* b = band.data() + static_cast<size_t>(sig) * states;
    for (int32_t q = 0; q < states; ++q) {
      if (alive(q, k1) && exits_at(sig, q, k1)) {
        b[q] = 0;
        queue.push_back(q);
      }
    }
    for (; !queue.empty(); queue.pop_front()) {
      const int32_t r = queue.front();
      deepest = std::max(deepest, b[r]);
      for (const auto& [q, chars] : into[r]) {
        if (b[q] != kNoEnd || !alive(q, k1)) continue;
        b[q] = b[r] + 1;
        queue.push_back(q);
      }
    }
  }
  const int64_t top = int64_t{k2} - int64_t{most_chars} * deepest;  // the band's last count
  if (top - k1 + 1 < 2) return false;
  tt.band_lo = k1;
  tt.band_len = static_cast<int32_t>(top - k1 + 1);
  tt.width = full - tt.band_len + 1;
  tt.nodes = states * tt.width;
  if (budget_ != nullptr &&
      !budget_->ChargeBytes(static_cast<int64_t>(tt.num_sigs) * tt.nodes * 4).ok())
    return true;
  tt.dist.assign(static_cast<size_t>(tt.num_sigs) * tt.nodes, kNoEnd);
  for (int32_t sig = 0; sig < tt.num_sigs; ++sig) {
    int32_t* d = tt.dist.data() + static_cast<size_t>(sig) * tt.nodes;
    auto count = [&](int32_t k) {  // fills count k from the counts above it
      for (int32_t q = 0; q < states; ++q) {
        if (!alive(q, k)) continue;
        int32_t best = exits_at(sig, q, k) ? 0 : kNoEnd;
        for (const auto& [r, chars] : succ[q]) {
          if (chars == 0 || k + chars > tt.cap) continue;
          const int32_t v = d[tt.node(r, k + chars)];
          if (v != kNoEnd) best = std::min(best, v + 1);
        }
        d[tt.node(q, k)] = best;
      }
      for (bool changed = true; changed;) {
        changed = false;
        for (int32_t q = 0; q < states; ++q) {
          if (!alive(q, k)) continue;
          for (const auto& [r, chars] : succ[q]) {
            const int32_t v = chars == 0 ? d[tt.node(r, k)] : kNoEnd;
            if (v != kNoEnd && v + 1 < d[tt.node(q, k)]) {
              d[tt.node(q, k)] = v + 1;
              changed = true;
            }
          }
        }
      }
    };
    for (int32_t k = tt.cap; k > top; --k) count(k);
    const int32_t* b = band.data() + static_cast<size_t>(sig) * states;
    for (int32_t q = 0; q < states; ++q) d[tt.node(q, k1)] = b[q];
    for (int32_t k = k1 - 1; k >= 0; --k) count(k);
  }
  return true;
}

// One pruned walk of the token trie from the closure of general state s with an open bottom
// (as StateMaskTable::BuildEntry), grouping the tokens by outcome. A token whose bytes continue
// after the frame returned (the closure became complete at depth i, and byte i may follow the
// rule) leaves the frame with carry bytes[i:]; tokens of subtrees the frame itself cannot take
// are then enumerated for their carries.
void TokenDistanceBuilder::WalkState(int32_t s) {
  const TokenTrie& trie = vocab_.trie();
  const auto ids = trie.ids();
  arena_.Truncate(0);
  levels_[0].Clear();
  arena_.Close(arena_.Make(s, 0, -1), &levels_[0]);
  marks_[0] = arena_.size();
  const ByteSet& follow = pda_.rule(pda_.state(s).rule).follow;
  const int32_t first = static_cast<int32_t>(out_->groups_.size());
  std::unordered_map<std::vector<int32_t>, int32_t, IdsHash> index;  // outcome key -> group
  std::vector<int32_t> comp;  // completion depths on the current path
  std::vector<int32_t> chains;
  std::vector<int32_t> key;
  auto add = [&](int32_t id, const std::vector<int32_t>& ch, bool complete) {
    Outcome o;
    o.chains = ch;
    o.complete = complete;
    const std::string_view b = vocab_.bytes(id);
    for (int32_t i : comp)
      if (static_cast<size_t>(i) < b.size() && follow.Has(static_cast<uint8_t>(b[i])))
        o.carries.push_back(Intern(b.substr(i)));
    if (o.chains.empty() && o.carries.empty() && !o.complete) return;  // the token dies here
    std::sort(o.carries.begin(), o.carries.end());
    key.assign(o.chains.begin(), o.chains.end());
    key.push_back(o.complete ? -1 : -2);
    key.insert(key.end(), o.carries.begin(), o.carries.end());
    auto [it, fresh] = index.emplace(key, static_cast<int32_t>(out_->groups_.size()));
    if (fresh) {
      out_->groups_.emplace_back();
      group_outcomes_.push_back(std::move(o));
    }
    out_->groups_[it->second].tokens.push_back(id);
  };
  auto add_range = [&](int32_t from, int32_t to) {  // trie positions [from, to), carries only
    for (int32_t i = from; i < to; ++i) add(ids[i], {}, false);
  };
  int32_t n = 1;
  while (n < trie.num_nodes()) {
    const int32_t d = trie.depth(n);
    while (!comp.empty() && comp.back() >= d) comp.pop_back();
    arena_.Truncate(marks_[d - 1]);
    StackSet& cur = levels_[d];
    arena_.Step(levels_[d - 1], trie.byte(n), &cur);
    marks_[d] = arena_.size();
    if (cur.nodes.empty() && !cur.complete) {
      if (!comp.empty()) add_range(trie.token_begin(n), trie.token_begin(trie.subtree_end(n)));
      n = trie.subtree_end(n);
      continue;
    }
    if (trie.token_begin(n) < trie.token_begin(n + 1)) {
      ChainsOf(cur, &chains);
      for (int32_t i = trie.token_begin(n); i < trie.token_begin(n + 1); ++i)
        add(ids[i], chains, cur.complete);
    }
    if (cur.complete) comp.push_back(d);
    if (cur.nodes.empty()) {  // returned, and nothing of the frame goes on: carries only
      add_range(trie.token_begin(n + 1), trie.token_begin(trie.subtree_end(n)));
      n = trie.subtree_end(n);
      continue;
    }
    ++n;
  }
  for (int32_t g = first; g < static_cast<int32_t>(out_->groups_.size()); ++g)
    std::sort(out_->groups_[g].tokens.begin(), out_->groups_[g].tokens.end());
  out_->group_range_[s] = {first, static_cast<int32_t>(out_->groups_.size())};
}

// The frame of general state `state` receiving the carry: simulated byte by byte from its
// closure, with an open bottom.
int32_t TokenDistanceBuilder::AfterIndex(int32_t state, int32_t carry) {
  const uint64_t key = static_cast<uint64_t>(state) << 32 | static_cast<uint32_t>(carry);
  auto it = after_ids_.find(key);
  if (it != after_ids_.end()) return it->second;
  AfterEntry e;
  e.state = state;
  e.carry = carry;
  const std::string bytes(out_->carry(carry));  // a copy: Intern may grow the table
  const ByteSet& follow = pda_.rule(pda_.state(state).rule).follow;
  arena_.Truncate(0);
  StackSet a, b;
  arena_.Close(arena_.Make(state, 0, -1), &a);
  // The frame may return at once: the whole carry goes on down.
  if (a.complete && follow.Has(static_cast<uint8_t>(bytes[0]))) e.outcome.carries.push_back(carry);
  bool alive = true;
  for (size_t i = 0; i < bytes.size() && alive; ++i) {
    arena_.Step(a, static_cast<uint8_t>(bytes[i]), &b);
    if (b.nodes.empty() && !b.complete) {
      alive = false;
    } else if (i + 1 < bytes.size()) {
      if (b.complete && follow.Has(static_cast<uint8_t>(bytes[i + 1])))
        e.outcome.carries.push_back(Intern(std::string_view(bytes).substr(i + 1)));
      if (b.nodes.empty()) alive = false;
    }
    std::swap(a, b);
  }
  if (alive) {
    ChainsOf(a, &e.outcome.chains);
    e.outcome.complete = a.complete;
  }
  std::sort(e.outcome.carries.begin(), e.outcome.carries.end());
  e.outcome.carries.erase(std::unique(e.outcome.carries.begin(), e.outcome.carries.end()),
                          e.outcome.carries.end());
  const int32_t id = static_cast<int32_t>(afters_.size());
  afters_.push_back(std::move(e));
  after_ids_.emplace(key, id);
  return id;
}

CostMap TokenDistanceBuilder::TextExits(int32_t t, int32_t node) const {
  const TokenDistance::TextTable& tt = out_->texts_[t];
  CostMap m;
  for (size_t i = 0; i < tt.carries.size(); ++i) {
    const int32_t d = tt.at(tt.sig_of[i], node);
    if (d < kNoEnd) m.push_back({tt.carries[i], d + 1});
  }
  return m;
}

// The exits of the frame at `state` after its callee left with the carries of `in`.
CostMap TokenDistanceBuilder::Compose(const CostMap& in, int32_t state) {
  CostAccumulator& acc = compose_acc_;  // not re-entered: AfterIndex composes nothing
  for (const CarryCost& e : in) {
    if (e.carry == 0) {
      acc.AddMap(out_->exit_[state], e.tokens);
      if (out_->exits_now_[state]) acc.Add(0, e.tokens);
    } else {
      acc.AddMap(afters_[AfterIndex(state, e.carry)].value, e.tokens);
    }
  }
  return acc.Take();
}

// The exits of the frame at `state` once a string called from it returned, per exit signature
// of the string: the least over the signature's carries (cached for the sweep; stale entries
// only hold larger values, which the next sweep lowers).
const std::vector<CostMap>& TokenDistanceBuilder::SigAfter(int32_t t, int32_t state) {
  const uint64_t key = static_cast<uint64_t>(t) << 32 | static_cast<uint32_t>(state);
  auto it = sig_after_.find(key);
  if (it != sig_after_.end()) return it->second;
  const TokenDistance::TextTable& tt = out_->texts_[t];
  std::vector<CostMap> per_sig(tt.num_sigs);
  for (size_t i = 0; i < tt.carries.size(); ++i)
    MinInto(&per_sig[tt.sig_of[i]], Compose({{tt.carries[i], 0}}, state), 0);
  return sig_after_.emplace(key, std::move(per_sig)).first->second;
}

CostMap TokenDistanceBuilder::ChainValue(int32_t chain) {
  const std::vector<Frame>& frames = chains_[chain];
  const PdaState& top = pda_.state(frames[0].state);
  CostMap acc;
  size_t next = 1;
  if (top.text >= 0) {
    const TokenDistance::TextTable& tt = out_->texts_[top.text];
    const int32_t node = tt.node(top.local, frames[0].count);
    if (frames.size() == 1) {
      acc = TextExits(top.text, node);
    } else {  // through the caller's frame, a signature at a time
      const std::vector<CostMap>& after = SigAfter(top.text, frames[1].state);
      for (int32_t sig = 0; sig < tt.num_sigs; ++sig) {
        const int32_t d = tt.at(sig, node);
        if (d < kNoEnd) MinInto(&acc, after[sig], d + 1);
      }
      next = 2;
    }
  } else {
    acc = out_->exit_[frames[0].state];
  }
  for (size_t i = next; i < frames.size() && !acc.empty(); ++i) acc = Compose(acc, frames[i].state);
  return acc;
}

CostMap TokenDistanceBuilder::OutValue(const Outcome& o) {
  CostAccumulator& acc = out_acc_;  // not re-entered: ChainValue only composes
  for (int32_t c : o.chains) acc.AddMap(ChainValue(c), 0);
  for (int32_t c : o.carries) acc.Add(c, 0);
  if (o.complete) acc.Add(0, 0);
  return acc.Take();
}

// One Bellman-Ford pass over Exit (states in decreasing order: the builder numbers a rule's
// states from its start, so later states are nearer its end) and After. True if anything fell.
bool TokenDistanceBuilder::Sweep() {
  bool changed = false;
  sig_after_.clear();
  for (int32_t s = pda_.num_states() - 1; s >= 0; --s) {
    const PdaState& st = pda_.state(s);
    if (st.text >= 0) continue;
    CostMap m;
    const auto [b, e] = out_->group_range_[s];
    for (int32_t g = b; g < e; ++g) MinInto(&m, OutValue(group_outcomes_[g]), 1);
    for (int32_t c : closure_[s]) MinInto(&m, ChainValue(c), 0);
    if (!SameMap(m, out_->exit_[s])) {
      out_->exit_[s] = std::move(m);
      changed = true;
    }
  }
  for (size_t i = 0; i < afters_.size(); ++i) {  // entries may be added meanwhile (a deque)
    CostMap m = OutValue(afters_[i].outcome);
    if (!SameMap(m, afters_[i].value)) {
      afters_[i].value = std::move(m);
      changed = true;
    }
  }
  return changed;
}

void TokenDistanceBuilder::Run() {
  const int32_t n = pda_.num_states();
  out_->exit_.assign(n, {});
  out_->exits_now_.assign(n, 0);
  out_->group_range_.assign(n, {0, 0});
  out_->texts_.resize(pda_.num_text_rules());
  closure_.assign(n, {});
  auto stopped = [&] { return budget_ != nullptr && !budget_->Check().ok(); };
  for (int32_t t = 0; t < pda_.num_text_rules(); ++t) {
    BuildText(t);
    if (stopped()) return;
  }
  for (int32_t s = 0; s < n; ++s) {
    const PdaState& st = pda_.state(s);
    if (st.text >= 0) continue;
    if (stopped()) return;
    arena_.Truncate(0);
    StackSet set;
    arena_.Close(arena_.Make(s, 0, -1), &set);
    out_->exits_now_[s] = set.complete;
    // The closure's stacks: all a non-consuming state has; for a consuming one the walk below
    // covers them, but valuing them too makes the callers' After entries exist for every stack
    // a position can hold (the start's included).
    ChainsOf(set, &closure_[s]);
    closure_[s].erase(std::remove_if(closure_[s].begin(), closure_[s].end(),
                                     [&](int32_t c) {
                                       return chains_[c].size() == 1 && chains_[c][0].state == s;
                                     }),
                      closure_[s].end());
    if (st.consumes) WalkState(s);
  }
  while (Sweep() && ++out_->sweeps_ < kMaxSweeps) {
    if (stopped()) return;
  }
  ++out_->sweeps_;
  for (size_t g = 0; g < out_->groups_.size(); ++g)
    out_->groups_[g].out = OutValue(group_outcomes_[g]);
  std::vector<std::pair<uint64_t, int32_t>> keys;
  for (size_t i = 0; i < afters_.size(); ++i) {
    keys.emplace_back(
        static_cast<uint64_t>(afters_[i].state) << 32 | static_cast<uint32_t>(afters_[i].carry),
        static_cast<int32_t>(i));
  }
  std::sort(keys.begin(), keys.end());
  for (const auto& [k, i] : keys) {
    out_->after_keys_.push_back(k);
    out_->after_.push_back(std::move(afters_[i].value));
  }
}

std::unique_ptr<TokenDistance> TokenDistance::Build(const PushdownAutomaton& pda,
                                                    const TokenVocabulary& vocab,
                                                    CompileBudget* budget,
                                                    int32_t band_from_counts) {
  auto d = std::unique_ptr<TokenDistance>(new TokenDistance());
  TokenDistanceBuilder(pda, vocab, d.get(), budget, band_from_counts).Run();
  if (budget == nullptr) return d;
  size_t tables = 0;  // the text tables' distances, charged as they were sized
  for (const TextTable& t : d->texts_) tables += t.dist.size() * sizeof(int32_t);
  if (!budget->ok() || !budget->ChargeBytes(static_cast<int64_t>(d->bytes() - tables)).ok())
    return nullptr;
  return d;
}

}  // namespace mimo
