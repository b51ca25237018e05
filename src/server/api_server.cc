// ApiServer: routing, admission (readiness, draining, API key, JSON body), errors, and the small
// endpoints (/health, /v1/models, /metrics, /tokenize, /detokenize).
#include "server/api_server.h"

#include <httplib.h>

#include <ctime>

#include "core/log.h"
#include "server/web_ui.h"
#include "tokenizer/utf8.h"

namespace mimo {

std::string DumpJson(const OJson& j) {
  return j.dump(-1, ' ', false, OJson::error_handler_t::replace);
}

ApiServer::ApiServer(ServerOptions options)
    : opts_(std::move(options)),
      http_(std::make_unique<httplib::Server>()),
      metrics_(std::make_unique<ServerMetrics>(opts_.served_model_name)) {}

ApiServer::~ApiServer() { Stop(); }

void ApiServer::SendJson(httplib::Response& res, const OJson& j, int status) {
  res.status = status;
  res.set_content(DumpJson(j), "application/json");
}

void ApiServer::SendError(httplib::Response& res, const ApiError& e, Protocol p) {
  SendJson(res, p == Protocol::kAnthropic ? e.AnthropicJson() : e.OpenAiJson(), e.status);
}

bool ApiServer::Admit(const httplib::Request& req, httplib::Response& res, Protocol p,
                      OJson* body) {
  ApiError e;
  if (!ready_.load()) {
    e.status = 503;
    e.type = "service_unavailable";
    e.message = "the model is loading; retry when GET /health answers 200";
    SendError(res, e, p);
    return false;
  }
  if (draining_.load()) {
    e.status = 503;
    e.type = "service_unavailable";
    e.message = "the server is shutting down";
    SendError(res, e, p);
    return false;
  }
  if (!opts_.api_key.empty()) {
    const std::string bearer = req.get_header_value("Authorization");
    const std::string x_key = req.get_header_value("x-api-key");
    if (bearer != "Bearer " + opts_.api_key && x_key != opts_.api_key) {
      e.status = 401;
      e.type = "authentication_error";
      e.code = "invalid_api_key";
      e.message = bearer.empty() && x_key.empty()
                      ? "missing API key: send 'Authorization: Bearer KEY' (or 'x-api-key: KEY')"
                      : "incorrect API key";
      SendError(res, e, p);
      return false;
    }
  }
  if (body) {
    *body = OJson::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (body->is_discarded()) {
      SendError(res, BadRequest("the request body is not valid JSON"), p);
      return false;
    }
    if (!body->is_object()) {
      SendError(res, BadRequest("the request body must be a JSON object"), p);
      return false;
    }
  }
  return true;
}

void ApiServer::HandleModels(const httplib::Request& req, httplib::Response& res) {
  if (!Admit(req, res, Protocol::kOpenAi, nullptr)) return;
  const OJson m = {{"id", opts_.served_model_name},
                   {"object", "model"},
                   {"created", static_cast<int64_t>(std::time(nullptr))},
                   {"owned_by", "mimo.cpp"},
                   {"root", opts_.served_model_name},
                   {"max_model_len", model_.defaults.max_model_len}};
  SendJson(res, {{"object", "list"}, {"data", OJson::array({m})}});
}

// vLLM's /tokenize: {"prompt": text} or {"messages": [...], "add_generation_prompt",
// "chat_template_kwargs", "tools"} -> {"count", "max_model_len", "tokens"}.
void ApiServer::HandleTokenize(const httplib::Request& req, httplib::Response& res) {
  OJson body;
  if (!Admit(req, res, Protocol::kOpenAi, &body)) return;
  if (auto e = CheckModel(body, model_.defaults)) return SendError(res, *e, Protocol::kOpenAi);
  for (const char* k : {"add_generation_prompt", "return_token_strs"}) {
    if (body.contains(k) && !body[k].is_boolean()) {
      return SendError(res, BadRequest(std::string("'") + k + "' must be a boolean", k),
                       Protocol::kOpenAi);
    }
  }
  std::string text;
  if (body.contains("messages")) {
    ChatRequest cr;
    OJson b = body;
    if (auto e = ParseChatRequest(b, model_.defaults, &cr)) return SendError(res, *e, Protocol::kOpenAi);
    const bool gen_prompt = body.value("add_generation_prompt", true);
    auto r = model_.chat_template->Render(cr.messages, cr.tools, gen_prompt, cr.template_kwargs);
    if (!r.ok()) return SendError(res, BadRequest(r.status().message(), "messages"), Protocol::kOpenAi);
    text = *r;
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
  SendJson(res, out);
}

void ApiServer::HandleDetokenize(const httplib::Request& req, httplib::Response& res) {
  OJson body;
  if (!Admit(req, res, Protocol::kOpenAi, &body)) return;
  if (auto e = CheckModel(body, model_.defaults)) return SendError(res, *e, Protocol::kOpenAi);
  if (!body.contains("tokens") || !body["tokens"].is_array()) {
    return SendError(res, BadRequest("'tokens' (an array of token ids) is required", "tokens"),
                     Protocol::kOpenAi);
  }
  std::vector<int32_t> ids;
  for (const OJson& x : body["tokens"]) {
    if (!x.is_number_integer() || !model_.tokenizer->IsValidId(x.get<int32_t>())) {
      return SendError(res, BadRequest("'tokens' holds an invalid token id: " + x.dump(), "tokens"),
                       Protocol::kOpenAi);
    }
    ids.push_back(x.get<int32_t>());
  }
  SendJson(res, {{"prompt", model_.tokenizer->Decode(ids)}});
}

void ApiServer::Route() {
  httplib::Server& s = *http_;
  const int threads = opts_.http_threads;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.set_payload_max_length(size_t{64} << 20);
  s.set_read_timeout(30, 0);
  s.set_write_timeout(30, 0);
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
    SendError(res, e, req.path == "/v1/messages" ? Protocol::kAnthropic : Protocol::kOpenAi);
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
  s.Get("/v1/models", [this](const httplib::Request& q, httplib::Response& r) { HandleModels(q, r); });
  s.Post("/v1/chat/completions",
         [this](const httplib::Request& q, httplib::Response& r) { HandleChat(q, r); });
  s.Post("/v1/completions",
         [this](const httplib::Request& q, httplib::Response& r) { HandleCompletion(q, r); });
  s.Post("/v1/messages",
         [this](const httplib::Request& q, httplib::Response& r) { HandleMessages(q, r); });
  s.Post("/tokenize", [this](const httplib::Request& q, httplib::Response& r) { HandleTokenize(q, r); });
  s.Post("/detokenize",
         [this](const httplib::Request& q, httplib::Response& r) { HandleDetokenize(q, r); });
  if (opts_.web_ui) RegisterWebUi(s);
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404 && res.body.empty()) {
      ApiError e;
      e.status = 404;
      e.type = "not_found_error";
      e.message = "no route " + req.method + " " + req.path;
      SendError(res, e, Protocol::kOpenAi);
    }
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
