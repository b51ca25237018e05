// `mimo logits`: float32 logits for every position of one or more id sequences, computed over
// the paged KV cache. Sequences ("1,2,3;4,5") run together in each step (continuous batching);
// --mode decode feeds one token per sequence per step, --chunk-size N prefills in chunks,
// --decode-last K prefills all but each sequence's last K tokens, then feeds those one per step.
// --prefix-cache runs the sequences one after another, each starting on the longest cached
// prefix; positions served from the cache are written as NaN (they are not recomputed).
// --columns 5,9,…|@FILE writes only those vocabulary columns, in that order ([total, ncols]):
// long runs over a 152k vocabulary would otherwise write gigabytes.
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <vector>

#include "cli/command.h"
#include "cli/model_loading.h"
#include "model/dflash_drafter.h"

namespace mimo::cli {
namespace {

bool ParseSequences(const std::string& spec, std::vector<std::vector<int32_t>>* seqs,
                    std::string* err) {
  std::string text = spec;
  if (!spec.empty() && spec[0] == '@' && !ReadFileToString(spec.substr(1), &text)) {
    *err = "cannot open ids file '" + spec.substr(1) + "'";
    return false;
  }
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ';')) {
    if (part.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    std::vector<int> ids;
    if (!ParseIdList(part, &ids, err)) return false;
    seqs->emplace_back(ids.begin(), ids.end());
  }
  if (seqs->empty()) {
    *err = "empty id list";
    return false;
  }
  return true;
}

bool WriteFloats(const std::string& path, const std::vector<float>& v) {
  FILE* f = std::fopen(path.c_str(), "wb");
  const bool ok = f && std::fwrite(v.data(), sizeof(float), v.size(), f) == v.size();
  if (f) std::fclose(f);
  if (!ok) std::fprintf(stderr, "mimo logits: cannot write '%s'\n", path.c_str());
  return ok;
}

// --mtp-layer I: the main model's pre-norm hidden states h[t] of one sequence, then MTP layer I
// on the pairs (h[t], ids[t+1]) at positions t = 0..n-2 (spec section 3); writes [n-1, vocab].
// The MTP layer's KV lives under a draft sequence of its own, so its positions restart at 0.
int RunMtpLogits(const Args& a, LoadedModel& lm, const std::vector<std::vector<int32_t>>& seqs,
                 const std::string& mode) {
  const int layer = static_cast<int>(a.GetInt("mtp-layer", 0));
  if (seqs.size() != 1 || seqs[0].size() < 2) {
    std::fprintf(stderr, "mimo logits: --mtp-layer needs one sequence of at least 2 ids\n");
    return 2;
  }
  if (layer < 0 || layer >= lm.model->num_mtp_layers()) {
    std::fprintf(stderr, "mimo logits: --mtp-layer %d out of range (the checkpoint has %d)\n",
                 layer, lm.model->num_mtp_layers());
    return 2;
  }
  const std::vector<int32_t>& ids = seqs[0];
  const int n = static_cast<int>(ids.size());
  const int64_t H = lm.model->config().hidden_size, V = lm.model->config().vocab_size;
  auto kv = MakeKvCacheOrReport("logits", a, *lm.model, 2, n, n);
  if (!kv) return 1;
  std::vector<float> h(static_cast<size_t>(n) * H);  // [n, H] residual before model.norm
  StepBatch b;
  b.chunks.push_back({0, 0, n, 0});
  b.num_tokens = n;
  ForwardOutputs out;
  out.prenorm_hidden = h.data();
  Status st = kv->StartSequence(0);
  if (st.ok()) st = kv->AddDraftSequence(1, 0);
  StatusOr<KvStepPlan> plan = st.ok() ? kv->PlanStep(b) : StatusOr<KvStepPlan>(st);
  if (plan.ok()) RunForward(*lm.model, lm.ctx, *kv, *plan, ids.data(), out);
  std::vector<float> logits(static_cast<size_t>(n - 1) * V);  // [n-1, V]
  const int step = mode == "decode" ? 1 : n - 1;
  for (int t = 0; t < n - 1 && plan.ok(); t += step) {
    const int m = std::min(step, n - 1 - t);
    StepBatch mb;
    mb.chunks.push_back({1, 0, m, t});
    mb.num_tokens = m;
    MtpOutputs mo;
    mo.logits = logits.data() + t * V;
    plan = kv->PlanStep(mb);
    if (!plan.ok()) break;
    RunMtpForward(*lm.model, lm.ctx, layer, *kv, *plan, h.data() + t * H, ids.data() + t + 1, mo);
  }
  if (!plan.ok()) {
    std::fprintf(stderr, "mimo logits: error: %s\n", plan.status().message().c_str());
    return 1;
  }
  return WriteFloats(a.Get("out"), logits) ? 0 : 1;
}

// --dflash: the DFlash drafter's blocks after sequences ids[0..n-1] (";"-separated): for each,
// the target computes the first n - 1 ids (P committed positions) with its outputs after the
// drafter's target layers captured, and the drafter builds that sequence's context from them;
// then ONE batched pass drafts every block [ids[n-1], mask x (B - 1)] at positions P ..; writes
// the draft logits [sequences, B - 1, vocab] (row j of a block: position P + j).
int RunDFlashLogits(const Args& a, LoadedModel& lm, const std::vector<std::vector<int32_t>>& seqs) {
  for (const auto& ids : seqs) {
    if (ids.size() < 2) {
      std::fprintf(stderr, "mimo logits: --dflash needs sequences of at least 2 ids\n");
      return 2;
    }
  }
  auto rope = ParseDFlashRope(a.Get("dflash-rope", "split"));
  if (!rope.ok()) {
    std::fprintf(stderr, "mimo logits: --dflash-rope: %s\n", rope.status().message().c_str());
    return 2;
  }
  const std::string dir = a.Get("speculative-draft-model", a.Get("model") + "/dflash");
  auto drafter = DFlashDrafter::Load(dir, *lm.model, *rope);
  if (!drafter.ok()) {
    std::fprintf(stderr, "mimo logits: error: %s\n", drafter.status().message().c_str());
    return 1;
  }
  const DFlashDrafter& d = **drafter;
  const int drafts = d.config().block_size - 1;
  std::vector<DFlashContext> contexts(seqs.size());
  std::vector<DFlashDrafter::Block> blocks;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const std::vector<int32_t>& ids = seqs[s];
    const int P = static_cast<int>(ids.size()) - 1;
    auto kv = MakeKvCacheOrReport("logits", a, *lm.model, 1, P, P);
    if (!kv) return 1;
    std::vector<float> features(static_cast<size_t>(P) * d.feature_width());  // [P, ids * H]
    StepBatch b;
    b.chunks.push_back({0, 0, P, 0});
    b.num_tokens = P;
    ForwardOutputs out;
    out.capture_layers = d.config().target_layer_ids;
    out.captured = features.data();
    Status st = kv->StartSequence(0);
    StatusOr<KvStepPlan> plan = st.ok() ? kv->PlanStep(b) : StatusOr<KvStepPlan>(st);
    if (!plan.ok()) {
      std::fprintf(stderr, "mimo logits: error: %s\n", plan.status().message().c_str());
      return 1;
    }
    RunForward(*lm.model, lm.ctx, *kv, *plan, ids.data(), out);
    d.AppendContext(lm.ctx, contexts[s], features.data(), P);
    blocks.push_back({&contexts[s], ids.back(), drafts});
  }
  std::vector<float> logits(seqs.size() * drafts * lm.model->config().vocab_size);
  d.DraftBatch(lm.ctx, blocks, logits.data());
  return WriteFloats(a.Get("out"), logits) ? 0 : 1;
}

