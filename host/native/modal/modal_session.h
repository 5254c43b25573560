// One Modal sandbox as the modal provider reaches it (internal): the control
// plane (modal.client.ModalClient: the auth token, cached until its exp; the
// sandbox's task; the command router's URL and JWT) and the router's stub,
// with the SDK's retry policy for every call. Shared by the transport and
// its channels; used on one executor.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "host/support/condition.h"
#include "host/native/grpc/grpc_asio.h"
#include "host/native/grpc/grpc_client.h"
#include "host/native/modal/modal_config.h"
#include "host/native/modal/task_command_router.grpc.pb.h"

namespace tether::modal {

using RouterStub = ::modal::task_command_router::TaskCommandRouter::Stub;

// (host/native/grpc/: the gRPC callback API awaited from Asio, channels.)
using rpc::AwaitUnary;
using rpc::CertificateRefused;
using rpc::kMaxMetadataBytes;
using rpc::ServerStream;
using rpc::StreamSink;

// The codes the SDK retries unary calls on (DEADLINE_EXCEEDED, UNAVAILABLE,
// CANCELLED, INTERNAL, UNKNOWN), but never a server whose certificate failed
// verification: gRPC says UNAVAILABLE for that too, and only in its message.
bool Retryable(const grpc::Status& st);
// A gRPC status as a Status with `what` in front ("modal: TaskExecStart:
// ..."); a refused certificate is net::UntrustedServerError.
absl::Status FromGrpc(const grpc::Status& st, std::string_view what);

inline constexpr int kMaxRetries = 10;                          // per call, as the SDK
inline constexpr std::chrono::milliseconds kRetryBase{10};      // doubled per retry, as the SDK
// New router JWTs one call may ask for after UNAUTHENTICATED answers. The
// SDK asks once; but a call that a slow router and retries keep past its
// new JWT's life (chaos.modal seed 16: the emulator's 3 s JWTs) is then
// refused for a start that never ran. Bounded, so a router that refuses
// every JWT ends the call.
inline constexpr int kMaxJwtRefreshes = 3;
inline constexpr std::chrono::milliseconds kUnaryDeadline{60000};

struct SessionOptions {
  std::string sandbox_id;
  std::string token_id, token_secret;  // never in a message
  GrpcTarget server;
  std::string ca_pem;  // extra roots (with the system's) for TLS; empty: gRPC's defaults
};

class ModalSession : public std::enable_shared_from_this<ModalSession> {
 public:
  ModalSession(boost::asio::any_io_executor ex, SessionOptions o);

  // Resolves the sandbox once: auth token, task id, router access.
  boost::asio::awaitable<absl::Status> Ready();
  const std::string& task_id() const { return task_id_; }

  // The router as it is now; `generation` changes with every new JWT.
  struct Router {
    std::shared_ptr<RouterStub> stub;
    std::string jwt;
    std::uint64_t generation = 0;
  };
  Router router() const { return router_; }
  // A new router JWT, unless one newer than `generation` already came.
  boost::asio::awaitable<absl::Status> RefreshRouter(std::uint64_t generation);

  // One unary router call with the SDK's policy: UNAUTHENTICATED refreshes
  // the JWT and calls again (up to kMaxJwtRefreshes times: a JWT that
  // expires within a call slowed by retries may expire again after its
  // refresh); the retryable codes call again with backoff (kMaxRetries). `invoke(async, ctx, req, resp, done)` starts it;
  // `live` (may be null) holds the call's context, for TryCancel.
  template <class Req, class Resp, class Invoke>
  boost::asio::awaitable<grpc::Status> RouterCall(const Req& req, Resp* resp, Invoke invoke,
                                                  std::shared_ptr<grpc::ClientContext>* live = nullptr,
                                                  std::chrono::milliseconds deadline = kUnaryDeadline,
                                                  int max_retries = kMaxRetries) {
    namespace asio = boost::asio;
    std::chrono::milliseconds delay = kRetryBase;
    int refreshes = 0;
    for (int attempt = 0;; ++attempt) {
      Router r = router_;
      auto ctx = std::make_shared<grpc::ClientContext>();
      ctx->AddMetadata("authorization", "Bearer " + r.jwt);
      ctx->set_deadline(std::chrono::system_clock::now() + deadline);
      if (live != nullptr) *live = ctx;
      grpc::Status st = co_await AwaitUnary(ctx, [&](std::function<void(grpc::Status)> done) {
        invoke(r.stub->async(), ctx.get(), &req, resp, std::move(done));
      });
      if (live != nullptr) live->reset();
      if (st.ok()) co_return st;
      asio::cancellation_state cs = co_await asio::this_coro::cancellation_state;
      if (cs.cancelled() != asio::cancellation_type::none) co_return st;
      if (st.error_code() == grpc::StatusCode::UNAUTHENTICATED && refreshes < kMaxJwtRefreshes) {
        ++refreshes;
        absl::Status rs = co_await RefreshRouter(r.generation);
        if (!rs.ok()) co_return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(rs.message()));
        continue;
      }
      if (!Retryable(st) || attempt >= max_retries) co_return st;
      asio::steady_timer t(co_await asio::this_coro::executor, delay);
      auto [ec] = co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
      if (ec) co_return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      delay *= 2;
    }
  }

  boost::asio::any_io_executor executor() const { return ex_; }

 private:
  boost::asio::awaitable<absl::Status> Resolve();
  boost::asio::awaitable<absl::Status> AuthToken(bool renew);
  boost::asio::awaitable<absl::Status> RouterAccess();
  // A control-plane call with the auth token and the retry policy.
  template <class Req, class Resp, class Invoke>
  boost::asio::awaitable<grpc::Status> ControlCall(const Req& req, Resp* resp, Invoke invoke);

  boost::asio::any_io_executor ex_;
  SessionOptions o_;
  std::shared_ptr<grpc::Channel> control_;
  std::string auth_token_;
  std::chrono::system_clock::time_point auth_renew_at_;
  std::string task_id_;
  std::string router_url_;
  std::shared_ptr<grpc::Channel> router_channel_;
  Router router_;
  bool ready_ = false, resolving_ = false, refreshing_ = false;
  absl::Status failure_;  // of the last Resolve
  internal::Condition changed_;
};

}  // namespace tether::modal
