// The HTTP API of `mimo serve`: OpenAI (/v1/chat/completions, /v1/completions, /v1/responses,
// /v1/models), Anthropic (/v1/messages, /v1/messages/count_tokens), /health, /metrics,
// /tokenize, /detokenize, and the chat page at / (server/web_ui.h), on server/http_server.h.
// Worker threads parse JSON, render the chat template, tokenize and submit; responses are pulled
// from the engine's events by the connection (no thread waits on a generation); only the engine
// thread touches the model (through Engine::Submit / Cancel). Handlers never throw: every failure
// becomes an error object with the right HTTP status. Before a body is read the headers are
// checked: API key, and without a key on a loopback address the Host and the Content-Type
// (DNS rebinding, CSRF); see docs/SECURITY.md.
// Thread-safety: Start/SetModel/BeginDrain/Stop from the owning thread; handlers run on the HTTP
// workers.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "chat/chat_template.h"
#include "engine/engine.h"
#include "grammar/grammar_cache.h"
#include "server/chat_turn.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/parse_context.h"
#include "server/response_writer.h"
#include "tokenizer/bpe.h"

namespace mimo {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;            // 0: any free port (see port())
  std::string api_key;        // non-empty: /v1/* and /tokenize need it
  std::string served_model_name = "mimo";
  int http_threads = 4;        // workers that parse, render and tokenize requests
  int grammar_threads = 1;     // compile structured-output grammars (the slow pool)
  // Open HTTP connections; at the cap the longest-idle one is closed for a new one, past it
  // /health and /metrics still answer on a reserve (HttpOptions).
  int max_connections = 1024;
  // Request bodies being received at once, in bytes; a body that would pass it is a 503.
  int64_t max_inflight_body_bytes = int64_t{1} << 30;
  double body_timeout_s = 60;  // to receive a whole request body; then 408
  // Without an API key on a loopback address: Host values accepted besides localhost,
  // 127.0.0.1 and [::1] (any port), and whether the Host/Content-Type checks apply at all.
  std::vector<std::string> allowed_hosts;
  // CORS: origins whose pages may call the API ("*": any); empty: no CORS headers.
  std::vector<std::string> allowed_origins;
  bool public_metrics = false;  // with an API key, GET /metrics without it
  bool web_ui = true;         // GET / serves the built-in chat page (server/web_ui.h)
  // A max_tokens larger than the room the prompt leaves in the context is a 400 (else it is
  // lowered to that room, and the output ends with finish reason "length" there).
  bool strict_max_tokens = false;
  // Added-token text in request content (messages, tools) becomes those tokens, as the template's
  // own do; off: it is encoded as text (chat/chat_prompt.h).
  bool parse_special_in_content = false;
  bool log_requests = true;  // one access-log line per request on stderr
  // Key of the signatures on thinking blocks and reasoning items (HMAC-SHA256); empty: a random
  // one per process, so a signature from before a restart no longer verifies.
  std::string signing_key;
  // Streams write a keep-alive (Anthropic's ping event, an SSE comment elsewhere) after this many
  // seconds without output, e.g. while a long prompt is processed.
  double sse_ping_seconds = 5;
  // The drain's length (serve --drain-timeout): the Retry-After of the 503s a draining server
  // answers new requests with.
  double drain_timeout_s = 30;
  size_t responses_store_entries = 1024;             // stored Responses API responses, at most
  size_t responses_store_bytes = size_t{256} << 20;  // ... and their bytes
};

// What a ready server serves with. Owned by the caller; must outlive the server.
class GrammarRecords;  // server/grammar_records.h

struct ServingModel {
  Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;
  bool thinks_by_default = false;  // chat_template->ThinksByDefault()
  ServerDefaults defaults;
  GrammarCache* grammars = nullptr;  // structured outputs (null: refused with a 400)
  GrammarOptions grammar_options;
  // With --prefix-cache-dir: the inputs of the grammars requests compile are recorded there
  // (server/grammar_records.h); null: not recorded.
  const GrammarRecords* grammar_records = nullptr;
  // Structured outputs (server/structured_output.h): the reasoning block's tags and the tool-call
  // tag (-1: the vocabulary has none; then no reasoning block / no tool-call constraint).
  int32_t think_start_id = -1;  // <think>: opens the block when thinking is on
  int32_t think_end_id = -1;    // </think>: closes it (forced at a reasoning budget)
  int32_t tool_call_id = -1;    // <tool_call>: tool_choice auto constrains a call once it opens
};

