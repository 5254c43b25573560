#include "host/native/modal/modal_session.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "host/net/http.h"
#include "host/native/modal/modal_client.grpc.pb.h"

namespace tether::modal {

namespace asio = boost::asio;
namespace mc = ::modal::client;

namespace {

constexpr std::chrono::seconds kAuthLifetimeGuess{20 * 60};  // a token without exp (the SDK's default)
constexpr std::chrono::seconds kAuthRenewEarly{60};           // renewed this long before its exp
constexpr int kMaxMessageBytes = 100 << 20;                   // as the SDK's router channel
// The client identity every control-plane call of modal-js 0.11.1 carries
// (EMULATORS.md section 5): client type 8 (CLIENT_TYPE_LIBMODAL_JS, the
// client whose calls we make, field for field) at protocol version 1.0.0.
// x-modal-libmodal-version ("modal-js/<release>") names an SDK release,
// which we are not, so it is left out.
constexpr char kClientType[] = "8";
constexpr char kClientVersion[] = "1.0.0";

void AddClientMetadata(grpc::ClientContext& ctx) {
  ctx.AddMetadata("x-modal-client-type", kClientType);
  ctx.AddMetadata("x-modal-client-version", kClientVersion);
}

}  // namespace

bool Retryable(const grpc::Status& st) {
  const grpc::StatusCode code = st.error_code();
  return (code == grpc::StatusCode::DEADLINE_EXCEEDED || code == grpc::StatusCode::UNAVAILABLE ||
          code == grpc::StatusCode::CANCELLED || code == grpc::StatusCode::INTERNAL ||
          code == grpc::StatusCode::UNKNOWN) &&
         !CertificateRefused(st);
}

absl::Status FromGrpc(const grpc::Status& st, std::string_view what) { return rpc::FromGrpc(st, "modal", what); }

ModalSession::ModalSession(asio::any_io_executor ex, SessionOptions o)
    : ex_(std::move(ex)), o_(std::move(o)), changed_(ex_) {}

template <class Req, class Resp, class Invoke>
asio::awaitable<grpc::Status> ModalSession::ControlCall(const Req& req, Resp* resp, Invoke invoke) {
  std::chrono::milliseconds delay = kRetryBase;
  bool renewed = false;
  for (int attempt = 0;; ++attempt) {
    auto ctx = std::make_shared<grpc::ClientContext>();
    AddClientMetadata(*ctx);
    ctx->AddMetadata("x-modal-auth-token", auth_token_);
    ctx->set_deadline(std::chrono::system_clock::now() + kUnaryDeadline);
    auto stub = mc::ModalClient::NewStub(control_);
    grpc::Status st = co_await AwaitUnary(ctx, [&](std::function<void(grpc::Status)> done) {
      invoke(stub->async(), ctx.get(), &req, resp, std::move(done));
    });
    if (st.ok()) co_return st;
    asio::cancellation_state cs = co_await asio::this_coro::cancellation_state;
    if (cs.cancelled() != asio::cancellation_type::none) co_return st;
    if (st.error_code() == grpc::StatusCode::UNAUTHENTICATED && !renewed) {
      renewed = true;
      absl::Status a = co_await AuthToken(true);
      if (!a.ok()) co_return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(a.message()));
      continue;
    }
    if (!Retryable(st) || attempt >= kMaxRetries) co_return st;
    asio::steady_timer t(ex_, delay);
    auto [ec] = co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) co_return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    delay *= 2;
  }
}

asio::awaitable<absl::Status> ModalSession::AuthToken(bool renew) {
  if (!renew && !auth_token_.empty() && std::chrono::system_clock::now() < auth_renew_at_) {
    co_return absl::OkStatus();
  }
  if (!control_) {
    // (MakeModalTransport refused it already; a session made directly too.)
    if (absl::Status bad = CheckCleartext(o_.server, "the server URL"); !bad.ok()) co_return bad;
    control_ = rpc::MakeChannel(o_.server, o_.ca_pem, kMaxMessageBytes);
  }
  mc::AuthTokenGetRequest req;
  mc::AuthTokenGetResponse resp;
  std::chrono::milliseconds delay = kRetryBase;
  for (int attempt = 0;; ++attempt) {
    auto ctx = std::make_shared<grpc::ClientContext>();
    AddClientMetadata(*ctx);
    ctx->AddMetadata("x-modal-token-id", o_.token_id);
    ctx->AddMetadata("x-modal-token-secret", o_.token_secret);
    ctx->set_deadline(std::chrono::system_clock::now() + kUnaryDeadline);
    auto stub = mc::ModalClient::NewStub(control_);
    grpc::Status st = co_await AwaitUnary(ctx, [&](std::function<void(grpc::Status)> done) {
      stub->async()->AuthTokenGet(ctx.get(), &req, &resp, std::move(done));
    });
    if (st.ok()) break;
    if (st.error_code() == grpc::StatusCode::UNAUTHENTICATED || st.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
      co_return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                             "modal: the token (MODAL_TOKEN_ID / MODAL_TOKEN_SECRET or ~/.modal.toml) was refused");
    }
    asio::cancellation_state cs = co_await asio::this_coro::cancellation_state;
    if (cs.cancelled() != asio::cancellation_type::none || !Retryable(st) || attempt >= kMaxRetries) {
      co_return FromGrpc(st, "AuthTokenGet");
    }
    asio::steady_timer t(ex_, delay);
    auto [ec] = co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) co_return absl::CancelledError("modal: AuthTokenGet was cancelled");
    delay *= 2;
  }
  if (resp.token().empty()) co_return absl::UnavailableError("modal: AuthTokenGet answered no token");
  auth_token_ = resp.token();
  const auto now = std::chrono::system_clock::now();
  std::optional<std::int64_t> exp = JwtExpiry(auth_token_);
  auth_renew_at_ = exp ? std::chrono::system_clock::time_point(std::chrono::seconds(*exp)) - kAuthRenewEarly
                       : now + kAuthLifetimeGuess - kAuthRenewEarly;
  co_return absl::OkStatus();
}

