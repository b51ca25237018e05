// HttpServer (see http_server.h). One coroutine per connection, on a strand of the I/O context:
// read the headers (deadline, size and field limits), route, precheck, read the body (deadline,
// size limit), run the handler (inline, or on the worker pool), write the answer; a BodySource
// is pulled when it notifies or its poll interval passes, while the socket is watched for the
// client going away.
#include "server/http_server.h"

#include <sys/resource.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>

namespace mimo {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;  // NOLINT: the || of two awaitables

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
using Clock = std::chrono::steady_clock;

thread_local HttpServer::RequestRecord* t_record = nullptr;

// Sets the access-log record of the request being served on this thread for a scope.
struct RecordScope {
  HttpServer::RequestRecord* prev;
  explicit RecordScope(HttpServer::RequestRecord* r) : prev(t_record) { t_record = r; }
  ~RecordScope() { t_record = prev; }
};

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

std::chrono::steady_clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// "/v1/x/{}/y" against a path: {} is one non-empty segment, {+} the non-empty rest.
bool MatchRoute(std::string_view pattern, std::string_view path, std::vector<std::string>* caps) {
  caps->assign(1, std::string(path));
  size_t i = 0, j = 0;
  while (i < pattern.size()) {
    if (pattern.compare(i, 3, "{+}") == 0) {
      if (j >= path.size()) return false;
      caps->emplace_back(path.substr(j));
      return i + 3 == pattern.size();
    }
    if (pattern.compare(i, 2, "{}") == 0) {
      const size_t end = std::min(path.find('/', j), path.size());
      if (end == j) return false;
      caps->emplace_back(path.substr(j, end - j));
      i += 2;
      j = end;
      continue;
    }
    if (j >= path.size() || pattern[i] != path[j]) return false;
    ++i;
    ++j;
  }
  return j == path.size();
}

// Wakes a connection waiting on its body source: Notify may run on any thread; the timer is only
// touched on the connection's strand.
struct Waker {
  explicit Waker(const asio::any_io_executor& ex) : timer(ex) {}
  asio::steady_timer timer;
  std::atomic<bool> notified{false};
};

}  // namespace

bool HttpRequest::has_header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (IEquals(k, name)) return true;
  }
  return false;
}

std::string HttpRequest::get_header_value(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (IEquals(k, name)) return v;
  }
  return "";
}

// The value of a query parameter ("" for "?name" or "?name="), or nullopt when absent.
static std::optional<std::string> QueryParam(const std::string& query, std::string_view name) {
  size_t pos = 0;
  while (pos <= query.size()) {
    const size_t amp = std::min(query.find('&', pos), query.size());
    const std::string_view kv = std::string_view(query).substr(pos, amp - pos);
    const size_t eq = kv.find('=');
    if (kv.substr(0, eq) == name) return eq == kv.npos ? "" : std::string(kv.substr(eq + 1));
    pos = amp + 1;
  }
  return std::nullopt;
}

bool HttpRequest::has_param(std::string_view name) const {
  return QueryParam(query, name).has_value();
}

std::string HttpRequest::get_param_value(std::string_view name) const {
  return QueryParam(query, name).value_or("");
}

HttpServer::RequestRecord* HttpServer::CurrentRecord() { return t_record; }

struct HttpServer::Impl {
  HttpServer* self;
  const HttpOptions& opts;
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  asio::thread_pool workers;
  std::vector<std::thread> threads;
  std::vector<HttpRoute> routes;
  Precheck precheck;
  Decorate decorate;
  ErrorBody error_body;
  Logger logger;
  std::atomic<int> busy{0};
  bool stopped = false;

  Impl(HttpServer* s, const HttpOptions& o)
      : self(s), opts(o), workers(static_cast<size_t>(std::max(1, o.worker_threads))) {}

  asio::awaitable<void> Accept();
  asio::awaitable<void> Refuse(tcp::socket sock);
  asio::awaitable<void> Serve(tcp::socket sock);
  asio::awaitable<void> Linger(beast::tcp_stream& stream);