int RunLogits(int argc, char** argv) {
  Args a;
  std::string err;
  std::vector<std::string> keys = {
      "model",      "ids",       "out",     "mode",        "threads",
      "chunk-size", "mtp-layer", "columns", "dflash-rope", "speculative-draft-model",
      "decode-last"};
  for (auto& k : KvCacheKeys()) keys.push_back(k);
  std::vector<std::string> flags = KvCacheFlags();
  flags.push_back("prefix-cache");
  flags.push_back("dflash");
  if (!a.Parse(argc, argv, keys, flags, &err) || !a.Has("model") || !a.Has("ids") ||
      !a.Has("out")) {
    std::fprintf(
        stderr,
        "mimo logits: %s\nusage: mimo logits --model DIR --ids 1,2,3[;4,5]|@FILE --out FILE "
        "[--mode prefill|decode] [--chunk-size N] [--decode-last K] [--threads N] "
        "[--attention-backend NAME] "
        "[--block-size N] [--kv-cache-dtype f32|bf16|fp8] [--prefix-cache] [--columns IDS|@FILE] "
        "[--precision exact|bf16|int8] [--dflash [--dflash-rope split|backbone|draft] "
        "[--speculative-draft-model DIR]]\n",
        err.empty() ? "missing --model, --ids or --out" : err.c_str());
    return 2;
  }
  const std::string mode = a.Get("mode", "prefill");
  if (mode != "prefill" && mode != "decode") {
    std::fprintf(stderr, "mimo logits: --mode must be prefill or decode, got '%s'\n", mode.c_str());
    return 2;
  }
  std::vector<std::vector<int32_t>> seqs;
  if (!ParseSequences(a.Get("ids"), &seqs, &err)) {
    std::fprintf(stderr, "mimo logits: %s\n", err.c_str());
    return 2;
  }
  LoadedModel lm;
  if (!LoadModelOrReport("logits", a.Get("model"), static_cast<int>(a.GetInt("threads", 0)), &lm,
                         &a)) {
    return 1;
  }
  const ModelConfig& cfg = lm.model->config();
  int64_t total = 0, longest = 0;
  for (const auto& s : seqs) {
    for (int32_t id : s) {
      if (id >= cfg.vocab_size) {
        std::fprintf(stderr, "mimo logits: token id %d out of range (vocab_size %d)\n", id, cfg.vocab_size);
        return 2;
      }
    }
    total += static_cast<int64_t>(s.size());
    longest = std::max<int64_t>(longest, static_cast<int64_t>(s.size()));
  }
  std::vector<int64_t> columns;  // empty: the whole vocabulary
  if (a.Has("columns")) {
    std::vector<std::vector<int32_t>> col_lists;
    if (!ParseSequences(a.Get("columns"), &col_lists, &err) || col_lists.size() != 1) {
      std::fprintf(stderr, "mimo logits: --columns: %s\n",
                   err.empty() ? "expected one comma-separated id list" : err.c_str());
      return 2;
    }
    for (int32_t c : col_lists[0]) {
      if (c < 0 || c >= cfg.vocab_size) {
        std::fprintf(stderr, "mimo logits: --columns: id %d out of range (vocab_size %d)\n", c,
                     cfg.vocab_size);
        return 2;
      }
      columns.push_back(c);
    }
  }
  if (a.Has("dflash")) return RunDFlashLogits(a, lm, seqs);
  if (a.Has("mtp-layer")) {
    if (!columns.empty()) {
      std::fprintf(stderr, "mimo logits: --columns is not supported with --mtp-layer\n");
      return 2;
    }
    return RunMtpLogits(a, lm, seqs, mode);
  }
  const bool prefix_cache = a.Has("prefix-cache");
  const int chunk = mode == "decode" ? 1 : static_cast<int>(a.GetInt("chunk-size", 0));
  const int step_chunk = chunk > 0 ? chunk : static_cast<int>(longest);
  const int decode_last = static_cast<int>(a.GetInt("decode-last", 0));
  if (decode_last < 0) {
    std::fprintf(stderr, "mimo logits: --decode-last must be >= 0, got %d\n", decode_last);
    return 2;
  }
  const int n_seq = static_cast<int>(seqs.size());
  auto kv = MakeKvCacheOrReport("logits", a, *lm.model, prefix_cache ? 1 : n_seq, longest,
                                step_chunk * (prefix_cache ? 1 : n_seq));
  if (!kv) return 1;

  const int64_t V = cfg.vocab_size;
  const int64_t W = columns.empty() ? V : static_cast<int64_t>(columns.size());
  std::vector<float> logits(total * W, std::numeric_limits<float>::quiet_NaN());  // [total, W]
  std::vector<int64_t> offset(n_seq, 0);  // first output row of each sequence
  for (int s = 1; s < n_seq; ++s) offset[s] = offset[s - 1] + static_cast<int64_t>(seqs[s - 1].size());
  std::vector<int> done(n_seq, 0);  // tokens of each sequence already computed

  // Runs steps until every sequence in `active` is complete.
  auto run = [&](const std::vector<int>& active) -> bool {
    for (;;) {
      StepBatch b;
      std::vector<int32_t> tokens;
      for (int s : active) {
        const int size = static_cast<int>(seqs[s].size());
        const int prefill_end = std::max(0, size - decode_last);
        const int n = done[s] < prefill_end ? std::min(step_chunk, prefill_end - done[s])
                                            : std::min(1, size - done[s]);
        if (n <= 0) continue;
        b.chunks.push_back({s, b.num_tokens, n, done[s]});
        tokens.insert(tokens.end(), seqs[s].begin() + done[s], seqs[s].begin() + done[s] + n);
        b.num_tokens += n;
      }
      if (b.num_tokens == 0) return true;
      StatusOr<KvStepPlan> plan = kv->PlanStep(b);
      if (!plan.ok()) {
        std::fprintf(stderr, "mimo logits: error: %s\n", plan.status().message().c_str());
        return false;
      }
      std::vector<float> step_logits(static_cast<size_t>(b.num_tokens) * V);  // [T, V]
      ForwardOutputs out;
      out.logits = step_logits.data();
      RunForward(*lm.model, lm.ctx, *kv, *plan, tokens.data(), out);
      for (const SequenceChunk& c : b.chunks) {
        for (int i = 0; i < c.num_tokens; ++i) {
          const float* src = step_logits.data() + static_cast<int64_t>(c.token_begin + i) * V;
          float* dst = logits.data() + (offset[c.seq_id] + c.start_pos + i) * W;
          if (columns.empty()) {
            std::copy(src, src + V, dst);
          } else {
            for (int64_t j = 0; j < W; ++j) dst[j] = src[columns[j]];
          }
        }
        kv->RecordTokenIds(c.seq_id, std::span<const int32_t>(seqs[c.seq_id].data() + c.start_pos, c.num_tokens));
        done[c.seq_id] += c.num_tokens;
      }
    }
  };

  if (prefix_cache) {
    for (int s = 0; s < n_seq; ++s) {
      auto hit = kv->AttachCachedPrefix(s, seqs[s]);
      if (!hit.ok()) {
        std::fprintf(stderr, "mimo logits: error: %s\n", hit.status().message().c_str());
        return 1;
      }
      done[s] = *hit;
      std::fprintf(stderr, "mimo logits: sequence %d: %d of %zu tokens from the prefix cache\n", s,
                   *hit, seqs[s].size());
      if (!run({s})) return 1;
      kv->FreeSequence(s);
    }
  } else {
    std::vector<int> all(n_seq);
    for (int s = 0; s < n_seq; ++s) {
      all[s] = s;
      const Status st = kv->StartSequence(s);
      if (!st.ok()) {
        std::fprintf(stderr, "mimo logits: error: %s\n", st.message().c_str());
        return 1;
      }
    }
    if (!run(all)) return 1;
  }

  return WriteFloats(a.Get("out"), logits) ? 0 : 1;
}

}  // namespace
MIMO_CLI_COMMAND(
    "logits",
    "--model DIR --ids 1,2,3[;4,5]|@FILE --out FILE [--mode prefill|decode] "
    "[--chunk-size N] [--decode-last K] [--attention-backend NAME] [--block-size N] "
    "[--kv-cache-dtype f32|bf16|fp8] [--prefix-cache] [--mtp-layer I] [--columns IDS|@FILE] "
    "[--threads N] [--tensor-parallel-size N [--expert-parallel]] "
    "[--precision exact|bf16|int8] "
    "[--dflash [--dflash-rope split|backbone|draft] [--speculative-draft-model DIR]]",
    RunLogits);
}  // namespace mimo::cli
