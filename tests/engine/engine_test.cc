// The engine on the shipped default model (models/mimo-v2-nano, unpacked by scripts/setup.sh):
// batch invariance (16 mixed requests against each run alone, with and without chunked prefill,
// f32 and bf16 KV), preemption under a small KV budget with unchanged outputs, cancellation
// freeing every block, seeds alone and in a batch, n samples sharing the prompt's blocks, and
// request errors that name what is wrong.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/request_stream.h"
#include "io/checkpoint_fingerprint.h"
#include "kv/prefix_cache_tiers.h"
#include "speculative/dflash_speculator.h"
#include "speculative/mtp_speculator.h"

namespace mimo {
namespace {

const std::string kModel = std::string(MIMO_SOURCE_DIR) + "/models/mimo-v2-nano";

struct Nano {
  std::unique_ptr<MimoV2Model> model;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<ThreadPool> pool;
};

Nano& Load() {
  static Nano n = [] {
    Nano x;
    auto m = MimoV2Model::Load(kModel);
    EXPECT_TRUE(m.ok()) << m.status().message() << " (run scripts/setup.sh)";
    if (m.ok()) x.model = std::move(m).value();
    auto t = Tokenizer::FromFile(kModel + "/tokenizer.json");
    EXPECT_TRUE(t.ok());
    if (t.ok()) x.tok = std::move(t).value();
    x.pool = std::make_unique<ThreadPool>(2);
    return x;
  }();
  return n;
}

std::unique_ptr<Engine> MakeEngine(int max_seqs, int budget, DType kv_dtype = DType::kF32,
                                   int64_t kv_bytes = 0, int block_size = 16,
                                   std::shared_ptr<Speculator> spec = nullptr) {
  Nano& n = Load();
  EngineOptions o;
  o.speculator = spec;
  o.scheduler.max_num_seqs = max_seqs;
  o.scheduler.max_num_batched_tokens = budget;
  o.kv.kv_dtype = kv_dtype;
  o.kv.kv_cache_memory_bytes = kv_bytes;
  o.kv.block_size = block_size;
  auto e = Engine::Create(*n.model, ExecContext{n.pool.get()}, n.tok.get(), o);
  EXPECT_TRUE(e.ok()) << e.status().message();
  return e.ok() ? std::move(e).value() : nullptr;
}

std::vector<int32_t> Chat(const std::string& system, const std::string& user) {
  std::string text;
  if (!system.empty()) text += "<|im_start|>system\n" + system + "<|im_end|>\n";
  text += "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n";
  return Load().tok->Encode(text);
}

// A greedy chat turn that runs max_tokens tokens (past eos).
GenerationRequest GreedyPastEos(const std::string& user, int max_tokens) {
  GenerationRequest g;
  g.prompt_ids = Chat("", user);
  g.sampling.temperature = 0.0f;
  g.stop.max_tokens = max_tokens;
  g.stop.ignore_eos = true;
  return g;
}

// Prompt i of the mixed set: short and long (past the 64-key window and past a 32-token chunk),
// two in three sharing a long system prompt (prefix-cache hits across requests).
std::vector<int32_t> MixedPrompt(int i) {
  const std::string shared =
      "You are MiMo, a helpful assistant. Notes: Venlo lives in Gostead and works as a baker. "
      "Pelden lives in Marrow and works as a painter. Answer briefly and exactly.";
  const char* questions[] = {"Where does Venlo live?", "What is 27 + 15?",
                             "What is Pelden's job?",  "What is 3 + 9?",
                             "Where does Pelden live?", "What is 40 + 1?",
                             "Spell the word garden.", "What is 12 + 19?"};
  const std::string q = questions[i % 8];
  return i % 3 == 0 ? Chat(shared, q) : i % 3 == 1 ? Chat("", q) : Chat(shared + " " + shared, q);
}

// 16 greedy requests over the mixed prompts.
std::vector<GenerationRequest> MixedRequests(int max_tokens) {
  std::vector<GenerationRequest> out;
  for (int i = 0; i < 16; ++i) {
    GenerationRequest g;
    g.prompt_ids = MixedPrompt(i);
    g.sampling.temperature = 0.0f;
    g.stop.max_tokens = max_tokens + (i % 4);
    out.push_back(std::move(g));
  }
  return out;
}

struct Result {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;  // of each chosen token, when asked for
  std::string text;
  RequestOutput last;
};

// Submits everything at once and runs the engine to completion on this thread.
std::vector<Result> RunAll(Engine& e, const std::vector<GenerationRequest>& reqs) {
  std::vector<RequestStream> streams(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto id = e.Submit(reqs[i], streams[i].Sink());
    EXPECT_TRUE(id.ok()) << id.status().message();
  }
  e.RunUntilIdle();
  std::vector<Result> out(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    RequestOutput ev;
    while (streams[i].Next(&ev, 0.0)) {
      out[i].ids.insert(out[i].ids.end(), ev.token_ids.begin(), ev.token_ids.end());
      for (const SampledToken& t : ev.logprobs) out[i].logprobs.push_back(t.logprob);
      out[i].text += ev.text;
      out[i].last = ev;
    }
    EXPECT_TRUE(out[i].last.finished) << "request " << i;
  }
  return out;
}

std::vector<std::vector<int32_t>> Ids(const std::vector<Result>& r) {
  std::vector<std::vector<int32_t>> v;
  for (const Result& x : r) v.push_back(x.ids);
  return v;
}

// Token-identical outputs, and bit-identical logprobs of every chosen token: the logits rows
// themselves must not depend on the batch (a trained model's argmax survives last-bit noise, so
// tokens alone would hide a reduction-order change; the logprobs do not).
TEST(Engine, BatchInvariantGreedyOutputs) {
  std::vector<GenerationRequest> reqs = MixedRequests(10);
  for (auto& g : reqs) g.sampling.logprobs = 0;
  int long_prompts = 0;
  for (const auto& g : reqs) long_prompts += g.prompt_ids.size() > 64;
  ASSERT_GE(long_prompts, 5);  // past the sliding window and the 32-token chunk
  for (DType dt : {DType::kF32, DType::kBF16}) {
    std::vector<Result> alone;
    for (const GenerationRequest& g : reqs) {
      auto e = MakeEngine(1, 4096, dt);
      alone.push_back(RunAll(*e, {g})[0]);
    }
    for (int budget : {32, 4096}) {  // chunked prefill, and whole prompts in one step
      auto e = MakeEngine(16, budget, dt);
      const std::vector<Result> got = RunAll(*e, reqs);
      for (size_t i = 0; i < reqs.size(); ++i) {
        EXPECT_EQ(got[i].ids, alone[i].ids) << "request " << i << " kv " << KvDTypeName(dt)
                                            << " budget " << budget;
        ASSERT_EQ(got[i].logprobs.size(), alone[i].logprobs.size());
        for (size_t t = 0; t < got[i].logprobs.size(); ++t) {
          EXPECT_EQ(F32ToBits(got[i].logprobs[t]), F32ToBits(alone[i].logprobs[t]))
              << "request " << i << " token " << t << " kv " << KvDTypeName(dt) << " budget "
              << budget << ": " << got[i].logprobs[t] << " vs " << alone[i].logprobs[t];
        }
      }
      // With a small budget requests are admitted over several steps, and later ones reuse the
      // shared system prompt's blocks; with a large one all start together and nothing is cached.
      if (budget == 32) {
        EXPECT_GE(got[2].last.num_cached_tokens, 32);
      }
    }
  }
}

TEST(Engine, PreemptionUnderASmallCacheKeepsOutputs) {
  // Every request runs to its max_tokens (past its EOS), so the cache fills the same way
  // whatever the model answers, and preemption has to happen.
  std::vector<GenerationRequest> reqs = MixedRequests(24);
  for (GenerationRequest& g : reqs) g.stop.ignore_eos = true;
  auto ample = MakeEngine(16, 64);
  const auto want = Ids(RunAll(*ample, reqs));
  EXPECT_EQ(ample->Stats().num_preemptions, 0);
  // Full layers of nano: 2 layers x 2 kv heads x (192 + 128) x 4 B = 5 KiB per token. Room for
  // about 3 of the longest sequences' full-attention blocks, plus the fixed SWA blocks.
  const KvMemoryPlan& plan = ample->kv_memory_plan();
  const int64_t swa = plan.num_swa_blocks * plan.swa_bytes_per_block;
  auto small = MakeEngine(16, 64, DType::kF32, swa + 40 * plan.full_bytes_per_block);
  ASSERT_NE(small, nullptr);
  const std::vector<Result> got = RunAll(*small, reqs);
  EXPECT_GT(small->Stats().num_preemptions, 0);
  EXPECT_EQ(Ids(got), want);
  const EngineStats s = small->Stats();
  EXPECT_EQ(s.kv_free_blocks_per_group, s.kv_total_blocks_per_group);  // nothing leaked
}

// report_admission: the first event of each request has no tokens and comes before its prompt
// is computed, with the prefix-cache hit that every later event reports (Anthropic's
// message_start says it); without the flag there is no such event.
TEST(Engine, AdmissionEventCarriesThePrefixHitBeforeAnyToken) {
  auto e = MakeEngine(4, 32);  // chunked prefill: the prompts take several steps
  for (int round = 0; round < 2; ++round) {
    GenerationRequest g = GreedyPastEos("Where does Venlo live?", 3);
    g.prompt_ids = MixedPrompt(0);
    g.report_admission = true;
    std::vector<RequestOutput> events;
    RequestStream s;
    ASSERT_TRUE(e->Submit(g, s.Sink()).ok());
    e->RunUntilIdle();
    RequestOutput ev;
    while (s.Next(&ev, 0.0)) events.push_back(ev);
    ASSERT_GE(events.size(), 2u);
    EXPECT_TRUE(events[0].token_ids.empty());
    EXPECT_FALSE(events[0].finished);
    EXPECT_EQ(events[0].num_output_tokens, 0);
    EXPECT_EQ(events[0].first_token_time, 0.0);
    EXPECT_GT(events[0].first_scheduled_time, 0.0);
    for (const RequestOutput& x : events) {
      EXPECT_EQ(x.num_cached_tokens, events[0].num_cached_tokens);
      EXPECT_EQ(x.num_prompt_tokens, static_cast<int>(g.prompt_ids.size()));
    }
    if (round == 0) {
      EXPECT_EQ(events[0].num_cached_tokens, 0);
    } else {
      EXPECT_GE(events[0].num_cached_tokens, 32);  // the first round's blocks
    }
    EXPECT_EQ(events.back().num_output_tokens, 3);
    EXPECT_TRUE(events.back().finished);
  }
  // Without the flag the first event already holds a token.
  GenerationRequest g = GreedyPastEos("Where does Venlo live?", 2);
  RequestStream s;
  ASSERT_TRUE(e->Submit(g, s.Sink()).ok());
  e->RunUntilIdle();
  RequestOutput ev;
  ASSERT_TRUE(s.Next(&ev, 0.0));
  EXPECT_FALSE(ev.token_ids.empty());
}

TEST(Engine, CancellationFreesEveryBlockAtOnce) {
  auto e = MakeEngine(8, 64);
  e->Start();
  std::vector<RequestStream> streams(6);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 6; ++i) {
    GenerationRequest g;
    g.prompt_ids = MixedRequests(1)[i].prompt_ids;
    g.stop.max_tokens = 1000;
    g.stop.ignore_eos = true;
    auto id = e->Submit(g, streams[i].Sink());
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
  }
  // Wait until every request produced a token, so all hold blocks.
  for (auto& s : streams) {
    RequestOutput ev;
    ASSERT_TRUE(s.Next(&ev, 60.0));
    EXPECT_FALSE(ev.finished);
  }
  EngineStats before = e->Stats();
  EXPECT_LT(before.num_kv_free_blocks, before.num_kv_blocks);
  for (uint64_t id : ids) e->Cancel(id);
  for (auto& s : streams) {
    RequestOutput ev;
    bool aborted = false;
    while (s.Next(&ev, 30.0)) {
      if (ev.finished) {
        aborted = ev.finish_reason == FinishReason::kAbort;
        break;
      }
    }
    EXPECT_TRUE(aborted);
  }
  // The engine publishes its stats after the step that handled the cancellations.
  EngineStats after;
  for (int i = 0; i < 100; ++i) {
    after = e->Stats();
    if (after.num_running == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(after.num_running, 0);
  EXPECT_EQ(after.num_waiting, 0);
  EXPECT_EQ(after.kv_free_blocks_per_group, after.kv_total_blocks_per_group);
  EXPECT_EQ(after.finished[static_cast<int>(FinishReason::kAbort)], 6);
  e->Shutdown();
}

TEST(Engine, SeedsReproduceAloneAndInABatch) {
  std::vector<GenerationRequest> reqs = MixedRequests(12);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].sampling.temperature = 0.9f;
    reqs[i].sampling.top_p = 0.95f;
    reqs[i].sampling.seed = 1000 + i;
  }
  auto batch = MakeEngine(16, 48);
  const auto together = Ids(RunAll(*batch, reqs));
  for (size_t i : {0u, 5u, 11u}) {
    auto e = MakeEngine(1, 4096);
    EXPECT_EQ(RunAll(*e, {reqs[i]})[0].ids, together[i]) << "request " << i;
  }
  reqs[0].sampling.seed = 77;  // another seed gives another sample
  auto e = MakeEngine(1, 4096);
  EXPECT_NE(RunAll(*e, {reqs[0]})[0].ids, together[0]);
}

// Every row of a batch is sampled with its own parameters: eight requests that differ in every
// sampling field (temperature, top_p, top_k, min_p, the three penalties, logit bias, seed) give,
// batched, exactly what each gives alone.
TEST(Engine, DistinctSamplingParametersPerRowEqualEachRequestAlone) {
  std::vector<GenerationRequest> reqs = MixedRequests(14);
  reqs.resize(8);
  const int32_t the = Load().tok->Encode(" the")[0];
  for (size_t i = 0; i < reqs.size(); ++i) {
    SamplingParams& sp = reqs[i].sampling;
    sp.temperature = i == 0 ? 0.0f : 0.3f + 0.2f * static_cast<float>(i);
    sp.top_p = i % 2 ? 0.8f + 0.02f * static_cast<float>(i) : 1.0f;
    sp.top_k = i % 3 == 1 ? 5 + static_cast<int>(i) : 0;
    sp.min_p = i % 4 == 2 ? 0.05f : 0.0f;
    sp.frequency_penalty = i % 3 == 0 ? 0.25f * static_cast<float>(i) : 0.0f;
    sp.presence_penalty = i % 3 == 2 ? 0.5f : 0.0f;
    sp.repetition_penalty = i == 5 ? 1.3f : 1.0f;
    if (i == 6) sp.logit_bias = {{the, 3.0f}};
    sp.seed = 9000 + 17 * i;
    sp.logprobs = 1;
    reqs[i].stop.max_tokens = 20;
    reqs[i].stop.ignore_eos = true;
  }
  auto batch = MakeEngine(16, 64);
  const std::vector<Result> together = RunAll(*batch, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto e = MakeEngine(1, 4096);
    const Result alone = RunAll(*e, {reqs[i]})[0];
    EXPECT_EQ(together[i].ids, alone.ids) << "request " << i;
    EXPECT_EQ(together[i].logprobs, alone.logprobs) << "request " << i;
  }
  // Each row's parameters matter: a row run with the next row's parameters gives another output,
  // so a batch that sampled a row with its neighbour's parameters would be seen above.
  int differ = 0;
  for (size_t i = 0; i + 1 < reqs.size(); ++i) {
    GenerationRequest swapped = reqs[i];
    swapped.sampling = reqs[i + 1].sampling;
    auto e = MakeEngine(1, 4096);
    differ += RunAll(*e, {swapped})[0].ids != together[i].ids;
  }
  EXPECT_GE(differ, 6);
}

TEST(Engine, NSamplesShareThePromptBlocksAndFollowSeedPlusIndex) {
  GenerationRequest g = MixedRequests(1)[2];  // a long prompt
  ASSERT_GT(g.prompt_ids.size(), 64u);
  g.sampling.temperature = 1.0f;
  g.sampling.seed = 5;
  g.stop.max_tokens = 8;
  g.n = 3;
  auto e = MakeEngine(4, 512);
  RequestStream stream(3);
  ASSERT_TRUE(e->Submit(g, stream.Sink()).ok());
  e->RunUntilIdle();
  std::map<int, std::vector<int32_t>> samples;
  std::map<int, int> cached;
  RequestOutput ev;
  while (stream.Next(&ev, 0.0)) {
    samples[ev.index].insert(samples[ev.index].end(), ev.token_ids.begin(), ev.token_ids.end());
    cached[ev.index] = ev.num_cached_tokens;
  }
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_EQ(cached[0], 0);
  const int full_blocks = static_cast<int>(g.prompt_ids.size() - 1) / 16 * 16;
  EXPECT_EQ(cached[1], full_blocks);
  EXPECT_EQ(cached[2], full_blocks);
  // Sample i is the request with seed 5 + i.
  for (int i = 0; i < 3; ++i) {
    GenerationRequest one = g;
    one.n = 1;
    one.sampling.seed = 5 + i;
    auto e1 = MakeEngine(1, 512);
    EXPECT_EQ(RunAll(*e1, {one})[0].ids, samples[i]) << "sample " << i;
  }
}

TEST(Engine, StopStringsAndMaxTokens) {
  GenerationRequest g;
  g.prompt_ids = Chat("", "Where does Venlo live?");
  g.sampling.temperature = 0.0f;
  g.stop.max_tokens = 30;
  auto e = MakeEngine(1, 512);
  const Result free_run = RunAll(*e, {g})[0];
  ASSERT_GT(free_run.text.size(), 8u) << free_run.text;
  // A stop string made of the middle of the free-running answer, spanning tokens.
  const std::string stop = free_run.text.substr(3, 5);
  g.stop.stop = {stop};
  const Result stopped = RunAll(*e, {g})[0];
  EXPECT_EQ(stopped.last.finish_reason, FinishReason::kStop);
  EXPECT_EQ(stopped.last.stop_reason, stop);
  EXPECT_EQ(stopped.text, free_run.text.substr(0, free_run.text.find(stop)));
  g.stop.stop.clear();
  g.stop.max_tokens = 3;
  g.stop.ignore_eos = true;
  const Result len = RunAll(*e, {g})[0];
  EXPECT_EQ(len.ids.size(), 3u);
  EXPECT_EQ(len.last.finish_reason, FinishReason::kLength);
}

TEST(Engine, BadRequestsGetErrorsNamingTheProblem) {
  auto e = MakeEngine(1, 512);
  auto submit = [&](GenerationRequest g) {
    auto r = e->Submit(std::move(g), [](RequestOutput&&) {});
    return r.ok() ? std::string() : r.status().message();
  };
  GenerationRequest g;
  EXPECT_NE(submit(g).find("empty"), std::string::npos);
  g.prompt_ids = {1, 2, 999999};
  EXPECT_NE(submit(g).find("vocabulary"), std::string::npos);
  g.prompt_ids.assign(e->max_model_len(), 5);
  EXPECT_NE(submit(g).find("context length"), std::string::npos);
  g.prompt_ids = {1, 2, 3};
  g.stop.max_tokens = e->max_model_len();
  EXPECT_NE(submit(g).find("max_tokens"), std::string::npos);
  g.stop.max_tokens = 4;
  g.sampling.top_p = 2.0f;
  EXPECT_NE(submit(g).find("top_p"), std::string::npos);
  g.sampling.top_p = 1.0f;
  g.stop.stop = {""};
  EXPECT_NE(submit(g).find("stop"), std::string::npos);
  g.stop.stop = {};
  EXPECT_EQ(submit(g), "");
}


// MTP drafting over the nano model's output vocabulary (models/mimo-v2-nano/nano_used_tokens.json).
std::shared_ptr<Speculator> Mtp(int k, bool chained = false) {
  Nano& n = Load();
  MtpSpeculatorOptions o;
  o.num_speculative_tokens = k;
  o.chained = chained;
  std::ifstream f(kModel + "/nano_used_tokens.json");
  const nlohmann::json j = nlohmann::json::parse(f);
  for (int id : j["output_ids"]) o.draft_vocab.push_back(id);
  auto s = MtpSpeculator::Create(*n.model, o);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return std::shared_ptr<Speculator>(std::move(s).value());
}

// Greedy MTP decoding verifies drafts against the target's own rows, computed batch-invariantly,
// so tokens and logprobs equal plain decoding's, whatever the accept lengths: alone and batched,
// with stop strings and max_tokens cutting inside a verified run, over block sizes that put
// block boundaries and the window edge inside the drafts (rollback).
TEST(EngineSpec, GreedyOutputsAreIdenticalWithMtp) {
  std::vector<GenerationRequest> reqs = MixedRequests(24);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].sampling.logprobs = 0;
    reqs[i].stop.max_tokens = 9 + static_cast<int>(i) * 3;
    if (i % 5 == 0) reqs[i].stop.stop = {" in "};
  }
  for (int block : {16, 4}) {
    // The block size changes where the attention's online softmax rescales: compare within one.
    auto plain = MakeEngine(16, 64, DType::kF32, 0, block);
    const std::vector<Result> want = RunAll(*plain, reqs);
    for (int k : {1, 3}) {
      auto e = MakeEngine(16, 64, DType::kF32, 0, block, Mtp(k));
      const std::vector<Result> got = RunAll(*e, reqs);
      for (size_t i = 0; i < reqs.size(); ++i) {
        EXPECT_EQ(got[i].ids, want[i].ids) << "request " << i << " k " << k << " block " << block;
        EXPECT_EQ(got[i].logprobs, want[i].logprobs) << "request " << i;
        EXPECT_EQ(got[i].text, want[i].text);
        EXPECT_EQ(got[i].last.finish_reason, want[i].last.finish_reason);
      }
      const EngineStats st = e->Stats();
      EXPECT_GT(st.spec_num_drafts, 0);
      // The nano model's MTP heads agree with it most of the time (README: 3.8 of 4 tokens).
      const double accept = 1.0 + static_cast<double>(st.spec_num_accepted_tokens) / st.spec_num_drafts;
      std::printf("block %d k %d: mean accept length %.3f\n", block, k, accept);
      EXPECT_GT(accept, k == 1 ? 1.6 : 2.2) << "k " << k;
      EXPECT_EQ(st.kv_free_blocks_per_group, st.kv_total_blocks_per_group);  // all returned
    }
  }
  // The chained variant (depth k fed by depth k-1) is exact too (acceptance may differ).
  auto plain = MakeEngine(16, 64);
  const std::vector<Result> want = RunAll(*plain, reqs);
  auto e = MakeEngine(16, 64, DType::kF32, 0, 16, Mtp(3, true));
  const std::vector<Result> got = RunAll(*e, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(got[i].ids, want[i].ids) << "chained " << i;
}