  // The route for a path; *allowed lists the methods of the routes whose pattern matched.
  const HttpRoute* Find(const std::string& method, const std::string& path,
                        std::vector<std::string>* caps, std::string* allowed) const {
    const HttpRoute* hit = nullptr;
    std::vector<std::string> c;
    for (const HttpRoute& r : routes) {
      if (!MatchRoute(r.pattern, path, &c)) continue;
      if (allowed->find(r.method) == std::string::npos) {
        if (!allowed->empty()) *allowed += ", ";
        *allowed += r.method;
        if (r.method == "GET") *allowed += ", HEAD";
      }
      if (!hit && (r.method == method || (method == "HEAD" && r.method == "GET"))) {
        hit = &r;
        *caps = c;
      }
    }
    return hit;
  }

  void Error(const HttpRequest& req, int status, const std::string& message, HttpResponse* res) {
    *res = HttpResponse();
    res->status = status;
    if (error_body) error_body(req, status, message, *res);
    if (res->body.empty()) {
      res->set_content("{\"error\":{\"message\":\"" + message + "\"}}", "application/json");
    }
  }

  // Runs a handler; an exception becomes a 500 (it never reaches the I/O loop).
  void Run(const HttpRoute& route, const HttpRequest& req, HttpResponse* res,
           RequestRecord* record) {
    RecordScope scope(record);
    try {
      route.handler(req, *res);
    } catch (const std::exception& e) {
      Error(req, 500, std::string("internal error: ") + e.what(), res);
    } catch (...) {
      Error(req, 500, "internal error", res);
    }
  }

  // The status line and headers of a response.
  std::string Head(const HttpRequest& req, const HttpResponse& res, bool keep_alive,
                   std::optional<size_t> length, bool chunked) const {
    std::string h = req.version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
    h += std::to_string(res.status);
    h += ' ';
    h += std::string(http::obsolete_reason(http::int_to_status(static_cast<unsigned>(res.status))));
    h += "\r\nServer: mimo.cpp\r\n";
    if (!res.content_type.empty()) h += "Content-Type: " + res.content_type + "\r\n";
    for (const auto& [k, v] : res.headers) h += k + ": " + v + "\r\n";
    if (length) h += "Content-Length: " + std::to_string(*length) + "\r\n";
    if (chunked) h += "Transfer-Encoding: chunked\r\n";
    if (!keep_alive) {
      h += "Connection: close\r\n";
    } else if (req.version == 10) {
      h += "Connection: keep-alive\r\n";
    }
    h += "\r\n";
    return h;
  }
};

HttpServer::HttpServer(HttpOptions options)
    : opts_(std::move(options)), impl_(std::make_unique<Impl>(this, opts_)) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Handle(HttpRoute route) { impl_->routes.push_back(std::move(route)); }

void HttpServer::SetHooks(Precheck precheck, Decorate decorate, ErrorBody error_body,
                          Logger logger) {
  impl_->precheck = std::move(precheck);
  impl_->decorate = std::move(decorate);
  impl_->error_body = std::move(error_body);
  impl_->logger = std::move(logger);
}

Status HttpServer::Start() {
  // Every connection is a descriptor: use the hard limit (Debian's soft default is 1024).
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  boost::system::error_code ec;
  const asio::ip::address addr = asio::ip::make_address(opts_.host, ec);
  if (ec) return InvalidArgument("--host '%s' is not an IP address", opts_.host.c_str());
  if (opts_.port < 0 || opts_.port > 65535) {
    return InvalidArgument("--port %d is not a TCP port (0..65535)", opts_.port);
  }
  const tcp::endpoint ep(addr, static_cast<unsigned short>(opts_.port));
  tcp::acceptor& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  // SO_REUSEADDR (a restart binds at once over old TIME_WAIT connections), never SO_REUSEPORT:
  // a second server on the same port is an error, not a share of the traffic.
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(1024, ec);
  if (ec) {
    return Internal("cannot listen on %s:%d: %s", opts_.host.c_str(), opts_.port,
                    ec.message().c_str());
  }
  port_ = a.local_endpoint().port();
  asio::co_spawn(impl_->ioc, impl_->Accept(), asio::detached);
  for (int i = 0; i < std::max(1, opts_.io_threads); ++i) {
    impl_->threads.emplace_back([this] {
      for (;;) {
        try {
          impl_->ioc.run();
          return;
        } catch (const std::exception& e) {
          // A connection's coroutine let an exception through: log it and keep serving.
          std::fprintf(stderr, "mimo serve: http: %s\n", e.what());
        }
      }
    });
  }
  return Status::Ok();
}

