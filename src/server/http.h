// The HTTP request and response the API handlers see, independent of the transport
// (server/http_server.h). A response is either whole (status, headers, body) or produced over
// time by a BodySource (SSE streams; a non-streaming generation whose JSON is written when the
// request is done), which the connection pulls from without holding a thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mimo {

struct HttpRequest {
  std::string method;  // "GET", "POST", ... (HEAD is routed as GET)
  std::string path;    // percent-encoding kept, without the query
  std::string query;   // after '?', without it
  int version = 11;    // 10 or 11
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // The route's captures: [0] the whole path, [1] the first {} segment.
  std::vector<std::string> matches;
  // Sent back as `x-request-id` on the response (HttpServer sets it): the client's own
  // x-request-id when it is sane (1-128 visible ASCII characters), else a new random "req_..." id.
  std::string request_id;

  // Header lookups are case-insensitive; the first field of a name wins.
  bool has_header(std::string_view name) const;
  std::string get_header_value(std::string_view name) const;
  // Query parameters (no percent-decoding: the API's parameters are plain words).
  bool has_param(std::string_view name) const;
  std::string get_param_value(std::string_view name) const;
};

// Produces a response body over time. The connection calls Pull on its own thread whenever
// Notify fired or poll_seconds passed, never two calls at once; the engine (any thread) calls the
// function given to SetNotify when an event may be ready.
class BodySource {
 public:
  enum class State { kMore, kDone, kAbort };
  virtual ~BodySource() = default;
  // Appends what is ready to *out without blocking. kDone: the body is complete; kAbort: close
  // the connection without completing it.
  virtual State Pull(std::string* out) = 0;
  // `notify` may be called from any thread until the source is destroyed.
  virtual void SetNotify(std::function<void()> notify) = 0;
  // The client went away (a failed write, the connection closed): stop the work behind it.
  virtual void Cancel() = 0;
  // Pull is called at least this often (keep-alive writes, deadlines).
  virtual double poll_seconds() const { return 1.0; }
  // A whole (not streamed) response's status once Pull said kDone; 0: the response's own. (An
  // error found while the answer was produced, e.g. the engine stopped, answers as an error.)
  virtual int final_status() const { return 0; }
};

struct HttpResponse {
  int status = 200;
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // Set: the body comes from the source. `stream`: written as it is produced (chunked on
  // HTTP/1.1, until close on HTTP/1.0); else sent whole with a Content-Length once kDone.
  std::shared_ptr<BodySource> source;
  bool stream = false;
  bool close = false;  // close the connection after this response
  // Set by a handler (instead of an answer) that needs work too long for the request workers, a
  // grammar compile: the connection runs the handler again, from the start, on the slow pool
  // (HttpServer::RequestRecord::on_slow_pool is then set), watching the client meanwhile.
  bool rerun_slow = false;

  void set_content(std::string text, std::string_view type) {
    body = std::move(text);
    content_type = std::string(type);
  }
  void set_header(std::string name, std::string value) {
    headers.emplace_back(std::move(name), std::move(value));
  }
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponse&)>;

}  // namespace mimo
