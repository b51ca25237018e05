// `mimo serve`: the OpenAI- and Anthropic-compatible HTTP server (src/server) over the engine.
// Start-up: listen at once (GET /health answers 503 while loading), load tokenizer, template,
// model and engine, copy the memory-mapped weights into memory once with a progress line (so the
// first request does not pay every page fault; --weights-memory decides, tools/cli/
// weights_memory.h: auto keeps them in the page cache when they do not fit; --no-warmup = mmap),
// then serve. SIGINT /
// SIGTERM drain: new requests get 503, requests in flight finish (up to --drain-timeout
// seconds), then the process exits 0; a second signal exits at once.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "chat/chat_template.h"
#include "cli/command.h"
#include "cli/engine_setup.h"
#include "cli/weights_memory.h"
#include "grammar/grammar_cache.h"
#include "io/generation_config.h"
#include "server/api_server.h"
#include "server/grammar_records.h"
#include "server/openai_request.h"
#include "server/response_writer.h"

namespace mimo::cli {
namespace {

std::string BaseName(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t s = path.rfind('/');
  return s == std::string::npos ? path : path.substr(s + 1);
}

// --grammar-limits "states=N,text_states=N,text_nodes=N,nfa_states=N,bytes=B,timeout=S": any
// subset, the rest at their defaults (grammar/compile_budget.h).
bool ParseGrammarLimits(const std::string& text, GrammarLimits* out, std::string* err) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    pos = comma + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    char* end = nullptr;
    const double v = eq == std::string::npos ? -1 : std::strtod(item.c_str() + eq + 1, &end);
    if (eq == std::string::npos || end == nullptr || *end != '\0' || !(v > 0) || v > 1e15) {
      *err = "'" + item + "' is not KEY=POSITIVE_NUMBER";
      return false;
    }
    const auto n = static_cast<int64_t>(v);
    if (key == "states") {
      out->max_states = n;
    } else if (key == "text_states") {
      out->max_text_states = n;
    } else if (key == "text_nodes") {
      out->max_text_nodes = n;
    } else if (key == "nfa_states") {
      out->max_nfa_states = n;
    } else if (key == "bytes") {
      out->max_bytes = n;
    } else if (key == "timeout") {
      out->deadline_s = v;
    } else {
      *err = "unknown key '" + key +
             "' (states, text_states, text_nodes, nfa_states, bytes, timeout)";
      return false;
    }
  }
  return true;
}

