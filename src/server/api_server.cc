// ApiServer: routing, admission (readiness, draining, API key, JSON body), errors, and the small
// endpoints (/health, /v1/models, /metrics, /tokenize, /detokenize).
#include "server/api_server.h"

#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>

#include "core/log.h"
#include "core/sha256.h"
#include "server/request_json.h"
#include "server/response_store.h"
#include "server/web_ui.h"
#include "tokenizer/utf8.h"

namespace mimo {
namespace {

// The access-log record of the request the current HTTP thread serves (cpp-httplib runs a
// request's routing, handler, content provider and logger on one thread).
struct AccessRecord {
  std::chrono::steady_clock::time_point start;
  int prompt_tokens = -1;
  int output_tokens = -1;
};
thread_local AccessRecord t_access;

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// "Bearer KEY" with the scheme in any case (RFC 7235: schemes are case-insensitive).
std::string BearerToken(const std::string& header) {
  if (header.size() < 7) return "";
  std::string scheme = header.substr(0, 7);
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return scheme == "bearer " ? header.substr(7) : "";
}

}  // namespace

std::string DumpJson(const OJson& j) {
  return j.dump(-1, ' ', false, OJson::error_handler_t::replace);
}

std::string RandomId(const char* prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static const char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string s = prefix;
  for (int i = 0; i < 24; ++i) s += kAlnum[rng() % 62];
  return s;
}

void NoteRequestTokens(int prompt_tokens, int output_tokens) {
  t_access.prompt_tokens = prompt_tokens;
  t_access.output_tokens = output_tokens;
}

ApiServer::ApiServer(ServerOptions options)
    : opts_(std::move(options)),
      http_(std::make_unique<httplib::Server>()),
      metrics_(std::make_unique<ServerMetrics>(opts_.served_model_name)),
      responses_(std::make_unique<ResponseStore>(opts_.responses_store_entries,
                                                 opts_.responses_store_bytes)) {
  signing_key_ = opts_.signing_key;
  if (signing_key_.empty()) {
    std::random_device rd;
    for (int i = 0; i < 32; ++i) signing_key_ += static_cast<char>(rd() & 0xff);
  }
}

ApiServer::~ApiServer() { Stop(); }

void ApiServer::SendJson(httplib::Response& res, const OJson& j, int status) {
  res.status = status;
  res.set_content(DumpJson(j), "application/json");
}

void ApiServer::Respond(httplib::Response& res, std::shared_ptr<GenerationSession> session,
                        bool stream, StreamWriters writers,
                        std::function<void(const RequestOutput&)> accumulate, TailWriter whole) {
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
      std::move(whole), &in_flight_);
}

void ApiServer::SendError(httplib::Response& res, const ApiError& e, Protocol p) {
  SendJson(res, p == Protocol::kAnthropic ? e.AnthropicJson() : e.OpenAiJson(), e.status);
}

