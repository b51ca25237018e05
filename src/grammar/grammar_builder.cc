// Rule compilation into one PushdownAutomaton.
#include "grammar/grammar_builder.h"

#include <algorithm>

#include "core/check.h"
#include "grammar/dfa.h"

namespace mimo {
namespace {

constexpr int32_t kMaxRuleStates = 200000;
constexpr int32_t kInf = 1 << 29;
constexpr int32_t kMaxBoundedLength = 4096;

}  // namespace

GrammarBuilder::GrammarBuilder(CompileBudget* budget) : budget_(budget) {
  if (budget_ != nullptr) nfa_.set_max_states(budget_->limits().max_nfa_states);
}

int32_t GrammarBuilder::DeclareRule(std::string name) {
  rules_.push_back({std::move(name), {}, false, -1});
  return static_cast<int32_t>(rules_.size() - 1);
}

void GrammarBuilder::DefineRule(int32_t rule, Nfa::Frag body) {
  MIMO_CHECK(!rules_[rule].defined, "rule %s defined twice", rules_[rule].name.c_str());
  rules_[rule].body = body;
  rules_[rule].defined = true;
}

StatusOr<int32_t> GrammarBuilder::AddTextRule(std::string name, std::shared_ptr<const TextDfa> dfa,
                                              std::shared_ptr<const TextProfile> profile,
                                              int32_t min_chars, int32_t max_chars) {
  PdaTextRule t;
  t.min_chars = min_chars;
  t.max_chars = max_chars;
  t.count_cap = min_chars + dfa->max_pending();
  if (!dfa->counts_freely() && (min_chars > 0 || max_chars >= 0)) {
    if (std::max(min_chars, max_chars) > kMaxBoundedLength)
      return Unimplemented("JSON schema: minLength/maxLength above %d together with 'pattern', "
                           "'format' or 'enum' are not supported", kMaxBoundedLength);
    t.alive = dfa->AliveTable(min_chars, max_chars, &t.count_cap);
    if (!t.Alive(0, 0))
      return InvalidArgument("JSON schema: no string meets both the pattern/format and the "
                             "length bounds; the schema can never be satisfied");
  }
  t.dfa = std::move(dfa);
  t.profile = std::move(profile);
  texts_.push_back(std::move(t));
  const int32_t r = DeclareRule(std::move(name));
  rules_[r].defined = true;
  rules_[r].text = static_cast<int32_t>(texts_.size() - 1);
  return r;
}

StatusOr<std::shared_ptr<const PushdownAutomaton>> GrammarBuilder::Build(int32_t root) {
  if (budget_ != nullptr) {
    if (nfa_.full()) MIMO_RETURN_IF_ERROR(budget_->ChargeNfaStates(nfa_.wanted()));
    MIMO_RETURN_IF_ERROR(budget_->Check());  // a string's profile may have used it up
  }
  auto pda = std::make_shared<PushdownAutomaton>();
  pda->root_ = root;
  std::vector<Dfa> dfas(rules_.size());
  // Global ids: general rules first, then text rules.
  for (size_t r = 0; r < rules_.size(); ++r) {
    const RuleDef& def = rules_[r];
    MIMO_CHECK(def.defined, "rule %s declared but never defined", def.name.c_str());
    PdaRule pr;
    pr.name = def.name;
    pr.text = def.text;
    if (def.text < 0) {
      auto d = Dfa::Determinize(nfa_, def.body, kMaxRuleStates);
      if (!d.ok()) return Unimplemented("grammar rule %s is too large (%s)", def.name.c_str(),
                                        d.status().message().c_str());
      dfas[r] = d->Trimmed();
      if (budget_ != nullptr) MIMO_RETURN_IF_ERROR(budget_->ChargeStates(dfas[r].num_states()));
      pr.start = pda->num_states();
      pda->states_.resize(pda->states_.size() + dfas[r].num_states());
    }
    pda->rules_.push_back(std::move(pr));
  }
  for (size_t t = 0; t < texts_.size(); ++t) {
    texts_[t].first_state = pda->num_states();
    pda->states_.resize(pda->states_.size() + texts_[t].dfa->num_states());
  }
  for (size_t r = 0; r < rules_.size(); ++r) {
    if (rules_[r].text >= 0) pda->rules_[r].start = texts_[rules_[r].text].first_state;
  }
  pda->text_rules_ = texts_;
  // General states: ranges and calls.
  for (size_t r = 0; r < rules_.size(); ++r) {
    if (rules_[r].text >= 0) continue;
    const Dfa& d = dfas[r];
    const int32_t base = pda->rules_[r].start;
    for (int32_t s = 0; s < d.num_states(); ++s) {
      PdaState& st = pda->states_[base + s];
      st.rule = static_cast<int32_t>(r);
      st.final = d.accepting(s);
      st.range_begin = static_cast<int32_t>(pda->ranges_.size());
      int b = 0;
      while (b < 256) {
        const int32_t t = d.Next(s, b);
        int e = b;
        while (e + 1 < 256 && d.Next(s, e + 1) == t) ++e;
        if (t >= 0) pda->ranges_.push_back({static_cast<uint8_t>(b), static_cast<uint8_t>(e), base + t});
        b = e + 1;
      }
      st.range_end = static_cast<int32_t>(pda->ranges_.size());
      st.call_begin = static_cast<int32_t>(pda->calls_.size());
      for (const Nfa::Call& c : d.calls(s)) pda->calls_.push_back({c.rule, base + c.to, false});
      st.call_end = static_cast<int32_t>(pda->calls_.size());
    }
  }
  for (size_t t = 0; t < texts_.size(); ++t) {
    const PdaTextRule& tr = pda->text_rules_[t];
    for (int32_t q = 0; q < tr.dfa->num_states(); ++q) {
      PdaState& st = pda->states_[tr.first_state + q];
      for (size_t r = 0; r < rules_.size(); ++r)
        if (rules_[r].text == static_cast<int32_t>(t)) st.rule = static_cast<int32_t>(r);
      st.text = static_cast<int32_t>(t);
      st.local = q;
      st.final = q == tr.dfa->end();
      st.consumes = q != tr.dfa->end();
      st.dist = tr.dfa->bytes_to_end(q) < 0 ? kInf : tr.dfa->bytes_to_end(q);
    }
  }
  // Distances to the end of each rule (Bellman-Ford; all weights positive or zero).
  std::vector<int32_t> rule_min(rules_.size(), kInf);
  for (auto& st : pda->states_)
    if (st.text < 0) st.dist = st.final ? 0 : kInf;
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules_.size(); ++r) {
      const PdaRule& pr = pda->rules_[r];
      int32_t m = pda->states_[pr.start].dist;
      if (pr.text >= 0 && m < kInf) m += pda->text_rules_[pr.text].min_chars;
      if (m < rule_min[r]) {
        rule_min[r] = m;
        changed = true;
      }
    }
    for (int32_t s = pda->num_states() - 1; s >= 0; --s) {
      PdaState& st = pda->states_[s];
      if (st.text >= 0) continue;
      int32_t best = st.dist;
      for (const PdaRange& rg : pda->ranges(st)) best = std::min(best, 1 + pda->states_[rg.to].dist);
      for (const PdaCall& c : pda->calls(st)) {
        if (rule_min[c.rule] < kInf && pda->states_[c.ret].dist < kInf)
          best = std::min(best, rule_min[c.rule] + pda->states_[c.ret].dist);
      }
      if (best < st.dist) {
        st.dist = best;
        changed = true;
      }
    }
  }
  if (rule_min[root] >= kInf)
    return InvalidArgument("JSON schema: the schema can never be satisfied");
  // Drop edges into states that cannot complete, and calls of rules that never complete.
  std::vector<PdaRange> ranges;
  std::vector<PdaCall> calls;
  for (auto& st : pda->states_) {
    if (st.text >= 0) continue;
    const int32_t rb = static_cast<int32_t>(ranges.size());
    for (const PdaRange& rg : pda->ranges(st))
      if (pda->states_[rg.to].dist < kInf) ranges.push_back(rg);
    const int32_t cb = static_cast<int32_t>(calls.size());
    for (const PdaCall& c : pda->calls(st))
      if (rule_min[c.rule] < kInf && pda->states_[c.ret].dist < kInf) calls.push_back(c);
    st.range_begin = rb;
    st.range_end = static_cast<int32_t>(ranges.size());
    st.call_begin = cb;
    st.call_end = static_cast<int32_t>(calls.size());
    st.consumes = st.range_end > st.range_begin;
  }
  pda->ranges_ = std::move(ranges);
  pda->calls_ = std::move(calls);
  for (auto& st : pda->states_)
    st.tail = st.text < 0 && st.final && !st.consumes && st.call_begin == st.call_end;
  for (auto& c : pda->calls_) c.tail = pda->states_[c.ret].tail;
  for (size_t r = 0; r < rules_.size(); ++r) pda->rules_[r].min_bytes = rule_min[r];
  MIMO_RETURN_IF_ERROR(CheckLeftRecursion(*pda));
  ComputeFollow(pda.get());
  return std::shared_ptr<const PushdownAutomaton>(std::move(pda));
}

