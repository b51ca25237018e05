// The engine on the shipped default model (models/mimo-v2-nano, unpacked by scripts/setup.sh):
// batch invariance (16 mixed requests against each run alone, with and without chunked prefill,
// f32 and bf16 KV), preemption under a small KV budget with unchanged outputs, cancellation
// freeing every block, seeds alone and in a batch, n samples sharing the prompt's blocks, and
// request errors that name what is wrong.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <thread>

#include "engine/request_stream.h"

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
                                   int64_t kv_bytes = 0, int block_size = 16) {
  Nano& n = Load();
  EngineOptions o;
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

// 16 prompts: short and long (past the 64-key window and past a 32-token chunk), several
// sharing a long system prompt (prefix-cache hits across requests).
std::vector<GenerationRequest> MixedRequests(int max_tokens) {
  const std::string shared =
      "You are MiMo, a helpful assistant. Notes: Venlo lives in Gostead and works as a baker. "
      "Pelden lives in Marrow and works as a painter. Answer briefly and exactly.";
  const char* questions[] = {"Where does Venlo live?", "What is 27 + 15?",
                             "What is Pelden's job?",  "What is 3 + 9?",
                             "Where does Pelden live?", "What is 40 + 1?",
                             "Spell the word garden.", "What is 12 + 19?"};
  std::vector<GenerationRequest> out;
  for (int i = 0; i < 16; ++i) {
    GenerationRequest g;
    const std::string q = questions[i % 8];
    g.prompt_ids = i % 3 == 0 ? Chat(shared, q) : i % 3 == 1 ? Chat("", q) : Chat(shared + " " + shared, q);
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
  const std::vector<GenerationRequest> reqs = MixedRequests(24);
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

}  // namespace
}  // namespace mimo