asio::awaitable<absl::Status> ModalSession::Ready() {
  while (!ready_) {
    if (!resolving_) {
      resolving_ = true;
      failure_ = co_await Resolve();
      resolving_ = false;
      ready_ = failure_.ok();
      changed_.NotifyAll();
      if (!failure_.ok()) co_return failure_;
      break;
    }
    const bool woke = co_await changed_.Wait();
    if (!woke) co_return absl::CancelledError("modal: cancelled");
    if (!ready_ && !resolving_) co_return failure_;
  }
  co_return absl::OkStatus();
}

asio::awaitable<absl::Status> ModalSession::Resolve() {
  if (absl::Status st = co_await AuthToken(false); !st.ok()) co_return st;
  mc::SandboxGetTaskIdRequest req;
  req.set_sandbox_id(o_.sandbox_id);
  mc::SandboxGetTaskIdResponse resp;
  const bool v1 = IsV1SandboxId(o_.sandbox_id);
  grpc::Status st;
  if (v1) {
    st = co_await ControlCall(req, &resp, [](auto* a, auto* c, auto* q, auto* p, auto done) {
      a->SandboxGetTaskId(c, q, p, std::move(done));
    });
  } else {
    st = co_await ControlCall(req, &resp, [](auto* a, auto* c, auto* q, auto* p, auto done) {
      a->SandboxGetTaskIdV2(c, q, p, std::move(done));
    });
  }
  if (st.error_code() == grpc::StatusCode::NOT_FOUND) {
    co_return absl::NotFoundError(absl::StrCat("modal: sandbox '", o_.sandbox_id, "' not found (", st.error_message(), ")"));
  }
  if (!st.ok()) co_return FromGrpc(st, v1 ? "SandboxGetTaskId" : "SandboxGetTaskIdV2");
  if (resp.has_task_result()) {
    co_return absl::FailedPreconditionError(absl::StrCat("modal: sandbox '", o_.sandbox_id, "' has finished"));
  }
  if (resp.task_id().empty()) {
    co_return absl::UnavailableError(absl::StrCat("modal: sandbox '", o_.sandbox_id, "' has no task yet"));
  }
  task_id_ = resp.task_id();
  co_return co_await RouterAccess();
}

asio::awaitable<absl::Status> ModalSession::RouterAccess() {
  mc::TaskGetCommandRouterAccessResponse resp;
  grpc::Status st;
  const bool v1 = IsV1SandboxId(o_.sandbox_id);
  if (v1) {
    mc::TaskGetCommandRouterAccessRequest req;
    req.set_task_id(task_id_);
    st = co_await ControlCall(req, &resp, [](auto* a, auto* c, auto* q, auto* p, auto done) {
      a->TaskGetCommandRouterAccess(c, q, p, std::move(done));
    });
  } else {
    mc::SandboxGetCommandRouterAccessRequest req;
    req.set_sandbox_id(o_.sandbox_id);
    st = co_await ControlCall(req, &resp, [](auto* a, auto* c, auto* q, auto* p, auto done) {
      a->SandboxGetCommandRouterAccess(c, q, p, std::move(done));
    });
  }
  if (!st.ok()) co_return FromGrpc(st, v1 ? "TaskGetCommandRouterAccess" : "SandboxGetCommandRouterAccess");
  absl::StatusOr<GrpcTarget> t = ParseGrpcUrl(resp.url());
  if (!t.ok()) co_return absl::UnavailableError(absl::StrCat("modal: the command router: ", t.status().message()));
  if (!t->tls) co_return absl::UnavailableError("modal: the command router's URL is not https");
  if (resp.jwt().empty()) co_return absl::UnavailableError("modal: the command router access has no JWT");
  // The router's URL is https://, but a plaintext control plane (a local
  // emulator; only a loopback one is accepted) serves its router in
  // plaintext too, as the SDK dials it for a loopback server. That holds
  // only for a loopback router: a remote one named by a plaintext server is
  // refused before it is dialled, as the JWT would go in cleartext.
  const bool plaintext = !o_.server.tls;
  if (plaintext && !t->loopback) {
    co_return absl::FailedPreconditionError(absl::StrCat(
        "modal: the plaintext server ", o_.server.target(), " names a command router that is not loopback (",
        t->target(), "): refused, its JWT would travel unencrypted. Use an https:// server URL"));
  }
  if (!router_channel_ || resp.url() != router_url_) {
    GrpcTarget router = *t;
    router.tls = !plaintext;
    router_channel_ = rpc::MakeChannel(router, o_.ca_pem, kMaxMessageBytes);
    router_url_ = resp.url();
  }
  Router r;
  r.stub = std::shared_ptr<RouterStub>(::modal::task_command_router::TaskCommandRouter::NewStub(router_channel_));
  r.jwt = resp.jwt();
  r.generation = router_.generation + 1;
  router_ = std::move(r);
  co_return absl::OkStatus();
}

asio::awaitable<absl::Status> ModalSession::RefreshRouter(std::uint64_t generation) {
  while (refreshing_) {
    const bool woke = co_await changed_.Wait();
    if (!woke) co_return absl::CancelledError("modal: cancelled");
  }
  if (router_.generation != generation) co_return absl::OkStatus();  // refreshed meanwhile
  refreshing_ = true;
  absl::Status st = co_await RouterAccess();
  refreshing_ = false;
  changed_.NotifyAll();
  co_return st;
}

}  // namespace tether::modal