// The request options speculative decoding must honour on every verify row, over the mixed
// prompts: penalties (which must count the drafts accepted before a row), logit bias, min_tokens
// (eos masked on the rows before it), stop strings and stop token ids cutting inside a verified
// run, and all of them together, each over a frequency, presence or repetition penalty; 48 of the
// 64 rows run 48 tokens past eos (a trained model repeats itself there, inside draft runs).
// `sampled`: temperature 0.8 and a seed per request (else greedy). Any speculator must give
// greedy outputs identical to plain decoding's on all of them (the DFlash drafter reuses it).
std::vector<GenerationRequest> OptionMatrix(bool sampled) {
  Nano& n = Load();
  const int32_t the = n.tok->Encode(" the")[0];
  const int32_t period = n.tok->Encode(".")[0];
  std::vector<GenerationRequest> reqs;
  for (int row = 0; row < 64; ++row) {
    GenerationRequest g;
    g.prompt_ids = MixedPrompt(row);
    SamplingParams& sp = g.sampling;
    sp.temperature = sampled ? 0.8f : 0.0f;
    if (sampled) sp.seed = 300 + row;
    sp.logprobs = 0;
    // Strong penalties (a trained model's argmax moves only under a large one): frequency,
    // presence or repetition by row.
    switch (row % 3) {
      case 0:
        sp.frequency_penalty = 1.5f;
        break;
      case 1:
        sp.presence_penalty = 2.0f;
        break;
      default:
        sp.repetition_penalty = 2.0f + 0.25f * static_cast<float>(row / 16);
        break;
    }
    if (row < 48) {
      // 48 tokens past eos: the rows that would show a verify row not counting the drafts
      // accepted before it repeat a token inside one verified run (about 1 in 10). Some add a
      // logit bias or min_tokens (neither ends a run early).
      g.stop.max_tokens = 48;
      g.stop.ignore_eos = true;
      if (row % 5 == 1) sp.logit_bias = {{the, 2.0f}, {period, -100.0f}};
      if (row % 5 == 3) {
        g.stop.min_tokens = 12;
        g.stop.ignore_eos = false;
      }
    } else {
      // Stops cutting inside verified runs, and everything together.
      g.stop.max_tokens = 32;
      switch (row % 4) {
        case 0:
          g.stop.stop = {" in ", "."};
          break;
        case 1:
          g.stop.stop_token_ids = {period};
          break;
        case 2:
          g.stop.min_tokens = 16;
          break;
        default:
          sp.logit_bias = {{the, 1.5f}};
          g.stop.min_tokens = 4;
          g.stop.stop = {" is "};
          break;
      }
    }
    reqs.push_back(std::move(g));
  }
  return reqs;
}

