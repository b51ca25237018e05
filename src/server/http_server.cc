// HttpServer (see http_server.h). One coroutine per connection, on a strand of the I/O context:
// read the headers (deadline, size and field limits), route, precheck, read the body (deadline,
// size limit), run the handler (inline, or on the worker pool), write the answer; a BodySource
// is pulled when it notifies or its poll interval passes, while the socket is watched for the
// client going away.
#include "server/http_server.h"

#include <malloc.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <future>
#include <list>
#include <mutex>

#include "core/secure_random.h"

namespace mimo {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;  // NOLINT: the || of two awaitables

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
constexpr size_t kTrimAfterBodyBytes = size_t{1} << 20;  // bodies this large end with TrimHeap
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

// The client's x-request-id when it is one we may echo (bounded, visible ASCII only: it goes back
// in a header and into logs), else a new one.
std::string RequestIdFor(const HttpRequest& req) {
  const std::string id = req.get_header_value("x-request-id");
  bool sane = !id.empty() && id.size() <= 128;
  for (char c : id) sane = sane && c > 0x20 && c < 0x7f;
  return sane ? id : SecureRandomId("req_");
}

bool HasHeader(const HttpResponse& res, std::string_view name) {
  for (const auto& [k, v] : res.headers) {
    if (IEquals(k, name)) return true;
  }
  return false;
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
  // Declared before the I/O context: a connection's coroutine frame, destroyed with the context
  // (after Stop), still updates these.
  std::atomic<int> busy{0};            // requests on or waiting for a worker
  std::atomic<int> slow_busy{0};       // ... for a slow thread
  std::atomic<int64_t> body_bytes{0};  // request bodies being received (reserved on headers)
  std::atomic<int> active{0};          // responses being produced or written (Quiesce waits for 0)
  std::atomic<bool> trimming{false};   // a TrimHeap is queued or running
  // An open connection, for closing the longest-idle one at the cap. The socket is only touched
  // on the connection's strand (`alive` is cleared there before the coroutine ends).
  struct Conn {
    asio::any_io_executor ex;
    tcp::socket* sock = nullptr;
    bool alive = true;
    // Guarded by conns_mu: waiting for a request's first byte, since when, and picked to be
    // closed (cleared if a byte arrives before the close runs).
    bool idle = false;
    bool evict = false;
    Clock::time_point idle_since;
  };
  std::mutex conns_mu;
  std::list<std::shared_ptr<Conn>> conns;
  asio::io_context ioc;
  asio::strand<asio::io_context::executor_type> accept_strand = asio::make_strand(ioc);
  tcp::acceptor acceptor{accept_strand};
  asio::thread_pool workers;
  asio::thread_pool slow;  // handlers that asked to run where they may take seconds
  std::vector<std::thread> threads;
  std::vector<HttpRoute> routes;
  Precheck precheck;
  Decorate decorate;
  ErrorBody error_body;
  Logger logger;
  bool stopped = false;


  // One request/response exchange on a connection.
  struct Exchange {
    HttpRequest req;
    HttpResponse res;
    RequestRecord record;
    const HttpRoute* route = nullptr;
    bool keep_alive = false;
    bool has_body = false;
    bool body_read = true;
    int64_t reserved_body = 0;  // of body_bytes
    Clock::time_point start = Clock::now();
  };

  // A connection's entry in `conns`, for as long as its coroutine runs.
  struct ConnEntry {
    ConnEntry(Impl* i, std::shared_ptr<Conn> conn) : impl(i), c(std::move(conn)) {
      std::lock_guard<std::mutex> lock(impl->conns_mu);
      pos = impl->conns.insert(impl->conns.begin(), c);  // stable while others come and go
    }
    ~ConnEntry() {
      std::lock_guard<std::mutex> lock(impl->conns_mu);
      c->alive = false;
      impl->conns.erase(pos);
    }
    Impl* impl;
    std::shared_ptr<Conn> c;
    std::list<std::shared_ptr<Conn>>::iterator pos;
  };

  // The exchange's share of the body budget and of `active`, released at its end.
  struct ExchangeScope {
    Impl* impl;
    Exchange* x;
    ~ExchangeScope() {
      impl->body_bytes -= x->reserved_body;
      --impl->active;
    }
  };

  Impl(HttpServer* s, const HttpOptions& o)
      : self(s),
        opts(o),
        workers(static_cast<size_t>(std::max(1, o.worker_threads))),
        slow(static_cast<size_t>(std::max(1, o.slow_threads))) {}

  asio::awaitable<void> Accept();
  asio::awaitable<void> Refuse(tcp::socket sock);
  // A connection: one exchange after another (AwaitRequest, ServeExchange) until one ends it.
  asio::awaitable<void> Serve(tcp::socket sock, bool reserve);
  // What the connection does after an exchange: serve the next request, end (the answer said
  // close: shut down sending), or drop it (the client went away, or a write failed).
  enum class Next { kNext, kEnd, kDrop };
  asio::awaitable<bool> AwaitRequest(beast::tcp_stream& stream, beast::flat_buffer& buf, Conn& conn,
                                     bool first);
  asio::awaitable<Next> ServeExchange(beast::tcp_stream& stream, beast::flat_buffer& buf,
                                      bool reserve);
  asio::awaitable<Next> Answer(beast::tcp_stream& stream, Exchange* x);
  // The head: read (ReadHead), taken into the request (TakeHead), its fields checked
  // (CheckHeaderFields), routed and admitted (AdmitHead).
  asio::awaitable<bool> ReadHead(beast::tcp_stream& stream, beast::flat_buffer& buf,
                                 http::request_parser<http::string_body>& parser, bool reserve,
                                 Exchange* x);
  void TakeHead(const http::request_parser<http::string_body>& parser, Exchange* x);
  bool CheckHeaderFields(Exchange* x);
  void AdmitHead(const http::request_parser<http::string_body>& parser, bool reserve, Exchange* x);
  asio::awaitable<bool> ReadBody(beast::tcp_stream& stream, beast::flat_buffer& buf,
                                 http::request_parser<http::string_body>& parser, Exchange* x);
  asio::awaitable<bool> Dispatch(beast::tcp_stream& stream, Exchange* x);
  asio::awaitable<bool> SendBody(beast::tcp_stream& stream, Exchange* x);
  asio::awaitable<bool> Write(beast::tcp_stream& stream, std::string_view data);
  asio::awaitable<bool> WaitWatching(beast::tcp_stream& stream, Waker& waker, double seconds,
                                     bool* watch);
  asio::awaitable<void> Linger(beast::tcp_stream& stream);
  bool EvictIdle();
  // After a large request: hands the heap's free pages back to the system (glibc keeps what a
  // parse of a large body freed: 5.5 GB of RSS for 0.2 GB live after 4 x 60 MiB bodies), on a
  // worker, one trim at a time. (A slow-pool run trims on its own thread when it is done.)
  void TrimHeap() {
    if (trimming.exchange(true)) return;
    asio::post(workers, [this] {
      malloc_trim(0);
      trimming.store(false);
    });
  }
  void SetIdle(Conn& c, bool idle) {
    std::lock_guard<std::mutex> lock(conns_mu);
    c.idle = idle;
    c.evict = false;
    if (idle) c.idle_since = Clock::now();
  }
  void Log(const Exchange& x, int status) {
    if (!logger) return;
    logger(x.req, status,
           std::chrono::duration<double, std::milli>(Clock::now() - x.start).count(), x.record);
  }

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

  // A 429 or 503 tells when to retry.
  void AddRetryAfter(HttpResponse* res) const {
    if ((res->status == 429 || res->status == 503) && !HasHeader(*res, "Retry-After"))
      res->set_header("Retry-After", std::to_string(opts.retry_after_s));
  }

  void Busy(const HttpRequest& req, const std::string& message, HttpResponse* res) {
    Error(req, 503, message, res);
    res->set_header("Retry-After", std::to_string(opts.retry_after_s));
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
    if (!req.request_id.empty()) h += "x-request-id: " + req.request_id + "\r\n";
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
  asio::co_spawn(impl_->accept_strand, impl_->Accept(), asio::detached);
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

bool HttpServer::Quiesce(double seconds) {
  if (impl_->stopped || impl_->threads.empty()) return true;
  std::promise<void> closed;
  asio::post(impl_->accept_strand, [this, &closed] {
    boost::system::error_code ec;
    impl_->acceptor.close(ec);
    closed.set_value();
  });
  closed.get_future().wait();
  const auto deadline = Clock::now() + Seconds(seconds);
  while (impl_->active.load() > 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return impl_->active.load() == 0;
}

void HttpServer::Stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  impl_->ioc.stop();
  for (std::thread& t : impl_->threads) t.join();
  impl_->workers.stop();
  impl_->workers.join();
  impl_->slow.stop();
  impl_->slow.join();
}

asio::awaitable<void> HttpServer::Impl::Accept() {
  asio::steady_timer backoff(ioc);
  for (;;) {
    auto [ec, sock] = co_await acceptor.async_accept(asio::make_strand(ioc), kTuple);
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      // Out of descriptors (EMFILE/ENFILE) or a transient error: wait a little, keep accepting.
      backoff.expires_after(std::chrono::milliseconds(50));
      co_await backoff.async_wait(kTuple);
      continue;
    }
    const asio::any_io_executor ex = sock.get_executor();
    const int open = self->connections_.load();
    bool reserve = false;
    if (open >= opts.max_connections && !EvictIdle()) {
      if (open >= opts.max_connections + opts.reserve_connections) {
        asio::co_spawn(ex, Refuse(std::move(sock)), asio::detached);
        continue;
      }
      reserve = true;  // every connection is busy: this one may only ask /health or /metrics
    }
    ++self->connections_;
    asio::co_spawn(ex, Serve(std::move(sock), reserve), [this](std::exception_ptr ep) {
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

// At the connection cap: closes the connection idle the longest (a kept-alive one waiting for its
// next request, or one that has not sent its first), so a client holding many idle connections
// cannot lock the others out. False when none is idle.
bool HttpServer::Impl::EvictIdle() {
  std::shared_ptr<Conn> oldest;
  {
    std::lock_guard<std::mutex> lock(conns_mu);
    for (const auto& c : conns) {
      if (c->idle && (!oldest || c->idle_since < oldest->idle_since)) oldest = c;
    }
    if (!oldest) return false;
    oldest->idle = false;  // not picked twice
    oldest->evict = true;
  }
  asio::post(oldest->ex, [this, oldest] {
    {
      std::lock_guard<std::mutex> lock(conns_mu);
      if (!oldest->alive || !oldest->evict) return;  // gone, or a request started meanwhile
    }
    boost::system::error_code ec;
    oldest->sock->shutdown(tcp::socket::shutdown_both, ec);
    oldest->sock->close(ec);
  });
  return true;
}

// Over the connection cap and its reserve: a 503 at once, then close.
asio::awaitable<void> HttpServer::Impl::Refuse(tcp::socket sock) {
  HttpRequest req;
  req.request_id = SecureRandomId("req_");
  HttpResponse res;
  Busy(req, "too many open connections; retry later", &res);
  const std::string out = Head(req, res, false, res.body.size(), false) + res.body;
  beast::tcp_stream stream(std::move(sock));
  stream.expires_after(std::chrono::seconds(5));
  co_await asio::async_write(stream, asio::buffer(out), kTuple);
  co_await Linger(stream);
}

// Writes all of `data` under the write deadline; false when the client is gone.
asio::awaitable<bool> HttpServer::Impl::Write(beast::tcp_stream& stream, std::string_view data) {
  stream.expires_after(Seconds(opts.write_timeout_s));
  auto [ec, n] = co_await asio::async_write(stream, asio::buffer(data.data(), data.size()), kTuple);
  stream.expires_never();
  co_return !ec;
}

// Waits until the waker fires or `seconds` pass, watching the socket meanwhile: false when the
// client closed the connection (or reset it). While a pipelined request is waiting unread the
// socket stays readable, so the close is then seen by polling for the peer's hang-up (POLLRDHUP)
// instead.
asio::awaitable<bool> HttpServer::Impl::WaitWatching(beast::tcp_stream& stream, Waker& waker,
                                                     double seconds, bool* watch) {
  const int fd = stream.socket().native_handle();
  if (waker.notified.exchange(false)) co_return true;
  waker.timer.expires_after(Seconds(seconds));
  if (*watch) {
    auto which = co_await (waker.timer.async_wait(kTuple) ||
                           stream.socket().async_wait(tcp::socket::wait_read, kTuple));
    if (which.index() == 0) co_return true;
    char c;
    const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
      co_return false;
    if (n > 0) *watch = false;  // a pipelined request: poll for the hang-up from now on
    co_return true;
  }
  co_await waker.timer.async_wait(kTuple);
  pollfd p{fd, POLLRDHUP, 0};
  if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) co_return false;
  co_return true;
}

// Reads and checks a request's headers into *x (x->res.status != 200: refused, answer it).
// False: the connection is to be closed without an answer (the client went away or was slow).
asio::awaitable<bool> HttpServer::Impl::ReadHead(beast::tcp_stream& stream,
                                                 beast::flat_buffer& buf,
                                                 http::request_parser<http::string_body>& parser,
                                                 bool reserve, Exchange* x) {
  HttpRequest& req = x->req;
  parser.header_limit(static_cast<std::uint32_t>(opts.max_header_bytes));
  parser.body_limit(boost::none);  // checked by AdmitHead, after the precheck
  stream.expires_after(Seconds(opts.header_timeout_s));
  auto [ec, n] = co_await http::async_read_header(stream, buf, parser, kTuple);
  stream.expires_never();
  if (ec == http::error::header_limit) {
    Error(req, 431,
          "the request headers are larger than " + std::to_string(opts.max_header_bytes) + " bytes",
          &x->res);
    co_return true;
  }
  if (ec == beast::error::timeout || ec == http::error::end_of_stream || ec == asio::error::eof ||
      ec == asio::error::connection_reset || ec == asio::error::operation_aborted ||
      ec == asio::error::bad_descriptor) {
    co_return false;  // a client that went away, sent its headers too slowly, or was evicted
  }
  if (ec) {
    Error(req, 400, "malformed HTTP request: " + ec.message(), &x->res);
    co_return true;
  }
  TakeHead(parser, x);
  if (CheckHeaderFields(x)) AdmitHead(parser, reserve, x);
  co_return true;
}

// The parsed head into x->req, and how the exchange is framed (keep-alive, a body to read).
void HttpServer::Impl::TakeHead(const http::request_parser<http::string_body>& parser,
                                Exchange* x) {
  HttpRequest& req = x->req;
  const auto& h = parser.get();
  req.method = std::string(h.method_string());
  const std::string_view target = h.target();
  const size_t q = target.find('?');
  req.path = std::string(target.substr(0, q));
  if (q != target.npos) req.query = std::string(target.substr(q + 1));
  req.version = h.version() == 10 ? 10 : 11;
  for (const auto& f : h) {
    req.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  }
  x->keep_alive = parser.keep_alive();
  // RFC 9112 6.1: an HTTP/1.0 message with Transfer-Encoding has faulty framing: close after it.
  if (req.version == 10 && req.has_header("Transfer-Encoding")) x->keep_alive = false;
  x->has_body = !parser.is_done() &&
                (parser.chunked() || (parser.content_length() && *parser.content_length() > 0));
  x->body_read = !x->has_body;
}

// The number of header fields, and the Host fields: RFC 9112 3.2, exactly one Host on HTTP/1.1,
// at most one on 1.0 (the Host check of the precheck then reads the one there is). False: refused
// (x->res is the answer).
bool HttpServer::Impl::CheckHeaderFields(Exchange* x) {
  const HttpRequest& req = x->req;
  const int fields = static_cast<int>(req.headers.size());
  int hosts = 0;
  for (const auto& [name, value] : req.headers) hosts += IEquals(name, "Host");
  if (fields > opts.max_header_fields) {
    Error(req, 431,
          "the request has " + std::to_string(fields) + " header fields; at most " +
              std::to_string(opts.max_header_fields) + " are accepted",
          &x->res);
    return false;
  }
  if (hosts > 1 || (hosts == 0 && req.version == 11)) {
    Error(req, 400,
          hosts > 1 ? "the request has " + std::to_string(hosts) +
                          " Host header fields; exactly one is accepted"
                    : "an HTTP/1.1 request needs a Host header field",
          &x->res);
    return false;
  }
  return true;
}

// Routes the request and decides whether it is served: the owner's precheck, 405 / 404, a
// connection beyond the cap (only the inline routes), the body's size and its share of what all
// bodies being received may take (reserved in x->reserved_body). A refusal is left in x->res.
void HttpServer::Impl::AdmitHead(const http::request_parser<http::string_body>& parser,
                                 bool reserve, Exchange* x) {
  HttpRequest& req = x->req;
  HttpResponse& res = x->res;
  std::string allowed;
  x->route = Find(req.method, req.path, &req.matches, &allowed);
  std::optional<HttpResponse> early;
  if (precheck) early = precheck(req, x->route);
  if (early) {
    res = std::move(*early);
  } else if (!x->route && !allowed.empty()) {
    Error(req, 405, "method " + req.method + " is not allowed on " + req.path, &res);
    res.set_header("Allow", allowed);
  } else if (!x->route) {
    Error(req, 404, "no route " + req.method + " " + req.path, &res);
  } else if (reserve && !x->route->inline_handler) {
    // A connection beyond the cap, every other one busy: only the inline routes are served.
    Busy(req, "too many open connections; retry later", &res);
  } else if (parser.content_length() && *parser.content_length() > opts.max_body_bytes) {
    Error(req, 413,
          "the request body is too large: " + std::to_string(*parser.content_length()) +
              " bytes; at most " + std::to_string(opts.max_body_bytes >> 20) +
              " MiB are accepted",
          &res);
  } else if (x->has_body) {
    // The body's bytes against what all bodies being received may take.
    const int64_t want = parser.chunked() ? static_cast<int64_t>(opts.max_body_bytes)
                                          : static_cast<int64_t>(*parser.content_length());
    if (body_bytes.fetch_add(want) + want > opts.max_inflight_body_bytes) {
      body_bytes -= want;
      Busy(req, "the server is receiving too many request bodies at once; retry later", &res);
    } else {
      x->reserved_body = want;
    }
  }
}

// Reads the body of an admitted request into x->req.body (refusals set x->res). False: the
// client went away.
asio::awaitable<bool> HttpServer::Impl::ReadBody(beast::tcp_stream& stream,
                                                 beast::flat_buffer& buf,
                                                 http::request_parser<http::string_body>& parser,
                                                 Exchange* x) {
  HttpRequest& req = x->req;
  if (IEquals(req.get_header_value("Expect"), "100-continue") && req.version == 11) {
    if (!co_await Write(stream, "HTTP/1.1 100 Continue\r\n\r\n")) co_return false;
  }
  parser.body_limit(opts.max_body_bytes);
  // A chunked body of unknown size: reserve the limit's address space once (pages are only
  // touched as the body arrives) rather than let the string double and copy on the way.
  if (parser.chunked()) parser.get().body().reserve(opts.max_body_bytes);
  // The body deadline cancels the read rather than closing the socket, so the 408 can be sent.
  asio::steady_timer deadline(stream.get_executor());
  deadline.expires_after(Seconds(opts.body_timeout_s));
  auto which = co_await (http::async_read(stream, buf, parser, kTuple) || deadline.async_wait(kTuple));
  if (which.index() == 1) {
    Error(req, 408, "the request body was not received within " +
                        std::to_string(static_cast<int>(opts.body_timeout_s)) + " s",
          &x->res);
    co_return true;
  }
  const auto [ec, n] = std::get<0>(which);
  if (ec == http::error::body_limit) {
    Error(req, 413,
          "the request body is too large: at most " + std::to_string(opts.max_body_bytes >> 20) +
              " MiB are accepted",
          &x->res);
  } else if (ec == http::error::end_of_stream || ec == asio::error::eof ||
             ec == asio::error::connection_reset) {
    co_return false;
  } else if (ec) {
    Error(req, 400, "malformed HTTP request body: " + ec.message(), &x->res);
  } else {
    req.body = std::move(parser.get().body());
    x->body_read = true;
  }
  co_return true;
}

// Runs the route's handler: inline on this I/O thread, on a worker, and again on the slow pool
// when it asks (rerun_slow), the client watched meanwhile. False: the client went away.
asio::awaitable<bool> HttpServer::Impl::Dispatch(beast::tcp_stream& stream, Exchange* x) {
  const HttpRoute& route = *x->route;
  if (route.inline_handler) {
    Run(route, x->req, &x->res, &x->record);
    co_return true;
  }
  if (busy.fetch_add(1) >= opts.worker_threads + opts.worker_queue) {
    --busy;
    Busy(x->req, "the server is busy; retry later", &x->res);
    co_return true;
  }
  co_await asio::co_spawn(
      workers,
      [&]() -> asio::awaitable<void> {
        Run(route, x->req, &x->res, &x->record);
        co_return;
      },
      asio::use_awaitable);
  --busy;
  if (!x->res.rerun_slow) co_return true;
  x->res = HttpResponse();
  if (slow_busy.fetch_add(1) >= opts.slow_threads + opts.slow_queue) {
    --slow_busy;
    Busy(x->req, "too many structured-output grammars are being compiled; retry later", &x->res);
    co_return true;
  }
  // The slow pool signals completion through the waker; this coroutine (which owns x) never
  // leaves before it, and tells the handler when the client is gone.
  auto waker = std::make_shared<Waker>(co_await asio::this_coro::executor);
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::atomic<bool> cancel{false};
  x->record.cancel = &cancel;
  x->record.on_slow_pool = true;
  asio::post(slow, [this, x, &route, waker, done] {
    Run(route, x->req, &x->res, &x->record);
    done->store(true);
    waker->notified.store(true);
    asio::post(waker->timer.get_executor(), [waker] { waker->timer.cancel(); });
    // A compile's automata and tables are transient gigabytes at worst: give the pages back.
    malloc_trim(0);
  });
  bool watch = true, gone = false;
  while (!done->load()) {
    if (!co_await WaitWatching(stream, *waker, 1.0, &watch) && !gone) {
      gone = true;
      cancel.store(true);  // the compile stops at its next check
      watch = false;
    }
  }
  --slow_busy;
  x->record.cancel = nullptr;
  if (gone) {
    if (x->res.source) x->res.source->Cancel();
    co_return false;
  }
  co_return true;
}

// Produces and writes a response that has a body source (streamed, or whole when done). False:
// the connection ends here (the client went away, or a stream ended the HTTP/1.0 way).
asio::awaitable<bool> HttpServer::Impl::SendBody(beast::tcp_stream& stream, Exchange* x) {
  HttpRequest& req = x->req;
  HttpResponse& res = x->res;
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
      RecordScope scope(&x->record);
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
        co_return true;
      }
      co_return false;
    }
    if (!out.empty()) {
      if (!res.stream) {
        whole += out;
      } else if (req.version == 11) {
        char size[24];
        std::snprintf(size, sizeof(size), "%zx\r\n", out.size());
        if (!co_await Write(stream, size + out + "\r\n")) {
          res.source->Cancel();
          co_return false;
        }
      } else if (!co_await Write(stream, out)) {
        res.source->Cancel();
        co_return false;
      }
    }
    if (st == BodySource::State::kDone) {
      if (res.stream && req.version == 11 && !co_await Write(stream, "0\r\n\r\n")) co_return false;
      if (!res.stream) {
        if (const int s = res.source->final_status()) res.status = s;
        res.body = std::move(whole);
        res.source.reset();
      }
      co_return true;
    }
    if (!co_await WaitWatching(stream, *waker, res.source->poll_seconds(), &watch)) {
      res.source->Cancel();  // the client closed the connection: free its requests now
      Log(*x, 499);
      co_return false;
    }
  }
}

// Waits for the next request's first byte: within the idle deadline, or on a new connection
// the header deadline (its headers then have the header deadline: a slow sender of headers is
// cut off). False: the connection is to be closed (idle too long, or the client left).
asio::awaitable<bool> HttpServer::Impl::AwaitRequest(beast::tcp_stream& stream,
                                                     beast::flat_buffer& buf, Conn& conn,
                                                     bool first) {
  if (buf.size() != 0) co_return true;  // pipelined: already here
  SetIdle(conn, true);
  stream.expires_after(Seconds(first ? opts.header_timeout_s : opts.idle_timeout_s));
  auto [ec, n] = co_await stream.async_read_some(buf.prepare(4096), kTuple);
  stream.expires_never();
  SetIdle(conn, false);
  if (ec) co_return false;
  buf.commit(n);
  co_return true;
}

// One request and its answer: read the head, check it, read the body, dispatch, answer.
asio::awaitable<HttpServer::Impl::Next> HttpServer::Impl::ServeExchange(beast::tcp_stream& stream,
                                                                        beast::flat_buffer& buf,
                                                                        bool reserve) {
  Exchange x;
  http::request_parser<http::string_body> parser;
  if (!co_await ReadHead(stream, buf, parser, reserve, &x)) co_return Next::kDrop;
  x.req.request_id = RequestIdFor(x.req);
  ++active;
  ExchangeScope scope{this, &x};
  if (x.res.status == 200 && x.has_body && !co_await ReadBody(stream, buf, parser, &x))
    co_return Next::kDrop;
  if (x.res.status == 200 && x.route && !co_await Dispatch(stream, &x)) co_return Next::kDrop;
  body_bytes -= x.reserved_body;  // the body is parsed and copied by now
  x.reserved_body = 0;
  if (x.req.body.size() >= kTrimAfterBodyBytes) {
    std::string().swap(x.req.body);
    TrimHeap();
  }
  if (decorate) decorate(x.req, x.res);
  AddRetryAfter(&x.res);
  // An unread body cannot be skipped safely: close after answering. So does a connection
  // beyond the cap.
  x.keep_alive = x.keep_alive && x.body_read && !x.res.close && !reserve && x.res.status != 400 &&
                 x.res.status != 408 && x.res.status != 431;
  co_return co_await Answer(stream, &x);
}

// Writes the answer: a stream (chunked on HTTP/1.1; on HTTP/1.0 the body ends when the connection
// closes) or a whole response (a body source produced first; its status may be the error the
// source ended with).
asio::awaitable<HttpServer::Impl::Next> HttpServer::Impl::Answer(beast::tcp_stream& stream,
                                                                 Exchange* x) {
  HttpResponse& res = x->res;
  const bool head_only = x->req.method == "HEAD";
  if (res.source && res.stream && !head_only) {
    const bool chunked = x->req.version == 11;
    if (!chunked) x->keep_alive = false;
    if (!co_await Write(stream, Head(x->req, res, x->keep_alive, std::nullopt, chunked))) {
      res.source->Cancel();
      co_return Next::kDrop;
    }
  }
  if (res.source) {
    if (!co_await SendBody(stream, x)) co_return Next::kDrop;
    if (res.stream) {
      Log(*x, res.status);
      co_return x->keep_alive ? Next::kNext : Next::kEnd;
    }
  }
  AddRetryAfter(&res);
  std::string out = Head(x->req, res, x->keep_alive, res.body.size(), false);
  if (!head_only) out += res.body;
  const bool ok = co_await Write(stream, out);
  Log(*x, res.status);
  if (!ok) co_return Next::kDrop;
  if (!x->keep_alive && (!x->body_read || res.status >= 400)) co_await Linger(stream);
  co_return x->keep_alive ? Next::kNext : Next::kEnd;
}

asio::awaitable<void> HttpServer::Impl::Serve(tcp::socket sock, bool reserve) {
  beast::tcp_stream stream(std::move(sock));
  beast::flat_buffer buf(opts.max_header_bytes + (size_t{1} << 20));
  auto conn = std::make_shared<Conn>();
  conn->ex = stream.get_executor();
  conn->sock = &stream.socket();
  const ConnEntry entry(this, conn);
  for (bool first = true;; first = false) {
    if (!co_await AwaitRequest(stream, buf, *conn, first)) co_return;
    const Next next = co_await ServeExchange(stream, buf, reserve);
    if (next == Next::kDrop) co_return;
    if (next == Next::kEnd) break;
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