bool ApiServer::Admit(const httplib::Request& req, httplib::Response& res, Protocol p,
                      OJson* body) {
  ApiError e;
  if (!ready_.load()) {
    SendError(res, ServiceUnavailable("the model is loading; retry when GET /health answers 200"),
              p);
    return false;
  }
  if (draining_.load()) {
    SendError(res, ServiceUnavailable("the server is shutting down"), p);
    return false;
  }
  if (!opts_.api_key.empty()) {
    const std::string auth = req.get_header_value("Authorization");
    const std::string x_key = req.get_header_value("x-api-key");
    const bool ok = ConstantTimeEquals(BearerToken(auth), opts_.api_key) ||
                    ConstantTimeEquals(x_key, opts_.api_key);
    if (!ok) {
      e.status = 401;
      e.type = "authentication_error";
      e.code = "invalid_api_key";
      e.message = auth.empty() && x_key.empty()
                      ? "missing API key: send 'Authorization: Bearer KEY' (or 'x-api-key: KEY')"
                      : "incorrect API key";
      SendError(res, e, p);
      return false;
    }
  }
  if (body) {
    if (auto bad = ParseRequestBody(req.body, body)) {
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
static OJson ModelJson(const httplib::Request& req, const std::string& name, int max_model_len) {
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

void ApiServer::HandleModels(const httplib::Request& req, httplib::Response& res) {
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

void ApiServer::HandleModel(const httplib::Request& req, httplib::Response& res) {
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
void ApiServer::HandleTokenize(const httplib::Request& req, httplib::Response& res) {
  OJson body;
  if (!Admit(req, res, Protocol::kOpenAi, &body)) return;
  if (auto e = CheckModel(body, model_.defaults)) return SendError(res, *e, Protocol::kOpenAi);
  for (const char* k : {"add_generation_prompt", "return_token_strs", "continue_final_message"}) {
    if (body.contains(k) && !body[k].is_boolean()) {
      return SendError(res, BadRequest(std::string("'") + k + "' must be a boolean", k),
                       Protocol::kOpenAi);
    }
  }
  std::string text;
  if (body.contains("messages")) {
    ChatRequest cr;
    if (auto e = ParseChatRequest(body, model_.defaults, &cr))
      return SendError(res, *e, Protocol::kOpenAi);
    ChatTurn turn = std::move(cr.turn);
    turn.add_generation_prompt = body.value("add_generation_prompt", true);
    if (auto e = RenderTurn(&turn, &text)) return SendError(res, *e, Protocol::kOpenAi);
  } else if (body.contains("prompt") && body["prompt"].is_string()) {
    text = body["prompt"];
  } else {
    return SendError(res, BadRequest("'prompt' (a string) or 'messages' is required", "prompt"),
                     Protocol::kOpenAi);
  }
  const std::vector<int32_t> ids = model_.tokenizer->Encode(text);
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

void ApiServer::HandleDetokenize(const httplib::Request& req, httplib::Response& res) {
  OJson body;
  if (!Admit(req, res, Protocol::kOpenAi, &body)) return;
  if (auto e = CheckModel(body, model_.defaults)) return SendError(res, *e, Protocol::kOpenAi);
  std::vector<int32_t> ids;
  auto known = [this](int32_t id) { return model_.tokenizer->IsValidId(id); };
  if (auto e = ParseDetokenizeRequest(body, model_.defaults, known, &ids))
    return SendError(res, *e, Protocol::kOpenAi);
  SendJson(res, {{"prompt", model_.tokenizer->Decode(ids)}});
}

void ApiServer::Route() {
  httplib::Server& s = *http_;
  const int threads = opts_.http_threads;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.set_payload_max_length(size_t{64} << 20);
  s.set_read_timeout(30, 0);
  s.set_write_timeout(30, 0);
  s.set_pre_routing_handler([](const httplib::Request&, httplib::Response&) {
    t_access = AccessRecord{std::chrono::steady_clock::now()};
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // One line per request once it is answered (for a stream: once it ended).
  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    if (!opts_.log_requests) return;
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_access.start)
            .count();
    std::string tokens;
    if (t_access.prompt_tokens >= 0) {
      tokens = " prompt_tokens=" + std::to_string(t_access.prompt_tokens) +
               " output_tokens=" + std::to_string(t_access.output_tokens);
    }
    std::fprintf(stderr, "mimo serve: %s %s %d%s %.0f ms\n", req.method.c_str(), req.path.c_str(),
                 res.status, tokens.c_str(), ms);
  });
  // Handlers catch everything: a request must never take the server down.
  s.set_exception_handler([](const httplib::Request& req, httplib::Response& res,
                             std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    ApiError e;
    e.status = 500;
    e.type = "internal_server_error";
    e.message = what;
    SendError(res, e, ProtocolOf(req.path));
  });
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (!ready_.load()) return SendJson(res, {{"status", "loading"}}, 503);
    if (draining_.load()) return SendJson(res, {{"status", "draining"}}, 503);
    SendJson(res, {{"status", "ok"}});
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    EngineStats st;
    if (ready_.load()) st = model_.engine->Stats();
    res.set_content(metrics_->Render(st), "text/plain; version=0.0.4; charset=utf-8");
  });
  using Req = httplib::Request;
  using Res = httplib::Response;
  s.Get("/v1/models", [this](const Req& q, Res& r) { HandleModels(q, r); });
  s.Get(R"(/v1/models/(.+))", [this](const Req& q, Res& r) { HandleModel(q, r); });
  s.Post("/v1/chat/completions", [this](const Req& q, Res& r) { HandleChat(q, r); });
  s.Post("/v1/completions", [this](const Req& q, Res& r) { HandleCompletion(q, r); });
  s.Post("/v1/messages", [this](const Req& q, Res& r) { HandleMessages(q, r); });
  s.Post("/v1/messages/count_tokens", [this](const Req& q, Res& r) { HandleCountTokens(q, r); });
  s.Post("/v1/responses", [this](const Req& q, Res& r) { HandleResponses(q, r); });
  s.Get(R"(/v1/responses/([^/]+))", [this](const Req& q, Res& r) { HandleGetResponse(q, r); });
  s.Delete(R"(/v1/responses/([^/]+))",
           [this](const Req& q, Res& r) { HandleDeleteResponse(q, r); });
  s.Get(R"(/v1/responses/([^/]+)/input_items)",
        [this](const Req& q, Res& r) { HandleResponseInputItems(q, r); });
  s.Post("/tokenize", [this](const Req& q, Res& r) { HandleTokenize(q, r); });
  s.Post("/detokenize", [this](const Req& q, Res& r) { HandleDetokenize(q, r); });
  if (opts_.web_ui) RegisterWebUi(s);
  // Whatever the HTTP layer itself refuses (no route, a malformed or oversized request) still
  // gets an error object, in the shape of the protocol the path belongs to.
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e;
    e.status = res.status;
    if (res.status == 404) {
      e.type = "not_found_error";
      e.message = "no route " + req.method + " " + req.path;
    } else if (res.status == 413) {
      e.type = "invalid_request_error";
      e.message = "the request body is too large";
    } else if (res.status >= 500) {
      e.type = "internal_server_error";
      e.message = "the server could not answer this request";
    } else if (req.method == "POST" && !req.has_header("Content-Length")) {
      e.message = "the request has no body: send a JSON object (with a Content-Length)";
    } else {
      e.message = "malformed HTTP request";
    }
    SendError(res, e, ProtocolOf(req.path));
  });
}

Status ApiServer::Start() {
  Route();
  if (opts_.port == 0) {
    port_ = http_->bind_to_any_port(opts_.host);
    if (port_ <= 0) return Internal("cannot bind %s to any port", opts_.host.c_str());
  } else {
    if (!http_->bind_to_port(opts_.host, opts_.port)) {
      return Internal("cannot listen on %s:%d (in use, or not an address of this host)",
                      opts_.host.c_str(), opts_.port);
    }
    port_ = opts_.port;
  }
  listener_ = std::thread([this] { http_->listen_after_bind(); });
  return Status::Ok();
}

void ApiServer::SetModel(const ServingModel& m) {
  model_ = m;
  ready_.store(true);
}

void ApiServer::BeginDrain() { draining_.store(true); }

void ApiServer::Stop() {
  if (http_) http_->stop();
  if (listener_.joinable()) listener_.join();
}

}  // namespace mimo
