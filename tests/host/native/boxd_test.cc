// The boxd provider without a server: the command line it sends (exactly
// argv, through the guest's shell), the exit status a call reports, the
// token exchange's answer (hostile JSON from the network), when a refused
// JWT is asked again, and the factory's checks. The wire runs through the
// emulator in conformance.boxd*, chaos.boxd and cli_boxd.
#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "host/native/boxd/boxd_channel.h"
#include "host/native/boxd/boxd_session.h"
#include "host/native/grpc/grpc_client.h"
#include "tether/errors.h"
#include "tether/providers/boxd.h"

namespace {

using namespace tether;
using namespace tether::boxd;

TEST_CASE("the command line is argv, each argument single-quoted for the guest's shell") {
  CHECK(*CommandLine({"/bin/echo", "a b", "it's", "$(false)", ""}) ==
        "exec '/bin/echo' 'a b' 'it'\\''s' '$(false)' ''");
  CHECK(ErrorCodeOf(CommandLine({}).status()) == ErrorCode::kInvalidArgument);
  CHECK(ErrorCodeOf(CommandLine({std::string("a\0b", 3)}).status()) == ErrorCode::kInvalidArgument);
  CHECK(ErrorCodeOf(CommandLine({"a\xff"}).status()) == ErrorCode::kInvalidArgument);
  CHECK(ErrorCodeOf(CommandLine({std::string(kMaxCommandBytes, 'x')}).status()) == ErrorCode::kInvalidArgument);
  CHECK(CommandLine({std::string(kMaxCommandBytes - 16, 'x')}).ok());
}

TEST_CASE("the exit status: the last non-zero exit_code, else 0 for a call that ended OK; never one for a cut") {
  CHECK(ExitStatus(true, std::nullopt) == 0);
  CHECK(ExitStatus(true, 3) == 3);
  CHECK(ExitStatus(true, 143) == 143);
  CHECK(ExitStatus(true, -15) == 143);  // a signal's number, negated
  CHECK(ExitStatus(true, -1000) == 255);
  CHECK(!ExitStatus(false, std::nullopt).has_value());
  CHECK(!ExitStatus(false, 3).has_value());
}

TEST_CASE("the token exchange's answer: a token fit for a header and an expiry in seconds, or a clear error") {
  absl::StatusOr<Jwt> j = ParseTokenAnswer(R"({"token":"h.p.s","expires_at":1800000000,"user_id":"u"})");
  REQUIRE(j.ok());
  CHECK(j->token == "h.p.s");
  CHECK(j->expires_at == std::chrono::system_clock::time_point(std::chrono::seconds(1800000000)));
  CHECK(ParseTokenAnswer(R"({"token":"h.p.s","expires_at":1.8e9})").ok());
  CHECK(ParseTokenAnswer(R"({"token":"h.p.s","expires_at":1800000000.75})")->expires_at ==
        std::chrono::system_clock::time_point(std::chrono::seconds(1800000000)));
  for (const char* bad : {"", "[]", "not json", R"({"expires_at":1800000000})", R"({"token":"","expires_at":1800000000})",
                          R"({"token":7,"expires_at":1800000000})", R"({"token":"a b","expires_at":1800000000})",
                          R"({"token":"a\nb","expires_at":1800000000})", R"({"token":"t"})",
                          R"({"token":"t","expires_at":"1800000000"})", R"({"token":"t","expires_at":12})",
                          R"({"token":"t","expires_at":1e300})"}) {
    CAPTURE(bad);
    absl::StatusOr<Jwt> r = ParseTokenAnswer(bad);
    REQUIRE(!r.ok());
    CHECK(ErrorCodeOf(r.status()) == ErrorCode::kProtocol);
    CHECK(std::string(r.status().message()).find("boxd: the token exchange answered") == 0);
  }
  // The size limits, checked before anything is parsed.
  const std::string long_token = std::string(R"({"token":")") + std::string(kMaxTokenBytes + 1, 'a') +
                                 R"(","expires_at":1800000000})";
  CHECK(!ParseTokenAnswer(long_token).ok());
  std::string huge = R"({"token":"t","expires_at":1800000000,"pad":")" + std::string(kMaxAuthAnswerBytes, ' ') + "\"}";
  CHECK(std::string(ParseTokenAnswer(huge).status().message()).find("64 KiB") != std::string::npos);
}

