#include "server/http/http_server.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <deque>
#include <optional>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "boost/asio/dispatch.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/strand.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"

namespace pdserve::http {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = boost::asio::ip::tcp;

const std::string& Request::Header(const std::string& lower_name) const {
  static const std::string kEmpty;
  auto it = headers.find(lower_name);
  return it == headers.end() ? kEmpty : it->second;
}

std::string StatusText(int status) {
  return std::string(
      bhttp::obsolete_reason(static_cast<bhttp::status>(status)));
}

namespace {

// One queued piece of output.
struct Out {
  enum Kind { kFull, kHeader, kChunk, kLast } kind;
  std::shared_ptr<bhttp::response<bhttp::string_body>> full;
  std::shared_ptr<bhttp::response<bhttp::empty_body>> header;
  std::shared_ptr<bhttp::response_serializer<bhttp::empty_body>> serializer;
  std::shared_ptr<std::string> chunk;
};

}  // namespace

class Session;

// An io_context whose queued handlers can be destroyed once its threads
// have stopped. A pending handler holds its Session, and the Session holds
// the io_context (so it outlives the handlers): without this, that cycle
// leaked every session still open at Stop() together with the io_context
// (LeakSanitizer on http_server_test).
class DrainableContext : public net::io_context {
 public:
  using net::io_context::io_context;
  // Shuts the services down, destroying every pending operation and the
  // handler (and Session) it holds. After the run threads have joined.
  void DestroyPendingHandlers() { shutdown(); }
};

class Server::Impl {
 public:
  Impl(ServerOptions options, Handler handler)
      : options_(std::move(options)),
        handler_(std::move(handler)),
        ioc_(std::make_shared<DrainableContext>(std::max(1, options_.threads))),
        acceptor_(net::make_strand(*ioc_)) {}

  absl::Status Listen();
  void Run();
  void Stop();
  int port() const { return port_; }

  const ServerOptions& options() const { return options_; }
  const Handler& handler() const { return handler_; }
  std::pair<std::string, std::string> ErrorBody(int status,
                                                const std::string& msg) const {
    if (options_.error_body) return options_.error_body(status, msg);
    return {"text/plain", msg + "\n"};
  }

 private:
  void Accept();