// Speculative decoding (MTP at depth 1 and 3) equals plain decoding on the option matrix, greedy:
// tokens, logprobs, text and finish reasons, batched and alone. Seeded sampling draws differently
// with drafts (the distribution, not the draws, is what speculative sampling keeps:
// tests/speculative/verify_test.cc checks it at every draft position under penalties), so
// sampled rows must be reproducible: each row alone equals its draws in the batch.
TEST(EngineSpec, OptionMatrixGreedyEqualsPlainAndSampledReproduces) {
  const std::vector<GenerationRequest> greedy = OptionMatrix(false);
  auto plain = MakeEngine(16, 64);
  const std::vector<Result> want = RunAll(*plain, greedy);
  int differ_from_free = 0;  // rows whose options changed the output (else the test is vacuous)
  {
    std::vector<GenerationRequest> free = greedy;
    for (GenerationRequest& g : free) {
      g.sampling = SamplingParams{};
      g.sampling.temperature = 0.0f;
      g.sampling.logprobs = 0;
      g.stop.min_tokens = 0;
      g.stop.stop.clear();
      g.stop.stop_token_ids.clear();
    }
    auto e = MakeEngine(16, 64);
    const std::vector<Result> got = RunAll(*e, free);
    for (size_t i = 0; i < free.size(); ++i) differ_from_free += got[i].ids != want[i].ids;
  }
  std::printf("options changed %d of %zu greedy outputs\n", differ_from_free, greedy.size());
  EXPECT_GE(differ_from_free, static_cast<int>(greedy.size()) / 2);
  for (int k : {1, 3}) {
    auto e = MakeEngine(16, 64, DType::kF32, 0, 16, Mtp(k));
    const std::vector<Result> got = RunAll(*e, greedy);
    for (size_t i = 0; i < greedy.size(); ++i) {
      EXPECT_EQ(got[i].ids, want[i].ids) << "row " << i << " k " << k;
      EXPECT_EQ(got[i].logprobs, want[i].logprobs) << "row " << i << " k " << k;
      EXPECT_EQ(got[i].text, want[i].text) << "row " << i << " k " << k;
      EXPECT_EQ(got[i].last.finish_reason, want[i].last.finish_reason) << "row " << i;
      EXPECT_EQ(got[i].last.stop_reason, want[i].last.stop_reason) << "row " << i;
    }
    const EngineStats st = e->Stats();
    EXPECT_GT(st.spec_num_accepted_tokens, st.spec_num_drafts / 2) << "k " << k;
    EXPECT_EQ(st.kv_free_blocks_per_group, st.kv_total_blocks_per_group);
  }
  for (size_t i : {0u, 1u, 3u, 51u}) {  // alone: penalties, bias, min_tokens, everything
    auto e = MakeEngine(1, 512, DType::kF32, 0, 16, Mtp(3));
    EXPECT_EQ(RunAll(*e, {greedy[i]})[0].ids, want[i].ids) << "row " << i << " alone";
  }
  const std::vector<GenerationRequest> sampled = OptionMatrix(true);
  auto s1 = MakeEngine(16, 64, DType::kF32, 0, 16, Mtp(3));
  const std::vector<Result> first = RunAll(*s1, sampled);
  for (size_t i : {0u, 2u, 51u}) {
    auto e = MakeEngine(1, 512, DType::kF32, 0, 16, Mtp(3));
    EXPECT_EQ(RunAll(*e, {sampled[i]})[0].ids, first[i].ids) << "sampled row " << i << " alone";
  }
}