TEST_CASE("a refused JWT is asked again only with a key, and at most kMaxTokenRefreshes times in a row") {
  boost::asio::io_context io;
  SessionOptions with_key;
  with_key.vm_id = "vm";
  with_key.server = *rpc::ParseGrpcUrl("http://127.0.0.1:1");
  with_key.auth = net::ClientOptions{};
  with_key.api_key = "bxd_key";
  BoxdSession s(io.get_executor(), with_key);
  for (int i = 0; i < kMaxTokenRefreshes; ++i) CHECK(s.Refused(0));
  CHECK(!s.Refused(0));
  s.Accepted();  // a call went through: the count starts again
  CHECK(s.Refused(0));

  SessionOptions token_only = with_key;
  token_only.auth.reset();
  token_only.api_key.clear();
  token_only.token = "h.p.s";
  BoxdSession t(io.get_executor(), token_only);
  CHECK(!t.Refused(1));
  CHECK(!t.can_exchange());
}

TEST_CASE("a --ca-file (modal, boxd) is read to 1 MiB at most, and must hold a certificate") {
  char dir_template[] = "/tmp/tether-ca-file-test.XXXXXX";
  REQUIRE(::mkdtemp(dir_template) != nullptr);
  const std::string dir = dir_template;
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name, std::ios::binary) << text;
    return dir + "/" + name;
  };
  const std::string pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  absl::StatusOr<std::string> ok = rpc::ReadCaFile("boxd", write("ok.pem", pem));
  REQUIRE(ok.ok());
  CHECK(*ok == pem);
  // Exactly the limit is accepted; one byte more is refused, with the size named.
  std::string at_limit = pem + std::string(rpc::kMaxCaFileBytes - pem.size(), '#');
  ok = rpc::ReadCaFile("boxd", write("limit.pem", at_limit));
  REQUIRE(ok.ok());
  CHECK(ok->size() == rpc::kMaxCaFileBytes);
  absl::StatusOr<std::string> big = rpc::ReadCaFile("modal", write("big.pem", at_limit + "#"));
  CHECK(ErrorCodeOf(big.status()) == ErrorCode::kInvalidArgument);
  CHECK(std::string(big.status().message()) == "modal: --ca-file " + dir + "/big.pem is larger than 1 MiB");
  for (const std::string& path : {write("empty.pem", ""), write("key.pem", "-----BEGIN PRIVATE KEY-----\n"),
                                  dir + "/missing.pem", dir}) {
    absl::StatusOr<std::string> bad = rpc::ReadCaFile("boxd", path);
    CHECK(ErrorCodeOf(bad.status()) == ErrorCode::kInvalidArgument);
    CHECK(std::string(bad.status().message()) == "boxd: --ca-file " + path + " is not a readable PEM file");
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("the factory refuses what it cannot use before anything is contacted") {
  boost::asio::io_context io;
  BoxdOptions o;
  o.api_key = "bxd_key";
  CHECK(ErrorCodeOf(MakeBoxdTransport(io.get_executor(), o).status()) == ErrorCode::kInvalidArgument);  // no VM
  o.vm_id = "vm 1";
  CHECK(ErrorCodeOf(MakeBoxdTransport(io.get_executor(), o).status()) == ErrorCode::kInvalidArgument);
  o.vm_id = "vm-1";
  o.endpoint = "http://192.0.2.1:9443";  // the JWT in cleartext
  absl::StatusOr<std::shared_ptr<Transport>> t = MakeBoxdTransport(io.get_executor(), o);
  CHECK(ErrorCodeOf(t.status()) == ErrorCode::kInvalidArgument);
  CHECK(std::string(t.status().message()).find("plain http://") != std::string::npos);
  o.endpoint = "https://boxd.example:9443/path";
  CHECK(ErrorCodeOf(MakeBoxdTransport(io.get_executor(), o).status()) == ErrorCode::kInvalidArgument);
  o.endpoint = "http://127.0.0.1:9443";
  o.auth_url = "http://192.0.2.1/api/v1/auth/token";  // the key in cleartext
  CHECK(ErrorCodeOf(MakeBoxdTransport(io.get_executor(), o).status()) == ErrorCode::kInvalidArgument);
  o.auth_url = "http://127.0.0.1:1/api/v1/auth/token";
  o.ca_file = "/nonexistent/ca.pem";
  CHECK(ErrorCodeOf(MakeBoxdTransport(io.get_executor(), o).status()) == ErrorCode::kInvalidArgument);
  o.ca_file.clear();
  o.api_key = "a key";  // goes into a header
  CHECK(ErrorCodeOf(MakeBoxdTransport(io.get_executor(), o).status()) == ErrorCode::kInvalidArgument);
  o.api_key = "bxd_key";
  t = MakeBoxdTransport(io.get_executor(), o);
  REQUIRE(t.ok());
  CHECK((*t)->name() == "boxd");
  CHECK((*t)->sandbox_id() == "vm-1");
}

}  // namespace