class ResponseStore;
class HttpServer;
struct HttpRoute;

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
  // Stops accepting connections and waits up to `seconds` until no response is being produced or
  // written: after the engine ended what was in flight (Engine::Shutdown with kShutdownError),
  // every stream gets its error event and terminator and every whole response its error before
  // Stop. True when none was left.
  bool FinishResponses(double seconds);
  int requests_in_flight() const { return in_flight_.load(); }
  void Stop();  // stops listening and answering; joins the HTTP threads
  int port() const { return port_; }
  ServerMetrics& metrics() { return *metrics_; }

  // --- Handlers (one per route; defined across api_server.cc, openai_handlers.cc and
  // anthropic_messages.cc).
  void HandleChat(const HttpRequest& req, HttpResponse& res);
  void HandleCompletion(const HttpRequest& req, HttpResponse& res);
  void HandleMessages(const HttpRequest& req, HttpResponse& res);
  void HandleCountTokens(const HttpRequest& req, HttpResponse& res);
  void HandleResponses(const HttpRequest& req, HttpResponse& res);
  void HandleGetResponse(const HttpRequest& req, HttpResponse& res);
  void HandleDeleteResponse(const HttpRequest& req, HttpResponse& res);
  void HandleResponseInputItems(const HttpRequest& req, HttpResponse& res);
  void HandleResponseInputTokens(const HttpRequest& req, HttpResponse& res);
  void HandleModels(const HttpRequest& req, HttpResponse& res);
  void HandleModel(const HttpRequest& req, HttpResponse& res);
  void HandleTokenize(const HttpRequest& req, HttpResponse& res);
  void HandleDetokenize(const HttpRequest& req, HttpResponse& res);

  // --- Shared by the handlers.
  enum class Protocol { kOpenAi, kAnthropic };
  // Ready, not draining, authorised, body is a JSON object: else answers the error and false.
  bool Admit(const HttpRequest& req, HttpResponse& res, Protocol p, OJson* body);
  // The protocol whose error shape a path answers in (/v1/messages... is Anthropic's).
  static Protocol ProtocolOf(const std::string& path);
  static void SendError(HttpResponse& res, const ApiError& e, Protocol p);
  static void SendJson(HttpResponse& res, const OJson& j, int status = 200);
  // The end of a response whose request the engine ended with an error (StreamWriters::
  // error_tail): the protocol's error event and the stream's terminator, or the error object.
  static std::function<std::string(const ApiError&)> ErrorTail(Protocol p, bool stream);
  const ServingModel& model() const { return model_; }
  std::atomic<int>& in_flight() { return in_flight_; }
  // Answers a submitted session: streamed (`stream`: the writers, with the server's keep-alive
  // interval) or whole (every event to `accumulate`, then the text of `whole`).
  void Respond(HttpResponse& res, std::shared_ptr<GenerationSession> session, bool stream,
               StreamWriters writers, std::function<void(const RequestOutput&)> accumulate,
               TailWriter whole);

  // Renders the turn's prompt (thinking resolved against the template's default) into *prompt,
  // with the request's text marked literal (encode it with EncodeChatPrompt).
  std::optional<ApiError> RenderTurn(ChatTurn* turn, ChatPrompt* prompt) const;
  // RenderTurn, then tokenize into turn->gen.prompt_ids, fit max_tokens into the context, build
  // the output constraint and the parser options.
  std::optional<ApiError> PrepareTurn(ChatTurn* turn, PreparedTurn* out) const;
  // Signatures of text this server generated (thinking blocks, reasoning items): base64 of an
  // HMAC-SHA256 under the server's key, bound to `kind`.
  std::string Sign(std::string_view kind, std::string_view text) const;
  bool Verify(std::string_view kind, std::string_view text, std::string_view signature) const;
  // What the Anthropic and Responses request parsers need of the server: the defaults, Verify
  // and the response store.
  ParseContext ParseCtx() const;
  const ServerOptions& options() const { return opts_; }
  ResponseStore& responses() { return *responses_; }

 private:
  // The routes (the server's own, the API's, the web UI's) and the HTTP layer's hooks.
  void Route();
  void SetHttpHooks();
  // The checks on a request's headers (see the file comment), in this order: Host (without a key
  // on a loopback address), a CORS preflight, the API key, Content-Type (as Host); an answer
  // refuses the request (or answers the preflight).
  std::optional<HttpResponse> Precheck(const HttpRequest& req, const HttpRoute* route) const;
  std::optional<HttpResponse> CheckHost(const HttpRequest& req) const;
  std::optional<HttpResponse> Preflight(const HttpRequest& req) const;
  std::optional<HttpResponse> CheckApiKey(const HttpRequest& req, const HttpRoute& route) const;
  void AddCors(const HttpRequest& req, HttpResponse& res) const;

  ServerOptions opts_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<ResponseStore> responses_;
  std::string signing_key_;
  int port_ = 0;
  ServingModel model_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
  std::atomic<int> in_flight_{0};
};

// JSON text safe for the wire: invalid UTF-8 in strings (partial tokens) becomes U+FFFD.
std::string DumpJson(const OJson& j);

// For the access log: the token counts of the request this HTTP thread is serving.
void NoteRequestTokens(int prompt_tokens, int output_tokens);

}  // namespace mimo