// Forwards to a speculator and keeps every proposal: the request's tokens at that moment, its
// drafts and (sampling) their distributions. Optional hooks tamper with a verification's result
// or a request after a proposal (a speculator with a bug).
class RecordingSpeculator final : public Speculator {
 public:
  struct Proposal {
    std::vector<int32_t> tokens;  // prompt + output when the drafts were proposed
    std::vector<int32_t> draft;
    std::vector<std::vector<TokenProb>> probs;
  };
  explicit RecordingSpeculator(std::shared_ptr<Speculator> inner) : inner_(std::move(inner)) {}
  int num_speculative_tokens() const override { return inner_->num_speculative_tokens(); }
  int mtp_sequences_per_sequence() const override { return inner_->mtp_sequences_per_sequence(); }
  int mtp_chunk_tokens() const override { return inner_->mtp_chunk_tokens(); }
  int prefix_hit_margin() const override { return inner_->prefix_hit_margin(); }
  std::vector<int> capture_layers() const override { return inner_->capture_layers(); }
  Status Attach(KvCache& kv, int block_size) override { return inner_->Attach(kv, block_size); }
  void ObserveStep(const SchedulePlan& plan, const float* hidden,
                   std::span<Request* const> reqs) override {
    inner_->ObserveStep(plan, hidden, reqs);
  }
  VerifyResult Verify(Request& r, const float* logits, int64_t vocab,
                      const std::vector<int32_t>& eos_ids, Sampler& sampler) override {
    VerifyResult v = inner_->Verify(r, logits, vocab, eos_ids, sampler);
    if (after_verify) after_verify(r, v);
    return v;
  }
  void Propose(ExecContext& ctx, std::span<Request* const> reqs,
               std::span<const int> max_drafts) override {
    inner_->Propose(ctx, reqs, max_drafts);
    for (Request* r : reqs) {
      if (after_propose) after_propose(*r);
      Proposal p;
      p.tokens = r->prompt();
      p.tokens.insert(p.tokens.end(), r->output.begin(), r->output.end());
      p.draft = r->draft;
      p.probs = r->draft_probs;
      proposals[r->request_id].push_back(std::move(p));
    }
  }