  ServerOptions options_;
  Handler handler_;
  std::shared_ptr<DrainableContext> ioc_;
  tcp::acceptor acceptor_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stopped_{false};
  int port_ = 0;
};

// One connection: reads requests one after another (keep-alive), hands each
// to the handler and writes its answer. All of its state lives on its
// strand (the tcp_stream's executor).
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Server::Impl* server,
          std::shared_ptr<net::io_context> ioc)
      : stream_(std::move(socket)), server_(server), ioc_(std::move(ioc)) {}

  void Start() {
    net::dispatch(stream_.get_executor(),
                  [self = shared_from_this()] { self->DoRead(); });
  }

  // Runs `fn` on the strand if `serial` is still the current request.
  template <typename Fn>
  void Post(uint64_t serial, Fn fn) {
    net::post(stream_.get_executor(),
              [self = shared_from_this(), serial, fn = std::move(fn)]() mutable {
                if (self->serial_ == serial && !self->gone_) fn(*self);
              });
  }

  void Respond(int status, absl::string_view type, std::string body,
               const Headers& headers) {
    if (started_) return;
    started_ = ended_ = true;
    auto res = std::make_shared<bhttp::response<bhttp::string_body>>(
        static_cast<bhttp::status>(status), version_);
    res->set(bhttp::field::server, "pdserve");
    res->set(bhttp::field::content_type, std::string(type));
    for (const auto& [k, v] : headers) res->set(k, v);
    res->keep_alive(keep_alive_);
    res->body() = std::move(body);
    res->prepare_payload();
    Queue({Out::kFull, res, nullptr, nullptr, nullptr});
  }
  void StartStream(int status, absl::string_view type, const Headers& headers) {
    if (started_) return;
    started_ = true;
    auto res = std::make_shared<bhttp::response<bhttp::empty_body>>(
        static_cast<bhttp::status>(status), version_);
    res->set(bhttp::field::server, "pdserve");
    res->set(bhttp::field::content_type, std::string(type));
    res->set(bhttp::field::cache_control, "no-cache");
    for (const auto& [k, v] : headers) res->set(k, v);
    res->keep_alive(keep_alive_);
    res->chunked(true);
    auto sr =
        std::make_shared<bhttp::response_serializer<bhttp::empty_body>>(*res);
    Queue({Out::kHeader, nullptr, res, sr, nullptr});
  }
  void Write(std::string data) {
    if (!started_ || ended_ || data.empty()) return;
    Queue({Out::kChunk, nullptr, nullptr, nullptr,
           std::make_shared<std::string>(std::move(data))});
  }
  void End() {
    if (!started_ || ended_) return;
    ended_ = true;
    Queue({Out::kLast, nullptr, nullptr, nullptr, nullptr});
  }
  // Sets the client-gone callback of request `serial` (runs it at once
  // when the client is already gone; drops it when that request is over).
  void PostOnGone(uint64_t serial, std::function<void()> fn) {
    net::post(stream_.get_executor(),
              [self = shared_from_this(), serial, fn = std::move(fn)]() mutable {
                if (self->serial_ != serial) return;
                if (self->gone_) {
                  fn();
                } else if (!self->ended_ || self->writing_ ||
                           !self->out_.empty()) {
                  self->on_gone_ = std::move(fn);
                }
              });
  }

  uint64_t serial() const { return serial_; }
  bool gone() const { return gone_; }
  const std::shared_ptr<std::atomic<bool>>& gone_flag() const {
    return gone_flag_;
  }

 private:
  void DoRead() {
    parser_.emplace();
    parser_->body_limit(server_->options().max_body_bytes);
    parser_->header_limit(
        static_cast<uint32_t>(server_->options().max_header_bytes));
    stream_.expires_after(
        std::chrono::seconds(server_->options().idle_timeout_seconds));
    bhttp::async_read(stream_, buffer_, *parser_,
                      [self = shared_from_this()](beast::error_code ec,
                                                  size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    if (ec) {
      int status = 0;
      if (ec == bhttp::error::body_limit) {
        status = 413;
      } else if (ec == bhttp::error::header_limit) {
        status = 431;
      } else if (ec.category() == bhttp::make_error_code(bhttp::error::body_limit).category() &&
                 ec != bhttp::error::end_of_stream &&
                 ec != bhttp::error::partial_message) {
        status = 400;
      }
      if (status == 0) return Close();
      // Answer the refusal, then close: the rest of the body is unread.
      ++serial_;
      keep_alive_ = false;
      version_ = 11;
      started_ = ended_ = false;
      const std::string msg =
          status == 413
              ? absl::StrCat("the request body exceeds the limit of ",
                             server_->options().max_body_bytes, " bytes")
              : status == 431 ? absl::StrCat(
                                    "the request headers exceed the limit of ",
                                    server_->options().max_header_bytes,
                                    " bytes")
                              : absl::StrCat("malformed HTTP request: ",
                                             ec.message());
      auto [type, body] = server_->ErrorBody(status, msg);
      Respond(status, type, std::move(body), {});
      return;
    }
    stream_.expires_never();
    bhttp::request<bhttp::string_body> msg = parser_->release();
    ++serial_;
    started_ = ended_ = false;
    on_gone_ = nullptr;
    keep_alive_ = msg.keep_alive();
    version_ = msg.version();
    Request req;
    req.method = std::string(msg.method_string());
    const std::string target(msg.target());
    const size_t q = target.find('?');
    req.path = target.substr(0, q);
    if (q != std::string::npos) req.query = target.substr(q + 1);
    for (const auto& field : msg) {
      req.headers[absl::AsciiStrToLower(std::string(field.name_string()))] =
          std::string(field.value());
    }
    req.body = std::move(msg.body());
    StartProbe();
    std::shared_ptr<ResponseWriter> writer = MakeWriter();
    try {
      server_->handler()(std::move(req), writer);
    } catch (const std::exception& e) {
      // A handler bug must not take the server down: answer 500.
      auto [type, body] = server_->ErrorBody(
          500, absl::StrCat("internal error: ", e.what()));
      writer->Respond(500, type, std::move(body));
    }
  }

  std::shared_ptr<ResponseWriter> MakeWriter();

  // While a request is answered, a read notices the client closing.
  void StartProbe() {
    probe_pending_ = true;
    stream_.socket().async_read_some(
        net::buffer(probe_),
        [self = shared_from_this()](beast::error_code ec, size_t n) {
          self->OnProbe(ec, n);
        });
  }
  void OnProbe(beast::error_code ec, size_t n) {
    probe_pending_ = false;
    if (n > 0) {  // a pipelined next request: keep its bytes for the parser
      auto dst = buffer_.prepare(n);
      net::buffer_copy(dst, net::buffer(probe_.data(), n));
      buffer_.commit(n);
    }
    if (read_after_probe_) {
      read_after_probe_ = false;
      if (!gone_) DoRead();
      return;
    }
    if (!ec) {
      StartProbe();
      return;
    }
    if (ec == net::error::operation_aborted && !gone_) return;
    ClientGone();
  }

  void ClientGone() {
    if (gone_) return;
    gone_ = true;
    gone_flag_->store(true);
    if (on_gone_) {
      auto fn = std::move(on_gone_);
      on_gone_ = nullptr;
      fn();
    }
    Close();
  }

  void Queue(Out out) {
    out_.push_back(std::move(out));
    if (!writing_) WriteNext();
  }

  void WriteNext() {
    if (out_.empty() || gone_) return;
    writing_ = true;
    Out& o = out_.front();
    auto done = [self = shared_from_this()](beast::error_code ec, size_t) {
      self->OnWritten(ec);
    };
    switch (o.kind) {
      case Out::kFull:
        bhttp::async_write(stream_, *o.full, std::move(done));
        break;
      case Out::kHeader:
        bhttp::async_write_header(stream_, *o.serializer, std::move(done));
        break;
      case Out::kChunk:
        net::async_write(stream_, bhttp::make_chunk(net::buffer(*o.chunk)),
                         std::move(done));
        break;
      case Out::kLast:
        net::async_write(stream_, bhttp::make_chunk_last(), std::move(done));
        break;
    }
  }

  void OnWritten(beast::error_code ec) {
    writing_ = false;
    if (ec) {
      out_.clear();
      ClientGone();
      return;
    }
    const bool last = out_.front().kind == Out::kFull ||
                      out_.front().kind == Out::kLast;
    out_.pop_front();
    if (!last) {
      WriteNext();
      return;
    }
    // The response is complete.
    on_gone_ = nullptr;
    if (!keep_alive_) {
      beast::error_code ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      Close();
      return;
    }
    if (probe_pending_) {
      read_after_probe_ = true;
      beast::error_code ignored;
      stream_.socket().cancel(ignored);
    } else {
      DoRead();
    }
  }

  void Close() {
    beast::error_code ignored;
    stream_.socket().close(ignored);
    gone_flag_->store(true);
  }

  beast::tcp_stream stream_;
  Server::Impl* server_;
  std::shared_ptr<net::io_context> ioc_;  // outlives the pending handlers
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::array<char, 512> probe_;
  bool probe_pending_ = false, read_after_probe_ = false;
  uint64_t serial_ = 0;
  bool keep_alive_ = true;
  unsigned version_ = 11;
  bool started_ = false, ended_ = false, writing_ = false, gone_ = false;
  std::function<void()> on_gone_;
  std::deque<Out> out_;
  std::shared_ptr<std::atomic<bool>> gone_flag_ =
      std::make_shared<std::atomic<bool>>(false);
};

namespace {

// The writer of one request: posts every call to the session's strand,
// tagged with the request's serial so a stale writer does nothing.
class SessionWriter : public ResponseWriter {
 public:
  SessionWriter(std::shared_ptr<Session> session)
      : session_(std::move(session)),
        serial_(session_->serial()),
        gone_(session_->gone_flag()) {}

  void Respond(int status, absl::string_view content_type, std::string body,
               Headers headers) override {
    session_->Post(serial_, [status, type = std::string(content_type),
                             body = std::move(body),
                             headers = std::move(headers)](Session& s) mutable {
      s.Respond(status, type, std::move(body), headers);
    });
  }
  void StartStream(int status, absl::string_view content_type,
                   Headers headers) override {
    session_->Post(serial_, [status, type = std::string(content_type),
                             headers = std::move(headers)](Session& s) {
      s.StartStream(status, type, headers);
    });
  }
  void Write(std::string data) override {
    session_->Post(serial_, [data = std::move(data)](Session& s) mutable {
      s.Write(std::move(data));
    });
  }
  void End() override {
    session_->Post(serial_, [](Session& s) { s.End(); });
  }
  void OnClientGone(std::function<void()> fn) override {
    session_->PostOnGone(serial_, std::move(fn));
  }
  bool closed() const override { return gone_->load(); }

 private:
  std::shared_ptr<Session> session_;
  uint64_t serial_;
  std::shared_ptr<std::atomic<bool>> gone_;
};

}  // namespace

std::shared_ptr<ResponseWriter> Session::MakeWriter() {
  return std::make_shared<SessionWriter>(shared_from_this());
}

absl::Status Server::Impl::Listen() {
  beast::error_code ec;
  const auto address = net::ip::make_address(options_.host, ec);
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HTTP host '", options_.host, "' is not an IP address: ", ec.message()));
  }
  if (options_.port < 0 || options_.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP port ", options_.port, " is not in 0..65535"));
  }
  const tcp::endpoint endpoint(address, static_cast<uint16_t>(options_.port));
  auto fail = [&](const char* what) {
    return absl::UnavailableError(absl::StrCat("HTTP server: ", what, " ",
                                               options_.host, ":",
                                               options_.port, ": ",
                                               ec.message()));
  };
  acceptor_.open(endpoint.protocol(), ec);
  if (ec) return fail("cannot open");
  acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  acceptor_.bind(endpoint, ec);
  if (ec) return fail("cannot bind");
  acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return fail("cannot listen on");
  port_ = acceptor_.local_endpoint().port();
  return absl::OkStatus();
}

