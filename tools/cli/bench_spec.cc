// `mimo bench spec [--speculative mtp|dflash]`: what a verify step costs against a plain decode
// step, and whether speculative decoding's measured speed-up matches what those costs project.
//   1. Step costs on the model directly, over a prompt of --prompt-len tokens: a 1-token decode
//      step; a verify step of K + 1 tokens (with the distinct experts it reads, each once); the
//      drafting: K MTP passes (one MTP layer + the draft head each, one position), or one DFlash
//      block (the drafter's layers over K + 1 rows with the prompt as its context + the head).
//   2. Projection: speed-up(L) = L * t_decode / (t_verify + t_draft) at accept lengths L = 2, 3,
//      3.6 and at the measured L.
//   3. Measurement: one greedy request of --gen-len tokens (ignore_eos) through the engine with
//      and without the speculator: decode tok/s, accept length, the acceptance rate of each draft
//      position, speed-up.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "cli/command.h"
#include "cli/decode_session.h"
#include "cli/engine_setup.h"
#include "engine/request_stream.h"

namespace mimo::cli {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct StepCosts {
  double decode = 0, verify = 0, draft = 0;   // seconds per step
  double experts_decode = 0, experts_verify = 0;  // distinct experts read per step (all layers)
  double bytes_decode = 0, bytes_verify = 0;
};

// Exactly one of mtp / dflash is set: whose drafting is timed.
StepCosts MeasureSteps(const Args& a, EngineRuntime& rt, MtpSpeculator* mtp,
                       DFlashSpeculator* dflash, int k, const std::vector<int32_t>& prompt,
                       int reps) {
  MimoV2Model& m = *rt.lm.model;
  const int64_t H = m.config().hidden_size, V = m.config().vocab_size;
  PagedKvOptions o;
  KvOptionsFromArgs("bench spec", a, &o);
  o.max_sequences = 1;
  o.max_context = static_cast<int64_t>(prompt.size()) + 4 * reps + 64;
  o.max_chunk_tokens = static_cast<int>(prompt.size());
  o.mtp_sequences_per_sequence = k;
  o.mtp_chunk_tokens = 8;
  ModelConfig kc = m.config();
  kc.layers = m.KvLayerConfigs();
  auto kv = KvCache::Create(kc, o);
  MIMO_CHECK(kv.ok(), "%s", kv.status().message().c_str());
  const int P = static_cast<int>(prompt.size());
  std::vector<float> logits((k + 1) * V), hidden((k + 1 + P) * H);
  DecodeSession session(rt.lm, **kv, 1);
  MIMO_CHECK(session.Prefill(prompt, P).ok(), "prefill");
  StepCosts c;
  std::vector<int32_t> toks(k + 1);
  std::mt19937 rng(7);
  for (int r = 0; r < reps; ++r) {  // decode: one token per step
    toks[0] = static_cast<int32_t>(rng() % V);
    const double t0 = Now();
    MIMO_CHECK(session.Decode(std::span<const int32_t>(toks.data(), 1), hidden.data()).ok(),
               "decode");
    c.decode += Now() - t0;
    c.experts_decode += m.last_forward_stats().distinct_experts;
    c.bytes_decode += m.last_forward_stats().weight_bytes;
  }
  for (int r = 0; r < reps; ++r) {  // verify: K + 1 tokens, then K rolled back
    for (int& t : toks) t = static_cast<int32_t>(rng() % V);
    const int pos = session.position(0);
    StepBatch b;
    b.chunks.push_back({0, 0, k + 1, pos});
    b.num_tokens = k + 1;
    ForwardOutputs fo;
    fo.logits = logits.data();
    fo.prenorm_hidden = hidden.data();
    const double t0 = Now();
    MIMO_CHECK(session.Step(b, toks.data(), fo).ok(), "verify");
    c.verify += Now() - t0;
    c.experts_verify += m.last_forward_stats().distinct_experts;
    c.bytes_verify += m.last_forward_stats().weight_bytes;
    MIMO_CHECK((*kv)->Rewind(0, pos + 1).ok(), "rewind");
  }
  if (dflash) {  // one block over a context of the prompt's positions (values do not matter)
    const DFlashDrafter& d = dflash->drafter();
    DFlashContext dc;
    const int W = d.config().sliding_window;
    const int ctx_len = W > 0 ? std::min(P, W - 1) : P;
    std::vector<float> feats(static_cast<size_t>(ctx_len) * d.feature_width());
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& f : feats) f = normal(rng);
    d.AppendContext(rt.lm.ctx, dc, feats.data(), ctx_len);
    std::vector<float> dl(static_cast<size_t>(k) * dflash->draft_head().size());
    for (int r = 0; r < reps; ++r) {
      const double t0 = Now();
      d.Draft(rt.lm.ctx, dc, static_cast<int32_t>(rng() % V), k, dl.data(),
              &dflash->draft_head().weight());
      c.draft += Now() - t0;
    }
  } else {  // K MTP passes of one position each, over draft sequences that start at 0
    MtpSpeculator& spec = *mtp;
    std::vector<float> dl(spec.draft_vocab_size());
    for (int d = 0; d < k; ++d) MIMO_CHECK((*kv)->AddDraftSequence(100 + d, 0).ok(), "mtp seq");
    for (int r = 0; r < reps; ++r) {
      const double t0 = Now();
      for (int d = 0; d < k; ++d) {
        StepBatch b;
        b.chunks.push_back({100 + d, 0, 1, r});
        b.num_tokens = 1;
        MtpOutputs mo;
        mo.logits = dl.data();
        mo.head = &spec.draft_head();
        const int32_t tok = static_cast<int32_t>(rng() % V);
        auto plan = (*kv)->PlanStep(b);
        MIMO_CHECK(plan.ok(), "%s", plan.status().message().c_str());
        RunMtpForward(m, rt.lm.ctx, d, **kv, *plan, hidden.data(), &tok, mo);
      }
      c.draft += Now() - t0;
    }
  }
  c.decode /= reps;
  c.verify /= reps;
  c.draft /= reps;
  c.experts_decode /= reps;
  c.experts_verify /= reps;
  c.bytes_decode /= reps;
  c.bytes_verify /= reps;
  return c;
}

