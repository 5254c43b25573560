#include "host/native/boxd/boxd_session.h"

#include <boost/json.hpp>

#include "absl/strings/str_cat.h"
#include "host/native/native_json.h"
#include "host/native/native_options.h"
#include "tether/errors.h"

namespace tether::boxd {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {

absl::Status Lied(std::string_view why) {
  return WithErrorCode(absl::UnavailableError(absl::StrCat("boxd: the token exchange answered ", std::string(why))),
                       ErrorCode::kProtocol);
}

}  // namespace

absl::StatusOr<Jwt> ParseTokenAnswer(std::string_view body) {
  if (body.size() > kMaxAuthAnswerBytes) return Lied("more than 64 KiB");
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(body.data(), body.size()), ec);
  if (ec || !v.is_object()) return Lied("something that is not a JSON object");
  const json::object& o = v.get_object();
  const json::value* token = o.if_contains("token");
  if (token == nullptr || !token->is_string() || token->get_string().empty()) return Lied("no token");
  const json::string& t = token->get_string();
  if (t.size() > kMaxTokenBytes) return Lied("a token longer than 16 KiB");
  if (!native::HeaderSafe(std::string_view(t.data(), t.size()))) return Lied("a token that cannot go into a header");
  const json::value* exp = o.if_contains("expires_at");
  std::optional<std::int64_t> secs = exp != nullptr ? native::JsonInteger(*exp) : std::nullopt;
  // (Seconds with a fraction, as some encoders write a time: rounded down.)
  if (!secs && exp != nullptr && exp->is_double() && exp->get_double() >= 1e9 && exp->get_double() < 1e10) {
    secs = static_cast<std::int64_t>(exp->get_double());
  }
  // Seconds since the epoch: before 2001 or past 2286 is not a time.
  if (!secs || *secs < 1'000'000'000 || *secs > 9'999'999'999) return Lied("no expires_at in seconds since the epoch");
  Jwt j;
  j.token = std::string(t.data(), t.size());
  j.expires_at = std::chrono::system_clock::time_point(std::chrono::seconds(*secs));
  return j;
}

BoxdSession::BoxdSession(asio::any_io_executor ex, SessionOptions o)
    : ex_(std::move(ex)), o_(std::move(o)), changed_(ex_) {
  channel_ = rpc::MakeChannel(o_.server, o_.ca_pem, kMaxMessageBytes);
  stub_ = ::boxd::api::v1::BoxdApi::NewStub(channel_);
  if (!o_.token.empty()) {
    // A user's JWT: used as it is, until the endpoint refuses it.
    Jwt j;
    j.token = o_.token;
    j.expires_at = std::chrono::system_clock::time_point::max();
    jwt_ = std::move(j);
    generation_ = 1;
  }
}

asio::awaitable<absl::StatusOr<BoxdSession::Bearer>> BoxdSession::Token() {
  while (true) {
    const auto now = std::chrono::system_clock::now();
    if (jwt_ && (jwt_->expires_at == std::chrono::system_clock::time_point::max() ||
                 now + kRenewEarly < jwt_->expires_at)) {
      co_return Bearer{jwt_->token, generation_};
    }
    if (!o_.auth) {
      co_return absl::UnauthenticatedError("boxd: the JWT in BOXD_TOKEN was refused or has expired; set BOXD_API_KEY");
    }
    if (exchanging_) {
      if (!co_await changed_.Wait()) co_return absl::CancelledError("boxd: cancelled waiting for a JWT");
      continue;
    }
    exchanging_ = true;
    absl::Status st = co_await Exchange();
    exchanging_ = false;
    changed_.NotifyAll();
    if (!st.ok()) co_return st;
  }
}

bool BoxdSession::Refused(std::uint64_t generation) {
  if (!o_.auth || ++refusals_ > kMaxTokenRefreshes) return false;
  if (generation == generation_) jwt_.reset();
  return true;
}

asio::awaitable<absl::Status> BoxdSession::Exchange() {
  if (!auth_client_) {
    absl::StatusOr<std::shared_ptr<net::Client>> c = net::Client::Make(ex_, *o_.auth);
    if (!c.ok()) co_return c.status();
    auth_client_ = *std::move(c);
  }
  net::Request req;
  req.method = "POST";
  req.target = o_.auth_target;
  req.headers = {{"Content-Type", "application/json"}, {"Accept", "application/json"}};
  req.body = json::serialize(json::object{{"api_key", o_.api_key}});
  ++exchanges_;
  absl::StatusOr<net::Response> resp = co_await auth_client_->Call(std::move(req));
  if (!resp.ok()) co_return native::ScrubSecret(resp.status(), o_.api_key, "<BOXD_API_KEY>");
  if (!net::IsSuccess(*resp)) {
    absl::Status st = native::ScrubSecret(net::HttpError(*resp, "boxd: the token exchange"), o_.api_key,
                                          "<BOXD_API_KEY>");
    if (st.code() == absl::StatusCode::kUnauthenticated || st.code() == absl::StatusCode::kPermissionDenied) {
      co_return absl::Status(st.code(), absl::StrCat("the API key (BOXD_API_KEY) was refused (", st.message(), ")"));
    }
    co_return st;
  }
  absl::StatusOr<Jwt> j = ParseTokenAnswer(resp->body);
  if (!j.ok()) co_return j.status();
  jwt_ = *std::move(j);
  ++generation_;
  co_return absl::OkStatus();
}

}  // namespace tether::boxd