  std::map<uint64_t, std::vector<Proposal>> proposals;  // by request id
  std::function<void(Request&, VerifyResult&)> after_verify;
  std::function<void(Request&)> after_propose;

 private:
  std::shared_ptr<Speculator> inner_;
};

// The drafter's state after the rollback of rejected drafts is what a fresh drafter builds from
// the verified tokens alone: at every step of a sampled request (temperature 1, so each draft
// comes with its distribution), a new request on the same tokens (the last one forced as its
// first output) gets the same first-depth distribution, and the same distribution at every later
// depth whose earlier drafts coincide. A drafter that kept a position computed from a rejected
// draft differs at the depths that read it.
TEST(EngineSpec, DrafterStateAfterRollbackEqualsAFreshDrafters) {
  GenerationRequest a;
  a.prompt_ids = Chat("", "Where does Pelden live?");
  a.sampling.temperature = 1.0f;
  a.sampling.seed = 4;
  a.stop.max_tokens = 40;
  a.stop.ignore_eos = true;
  auto rec = std::make_shared<RecordingSpeculator>(Mtp(3));
  auto e = MakeEngine(1, 512, DType::kF32, 0, 16, rec);
  RunAll(*e, {a});
  ASSERT_EQ(rec->proposals.size(), 1u);
  const std::vector<RecordingSpeculator::Proposal> steps = rec->proposals.begin()->second;
  ASSERT_GE(steps.size(), 8u);
  const EngineStats st = e->Stats();
  ASSERT_LT(st.spec_num_accepted_tokens, st.spec_num_draft_tokens) << "no draft was rejected";
  int compared = 0, later_depths = 0;
  for (size_t s = 1; s < steps.size(); ++s) {
    const RecordingSpeculator::Proposal& want = steps[s];
    // A fresh request on the same tokens: the prompt is all but the last, and a logit bias forces
    // the last as its first output, after which its drafter proposes once.
    GenerationRequest b;
    b.prompt_ids.assign(want.tokens.begin(), want.tokens.end() - 1);
    b.sampling.temperature = 1.0f;
    b.sampling.seed = 1000 + s;
    b.sampling.logit_bias = {{want.tokens.back(), 100.0f}};
    b.stop.max_tokens = 8;  // room for drafts after the first token
    b.stop.ignore_eos = true;
    auto fresh = std::make_shared<RecordingSpeculator>(Mtp(3));
    auto f = MakeEngine(1, 512, DType::kF32, 0, 16, fresh);
    RunAll(*f, {b});
    ASSERT_EQ(fresh->proposals.size(), 1u);
    const RecordingSpeculator::Proposal& got = fresh->proposals.begin()->second.at(0);
    ASSERT_EQ(got.tokens, want.tokens);
    ASSERT_FALSE(got.probs.empty());
    ASSERT_FALSE(want.probs.empty());
    // The logit bias acts on the target only: the drafter's distributions are its own.
    for (size_t k = 0; k < std::min(got.probs.size(), want.probs.size()); ++k) {
      if (k > 0 && got.draft[k - 1] != want.draft[k - 1]) break;  // different inputs from here
      ASSERT_EQ(got.probs[k].size(), want.probs[k].size()) << "step " << s << " depth " << k;
      for (size_t j = 0; j < got.probs[k].size(); ++j) {
        EXPECT_EQ(got.probs[k][j].id, want.probs[k][j].id) << "step " << s << " depth " << k;
        EXPECT_NEAR(got.probs[k][j].p, want.probs[k][j].p, 1e-6) << "step " << s << " depth " << k;
      }
      ++compared;
      later_depths += k > 0;
    }
  }
  std::printf("compared %d draft distributions (%d at depth >= 1)\n", compared, later_depths);
  EXPECT_GE(later_depths, 10);
}

// A speculator bug ends the requests it touches with an error naming it; it never corrupts the
// sequence nor spins the engine. A verification that counts a rejected draft as accepted (the
// result no longer starts with the drafts) is refused; a request whose computed count a bug
// pushed past its tokens cannot be scheduled again, and the step that finds nothing to run ends
// the requests instead of looping (RunUntilIdle returns).
TEST(EngineSpec, SpeculatorBugsEndRequestsWithAnErrorNotAHang) {
  const GenerationRequest g = GreedyPastEos("What is 27 + 15?", 40);
  {
    auto spec = std::make_shared<RecordingSpeculator>(Mtp(3));
    spec->after_verify = [](Request& r, VerifyResult& v) {
      if (v.num_accepted < static_cast<int>(r.draft.size())) ++v.num_accepted;  // one too many
    };
    auto e = MakeEngine(4, 64, DType::kF32, 0, 16, spec);
    const Result got = RunAll(*e, {g, g})[0];
    EXPECT_EQ(got.last.finish_reason, FinishReason::kError);
    EXPECT_NE(got.last.error.find("draft verification"), std::string::npos) << got.last.error;
    const EngineStats st = e->Stats();
    EXPECT_EQ(st.kv_free_blocks_per_group, st.kv_total_blocks_per_group);
  }
  {
    auto spec = std::make_shared<RecordingSpeculator>(Mtp(3));
    spec->after_propose = [](Request& r) {
      r.num_computed = r.num_tokens_with_spec();  // nothing left to compute: never scheduled
    };
    auto e = MakeEngine(4, 64, DType::kF32, 0, 16, spec);
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<Result> got = RunAll(*e, {g, g});
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
    for (const Result& r : got) {
      EXPECT_EQ(r.last.finish_reason, FinishReason::kError);
      EXPECT_NE(r.last.error.find("cannot advance"), std::string::npos) << r.last.error;
    }
  }
}