struct RunResult {
  double tps = 0, accept = 0;
  std::vector<double> per_pos;  // acceptance rate of draft position 0, 1, ...
};

RunResult Generate(Engine& e, const std::vector<int32_t>& prompt, int gen_len) {
  GenerationRequest g;
  g.prompt_ids = prompt;
  g.sampling.temperature = 0.0f;
  g.stop.max_tokens = gen_len;
  g.stop.ignore_eos = true;
  RequestStream s;
  const EngineStats s0 = e.Stats();
  MIMO_CHECK(e.Submit(g, s.Sink()).ok(), "submit");
  e.RunUntilIdle();
  RequestOutput ev, last;
  int n = 0;
  while (s.Next(&ev, 0.0)) {
    n += static_cast<int>(ev.token_ids.size());
    last = ev;
  }
  const EngineStats s1 = e.Stats();
  RunResult r;
  r.tps = (n - 1) / std::max(1e-9, last.time - last.first_token_time);
  const int64_t drafts = s1.spec_num_drafts - s0.spec_num_drafts;
  r.accept = drafts > 0 ? 1.0 + static_cast<double>(s1.spec_num_accepted_tokens -
                                                     s0.spec_num_accepted_tokens) / drafts
                        : 1.0;
  for (size_t i = 0; i < s1.spec_accepted_per_pos.size() && drafts > 0; ++i) {
    const int64_t before = i < s0.spec_accepted_per_pos.size() ? s0.spec_accepted_per_pos[i] : 0;
    r.per_pos.push_back(static_cast<double>(s1.spec_accepted_per_pos[i] - before) / drafts);
  }
  return r;
}

}  // namespace