void Server::Impl::Accept() {
  acceptor_.async_accept(
      net::make_strand(*ioc_), [this](beast::error_code ec, tcp::socket socket) {
        if (stopped_) return;
        if (!ec) {
          beast::error_code ignored;
          socket.set_option(tcp::no_delay(true), ignored);
          std::make_shared<Session>(std::move(socket), this, ioc_)->Start();
        }
        Accept();
      });
}

void Server::Impl::Run() {
  Accept();
  for (int i = 0; i < std::max(1, options_.threads); ++i) {
    threads_.emplace_back([ioc = ioc_] { ioc->run(); });
  }
}

void Server::Impl::Stop() {
  if (stopped_.exchange(true)) return;
  net::post(acceptor_.get_executor(), [this] {
    beast::error_code ignored;
    acceptor_.close(ignored);
  });
  ioc_->stop();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  ioc_->DestroyPendingHandlers();
}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(ServerOptions options,
                                                      Handler handler) {
  if (options.max_body_bytes <= 0 || options.max_header_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HTTP body and header limits must be > 0, got ", options.max_body_bytes,
        " and ", options.max_header_bytes));
  }
  auto impl = std::make_unique<Impl>(std::move(options), std::move(handler));
  if (absl::Status s = impl->Listen(); !s.ok()) return s;
  impl->Run();
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() { Stop(); }
int Server::port() const { return impl_->port(); }
void Server::Stop() { impl_->Stop(); }

}  // namespace pdserve::http