void HttpServer::Stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  impl_->ioc.stop();
  for (std::thread& t : impl_->threads) t.join();
  impl_->workers.stop();
  impl_->workers.join();
}

asio::awaitable<void> HttpServer::Impl::Accept() {
  asio::steady_timer backoff(ioc);
  for (;;) {
    auto [ec, sock] = co_await acceptor.async_accept(asio::make_strand(ioc), kTuple);
    if (ec == asio::error::operation_aborted) co_return;
    if (ec) {
      // Out of descriptors (EMFILE/ENFILE) or a transient error: wait a little, keep accepting.
      backoff.expires_after(std::chrono::milliseconds(50));
      co_await backoff.async_wait(kTuple);
      continue;
    }
    const asio::any_io_executor ex = sock.get_executor();
    if (self->connections_.load() >= opts.max_connections) {
      asio::co_spawn(ex, Refuse(std::move(sock)), asio::detached);
      continue;
    }
    ++self->connections_;
    asio::co_spawn(ex, Serve(std::move(sock)), [this](std::exception_ptr ep) {
      --self->connections_;
      if (!ep) return;
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "mimo serve: http connection: %s\n", e.what());
      } catch (...) {
      }
    });
  }
}

// Over the connection cap: a 503 at once, then close.
asio::awaitable<void> HttpServer::Impl::Refuse(tcp::socket sock) {
  HttpRequest req;
  HttpResponse res;
  Error(req, 503, "too many open connections; retry later", &res);
  res.set_header("Retry-After", "1");
  const std::string out = Head(req, res, false, res.body.size(), false) + res.body;
  beast::tcp_stream stream(std::move(sock));
  stream.expires_after(std::chrono::seconds(5));
  co_await asio::async_write(stream, asio::buffer(out), kTuple);
  co_await Linger(stream);
}