int RunBenchSpec(const Args& a) {
  if (!a.Has("model")) {
    std::fprintf(stderr, "bench spec: need --model\n");
    return 2;
  }
  const int prompt_len = static_cast<int>(a.GetInt("prompt-len", 0));
  const int gen_len = static_cast<int>(a.GetInt("gen-len", 128));
  const int reps = static_cast<int>(a.GetInt("reps", 20));
  EngineRuntime plain;
  Args plain_args = a;  // the baseline engine runs without the speculator
  plain_args.Erase("speculative");
  if (!MakeEngineOrReport("bench spec", plain_args, false, 1, &plain)) return 1;
  MimoV2Model& m = *plain.lm.model;
  plain.lm.model->checkpoint().ReadThrough(plain.lm.pool.get(), nullptr);
  // The speculator: MTP (default) or DFlash, with the flags serve takes.
  const bool use_dflash = a.Get("speculative", "mtp") == "dflash";
  if (!use_dflash && a.Get("speculative", "mtp") != "mtp") {
    std::fprintf(stderr, "bench spec: error: --speculative '%s': expected mtp or dflash\n",
                 a.Get("speculative").c_str());
    return 2;
  }
  std::unique_ptr<MtpSpeculator> mtp;
  std::unique_ptr<DFlashSpeculator> dflash;
  int k = 0, draft_vocab = 0;
  if (use_dflash) {
    if (!MakeDFlashOrReport("bench spec", a, m, plain.tok.get(), &dflash)) return 1;
    k = dflash->num_speculative_tokens();
    draft_vocab = dflash->draft_vocab_size();
  } else {
    MtpSpeculatorOptions so;
    so.num_speculative_tokens =
        static_cast<int>(a.GetInt("num-speculative-tokens", std::min(3, m.num_mtp_layers())));
    if (!DraftVocabOrReport("bench spec", a, plain.tok.get(), m.config().vocab_size,
                            &so.draft_vocab)) {
      return 1;
    }
    auto spec = MtpSpeculator::Create(m, so);
    if (!spec.ok()) {
      std::fprintf(stderr, "bench spec: error: %s\n", spec.status().message().c_str());
      return 1;
    }
    mtp = std::move(spec).value();
    k = so.num_speculative_tokens;
    draft_vocab = mtp->draft_vocab_size();
  }
  const char* name = use_dflash ? "DFlash" : "MTP";
  // The prompt: --prompt in the model's chat format when it has a tokenizer (a question it
  // answers at length), padded in front with random ids to --prompt-len (random ids only
  // without a tokenizer: a random-weight checkpoint accepts little anyway).
  std::vector<int32_t> prompt;
  if (plain.tok) {
    prompt = plain.tok->Encode(a.Get(
        "prompt", "<|im_start|>user\nWhat is 27 + 15?<|im_end|>\n<|im_start|>assistant\n"));
  }
  std::mt19937 rng(3);
  while (static_cast<int>(prompt.size()) < std::max(prompt_len, 1)) {
    prompt.insert(prompt.begin(), static_cast<int32_t>(rng() % std::min(m.config().vocab_size, 5000)));
  }
  const StepCosts c = MeasureSteps(a, plain, mtp.get(), dflash.get(), k, prompt, reps);
  std::printf("%s step costs (mean of %d, %zu-token prompt, K = %d, draft vocabulary %d):\n", name,
              reps, prompt.size(), k, draft_vocab);
  std::printf("  decode step (1 token):      %8.2f ms, %6.1f MB of weights, %5.1f distinct experts\n",
              c.decode * 1e3, c.bytes_decode / 1e6, c.experts_decode);
  std::printf("  verify step (%d tokens):     %8.2f ms, %6.1f MB of weights, %5.1f distinct experts (%.2fx the decode step)\n",
              k + 1, c.verify * 1e3, c.bytes_verify / 1e6, c.experts_verify, c.verify / c.decode);
  if (use_dflash) {
    std::printf("  draft (1 DFlash block):      %8.2f ms (%.2fx the decode step)\n", c.draft * 1e3,
                c.draft / c.decode);
  } else {
    std::printf("  draft (%d MTP passes):       %8.2f ms (%.2fx the decode step)\n", k,
                c.draft * 1e3, c.draft / c.decode);
  }
  auto projected = [&](double L) { return L * c.decode / (c.verify + c.draft); };
  std::printf("projected speed-up at accept length 2: %.2fx, 3: %.2fx, %d: %.2fx\n", projected(2),
              projected(3), k + 1, projected(k + 1));
  // Measured through the engine: the plain one, and one with the speculator.
  EngineOptions eo;
  eo.scheduler.max_num_seqs = 1;
  KvOptionsFromArgs("bench spec", a, &eo.kv);
  eo.eos_token_ids = plain.engine->eos_ids();
  if (use_dflash) {
    eo.speculator = std::shared_ptr<Speculator>(std::move(dflash));
  } else {
    eo.speculator = std::shared_ptr<Speculator>(std::move(mtp));
  }
  auto se = Engine::Create(m, plain.lm.ctx, plain.tok.get(), eo);
  if (!se.ok()) {
    std::fprintf(stderr, "bench spec: error: %s\n", se.status().message().c_str());
    return 1;
  }
  Generate(*plain.engine, prompt, 8);  // warm
  const RunResult p = Generate(*plain.engine, prompt, gen_len);
  const RunResult s = Generate(**se, prompt, gen_len);
  std::printf(
      "measured (greedy, %d tokens): plain %.2f tok/s; %s %.2f tok/s at accept length %.2f: "
      "%.2fx (projected at that length: %.2fx)\n",
      gen_len, p.tps, name, s.tps, s.accept, s.tps / p.tps, projected(s.accept));
  std::printf("acceptance per draft position:");
  for (double x : s.per_pos) std::printf(" %.3f", x);
  std::printf("\n");
  return 0;
}

}  // namespace mimo::cli
