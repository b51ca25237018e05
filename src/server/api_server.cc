// ApiServer: routing, admission (readiness, draining, API key, JSON body), errors, and the small
// endpoints (/health, /v1/models, /metrics, /tokenize, /detokenize).
#include "server/api_server.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "core/log.h"
#include "core/secure_random.h"
#include "core/sha256.h"
#include "core/utf8.h"
#include "server/http_server.h"
#include "server/request_json.h"
#include "server/response_store.h"
#include "server/web_ui.h"

namespace mimo {
namespace {

enum RouteTag { kPublic = 0, kApi = 1, kMetrics = 2 };

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool AllDigits(std::string_view s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
}

// The name of a Host header value, lower-cased ("[::1]:8000" -> "[::1]", "a.b:80" -> "a.b"), or
// "" when the value is malformed (an empty name, an unclosed bracket, a port that is not digits).
std::string HostName(const std::string& value) {
  const std::string h = Lower(value);
  size_t end = 0;
  if (!h.empty() && h[0] == '[') {
    end = h.find(']');
    if (end == std::string::npos) return "";
    ++end;
  } else {
    end = std::min(h.find(':'), h.size());
  }
  if (end == 0) return "";
  if (end < h.size() && (h[end] != ':' || !AllDigits(std::string_view(h).substr(end + 1))))
    return "";
  return h.substr(0, end);
}

// An IPv4 address in 127.0.0.0/8 written as a browser sends it: four decimal octets 0-255,
// without leading zeros. ("127.attacker.example", "127.0.0.1.nip.io" are DNS names.)
bool IsLoopbackIpv4(std::string_view s) {
  std::vector<std::string_view> octets;
  for (size_t pos = 0;;) {
    const size_t dot = std::min(s.find('.', pos), s.size());
    octets.push_back(s.substr(pos, dot - pos));
    if (dot == s.size()) break;
    pos = dot + 1;
  }
  if (octets.size() != 4 || octets[0] != "127") return false;
  for (std::string_view o : octets) {
    if (!AllDigits(o) || o.size() > 3 || (o.size() > 1 && o[0] == '0')) return false;
    if (std::stoi(std::string(o)) > 255) return false;
  }
  return true;
}

// The names a page can only reach when it is served from this host itself.
bool IsLoopbackName(const std::string& name) {
  return name == "localhost" || name == "[::1]" || IsLoopbackIpv4(name);
}

bool IsLoopbackAddress(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Whose fields a body on this path has (request_json.h: others are not even parsed).
RequestKind KindOf(const std::string& path) {
  if (StartsWith(path, "/v1/messages")) return RequestKind::kMessages;
  if (path == "/v1/chat/completions" || path == "/tokenize") return RequestKind::kChatCompletions;
  if (path == "/v1/completions") return RequestKind::kCompletions;
  if (path == "/v1/responses") return RequestKind::kResponses;
  if (path == "/detokenize") return RequestKind::kDetokenize;
  return RequestKind::kAny;
}

// "Bearer KEY" with the scheme in any case (RFC 7235: schemes are case-insensitive).
std::string BearerToken(const std::string& header) {
  if (header.size() < 7) return "";
  return Lower(header.substr(0, 7)) == "bearer " ? header.substr(7) : "";
}

}  // namespace

std::string DumpJson(const OJson& j) {
  return j.dump(-1, ' ', false, OJson::error_handler_t::replace);
}

void NoteRequestTokens(int prompt_tokens, int output_tokens) {
  if (HttpServer::RequestRecord* r = HttpServer::CurrentRecord()) {
    r->prompt_tokens = prompt_tokens;
    r->output_tokens = output_tokens;
  }
}

ApiServer::ApiServer(ServerOptions options)
    : opts_(std::move(options)),
      http_(std::make_unique<HttpServer>([&] {
        HttpOptions h;
        h.host = opts_.host;
        h.port = opts_.port;
        h.worker_threads = opts_.http_threads;
        h.slow_threads = opts_.grammar_threads;
        h.max_connections = opts_.max_connections;
        h.max_inflight_body_bytes = opts_.max_inflight_body_bytes;
        h.body_timeout_s = opts_.body_timeout_s;
        h.max_body_bytes = kMaxRequestBodyBytes;
        return h;
      }())),
      metrics_(std::make_unique<ServerMetrics>(opts_.served_model_name)),
      responses_(std::make_unique<ResponseStore>(opts_.responses_store_entries,
                                                 opts_.responses_store_bytes)) {
  signing_key_ = opts_.signing_key;
  if (signing_key_.empty()) {
    signing_key_.resize(32);
    SecureRandomBytes(signing_key_.data(), signing_key_.size());
  }
}

ApiServer::~ApiServer() { Stop(); }

void ApiServer::SendJson(HttpResponse& res, const OJson& j, int status) {
  res.status = status;
  res.set_content(DumpJson(j), "application/json");
}

void ApiServer::Respond(HttpResponse& res, std::shared_ptr<GenerationSession> session, bool stream,
                        StreamWriters writers, std::function<void(const RequestOutput&)> accumulate,
                        TailWriter whole) {
  if (stream) {
    writers.keepalive_seconds = opts_.sse_ping_seconds;
    RespondStreaming(res, std::move(session), std::move(writers), &in_flight_);
    return;
  }
  RespondWhenDone(
      res, std::move(session),
      [accumulate](const RequestOutput& ev) {
        accumulate(ev);
        return std::string();
      },
      std::move(whole), std::move(writers.error_tail), &in_flight_);
}

std::function<std::string(const ApiError&)> ApiServer::ErrorTail(Protocol p, bool stream) {
  return [p, stream](const ApiError& e) {
    const std::string json = DumpJson(p == Protocol::kAnthropic ? e.AnthropicJson() : e.OpenAiJson());
    if (!stream) return json;
    return p == Protocol::kAnthropic ? SseEvent("error", json) : SseData(json) + "data: [DONE]\n\n";
  };
}

void ApiServer::SendError(HttpResponse& res, const ApiError& e, Protocol p) {
  if (e.rerun_slow) {
    res = HttpResponse();
    res.rerun_slow = true;
    return;
  }
  SendJson(res, p == Protocol::kAnthropic ? e.AnthropicJson() : e.OpenAiJson(), e.status);
  if (e.retry_after_s > 0 && (e.status == 429 || e.status == 503))
    res.set_header("Retry-After", std::to_string(e.retry_after_s));
}

bool ApiServer::Admit(const HttpRequest& req, HttpResponse& res, Protocol p, OJson* body) {
  ApiError e;
  if (!ready_.load()) {
    e = ServiceUnavailable("the model is loading; retry when GET /health answers 200");
    e.retry_after_s = 5;  // a load takes seconds to minutes; /health says when it is done
    SendError(res, e, p);
    return false;
  }
  if (draining_.load()) {
    // Requests in flight have up to the drain to finish; a restarted server answers after it.
    e = ServiceUnavailable("the server is shutting down");
    e.retry_after_s = std::max(1, static_cast<int>(std::ceil(opts_.drain_timeout_s)));
    SendError(res, e, p);
    return false;
  }
  if (body) {
    if (auto bad = ParseRequestBody(req.body, body, KindOf(req.path))) {
      SendError(res, *bad, p);
      return false;
    }
  }
  return true;
}

ApiServer::Protocol ApiServer::ProtocolOf(const std::string& path) {
  return StartsWith(path, "/v1/messages") ? Protocol::kAnthropic : Protocol::kOpenAi;
}

// The served model in OpenAI's shape, or in Anthropic's for Anthropic clients (they send an
// anthropic-version header).
static OJson ModelJson(const HttpRequest& req, const std::string& name, int max_model_len) {
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  if (req.has_header("anthropic-version")) {
    char created[32];
    const std::time_t t = now;
    std::strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return {{"type", "model"}, {"id", name}, {"display_name", name}, {"created_at", created}};
  }
  return {{"id", name},     {"object", "model"},
          {"created", now}, {"owned_by", "mimo.cpp"},
          {"root", name},   {"max_model_len", max_model_len}};
}

void ApiServer::HandleModels(const HttpRequest& req, HttpResponse& res) {
  if (!Admit(req, res, Protocol::kOpenAi, nullptr)) return;
  const OJson m = ModelJson(req, opts_.served_model_name, model_.defaults.max_model_len);
  if (req.has_header("anthropic-version")) {
    return SendJson(res, {{"data", OJson::array({m})},
                          {"has_more", false},
                          {"first_id", opts_.served_model_name},
                          {"last_id", opts_.served_model_name}});
  }
  SendJson(res, {{"object", "list"}, {"data", OJson::array({m})}});
}

void ApiServer::HandleModel(const HttpRequest& req, HttpResponse& res) {
  if (!Admit(req, res, Protocol::kOpenAi, nullptr)) return;
  const std::string id = req.matches.size() > 1 ? std::string(req.matches[1]) : "";
  if (id != opts_.served_model_name) {
    ApiError e = NotFound("The model `" + id + "` does not exist; this server serves `" +
                          opts_.served_model_name + "`.");
    e.code = "model_not_found";
    e.param = "model";
    return SendError(res, e, Protocol::kOpenAi);
  }
  SendJson(res, ModelJson(req, opts_.served_model_name, model_.defaults.max_model_len));
}

// vLLM's /tokenize: {"prompt": text} or {"messages": [...], "add_generation_prompt",
// "continue_final_message", "chat_template_kwargs", "tools"} -> {"count", "max_model_len",
// "tokens"}.
void ApiServer::HandleTokenize(const HttpRequest& req, HttpResponse& res) {
  OJson body;
  if (!Admit(req, res, Protocol::kOpenAi, &body)) return;
  if (auto e = CheckModel(body, model_.defaults)) return SendError(res, *e, Protocol::kOpenAi);
  for (const char* k : {"add_generation_prompt", "return_token_strs", "continue_final_message"}) {
    if (body.contains(k) && !body[k].is_boolean()) {
      return SendError(res, BadRequest(std::string("'") + k + "' must be a boolean", k),
                       Protocol::kOpenAi);
    }
  }
  ChatPrompt prompt;  // a raw prompt is the model's input as it is: no literal ranges
  if (body.contains("messages")) {
    ChatRequest cr;
    if (auto e = ParseChatRequest(body, model_.defaults, &cr))
      return SendError(res, *e, Protocol::kOpenAi);
    ChatTurn turn = std::move(cr.turn);
    turn.add_generation_prompt = body.value("add_generation_prompt", true);
    if (auto e = RenderTurn(&turn, &prompt)) return SendError(res, *e, Protocol::kOpenAi);
  } else if (body.contains("prompt") && body["prompt"].is_string()) {
    prompt.text = body["prompt"];
  } else {
    return SendError(res, BadRequest("'prompt' (a string) or 'messages' is required", "prompt"),
                     Protocol::kOpenAi);
  }
  const std::vector<int32_t> ids = EncodeChatPrompt(*model_.tokenizer, prompt);
  OJson strs = OJson::array();
  if (body.value("return_token_strs", false)) {
    for (int32_t id : ids) strs.push_back(model_.tokenizer->IdToToken(id));
  }
  OJson out = {{"count", ids.size()}, {"max_model_len", model_.defaults.max_model_len},
               {"tokens", ids}};
  out["token_strs"] = body.value("return_token_strs", false) ? strs : OJson(nullptr);
  NoteRequestTokens(static_cast<int>(ids.size()), 0);
  SendJson(res, out);
}

void ApiServer::HandleDetokenize(const HttpRequest& req, HttpResponse& res) {
  OJson body;
  if (!Admit(req, res, Protocol::kOpenAi, &body)) return;
  if (auto e = CheckModel(body, model_.defaults)) return SendError(res, *e, Protocol::kOpenAi);
  std::vector<int32_t> ids;
  auto known = [this](int32_t id) { return model_.tokenizer->IsValidId(id); };
  if (auto e = ParseDetokenizeRequest(body, model_.defaults, known, &ids))
    return SendError(res, *e, Protocol::kOpenAi);
  SendJson(res, {{"prompt", model_.tokenizer->Decode(ids)}});
}

namespace {

// An answer refusing a request, in the error shape of its path's protocol.
HttpResponse Refusal(ApiServer::Protocol p, int status, const char* type, std::string message) {
  HttpResponse res;
  ApiError e;
  e.status = status;
  e.type = type;
  e.message = std::move(message);
  ApiServer::SendError(res, e, p);
  return res;
}

// A POST with a body on an unguarded loopback server must declare it application/json: a
// "simple" cross-site POST cannot (it would need a preflight).
std::optional<HttpResponse> CheckContentType(const HttpRequest& req, ApiServer::Protocol p) {
  const std::string length = req.get_header_value("Content-Length");
  const bool has_body = req.has_header("Transfer-Encoding") || (!length.empty() && length != "0");
  if (req.method != "POST" || !has_body) return std::nullopt;
  std::string type = Lower(req.get_header_value("Content-Type"));
  type = type.substr(0, type.find(';'));
  type.erase(type.find_last_not_of(" \t") + 1);
  if (type == "application/json") return std::nullopt;
  return Refusal(p, 415, "invalid_request_error",
                 "Content-Type '" + req.get_header_value("Content-Type") +
                     "' is not accepted: send the body as application/json");
}

// What the HTTP layer itself refuses (no route, a wrong method, a malformed or oversized
// request, a full server) gets an error object in the shape of the path's protocol.
void HttpErrorBody(const HttpRequest& req, int status, const std::string& message,
                   HttpResponse& res) {
  const ApiServer::Protocol p = ApiServer::ProtocolOf(req.path);
  ApiError e;
  e.status = status;
  e.message = message;
  if (status == 404) {
    e.type = "not_found_error";
  } else if (status == 405) {
    e.type = "invalid_request_error";
    e.code = "method_not_allowed";
  } else if (status == 413) {
    e.type = p == ApiServer::Protocol::kAnthropic ? "request_too_large" : "invalid_request_error";
  } else if (status == 503) {
    e.type = p == ApiServer::Protocol::kAnthropic ? "overloaded_error" : "service_unavailable";
  } else if (status >= 500) {
    e.type = "internal_server_error";
  }
  ApiServer::SendError(res, e, p);
}

// One line per request once it is answered (for a stream: once it ended).
void LogRequest(const HttpRequest& req, int status, double ms,
                const HttpServer::RequestRecord& rec) {
  std::string tokens;
  if (rec.prompt_tokens >= 0) {
    tokens = " prompt_tokens=" + std::to_string(rec.prompt_tokens) +
             " output_tokens=" + std::to_string(rec.output_tokens);
  }
  std::fprintf(stderr, "mimo serve: %s %s %d%s %.0f ms\n", req.method.c_str(), req.path.c_str(),
               status, tokens.c_str(), ms);
}

}  // namespace

// The Host of a request to an unguarded loopback server: a loopback name or one of
// --allowed-hosts (else a page could reach the API through a DNS name rebound to 127.0.0.1).
// (One Host field, present on HTTP/1.1: the HTTP layer checked that.)
std::optional<HttpResponse> ApiServer::CheckHost(const HttpRequest& req) const {
  if (!req.has_header("Host")) return std::nullopt;
  const std::string host = HostName(req.get_header_value("Host"));
  bool ok = IsLoopbackName(host);
  for (const std::string& h : opts_.allowed_hosts) ok = ok || (!host.empty() && Lower(h) == host);
  if (ok) return std::nullopt;
  return Refusal(ProtocolOf(req.path), 403, "permission_error",
                 "Host '" + req.get_header_value("Host") +
                     "' is not a loopback name; start the server with --allowed-hosts " + host +
                     " to accept it");
}

// A CORS preflight (OPTIONS with Origin and Access-Control-Request-Method): answered here, from
// an allowed origin, else refused; nullopt when the request is not one.
std::optional<HttpResponse> ApiServer::Preflight(const HttpRequest& req) const {
  if (req.method != "OPTIONS" || !req.has_header("Origin") ||
      !req.has_header("Access-Control-Request-Method")) {
    return std::nullopt;
  }
  HttpResponse res;
  AddCors(req, res);
  if (res.headers.empty()) {
    return Refusal(
        ProtocolOf(req.path), 403, "permission_error",
        "origin '" + req.get_header_value("Origin") + "' is not allowed (--allowed-origins)");
  }
  res.status = 204;
  res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
  const std::string asked = req.get_header_value("Access-Control-Request-Headers");
  res.set_header(
      "Access-Control-Allow-Headers",
      asked.empty() ? "Authorization, Content-Type, x-api-key, anthropic-version" : asked);
  res.set_header("Access-Control-Max-Age", "600");
  return res;
}

// The API key (Authorization: Bearer, or x-api-key) on the routes that need one: the API, and
// /metrics unless it is public.
std::optional<HttpResponse> ApiServer::CheckApiKey(const HttpRequest& req,
                                                   const HttpRoute& route) const {
  const bool needs_key = route.tag == kApi || (route.tag == kMetrics && !opts_.public_metrics);
  if (opts_.api_key.empty() || !needs_key) return std::nullopt;
  const std::string auth = req.get_header_value("Authorization");
  const std::string x_key = req.get_header_value("x-api-key");
  if (ConstantTimeEquals(BearerToken(auth), opts_.api_key) ||
      ConstantTimeEquals(x_key, opts_.api_key)) {
    return std::nullopt;
  }
  ApiError e;
  e.status = 401;
  e.type = "authentication_error";
  e.code = "invalid_api_key";
  e.message = auth.empty() && x_key.empty()
                  ? "missing API key: send 'Authorization: Bearer KEY' (or 'x-api-key: KEY')"
                  : "incorrect API key";
  HttpResponse res;
  SendError(res, e, ProtocolOf(req.path));
  return res;
}

std::optional<HttpResponse> ApiServer::Precheck(const HttpRequest& req,
                                                const HttpRoute* route) const {
  // Without a key on a loopback address any web page the user opens could call the API: through
  // a DNS name rebound to 127.0.0.1 (refused by Host) or with a "simple" cross-site POST (no
  // preflight: refused unless the body is declared application/json, which needs one).
  const bool guard = opts_.api_key.empty() && IsLoopbackAddress(opts_.host);
  if (guard) {
    if (auto refused = CheckHost(req)) return refused;
  }
  if (auto answer = Preflight(req)) return answer;
  if (!route) return std::nullopt;  // 404 / 405
  if (auto refused = CheckApiKey(req, *route)) return refused;
  if (guard) return CheckContentType(req, ProtocolOf(req.path));
  return std::nullopt;
}

void ApiServer::AddCors(const HttpRequest& req, HttpResponse& res) const {
  if (opts_.allowed_origins.empty() || !req.has_header("Origin")) return;
  for (const auto& [k, v] : res.headers) {
    if (k == "Access-Control-Allow-Origin") return;  // a preflight answer has them already
  }
  const std::string origin = req.get_header_value("Origin");
  for (const std::string& o : opts_.allowed_origins) {
    if (o == "*" || o == origin) {
      res.set_header("Access-Control-Allow-Origin", o == "*" ? "*" : origin);
      res.set_header("Vary", "Origin");
      return;
    }
  }
}

// The routes: the server's own (inline: answered on the I/O threads, so they answer however busy
// the workers are), the API's (on the workers) and the web UI's.
void ApiServer::Route() {
  HttpServer& s = *http_;
  using Req = HttpRequest;
  using Res = HttpResponse;
  const auto add = [&](const char* method, const char* pattern, HttpHandler h, int tag,
                       bool inline_handler = false) {
    s.Handle(HttpRoute{method, pattern, std::move(h), inline_handler, tag});
  };
  add(
      "GET", "/health",
      [this](const Req&, Res& res) {
        if (!ready_.load()) return SendJson(res, {{"status", "loading"}}, 503);
        if (draining_.load()) return SendJson(res, {{"status", "draining"}}, 503);
        SendJson(res, {{"status", "ok"}});
      },
      kPublic, true);
  add(
      "GET", "/metrics",
      [this](const Req&, Res& res) {
        EngineStats st;
        const bool ready = ready_.load();
        if (ready) st = model_.engine->Stats();
        res.set_content(metrics_->Render(st, ready ? model_.grammars : nullptr),
                        "text/plain; version=0.0.4; charset=utf-8");
      },
      kMetrics, true);
  add(
      "GET", "/v1/models", [this](const Req& q, Res& r) { HandleModels(q, r); }, kApi, true);
  add(
      "GET", "/v1/models/{+}", [this](const Req& q, Res& r) { HandleModel(q, r); }, kApi, true);
  add(
      "POST", "/v1/chat/completions", [this](const Req& q, Res& r) { HandleChat(q, r); }, kApi);
  add(
      "POST", "/v1/completions", [this](const Req& q, Res& r) { HandleCompletion(q, r); }, kApi);
  add(
      "POST", "/v1/messages", [this](const Req& q, Res& r) { HandleMessages(q, r); }, kApi);
  add(
      "POST", "/v1/messages/count_tokens",
      [this](const Req& q, Res& r) { HandleCountTokens(q, r); }, kApi);
  add(
      "POST", "/v1/responses", [this](const Req& q, Res& r) { HandleResponses(q, r); }, kApi);
  add(
      "POST", "/v1/responses/input_tokens",
      [this](const Req& q, Res& r) { HandleResponseInputTokens(q, r); }, kApi);
  add(
      "GET", "/v1/responses/{}", [this](const Req& q, Res& r) { HandleGetResponse(q, r); }, kApi);
  add(
      "DELETE", "/v1/responses/{}", [this](const Req& q, Res& r) { HandleDeleteResponse(q, r); },
      kApi);
  add(
      "GET", "/v1/responses/{}/input_items",
      [this](const Req& q, Res& r) { HandleResponseInputItems(q, r); }, kApi);
  add(
      "POST", "/tokenize", [this](const Req& q, Res& r) { HandleTokenize(q, r); }, kApi);
  add(
      "POST", "/detokenize", [this](const Req& q, Res& r) { HandleDetokenize(q, r); }, kApi);
  if (opts_.web_ui) {
    for (const std::string& path : WebUiPaths()) {
      add(
          "GET", path.c_str(), [](const Req& q, Res& r) { ServeWebAsset(q, r); }, kPublic, true);
    }
  }
}

// The HTTP layer's hooks: the precheck, the headers every answer gets (CORS, Anthropic's
// request-id), the error body of what the HTTP layer refuses itself, the access log.
void ApiServer::SetHttpHooks() {
  http_->SetHooks(
      [this](const HttpRequest& req, const HttpRoute* route) { return Precheck(req, route); },
      [this](const HttpRequest& req, HttpResponse& res) {
        AddCors(req, res);
        // Anthropic's name for the id (its SDK reads it into _request_id); every response also
        // has x-request-id (the HTTP layer's).
        if (ProtocolOf(req.path) == Protocol::kAnthropic)
          res.set_header("request-id", req.request_id);
      },
      HttpErrorBody,
      [this](const HttpRequest& req, int status, double ms, const HttpServer::RequestRecord& rec) {
        if (opts_.log_requests) LogRequest(req, status, ms, rec);
      });
}

Status ApiServer::Start() {
  Route();
  SetHttpHooks();
  Status st = http_->Start();
  if (!st.ok()) return st;
  port_ = http_->port();
  return Status::Ok();
}

void ApiServer::SetModel(const ServingModel& m) {
  model_ = m;
  ready_.store(true);
}

void ApiServer::BeginDrain() { draining_.store(true); }

bool ApiServer::FinishResponses(double seconds) { return http_ ? http_->Quiesce(seconds) : true; }

void ApiServer::Stop() {
  if (!http_) return;
  http_->Stop();
  // Connections still open hold generation sessions, which cancel their engine requests when
  // destroyed: destroy them now, while the engine (owned by the caller) still exists.
  http_.reset();
}

}  // namespace mimo