// FIRST bytes of every state, then FOLLOW bytes of every rule (fixed points). The mask
// precomputation uses FOLLOW to drop tokens that leave a rule into a byte no caller accepts.
void GrammarBuilder::ComputeFollow(PushdownAutomaton* pda) {
  const int32_t n = pda->num_states();
  std::vector<ByteSet> first(n);
  for (int32_t s = 0; s < n; ++s) {
    const PdaState& st = pda->states_[s];
    if (st.text >= 0) {
      const TextDfa& d = *pda->text_rules_[st.text].dfa;
      for (int b = 0; b < 256; ++b)
        if (d.Next(st.local, b) >= 0) first[s].Add(static_cast<uint8_t>(b));
      continue;
    }
    for (const PdaRange& r : pda->ranges(st))
      for (int b = r.lo; b <= r.hi; ++b) first[s].Add(static_cast<uint8_t>(b));
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t s = 0; s < n; ++s) {
      const PdaState& st = pda->states_[s];
      if (st.text >= 0) continue;
      for (const PdaCall& c : pda->calls(st)) {
        changed |= first[s].AddAll(first[pda->rules_[c.rule].start]);
        if (pda->rules_[c.rule].min_bytes == 0) changed |= first[s].AddAll(first[c.ret]);
      }
    }
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t s = 0; s < n; ++s) {
      const PdaState& st = pda->states_[s];
      if (st.text >= 0) continue;
      for (const PdaCall& c : pda->calls(st)) {
        PdaRule& callee = pda->rules_[c.rule];
        changed |= callee.follow.AddAll(first[c.ret]);
        if (pda->states_[c.ret].dist == 0)
          changed |= callee.follow.AddAll(ByteSet(pda->rules_[st.rule].follow));
      }
    }
  }
}