// Blocks written during drafting are published to the prefix cache only with verified content:
// a later request whose prompt is an earlier request's prompt + output reuses those blocks and
// continues exactly as the earlier request did.
TEST(EngineSpec, PrefixCacheAfterRollbackServesVerifiedContent) {
  const GenerationRequest a = GreedyPastEos("What is 27 + 15?", 160);
  auto plain = MakeEngine(1, 512, DType::kF32, 0, 4);
  const std::vector<int32_t> out = RunAll(*plain, {a})[0].ids;
  ASSERT_EQ(out.size(), 160u);
  GenerationRequest b = a;
  b.prompt_ids.insert(b.prompt_ids.end(), out.begin(), out.begin() + 130);
  b.stop.max_tokens = 30;
  // One sequence at a time: b starts after a, on the blocks a published while drafting.
  auto e = MakeEngine(1, 512, DType::kF32, 0, 4, Mtp(3));
  const std::vector<Result> got = RunAll(*e, {a, b});
  EXPECT_EQ(got[0].ids, out);
  EXPECT_EQ(got[1].ids, std::vector<int32_t>(out.begin() + 130, out.end()));
  // A hit reaching into the decoded part (blocks written by verify steps), less the drafter's
  // margin (window 64 + 3 drafts): the prompt of b is ~22 tokens + 130.
  EXPECT_GE(got[1].last.num_cached_tokens, static_cast<int>(b.prompt_ids.size()) - 64 - 3 - 4);
  EXPECT_GT(got[1].last.num_cached_tokens, static_cast<int>(a.prompt_ids.size()));
}

TEST(EngineSpec, SampledOutputsReproduceWithASeed) {
  std::vector<GenerationRequest> reqs = MixedRequests(16);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].sampling.temperature = 0.8f;
    reqs[i].sampling.top_p = 0.9f;
    reqs[i].sampling.seed = 50 + i;
  }
  auto e1 = MakeEngine(16, 64, DType::kF32, 0, 16, Mtp(3));
  auto e2 = MakeEngine(16, 64, DType::kF32, 0, 16, Mtp(3));
  const auto first = Ids(RunAll(*e1, reqs));
  EXPECT_EQ(Ids(RunAll(*e2, reqs)), first);
  auto alone = MakeEngine(1, 512, DType::kF32, 0, 16, Mtp(3));
  EXPECT_EQ(RunAll(*alone, {reqs[3]})[0].ids, first[3]);  // whatever else is in the batch
}

TEST(EngineSpec, CancellationFreesDraftBlocksToo) {
  auto e = MakeEngine(8, 64, DType::kF32, 0, 16, Mtp(3));
  e->Start();
  std::vector<RequestStream> streams(4);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 4; ++i) {
    GenerationRequest g;
    g.prompt_ids = MixedRequests(1)[i].prompt_ids;
    g.stop.max_tokens = 2000;
    g.stop.ignore_eos = true;
    auto id = e->Submit(g, streams[i].Sink());
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
  }
  for (auto& s : streams) {
    for (int got = 0; got < 2;) {  // past the first draft step
      RequestOutput ev;
      ASSERT_TRUE(s.Next(&ev, 60.0));
      got += !ev.token_ids.empty();
    }
  }
  for (uint64_t id : ids) e->Cancel(id);
  for (auto& s : streams) {
    RequestOutput ev;
    while (s.Next(&ev, 30.0) && !ev.finished) {
    }
  }
  EngineStats after;
  for (int i = 0; i < 100; ++i) {
    after = e->Stats();
    if (after.num_running == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(after.kv_free_blocks_per_group.size(), 3u);  // full, SWA and MTP pools
  EXPECT_EQ(after.kv_free_blocks_per_group, after.kv_total_blocks_per_group);
  e->Shutdown();
}

// The speculator keeps nothing of its own per request: its state (the drafter's hidden states,
// its draft sequences) is held by the KV cache while the request runs, shows in the stats, and
// goes with the request's sequence, whether it finished or was cancelled.
TEST(EngineSpec, DrafterStateLivesInTheKvCacheAndGoesWithTheRequest) {
  auto e = MakeEngine(4, 64, DType::kF32, 0, 16, Mtp(3));
  RequestStream a, b;
  const GenerationRequest g = GreedyPastEos("What is 27 + 15?", 40);
  ASSERT_TRUE(e->Submit(g, a.Sink()).ok());
  const StatusOr<uint64_t> ib = e->Submit(g, b.Sink());
  ASSERT_TRUE(ib.ok());
  int64_t held = 0;
  for (int i = 0; i < 50 && held == 0; ++i) {
    e->Step();
    held = e->Stats().spec_draft_state_bytes;
  }
  EXPECT_GT(held, 0);
  e->Cancel(*ib);
  e->RunUntilIdle();
  const EngineStats st = e->Stats();
  EXPECT_EQ(st.finished[static_cast<int>(FinishReason::kAbort)], 1);
  EXPECT_EQ(st.finished[static_cast<int>(FinishReason::kLength)], 1);
  EXPECT_EQ(st.spec_draft_state_bytes, 0);
  EXPECT_EQ(st.spec_feature_cache_bytes, 0);  // MTP restores nothing from a feature cache
  EXPECT_EQ(st.kv_free_blocks_per_group, st.kv_total_blocks_per_group);
}


// A toy constraint: exactly `len` digit tokens ("0".."9"), then the end.
class DigitsConstraint final : public TokenConstraint {
 public:
  DigitsConstraint(std::vector<int32_t> digits, int len) : digits_(std::move(digits)), len_(len) {}
  void FillMask(uint32_t* bits, std::span<const int32_t> eos, int /*remaining*/) override {
    if (n_ >= len_) {
      for (int32_t id : eos) bits[id / 32] |= 1u << (id % 32);
      return;
    }
    for (int32_t id : digits_) bits[id / 32] |= 1u << (id % 32);
  }
  bool Accept(int32_t id) override {
    if (n_ >= len_ || std::find(digits_.begin(), digits_.end(), id) == digits_.end()) return false;
    ++n_;
    return true;
  }
  bool IsTerminated() const override { return n_ >= len_; }

 private:
  std::vector<int32_t> digits_;
  int len_;
  int n_ = 0;
};

// The sampler only picks allowed tokens, the request ends by itself when the constraint is
// complete ("stop", stop reason "grammar"), and MTP verification masks every draft row with the
// state after the drafts before it (greedy outputs equal, sampled ones allowed).
TEST(EngineConstraint, ConstrainedOutputsEndWithTheGrammar) {
  std::vector<int32_t> digits;
  for (char c = '0'; c <= '9'; ++c) digits.push_back(Load().tok->TokenToId(std::string(1, c)));
  for (int32_t d : digits) ASSERT_GE(d, 0);
  std::vector<GenerationRequest> reqs = MixedRequests(50);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].constraint = [digits, i] { return std::make_unique<DigitsConstraint>(digits, 3 + i % 5); };
    if (i % 2) {
      reqs[i].sampling.temperature = 1.0f;
      reqs[i].sampling.seed = i;
    }
  }
  auto plain = MakeEngine(16, 64);
  const std::vector<Result> got = RunAll(*plain, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_EQ(got[i].ids.size(), 3 + i % 5) << i;
    for (int32_t id : got[i].ids) EXPECT_NE(std::find(digits.begin(), digits.end(), id), digits.end());
    EXPECT_EQ(got[i].last.finish_reason, FinishReason::kStop);
    EXPECT_EQ(got[i].last.stop_reason, "grammar");
  }
  auto spec = MakeEngine(16, 64, DType::kF32, 0, 16, Mtp(3));
  const std::vector<Result> with_mtp = RunAll(*spec, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_EQ(with_mtp[i].ids.size(), 3 + i % 5) << i;
    for (int32_t id : with_mtp[i].ids) {
      EXPECT_NE(std::find(digits.begin(), digits.end(), id), digits.end());
    }
    if (i % 2 == 0) {
      EXPECT_EQ(with_mtp[i].ids, got[i].ids) << i;  // greedy: identical
    }
  }
}

