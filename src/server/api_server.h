// The HTTP API of `mimo serve`: OpenAI (/v1/chat/completions, /v1/completions, /v1/models),
// Anthropic (/v1/messages), /health, /metrics, /tokenize, /detokenize, and the chat page at /
// (server/web_ui.h). Built on cpp-httplib.
// HTTP threads parse JSON, render the chat template, tokenize, detokenize and parse model output;
// only the engine thread touches the model (through Engine::Submit / Cancel). Handlers never
// throw: every failure becomes an error object with the right HTTP status.
// Thread-safety: Start/SetModel/BeginDrain/Stop from the owning thread; handlers run on the HTTP
// pool.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "chat/chat_template.h"
#include "engine/engine.h"
#include "grammar/grammar_cache.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "tokenizer/bpe.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace mimo {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;            // 0: any free port (see port())
  std::string api_key;        // non-empty: /v1/* and /tokenize need it
  std::string served_model_name = "mimo";
  int http_threads = 256;     // each streaming client holds one while it streams
  bool web_ui = true;         // GET / serves the built-in chat page (server/web_ui.h)
};

// What a ready server serves with. Owned by the caller; must outlive the server.
struct ServingModel {
  Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;
  bool thinks_by_default = false;  // chat_template->ThinksByDefault()
  ServerDefaults defaults;
  GrammarCache* grammars = nullptr;  // structured outputs (null: refused with a 400)
  GrammarOptions grammar_options;
  // Structured outputs (server/structured_output.h): the reasoning block's tags and the tool-call
  // tag (-1: the vocabulary has none; then no reasoning block / no tool-call constraint).
  int32_t think_start_id = -1;  // <think>: opens the block when thinking is on
  int32_t think_end_id = -1;    // </think>: closes it (forced at a reasoning budget)
  int32_t tool_call_id = -1;    // <tool_call>: tool_choice auto constrains a call once it opens
};

class ApiServer {
 public:
  explicit ApiServer(ServerOptions options);
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Binds and starts answering on a background thread; until SetModel, /health is 503 and every
  // API request gets 503 "the model is loading".
  Status Start();
  void SetModel(const ServingModel& model);
  // From now on new requests get 503; requests in flight continue.
  void BeginDrain();
  int requests_in_flight() const { return in_flight_.load(); }
  void Stop();  // stops listening and joins the listener thread
  int port() const { return port_; }
  ServerMetrics& metrics() { return *metrics_; }

  // --- Handlers (one per route; defined across api_server.cc, openai_handlers.cc and
  // anthropic_messages.cc).
  void HandleChat(const httplib::Request& req, httplib::Response& res);
  void HandleCompletion(const httplib::Request& req, httplib::Response& res);
  void HandleMessages(const httplib::Request& req, httplib::Response& res);
  void HandleModels(const httplib::Request& req, httplib::Response& res);
  void HandleTokenize(const httplib::Request& req, httplib::Response& res);
  void HandleDetokenize(const httplib::Request& req, httplib::Response& res);

  // --- Shared by the handlers.
  enum class Protocol { kOpenAi, kAnthropic };
  // Ready, not draining, authorised, body is a JSON object: else answers the error and false.
  bool Admit(const httplib::Request& req, httplib::Response& res, Protocol p, OJson* body);
  static void SendError(httplib::Response& res, const ApiError& e, Protocol p);
  static void SendJson(httplib::Response& res, const OJson& j, int status = 200);
  const ServingModel& model() const { return model_; }
  std::atomic<int>& in_flight() { return in_flight_; }

 private:
  void Route();

  ServerOptions opts_;
  std::unique_ptr<httplib::Server> http_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::thread listener_;
  int port_ = 0;
  ServingModel model_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
  std::atomic<int> in_flight_{0};
};

// JSON text safe for the wire: invalid UTF-8 in strings (partial tokens) becomes U+FFFD.
std::string DumpJson(const OJson& j);

}  // namespace mimo
