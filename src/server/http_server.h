// HttpServer: HTTP/1.1 on Boost.Beast / asio C++20 coroutines. A connection is a coroutine on
// a few I/O threads, so an idle, slow or streaming client costs memory (a few KiB), not a thread;
// request handlers that do work (parse, render, tokenize) run on a bounded worker pool, work that
// may take seconds (a grammar compile) on a small pool of its own (a handler asks for it with
// HttpResponse::rerun_slow), and routes marked inline (/health, /metrics, the chat page) answer
// on the I/O threads, so they answer under any load. Limits are checked on the headers, before
// any body byte is read: header bytes and fields (431), one Host field and, on HTTP/1.1, at least
// one (400), body size for fixed and chunked bodies (413), the bytes of all bodies being received
// at once (503), deadlines for the headers (the connection is closed) and for the body (408), a
// connection cap (the oldest idle connection is closed for a new one; past a reserve kept for
// the inline routes, 503), full worker pools (503). Ranges are not served (a Range header is
// ignored). See docs/SECURITY.md.
// Thread-safety: Handle/SetHooks before Start; Start/Stop from the owning thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "server/http.h"

namespace mimo {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port
  int io_threads = 2;
  int worker_threads = 4;              // handlers that are not inline
  int worker_queue = 64;               // requests waiting for a worker beyond those; more: 503
  int slow_threads = 1;                // handlers rerun on the slow pool (HttpResponse::rerun_slow)
  int slow_queue = 256;                // waiting for a slow thread beyond those; more: 503
  // Open connections. At the cap a new connection closes the connection that has been idle the
  // longest (keep-alive, or not sent a byte yet); with none idle, up to reserve_connections more
  // are served for the inline routes only (/health, /metrics answer under any load); beyond
  // that, 503.
  int max_connections = 1024;
  int reserve_connections = 32;
  // Bytes of request bodies being received at once (a chunked body counts max_body_bytes until
  // it is complete); a body that would pass it is refused on its headers with 503.
  int64_t max_inflight_body_bytes = int64_t{1} << 30;
  size_t max_header_bytes = 16 << 10;  // request line + headers; more: 431
  int max_header_fields = 100;         // more: 431
  size_t max_body_bytes = size_t{64} << 20;  // fixed or chunked; more: 413
  double header_timeout_s = 10;  // from a request's first byte to the end of its headers
  double body_timeout_s = 60;    // for the whole body
  double idle_timeout_s = 60;    // a kept-alive connection waiting for its next request
  double write_timeout_s = 60;   // one write (a client that stops reading)
  // Retry-After (seconds) on a 429 or 503 whose handler gave none: this layer's own refusals (a
  // full pool, too many connections or bodies) and answers that ended in an error status.
  int retry_after_s = 1;
};

struct HttpRoute {
  std::string method;   // GET (also answers HEAD), POST, DELETE
  std::string pattern;  // "/v1/x/{}/y": {} captures one non-empty segment, {+} the rest
  HttpHandler handler;
  bool inline_handler = false;  // runs on the I/O thread: must not block
  int tag = 0;                  // the owner's route class (e.g. which need a key)
};

class HttpServer {
 public:
  // Called on the headers (body not read yet) with the matched route (null: none). An answer
  // here is sent instead of reading the body (the connection is then closed if a body follows).
  using Precheck =
      std::function<std::optional<HttpResponse>(const HttpRequest&, const HttpRoute* route)>;
  // Headers added to every response (e.g. CORS).
  using Decorate = std::function<void(const HttpRequest&, HttpResponse&)>;
  // The body of an error this layer answers itself (404, 405, 413, 431, 503, ...).
  using ErrorBody = std::function<void(const HttpRequest&, int status, const std::string& message,
                                       HttpResponse&)>;
  struct RequestRecord;
  // Once a response has been sent (or the client went away first: status 499).
  using Logger =
      std::function<void(const HttpRequest&, int status, double ms, const RequestRecord&)>;

  explicit HttpServer(HttpOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void Handle(HttpRoute route);
  void SetHooks(Precheck precheck, Decorate decorate, ErrorBody error_body, Logger logger);

  // Binds (SO_REUSEADDR only: a port in use is an error) and starts the I/O threads.
  Status Start();
  // Stops accepting connections and waits, up to `seconds`, until no response is being produced
  // or written (responses in progress finish; idle connections are left to Stop). True when
  // none was left.
  bool Quiesce(double seconds);
  // Stops accepting and answering and joins the threads; idempotent, safe before Start.
  void Stop();
  int port() const { return port_; }

  // For the access log: set while a handler or a body source runs for a request on this
  // thread (null otherwise).
  struct RequestRecord {
    int prompt_tokens = -1;
    int output_tokens = -1;
    // Set when the client went away while a handler ran on the slow pool: long work checks it.
    const std::atomic<bool>* cancel = nullptr;
    bool on_slow_pool = false;  // the handler runs on the slow pool (may do long work)
  };
  static RequestRecord* CurrentRecord();

  struct Impl;

 private:
  HttpOptions opts_;
  std::unique_ptr<Impl> impl_;
  std::atomic<int> connections_{0};
  int port_ = 0;
};

}  // namespace mimo