asio::awaitable<void> HttpServer::Impl::Serve(tcp::socket sock) {
  beast::tcp_stream stream(std::move(sock));
  beast::flat_buffer buf(opts.max_header_bytes + (size_t{1} << 20));
  const int fd = stream.socket().native_handle();
  bool alive = true;
  bool first = true;  // a new connection must send its request within the header deadline

  // Writes all of `data` under the write deadline; false when the client is gone.
  auto write = [&](std::string_view data) -> asio::awaitable<bool> {
    stream.expires_after(Seconds(opts.write_timeout_s));
    auto [ec, n] =
        co_await asio::async_write(stream, asio::buffer(data.data(), data.size()), kTuple);
    co_return !ec;
  };

  while (alive) {
    // Wait for the next request's first byte (idle deadline), then for its headers (header
    // deadline: a slow sender of headers is cut off).
    if (buf.size() == 0) {
      stream.expires_after(Seconds(first ? opts.header_timeout_s : opts.idle_timeout_s));
      auto [ec, n] = co_await stream.async_read_some(buf.prepare(4096), kTuple);
      if (ec) co_return;
      buf.commit(n);
    }
    first = false;
    const auto start = Clock::now();
    http::request_parser<http::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(opts.max_header_bytes));
    parser.body_limit(boost::none);  // checked below, after the precheck
    stream.expires_after(Seconds(opts.header_timeout_s));
    HttpRequest req;
    HttpResponse res;
    RequestRecord record;
    bool keep_alive = false;
    {
      auto [ec, n] = co_await http::async_read_header(stream, buf, parser, kTuple);
      if (ec == http::error::header_limit) {
        Error(req, 431,
              "the request headers are larger than " + std::to_string(opts.max_header_bytes) +
                  " bytes",
              &res);
      } else if (ec == beast::error::timeout || ec == http::error::end_of_stream ||
                 ec == asio::error::eof || ec == asio::error::connection_reset) {
        co_return;  // a client that went away or sent its headers too slowly
      } else if (ec) {
        Error(req, 400, "malformed HTTP request: " + ec.message(), &res);
      }
    }
    if (res.status == 200) {
      const auto& h = parser.get();
      req.method = std::string(h.method_string());
      const std::string_view target = h.target();
      const size_t q = target.find('?');
      req.path = std::string(target.substr(0, q));
      if (q != target.npos) req.query = std::string(target.substr(q + 1));
      req.version = h.version() == 10 ? 10 : 11;
      int fields = 0;
      for (const auto& f : h) {
        ++fields;
        req.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
      }
      keep_alive = parser.keep_alive();
      if (fields > opts.max_header_fields) {
        Error(req, 431,
              "the request has " + std::to_string(fields) + " header fields; at most " +
                  std::to_string(opts.max_header_fields) + " are accepted",
              &res);
      }
    }
    const bool has_body =
        parser.is_header_done() && !parser.is_done() &&
        (parser.chunked() || (parser.content_length() && *parser.content_length() > 0));
    const HttpRoute* route = nullptr;
    std::string allowed;
    if (res.status == 200) {
      route = Find(req.method, req.path, &req.matches, &allowed);
      std::optional<HttpResponse> early;
      if (precheck) early = precheck(req, route);
      if (early) {
        res = std::move(*early);
      } else if (!route && !allowed.empty()) {
        Error(req, 405, "method " + req.method + " is not allowed on " + req.path, &res);
        res.set_header("Allow", allowed);
      } else if (!route) {
        Error(req, 404, "no route " + req.method + " " + req.path, &res);
      } else if (parser.content_length() && *parser.content_length() > opts.max_body_bytes) {
        Error(req, 413,
              "the request body is too large: " + std::to_string(*parser.content_length()) +
                  " bytes; at most " + std::to_string(opts.max_body_bytes >> 20) +
                  " MiB are accepted",
              &res);
      }
    }
    bool body_read = !has_body;
    if (res.status == 200 && has_body) {
      if (IEquals(req.get_header_value("Expect"), "100-continue") && req.version == 11) {
        if (!co_await write("HTTP/1.1 100 Continue\r\n\r\n")) co_return;
      }
      parser.body_limit(opts.max_body_bytes);
      // A chunked body of unknown size: reserve the limit's address space once (pages are only
      // touched as the body arrives) rather than let the string double and copy on the way.
      if (parser.chunked()) parser.get().body().reserve(opts.max_body_bytes);
      stream.expires_after(Seconds(opts.body_timeout_s));
      auto [ec, n] = co_await http::async_read(stream, buf, parser, kTuple);
      if (ec == http::error::body_limit) {
        Error(req, 413,
              "the request body is too large: at most " +
                  std::to_string(opts.max_body_bytes >> 20) + " MiB are accepted",
              &res);
      } else if (ec == beast::error::timeout) {
        Error(req, 408, "the request body was not received in time", &res);
      } else if (ec == http::error::end_of_stream || ec == asio::error::eof ||
                 ec == asio::error::connection_reset) {
        co_return;
      } else if (ec) {
        Error(req, 400, "malformed HTTP request body: " + ec.message(), &res);
      } else {
        req.body = std::move(parser.get().body());
        body_read = true;
      }
    }
    stream.expires_never();
    if (res.status == 200 && route) {
      if (route->inline_handler) {
        Run(*route, req, &res, &record);
      } else if (busy.fetch_add(1) >= opts.worker_threads + opts.worker_queue) {
        --busy;
        Error(req, 503, "the server is busy; retry later", &res);
        res.set_header("Retry-After", "1");
      } else {
        co_await asio::co_spawn(
            workers,
            [&]() -> asio::awaitable<void> {
              Run(*route, req, &res, &record);
              co_return;
            },
            asio::use_awaitable);
        --busy;
      }
    }
    if (decorate) decorate(req, res);
    // An unread body cannot be skipped safely: close after answering.
    keep_alive = keep_alive && body_read && !res.close && res.status != 400 && res.status != 431;
    const bool head_only = req.method == "HEAD";

    if (res.source && res.stream && !head_only) {
      // Streamed: chunked on HTTP/1.1; on HTTP/1.0 the body ends when the connection closes.
      const bool chunked = req.version == 11;
      if (!chunked) keep_alive = false;
      if (!co_await write(Head(req, res, keep_alive, std::nullopt, chunked))) {
        res.source->Cancel();
        co_return;
      }
    }
    if (res.source) {
      auto waker = std::make_shared<Waker>(co_await asio::this_coro::executor);
      res.source->SetNotify([waker] {
        waker->notified.store(true);
        asio::post(waker->timer.get_executor(), [waker] { waker->timer.cancel(); });
      });
      bool watch = true;  // watch the socket for the client closing it
      std::string whole;
      for (;;) {
        std::string out;
        BodySource::State st;
        {
          RecordScope scope(&record);
          try {
            st = res.source->Pull(&out);
          } catch (const std::exception& e) {
            std::fprintf(stderr, "mimo serve: response body: %s\n", e.what());
            st = BodySource::State::kAbort;
          }
        }
        if (st == BodySource::State::kAbort) {
          res.source->Cancel();
          if (!res.stream) {
            Error(req, 500, "the response could not be produced", &res);
            break;
          }
          co_return;
        }
        if (!out.empty()) {
          if (!res.stream) {
            whole += out;
          } else if (req.version == 11) {
            char size[24];
            std::snprintf(size, sizeof(size), "%zx\r\n", out.size());
            if (!co_await write(size + out + "\r\n")) {
              res.source->Cancel();
              co_return;
            }
          } else if (!co_await write(out)) {
            res.source->Cancel();
            co_return;
          }
        }
        if (st == BodySource::State::kDone) {
          if (res.stream && req.version == 11 && !co_await write("0\r\n\r\n")) co_return;
          if (!res.stream) {
            res.body = std::move(whole);
            res.source.reset();
          }
          break;
        }
        if (waker->notified.exchange(false)) continue;
        waker->timer.expires_after(Seconds(res.source->poll_seconds()));
        if (!watch) {
          co_await waker->timer.async_wait(kTuple);
          continue;
        }
        auto which = co_await (waker->timer.async_wait(kTuple) ||
                               stream.socket().async_wait(tcp::socket::wait_read, kTuple));
        if (which.index() == 1) {
          char c;
          const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
          if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            res.source->Cancel();  // the client closed the connection: free its requests now
            if (logger) {
              logger(req, 499,
                     std::chrono::duration<double, std::milli>(Clock::now() - start).count(),
                     record);
            }
            co_return;
          }
          if (n > 0) watch = false;  // a pipelined request: notice a closed client by writes
        }
      }
      if (res.stream) {
        if (logger) {
          logger(req, res.status,
                 std::chrono::duration<double, std::milli>(Clock::now() - start).count(), record);
        }
        if (!keep_alive) break;
        continue;
      }
    }
    // A whole response.
    std::string out = Head(req, res, keep_alive, res.body.size(), false);
    if (!head_only) out += res.body;
    const bool ok = co_await write(out);
    if (logger) {
      logger(req, res.status,
             std::chrono::duration<double, std::milli>(Clock::now() - start).count(), record);
    }
    if (!ok) co_return;
    alive = keep_alive;
    if (!alive && (!body_read || res.status >= 400)) co_await Linger(stream);
  }
  boost::system::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
}

// Closing a socket with unread input makes the kernel send a reset, which can destroy the answer
// just written (a 413) before the client reads it: stop sending, then read and drop what the
// client is still sending, for a bounded time and size.
asio::awaitable<void> HttpServer::Impl::Linger(beast::tcp_stream& stream) {
  boost::system::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  std::vector<char> sink(64 << 10);
  size_t total = 0;
  stream.expires_after(std::chrono::seconds(2));
  while (total < (size_t{4} << 20)) {
    auto [e, n] = co_await stream.async_read_some(asio::buffer(sink), kTuple);
    if (e) break;
    total += n;
  }
}

}  // namespace mimo
