// One boxd VM as the boxd provider reaches it (internal): the gRPC channel
// to the endpoint and the JWT every call carries, exchanged for the API key
// at the auth endpoint (never sent to the gRPC endpoint) and renewed before
// it expires. Shared by the transport and its channels; used on one
// executor.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "host/native/boxd/boxd.grpc.pb.h"
#include "host/native/grpc/grpc_asio.h"
#include "host/native/grpc/grpc_client.h"
#include "host/net/http.h"
#include "host/support/condition.h"

namespace tether::boxd {

using Stub = ::boxd::api::v1::BoxdApi::Stub;

inline constexpr int kMaxMessageBytes = 4 << 20;               // gRPC's default cap, which boxd keeps
inline constexpr std::chrono::seconds kRenewEarly{5 * 60};     // a JWT is renewed this long before it expires
inline constexpr std::size_t kMaxTokenBytes = 16 << 10;        // a longer token is refused
inline constexpr std::size_t kMaxAuthAnswerBytes = 64 << 10;   // the exchange's JSON answer
inline constexpr int kMaxTokenRefreshes = 3;                   // refusals in a row that ask for a new JWT

struct SessionOptions {
  std::string vm_id;
  rpc::GrpcTarget server;
  std::string ca_pem;                     // extra roots for the gRPC endpoint; empty: the system's
  std::optional<net::ClientOptions> auth; // the exchange's origin (with an API key); nullopt: `token` alone
  std::string auth_target;                // its path, "/api/v1/auth/token"
  std::string api_key;                    // never in a message
  std::string token;                      // a JWT given by the user (BOXD_TOKEN), when no key
};

// The token exchange's JSON answer {"token", "expires_at"} (sans-I/O, for
// tests): the token (at most kMaxTokenBytes, header-safe) and when it
// expires; kProtocol-attached errors for anything else.
struct Jwt {
  std::string token;
  std::chrono::system_clock::time_point expires_at;
};
absl::StatusOr<Jwt> ParseTokenAnswer(std::string_view body);

class BoxdSession : public std::enable_shared_from_this<BoxdSession> {
 public:
  BoxdSession(boost::asio::any_io_executor ex, SessionOptions o);

  // The JWT to send now, with its generation (a new JWT, a new
  // generation): exchanged when there is none yet or it expires within
  // kRenewEarly; one exchange at a time.
  struct Bearer {
    std::string token;
    std::uint64_t generation = 0;
  };
  boost::asio::awaitable<absl::StatusOr<Bearer>> Token();
  // A call was refused UNAUTHENTICATED with `generation`'s JWT: the next
  // Token() exchanges again (unless a newer JWT already came). False when
  // that is pointless: there is no key to exchange (a user's BOXD_TOKEN was
  // refused), or more than kMaxTokenRefreshes refusals came in a row since
  // a call was last accepted.
  bool Refused(std::uint64_t generation);
  // A call got an answer from its command: its JWT was taken.
  void Accepted() { refusals_ = 0; }
  bool can_exchange() const { return o_.auth.has_value(); }

  Stub& stub() { return *stub_; }
  const std::string& vm_id() const { return o_.vm_id; }
  boost::asio::any_io_executor executor() const { return ex_; }
  // How many exchanges this session made (tests).
  std::uint64_t exchanges() const { return exchanges_; }

 private:
  boost::asio::awaitable<absl::Status> Exchange();

  boost::asio::any_io_executor ex_;
  SessionOptions o_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Stub> stub_;
  std::shared_ptr<net::Client> auth_client_;
  std::optional<Jwt> jwt_;
  std::uint64_t generation_ = 0, exchanges_ = 0;
  int refusals_ = 0;
  bool exchanging_ = false;
  internal::Condition changed_;
};

}  // namespace tether::boxd