// A rule that can call itself (directly or not) before consuming a byte would make the closure
// of a stack infinite.
Status GrammarBuilder::CheckLeftRecursion(const PushdownAutomaton& pda) const {
  const int32_t n = pda.num_rules();
  std::vector<std::vector<int32_t>> first_calls(n);
  for (int32_t r = 0; r < n; ++r) {
    if (pda.rule(r).text >= 0) continue;
    std::vector<int32_t> stack = {pda.rule(r).start};
    std::vector<uint8_t> seen(pda.num_states(), 0);
    seen[stack[0]] = 1;
    while (!stack.empty()) {
      const PdaState& st = pda.state(stack.back());
      stack.pop_back();
      for (const PdaCall& c : pda.calls(st)) {
        first_calls[r].push_back(c.rule);
        if (pda.rule(c.rule).min_bytes == 0 && !seen[c.ret]) {
          seen[c.ret] = 1;
          stack.push_back(c.ret);
        }
      }
    }
  }
  std::vector<uint8_t> color(n, 0);
  std::vector<std::pair<int32_t, size_t>> dfs;
  for (int32_t r0 = 0; r0 < n; ++r0) {
    if (color[r0]) continue;
    dfs.push_back({r0, 0});
    color[r0] = 1;
    while (!dfs.empty()) {
      auto& [r, i] = dfs.back();
      if (i == first_calls[r].size()) {
        color[r] = 2;
        dfs.pop_back();
        continue;
      }
      const int32_t next = first_calls[r][i++];
      if (color[next] == 1)
        return Unimplemented(
            "JSON schema: a recursive '$ref' that can repeat without consuming input (left "
            "recursion through %s) is not supported",
            pda.rule(next).name.c_str());
      if (color[next] == 0) {
        color[next] = 1;
        dfs.push_back({next, 0});
      }
    }
  }
  return Status::Ok();
}

}  // namespace mimo