// --- The prefix cache's tiers below the pool (kv/prefix_cache_tiers.h).

// A long chat (past the 64-key window, several blocks) with system prompt i.
GenerationRequest TierRequest(int i) {
  std::string system = "You are MiMo, agent " + std::to_string(i) + ". Tools: ";
  for (int t = 0; t < 12; ++t) {
    system += "tool_" + std::to_string(i * 100 + t) + " reads file number " +
              std::to_string(t * 7 + i) + " of the project and returns its text; ";
  }
  GenerationRequest g;
  g.prompt_ids = Chat(system, "List the tools you have, in order.");
  g.sampling.temperature = 0.0f;
  g.sampling.logprobs = 0;
  g.stop.max_tokens = 12;
  g.stop.ignore_eos = true;
  return g;
}

std::unique_ptr<Engine> MakeTierEngine(DType kv_dtype, int64_t ram_bytes, const std::string& dir,
                                       int full_blocks, std::shared_ptr<Speculator> spec = nullptr) {
  Nano& n = Load();
  EngineOptions o;
  o.speculator = spec;
  o.scheduler.max_num_seqs = 1;
  o.scheduler.max_num_batched_tokens = 64;  // chunked prefill
  o.kv.kv_dtype = kv_dtype;
  o.kv.num_full_blocks_override = full_blocks;
  o.kv.prefix_tiers.ram_bytes = ram_bytes;
  o.kv.prefix_tiers.dir = dir;
  o.kv.prefix_tiers.disk_bytes = int64_t{1} << 30;
  auto fp = CheckpointFingerprint(kModel);
  EXPECT_TRUE(fp.ok());
  o.kv.prefix_tiers.checkpoint_fingerprint = fp.ok() ? *fp : 0;
  auto e = Engine::Create(*n.model, ExecContext{n.pool.get()}, n.tok.get(), o);
  EXPECT_TRUE(e.ok()) << e.status().message();
  return e.ok() ? std::move(e).value() : nullptr;
}

void ExpectSameOutputs(const Result& got, const Result& want, const std::string& what) {
  EXPECT_EQ(got.ids, want.ids) << what;
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << what;
  for (size_t t = 0; t < got.logprobs.size(); ++t) {
    EXPECT_EQ(F32ToBits(got.logprobs[t]), F32ToBits(want.logprobs[t]))
        << what << " token " << t << ": " << got.logprobs[t] << " vs " << want.logprobs[t];
  }
}

// Blocks the pool evicted come back from the RAM tier: the request's prompt is served from it
// (full and sliding-window groups) and its tokens and logprobs are bit-identical to its cold
// run; without the tier the same sequence of requests finds nothing. f32, bf16 and fp8 KV, and
// with MTP and DFlash drafting.
TEST(EngineTiers, RamTierHitGivesTheColdOutputs) {
  const GenerationRequest a = TierRequest(0);
  ASSERT_GT(a.prompt_ids.size(), 200u);
  const int blocks = static_cast<int>(a.prompt_ids.size() / 16) + 8;  // room for one request
  enum Spec { kNone, kMtp, kDFlash };
  struct Case {
    DType dt;
    Spec spec;
  };
  for (const Case c : {Case{DType::kF32, kNone}, Case{DType::kBF16, kNone},
                       Case{DType::kF8E4M3, kNone}, Case{DType::kF32, kMtp},
                       Case{DType::kF32, kDFlash}}) {
    const std::string what = std::string("kv ") + KvDTypeName(c.dt) +
                             (c.spec == kMtp ? " mtp" : c.spec == kDFlash ? " dflash" : "");
    for (int64_t ram : {int64_t{0}, int64_t{256} << 20}) {
      std::shared_ptr<Speculator> spec;
      if (c.spec == kMtp) spec = Mtp(2);
      if (c.spec == kDFlash) {
        auto d = DFlashSpeculator::Create(*Load().model, kModel, DFlashSpeculatorOptions{});
        ASSERT_TRUE(d.ok()) << d.status().message();
        spec = std::shared_ptr<Speculator>(std::move(d).value());
      }
      // A speculator keeps a margin of the prompt to compute (its drafter's context).
      const int margin = spec ? spec->prefix_hit_margin() : 0;
      auto e = MakeTierEngine(c.dt, ram, "", blocks, spec);
      ASSERT_NE(e, nullptr);
      const Result cold = RunAll(*e, {a})[0];
      EXPECT_EQ(cold.last.num_cached_tokens, 0) << what;
      RunAll(*e, {TierRequest(1)});  // evicts a's blocks from the pool
      RunAll(*e, {TierRequest(2)});
      const Result again = RunAll(*e, {a})[0];
      const EngineStats s = e->Stats();
      if (ram == 0) {
        EXPECT_EQ(again.last.num_cached_tokens, 0) << what << ": the pool still held a's blocks";
        continue;
      }
      EXPECT_GE(again.last.num_cached_tokens, static_cast<int>(a.prompt_ids.size()) - margin - 16)
          << what;
      EXPECT_GT(again.last.num_cached_tokens, 0) << what;
      EXPECT_EQ(s.prefix_tiers.ram.hit_tokens, again.last.num_cached_tokens) << what;
      EXPECT_GT(s.prefix_tiers.ram.evictions + s.prefix_tiers.ram.stores, 0) << what;
      EXPECT_LE(s.prefix_tiers.ram.bytes, ram) << what;
      ExpectSameOutputs(again, cold, what);
      EXPECT_EQ(s.kv_free_blocks_per_group, s.kv_total_blocks_per_group) << what;
    }
  }
}

