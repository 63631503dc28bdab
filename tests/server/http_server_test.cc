// pdserve_http end to end on loopback (port 0): complete responses over
// keep-alive, the body limit, a chunked SSE stream, and the client-gone
// notice of a request still being answered.
#include "server/http/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve::http {
namespace {

using ::testing::HasSubstr;

int Connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

void Send(int fd, const std::string& s) {
  ASSERT_EQ(write(fd, s.data(), s.size()), static_cast<ssize_t>(s.size()));
}

// Reads until `marker` has been seen (or the peer closes / times out).
std::string ReadUntil(int fd, const std::string& marker) {
  std::string got;
  char buf[4096];
  while (got.find(marker) == std::string::npos) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    got.append(buf, n);
  }
  return got;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(Handler handler, int64_t max_body = 1024) {
    ServerOptions o;
    o.port = 0;
    o.max_body_bytes = max_body;
    o.error_body = [](int status, const std::string& msg) {
      return std::make_pair(std::string("application/json"),
                            "{\"status\":" + std::to_string(status) +
                                ",\"message\":\"" + msg + "\"}");
    };
    auto s = Server::Start(o, std::move(handler));
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
  }
  std::unique_ptr<Server> server_;
};

TEST_F(HttpServerTest, AnswersRequestsOverOneKeptAliveConnection) {
  StartServer([](Request r, std::shared_ptr<ResponseWriter> out) {
    out->Respond(200, "text/plain",
                 r.method + " " + r.path + " q=" + r.query + " body=" + r.body +
                     " h=" + r.Header("x-test"));
  });
  const int fd = Connect(server_->port());
  ASSERT_GE(fd, 0);
  Send(fd, "POST /a?x=1 HTTP/1.1\r\nHost: t\r\nX-Test: yes\r\n"
           "Content-Length: 3\r\n\r\nabc");
  EXPECT_THAT(ReadUntil(fd, "h=yes"),
              HasSubstr("POST /a q=x=1 body=abc h=yes"));
  Send(fd, "GET /b HTTP/1.1\r\nHost: t\r\n\r\n");
  const std::string second = ReadUntil(fd, "h=");
  EXPECT_THAT(second, HasSubstr("HTTP/1.1 200 OK"));
  EXPECT_THAT(second, HasSubstr("GET /b q= body= h="));
  close(fd);
}

TEST_F(HttpServerTest, RefusesABodyOverTheLimitWith413) {
  StartServer([](Request, std::shared_ptr<ResponseWriter> out) {
    out->Respond(200, "text/plain", "should not run");
  });
  const int fd = Connect(server_->port());
  Send(fd, "POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n" +
               std::string(5000, 'x'));
  const std::string got = ReadUntil(fd, "}");
  EXPECT_THAT(got, HasSubstr("HTTP/1.1 413"));
  EXPECT_THAT(got, HasSubstr("the request body exceeds the limit of 1024 bytes"));
  close(fd);
}

TEST_F(HttpServerTest, StreamsChunkedEventsFromAnotherThread) {
  StartServer([](Request, std::shared_ptr<ResponseWriter> out) {
    std::thread([out] {
      out->StartStream(200, "text/event-stream");
      for (int i = 0; i < 3; ++i) {
        out->Write("data: " + std::to_string(i) + "\n\n");
      }
      out->End();
    }).detach();
  });
  const int fd = Connect(server_->port());
  Send(fd, "GET /s HTTP/1.1\r\nHost: t\r\n\r\n");
  const std::string got = ReadUntil(fd, "\r\n0\r\n\r\n");  // last chunk
  EXPECT_THAT(got, HasSubstr("Transfer-Encoding: chunked"));
  EXPECT_THAT(got, HasSubstr("text/event-stream"));
  const size_t a = got.find("data: 0"), b = got.find("data: 1"),
               c = got.find("data: 2");
  ASSERT_NE(a, std::string::npos);
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  close(fd);
}

TEST_F(HttpServerTest, TellsTheHandlerWhenTheClientGoesAway) {
  std::mutex mu;
  std::condition_variable cv;
  bool gone = false;
  std::shared_ptr<ResponseWriter> held;
  StartServer([&](Request, std::shared_ptr<ResponseWriter> out) {
    out->StartStream(200, "text/event-stream");
    out->Write("data: first\n\n");
    out->OnClientGone([&] {
      std::lock_guard<std::mutex> lock(mu);
      gone = true;
      cv.notify_all();
    });
    std::lock_guard<std::mutex> lock(mu);
    held = out;  // the answer is never finished
  });
  const int fd = Connect(server_->port());
  Send(fd, "GET /s HTTP/1.1\r\nHost: t\r\n\r\n");
  EXPECT_THAT(ReadUntil(fd, "first"), HasSubstr("data: first"));
  close(fd);
  std::unique_lock<std::mutex> lock(mu);
  EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return gone; }));
  EXPECT_TRUE(held->closed());
  held->Write("ignored after the client left");  // must not crash
}

}  // namespace
}  // namespace pdserve::http