int RunServe(int argc, char** argv) {
  Args a;
  std::string err;
  std::vector<std::string> keys = {"model",
                                   "host",
                                   "port",
                                   "served-model-name",
                                   "api-key",
                                   "chat-template",
                                   "drain-timeout",
                                   "grammar-max-string-length",
                                   "signature-key",
                                   "responses-store-size",
                                   "sse-ping-interval",
                                   "http-threads",
                                   "grammar-threads",
                                   "grammar-limits",
                                   "grammar-cache-size",
                                   "max-inflight-body",
                                   "body-timeout",
                                   "max-connections",
                                   "allowed-hosts",
                                   "allowed-origins",
                                   "weights-memory",
                                   "override-generation-config"};
  for (auto& k : EngineKeys()) keys.push_back(k);
  std::vector<std::string> flags = EngineFlags();
  flags.push_back("no-warmup");
  flags.push_back("no-webui");
  flags.push_back("strict-max-tokens");
  flags.push_back("parse-special-in-content");
  flags.push_back("disable-log-requests");
  flags.push_back("public-metrics");
  const char* usage =
      "usage: mimo serve --model DIR [--host 127.0.0.1] [--port 8000] "
      "[--served-model-name NAME] [--api-key KEY] [--max-model-len N] [--max-num-seqs N] "
      "[--max-waiting N] [--max-num-batched-tokens N] [--kv-cache-dtype f32|bf16|fp8] "
      "[--kv-cache-memory B] [--chat-template FILE] [--threads N] "
      "[--precision exact|bf16|int8] [--weights-memory auto|copy|mmap] [--no-warmup] "
      "[--no-webui] [--strict-max-tokens] [--parse-special-in-content] "
      "[--disable-log-requests] [--signature-key KEY] [--responses-store-size N] "
      "[--sse-ping-interval S] [--http-threads N] [--grammar-threads N] "
      "[--grammar-limits states=N,text_states=N,text_nodes=N,nfa_states=N,bytes=B,timeout=S] "
      "[--grammar-cache-size B] [--max-inflight-body B] [--body-timeout S] [--max-connections N] "
      "[--allowed-hosts H1,H2] [--allowed-origins O1,O2|*] [--public-metrics] "
      "[--override-generation-config '{\"temperature\": 0}']\n";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("%s", usage);
      return 0;
    }
  }
  if (!a.Parse(argc, argv, keys, flags, &err) || !a.Has("model")) {
    std::fprintf(stderr, "mimo serve: %s\n%s", err.empty() ? "missing --model" : err.c_str(),
                 usage);
    return 2;
  }
  const long long port = a.GetInt("port", 8000);
  const long long http_threads = a.GetInt("http-threads", 4);
  const long long max_connections = a.GetInt("max-connections", 1024);
  const long long grammar_threads = a.GetInt("grammar-threads", 1);
  if (port < 0 || port > 65535 || http_threads < 1 || http_threads > 1024 || max_connections < 1 ||
      max_connections > 1000000 || grammar_threads < 1 || grammar_threads > 64) {
    std::fprintf(stderr,
                 "mimo serve: error: --port must be 0..65535 (0: any free port), --http-threads "
                 "1..1024, --grammar-threads 1..64 and --max-connections 1..1000000\n");
    return 2;
  }
  // Sampling defaults for requests that leave a field out, over generation_config.json's.
  GenerationConfig gen_override;
  if (a.Has("override-generation-config")) {
    auto o = ParseGenerationConfigOverride(a.Get("override-generation-config"));
    if (!o.ok()) {
      std::fprintf(stderr, "mimo serve: error: %s\n", o.status().message().c_str());
      return 2;
    }
    gen_override = *o;
    // Its own values, before the listener starts (the file's are checked after the model loads).
    const Status valid = DefaultSampling(gen_override).Validate(0);
    if (!valid.ok()) {
      std::fprintf(stderr, "mimo serve: error: --override-generation-config: %s\n",
                   valid.message().c_str());
      return 2;
    }
  }
  GrammarLimits grammar_limits;
  std::string limits_err;
  if (!ParseGrammarLimits(a.Get("grammar-limits"), &grammar_limits, &limits_err)) {
    std::fprintf(stderr, "mimo serve: error: --grammar-limits: %s\n", limits_err.c_str());
    return 2;
  }
  const double grammar_cache_bytes = a.GetDouble("grammar-cache-size", 512.0 * (1 << 20));
  const double inflight_body = a.GetDouble("max-inflight-body", 1024.0 * (1 << 20));
  if (!(grammar_cache_bytes >= 0 && grammar_cache_bytes <= 1e15) ||
      !(inflight_body >= 64.0 * (1 << 20) && inflight_body <= 1e15)) {
    std::fprintf(stderr,
                 "mimo serve: error: --grammar-cache-size must be a byte count >= 0 and "
                 "--max-inflight-body at least one largest body (67108864 bytes)\n");
    return 2;
  }
  // Signals are taken by one thread with sigwait; every other thread inherits the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::atomic<int> signals{0};
  // Loaded (or under tensor parallelism, below): a signal drains; before, it exits at once.
  std::atomic<bool> serving{false};
  std::thread sig_thread([&] {
    for (;;) {
      int s = 0;
      if (sigwait(&sigs, &s) != 0) continue;
      if (!serving.load()) {
        std::fprintf(stderr, "mimo serve: signal while loading, exiting\n");
        std::_Exit(0);  // nothing to drain
      }
      if (++signals >= 2 || s < 0) {
        std::fprintf(stderr, "mimo serve: second signal, exiting now\n");
        std::_Exit(130);
      }
    }
  });
  sig_thread.detach();

  // Tensor parallel (mpirun -np N mimo serve --tensor-parallel-size N): rank 0 serves HTTP and
  // owns tokenizer and scheduler; the other ranks only load their slices and follow rank 0's
  // steps (LoadModelOrReport does not return on them). A signal to mpirun reaches every rank:
  // followers keep following until rank 0 has drained and stops them.
  if (a.Has("no-warmup") && a.Has("weights-memory") && a.Get("weights-memory") != "mmap") {
    std::fprintf(stderr,
                 "mimo serve: error: --no-warmup keeps the weights in the file mapping: "
                 "it contradicts --weights-memory %s\n",
                 a.Get("weights-memory").c_str());
    return 2;
  }
  if (a.GetInt("tensor-parallel-size", 1) > 1) {
    // Every rank gets the signal (mpirun forwards it): they all load on and rank 0 drains and
    // stops the followers once ready, rather than leaving a rank mid-collective.
    serving.store(true);
    TensorParallelOptions tp;
    if (!TensorParallelOrReport("serve", &a, &tp)) return 1;
    if (!tp.comm->leader()) {
      EngineRuntime follower;
      MakeEngineOrReport("serve", a, true, 16, &follower);
      return 1;
    }
  }
  const std::string dir = a.Get("model");
  ServerOptions so;
  so.host = a.Get("host", "127.0.0.1");
  so.port = static_cast<int>(port);
  so.http_threads = static_cast<int>(http_threads);
  so.grammar_threads = static_cast<int>(grammar_threads);
  so.max_inflight_body_bytes = static_cast<int64_t>(inflight_body);
  so.body_timeout_s = a.GetDouble("body-timeout", 60.0);
  if (!(so.body_timeout_s > 0 && so.body_timeout_s <= 3600)) {
    std::fprintf(stderr, "mimo serve: error: --body-timeout must be in (0, 3600] seconds\n");
    return 2;
  }
  so.max_connections = static_cast<int>(max_connections);
  so.allowed_hosts = SplitList(a.Get("allowed-hosts"));
  so.allowed_origins = SplitList(a.Get("allowed-origins"));
  so.public_metrics = a.Has("public-metrics");
  so.api_key = a.Get("api-key");
  so.served_model_name = a.Get("served-model-name", BaseName(dir));
  so.web_ui = !a.Has("no-webui");
  so.strict_max_tokens = a.Has("strict-max-tokens");
  so.parse_special_in_content = a.Has("parse-special-in-content");
  so.log_requests = !a.Has("disable-log-requests");
  so.signing_key = a.Get("signature-key");
  so.sse_ping_seconds = a.GetDouble("sse-ping-interval", 5.0);
  so.drain_timeout_s = a.GetDouble("drain-timeout", 30.0);
  const long long store_size = a.GetInt("responses-store-size", 1024);
  if (store_size < 0 || so.sse_ping_seconds <= 0) {
    std::fprintf(stderr,
                 "mimo serve: error: --responses-store-size must be >= 0 and "
                 "--sse-ping-interval > 0\n");
    return 2;
  }
  so.responses_store_entries = static_cast<size_t>(store_size);
  ApiServer server(so);
  const Status started = server.Start();
  if (!started.ok()) {
    std::fprintf(stderr, "mimo serve: error: %s\n", started.message().c_str());
    return 1;
  }
  // The pid: under a launcher (mpirun) the process to signal for a drain is this one, rank 0.
  std::fprintf(stderr, "mimo serve: listening on http://%s:%d (pid %d, loading %s)\n",
               so.host.c_str(), server.port(), static_cast<int>(getpid()), dir.c_str());

  StatusOr<ChatTemplate> tmpl = InvalidArgument("no chat template");
  if (a.Has("chat-template")) {
    std::string text;
    if (!ReadFileToString(a.Get("chat-template"), &text)) {
      std::fprintf(stderr, "mimo serve: error: cannot read '%s'\n", a.Get("chat-template").c_str());
      return 1;
    }
    tmpl = ChatTemplate::FromString(text);
  } else {
    tmpl = ChatTemplate::FromModelDir(dir);
  }
  if (!tmpl.ok()) {
    std::fprintf(stderr, "mimo serve: error: %s\n", tmpl.status().message().c_str());
    return 1;
  }
  EngineRuntime rt;
  if (!MakeEngineOrReport("serve", a, true, 16, &rt)) return 1;
  OverrideGenerationConfig(gen_override, &rt.gen);
  {
    const SamplingParams s = DefaultSampling(rt.gen);
    const Status valid = s.Validate(rt.lm.model->config().vocab_size);
    if (!valid.ok()) {
      std::fprintf(stderr, "mimo serve: error: the default sampling (%s%s): %s\n",
                   "generation_config.json",
                   a.Has("override-generation-config") ? " and --override-generation-config" : "",
                   valid.message().c_str());
      return 1;
    }
    if (a.Has("override-generation-config")) {
      std::fprintf(stderr,
                   "mimo serve: default sampling: temperature %g, top_p %g, top_k %d, min_p %g, "
                   "repetition_penalty %g\n",
                   s.temperature, s.top_p, s.top_k, s.min_p, s.repetition_penalty);
    }
  }
  // --no-warmup leaves the weights in the file mapping (--weights-memory mmap).
  if (!a.Has("no-warmup") && !PlaceWeightsOrReport("serve", a, rt, true)) return 1;
  rt.engine->Start();
  ServingModel m;
  m.engine = rt.engine.get();
  m.tokenizer = rt.tok.get();
  m.chat_template = &tmpl.value();
  m.thinks_by_default = tmpl->ThinksByDefault();
  m.defaults.served_model_name = so.served_model_name;
  m.defaults.max_model_len = rt.engine->max_model_len();
  m.defaults.vocab_size = rt.lm.model->config().vocab_size;
  m.defaults.gen = rt.gen;
  // Structured outputs: the vocabulary's byte strings and a cache of compiled grammars.
  auto vocab = TokenVocabulary::FromTokenizer(*rt.tok, rt.lm.model->config().vocab_size);
  GrammarCache grammars(vocab, 64, static_cast<size_t>(grammar_cache_bytes));
  m.grammars = &grammars;
  m.grammar_options.max_string_length = static_cast<int32_t>(a.GetInt("grammar-max-string-length", -1));
  m.grammar_options.limits = grammar_limits;
  // No string in an output is longer than the context's tokens x the longest token's bytes.
  size_t longest = 1;
  for (int32_t id = 0; id < vocab->size(); ++id) longest = std::max(longest, vocab->bytes(id).size());
  m.grammar_options.max_text_chars = int64_t{rt.engine->max_model_len()} * static_cast<int64_t>(longest);
  m.think_start_id = rt.tok->TokenToId("<think>");
  m.think_end_id = rt.tok->TokenToId("</think>");
  m.tool_call_id = rt.tok->TokenToId("<tool_call>");
  // The grammars requests compiled before a restart are compiled again before this server
  // reports ready (kept with the prefix cache: server/grammar_records.h).
  const GrammarRecords grammar_records(a.Get("prefix-cache-dir"));
  if (grammar_records.enabled()) {
    m.grammar_records = &grammar_records;
    const auto g0 = std::chrono::steady_clock::now();
    const int n = grammar_records.CompileAll(m);
    if (n > 0) {
      std::fprintf(stderr, "mimo serve: compiled %d recorded grammars from %s in %.2f s\n", n,
                   grammar_records.dir().c_str(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - g0).count());
    }
  }
  server.SetModel(m);
  serving.store(true);
  std::fprintf(stderr,
               "mimo serve: ready: model '%s', max_model_len %d, up to %lld sequences; KV cache "
               "holds %lld tokens\n",
               so.served_model_name.c_str(), rt.engine->max_model_len(),
               static_cast<long long>(a.GetInt("max-num-seqs", 16)),
               static_cast<long long>(rt.engine->kv_memory_plan().tokens_that_fit));
  if (so.web_ui) {
    std::fprintf(stderr, "mimo serve: chat page: http://%s:%d/\n", so.host.c_str(), server.port());
  }

  while (signals.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::fprintf(stderr, "mimo serve: draining\n");
  server.BeginDrain();
  const double timeout = a.GetDouble("drain-timeout", 30.0);
  const auto t0 = std::chrono::steady_clock::now();
  while (server.requests_in_flight() > 0 &&
         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < timeout) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // Whatever is still in flight ends with an error; every open response is then ended with the
  // protocol's error (a stream's error event and terminator, a whole response's 503) before the
  // connections close.
  const int left = server.requests_in_flight();
  if (left > 0) {
    std::fprintf(stderr,
                 "mimo serve: drain timeout (%.0f s) passed with %d requests in flight: ending "
                 "them with an error\n",
                 timeout, left);
  }
  rt.engine->Shutdown(FinishReason::kError,
                      std::string(kShutdownError) + " (its drain timeout passed); retry the request");
  if (!server.FinishResponses(5.0))
    std::fprintf(stderr, "mimo serve: some responses did not finish writing within 5 s\n");
  server.Stop();
  std::fprintf(stderr, "mimo serve: stopped\n");
  return 0;
}

}  // namespace
MIMO_CLI_COMMAND("serve",
                 "--model DIR [--host H] [--port P] [--api-key K] [--max-num-seqs N] ... "
                 "(OpenAI/Anthropic-compatible HTTP server)",
                 RunServe);
}  // namespace mimo::cli
