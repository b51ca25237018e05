// VerifyDrafts and SampleResidual (see verify.h).
#include "speculative/verify.h"

#include <algorithm>
#include <unordered_map>

namespace mimo {
namespace {

int32_t Draw(const std::vector<TokenProb>& dist, double u) {
  double c = 0.0;
  for (const TokenProb& e : dist) {
    c += e.p;
    if (u < c) return e.id;
  }
  return dist.back().id;
}

double ProbOf(const std::vector<TokenProb>& dist, int32_t id) {
  for (const TokenProb& e : dist) {
    if (e.id == id) return e.p;
  }
  return 0.0;
}

}  // namespace

int32_t SampleResidual(const std::vector<TokenProb>& p, const std::vector<TokenProb>& q,
                       double u) {
  std::unordered_map<int32_t, double> qm;
  for (const TokenProb& e : q) qm[e.id] = e.p;
  std::vector<TokenProb> res;
  double total = 0.0;
  for (const TokenProb& e : p) {
    auto it = qm.find(e.id);
    const double d = e.p - (it == qm.end() ? 0.0 : it->second);
    if (d > 0.0) {
      res.push_back({e.id, d});
      total += d;
    }
  }
  if (res.empty() || total <= 0.0) return Draw(p, u);
  return Draw(res, u * total);
}

VerifyResult VerifyDrafts(Request& r, const float* logits, int64_t vocab,
                          const std::vector<int32_t>& eos_ids, Sampler& sampler) {
  const GenerationRequest& g = *r.params;
  const SamplingParams& sp = g.sampling;
  const int k = static_cast<int>(r.draft.size());
  std::unordered_map<int32_t, int> counts = r.output_counts;  // + the tokens accepted so far
  const bool penalties = sp.frequency_penalty != 0.0f || sp.presence_penalty != 0.0f ||
                         sp.repetition_penalty != 1.0f;
  std::vector<float> work(vocab);  // [vocab] one processed row
  std::vector<uint32_t> allowed;   // [ceil(vocab / 32)] the constraint's mask
  VerifyResult res;
  std::vector<SampledToken>& out = res.tokens;
  for (int i = 0; i <= k; ++i) {
    const float* row = logits + static_cast<int64_t>(i) * vocab;
    work.assign(row, row + vocab);
    std::vector<int32_t> mask;
    if (static_cast<int>(r.output.size()) + i < g.stop.min_tokens) {
      mask = r.stop->MinTokensMask(eos_ids);
    }
    if (r.constraint) {  // the grammar's state after the tokens accepted so far
      allowed.assign((vocab + 31) / 32, 0u);
      r.constraint->FillMask(allowed.data(), eos_ids,
                             r.max_tokens - static_cast<int>(r.output.size()) - i);
      Sampler::ApplyAllowedMask(work.data(), vocab, allowed.data());
    }
    Sampler::ProcessLogits(work.data(), vocab, sp, {r.prompt_unique, &counts}, mask);
    SampledToken t;
    bool accepted = false;
    if (sp.greedy()) {
      t.id = Argmax(work.data(), vocab);
      accepted = i < k && r.draft[i] == t.id;
    } else {
      const std::vector<TokenProb> p = sampler.Distribution(work.data(), vocab, sp);
      if (i < k) {
        const std::vector<TokenProb>& q = r.draft_probs[i];
        const int32_t d = r.draft[i];
        const double pd = ProbOf(p, d), qd = ProbOf(q, d);
        const double u = r.rng.Uniform();
        if (qd > 0.0 && u * qd < pd) {  // u < min(1, pd / qd)
          t.id = d;
          accepted = true;
        } else {
          t.id = SampleResidual(p, q, r.rng.Uniform());
        }
      } else {
        t.id = Draw(p, r.rng.Uniform());
      }
    }
    if (sp.logprobs >= 0) Sampler::RawLogprobs(row, vocab, t.id, sp.logprobs, &t);
    if (r.constraint) r.constraint->Accept(t.id);
    out.push_back(std::move(t));
    if (!accepted) break;
    ++res.num_accepted;
    if (r.constraint && r.constraint->IsTerminated()) break;
    if (penalties) ++counts[out.back().id];
  }
  return res;
}

}  // namespace mimo