// Every cached block is written to disk behind the engine; a new engine on the same directory
// (a restarted server) serves the prompt from it with the cold outputs (f32, bf16, fp8 KV). A damaged file is
// skipped, removed and recomputed (still the cold outputs); another checkpoint's fingerprint
// sees nothing.
TEST(EngineTiers, DiskTierServesARestartedEngine) {
  const GenerationRequest a = TierRequest(3);
  const int blocks = static_cast<int>(a.prompt_ids.size() / 16) + 8;
  // fp8: the directory records the first engine's first-write scales and later engines adopt them.
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
    const std::string what = std::string("kv ") + KvDTypeName(dt);
    const std::string dir = ::testing::TempDir() + "mimo-engine-tiers-" + KvDTypeName(dt);
    std::filesystem::remove_all(dir);
    Result cold;
    {
      auto e = MakeTierEngine(dt, 0, dir, blocks);
      ASSERT_NE(e, nullptr);
      cold = RunAll(*e, {a})[0];
      EXPECT_EQ(cold.last.num_cached_tokens, 0);
    }  // shut down: the queued blocks are written
    // The full group keeps every block on disk; the sliding-window group only the windows
    // before the checkpoints (the prompt's end, the request's end).
    {
      std::map<std::string, int> files;  // "g0", "g1" -> count
      for (const auto& f : std::filesystem::recursive_directory_iterator(dir)) {
        if (f.path().extension() == ".kvb") files[f.path().filename().string().substr(0, 2)]++;
      }
      ASSERT_EQ(files.size(), 2u) << what;
      const int window = 64 / 16 + 2;
      EXPECT_GE(std::max(files["g0"], files["g1"]), static_cast<int>(a.prompt_ids.size() / 16));
      EXPECT_LE(std::min(files["g0"], files["g1"]), 2 * window) << what;
    }
    // A prompt that ends on a block boundary resumes one block before it (a hit keeps a token
    // to compute): its checkpoint covers that window too.
    GenerationRequest b = TierRequest(4);
    b.prompt_ids.resize(b.prompt_ids.size() / 16 * 16);
    Result cold_b;
    {
      auto e = MakeTierEngine(dt, 0, dir, blocks);
      cold_b = RunAll(*e, {b})[0];
    }
    {
      auto e = MakeTierEngine(dt, 0, dir, blocks);
      const Result warm = RunAll(*e, {a})[0];
      EXPECT_GE(warm.last.num_cached_tokens, 192) << what;
      EXPECT_EQ(e->Stats().prefix_tiers.disk.hit_tokens, warm.last.num_cached_tokens) << what;
      ExpectSameOutputs(warm, cold, what + " after a restart");
      const Result warm_b = RunAll(*e, {b})[0];
      EXPECT_EQ(warm_b.last.num_cached_tokens, static_cast<int>(b.prompt_ids.size()) - 16) << what;
      ExpectSameOutputs(warm_b, cold_b, what + " after a restart, prompt on a block boundary");
    }
    // Damage the first block of the first group: the whole hit needs it.
    const uint64_t first = HashFullBlocks(a.prompt_ids, 16, 0)[0];
    int damaged = 0;
    for (const auto& sub : std::filesystem::directory_iterator(dir)) {
      char name[64];
      std::snprintf(name, sizeof(name), "g0-%016llx.kvb", static_cast<unsigned long long>(first));
      const std::filesystem::path f = sub.path() / name;
      if (!std::filesystem::exists(f)) continue;
      std::fstream s(f, std::ios::in | std::ios::out | std::ios::binary);
      s.seekp(100);
      s.put('\x5a');
      ++damaged;
    }
    ASSERT_EQ(damaged, 1) << what;
    {
      auto e = MakeTierEngine(dt, 0, dir, blocks);
      const Result again = RunAll(*e, {a})[0];
      EXPECT_EQ(again.last.num_cached_tokens, 0) << what;
      EXPECT_EQ(e->Stats().prefix_tiers.disk.rejected, 1) << what;
      ExpectSameOutputs(again, cold, what + " after a damaged file");
    }
    {
      auto e = MakeTierEngine(dt, 0, dir, blocks);  // the recomputed block was written again
      EXPECT_GE(RunAll(*e, {a})[0].last.num_cached_tokens, 192) << what;
    }
    std::filesystem::remove_all(dir);
  }
}

// DFlash after a restart: the drafter's features of the checkpointed windows come back from disk
// with the K/V, so the prompt is served whole (without them a DFlash hit keeps the drafter's
// 1024-position window to compute: here the whole prompt), the tokens and logprobs are the cold
// run's and so are the drafts and their acceptance. Damaged feature files are rejected and the
// window recomputed, with the same outputs.
TEST(EngineTiers, DFlashFeaturesServeARestartedEngine) {
  GenerationRequest a = TierRequest(5);
  // An answer the drafter predicts well, after the long system prompt.
  a.prompt_ids = Chat("You are MiMo, a coding agent. Read files before editing them; run the "
                      "tests after every change; keep answers short. Use the tools you are "
                      "given; answer with the result only. The build uses CMake, the tests "
                      "use GoogleTest and node:test; the sources are under src/.",
                      "Count from 1 to 20, separated by commas.");
  a.stop.max_tokens = 32;
  const int blocks = static_cast<int>(a.prompt_ids.size() / 16) + 8;
  auto dflash = [] {
    auto d = DFlashSpeculator::Create(*Load().model, kModel, DFlashSpeculatorOptions{});
    EXPECT_TRUE(d.ok()) << d.status().message();
    return d.ok() ? std::shared_ptr<Speculator>(std::move(d).value()) : nullptr;
  };
  const std::string dir = ::testing::TempDir() + "mimo-engine-tiers-dflash";
  std::filesystem::remove_all(dir);
  auto feature_files = [&] {
    std::vector<std::filesystem::path> out;
    const std::string prefix = "g" + std::to_string(PrefixCacheTiers::kFeatureGroup) + "-";
    for (const auto& f : std::filesystem::recursive_directory_iterator(dir)) {
      if (f.path().filename().string().rfind(prefix, 0) == 0) out.push_back(f.path());
    }
    return out;
  };
  Result cold;
  EngineStats cold_stats;
  {
    auto e = MakeTierEngine(DType::kF32, 0, dir, blocks, dflash());
    ASSERT_NE(e, nullptr);
    ASSERT_GT(e->Stats().spec_feature_cache_capacity_bytes, 0);
    cold = RunAll(*e, {a})[0];
    cold_stats = e->Stats();
    EXPECT_EQ(cold.last.num_cached_tokens, 0);
  }
  ASSERT_GT(cold_stats.spec_num_accepted_tokens, 0)
      << cold_stats.spec_num_drafts << " verify steps, " << cold_stats.spec_num_draft_tokens
      << " drafts";
  // The window (here the whole prompt) before the prompt's end, one file per full block.
  EXPECT_EQ(feature_files().size(), a.prompt_ids.size() / 16);
  {
    auto e = MakeTierEngine(DType::kF32, 0, dir, blocks, dflash());
    const Result warm = RunAll(*e, {a})[0];
    const EngineStats s = e->Stats();
    EXPECT_GE(warm.last.num_cached_tokens, static_cast<int>(a.prompt_ids.size()) - 16);
    EXPECT_EQ(s.prefix_tiers.disk.hit_tokens, warm.last.num_cached_tokens);
    ExpectSameOutputs(warm, cold, "dflash after a restart");
    EXPECT_EQ(s.spec_num_draft_tokens, cold_stats.spec_num_draft_tokens);
    EXPECT_EQ(s.spec_num_accepted_tokens, cold_stats.spec_num_accepted_tokens);
    EXPECT_EQ(s.spec_accepted_per_pos, cold_stats.spec_accepted_per_pos);
  }
  for (const std::filesystem::path& f : feature_files()) {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(100);
    io.put('\x5a');
  }
  {
    auto e = MakeTierEngine(DType::kF32, 0, dir, blocks, dflash());
    const Result again = RunAll(*e, {a})[0];
    const EngineStats s = e->Stats();
    EXPECT_EQ(again.last.num_cached_tokens, 0) << "a hit without the drafter's features";
    EXPECT_GE(s.prefix_tiers.disk.rejected, 1);
    ExpectSameOutputs(again, cold, "dflash after damaged feature files");
    EXPECT_EQ(s.spec_num_accepted_tokens, cold_stats.spec_num_accepted_tokens);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mimo
