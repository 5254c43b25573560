#include "host/native/kubernetes/exec_status.h"

#include <doctest.h>

#include <string>

namespace tether::k8s {
namespace {

TEST_CASE("Success is exit code 0") {
  absl::StatusOr<int> c = ParseExecStatus(R"({"metadata":{},"status":"Success"})");
  REQUIRE(c.ok());
  CHECK(*c == 0);
}

TEST_CASE("NonZeroExitCode gives the ExitCode cause's number") {
  absl::StatusOr<int> c = ParseExecStatus(
      R"({"metadata":{},"status":"Failure","reason":"NonZeroExitCode",)"
      R"("message":"command terminated with non-zero exit code: exit status 3",)"
      R"("details":{"causes":[{"reason":"Other","message":"x"},{"reason":"ExitCode","message":"3"}]}})");
  REQUIRE(c.ok());
  CHECK(*c == 3);
  c = ParseExecStatus(
      R"({"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"137"}]}})");
  REQUIRE(c.ok());
  CHECK(*c == 137);
}

TEST_CASE("a NonZeroExitCode without a usable ExitCode cause is an error") {
  for (const char* bad : {
           R"({"status":"Failure","reason":"NonZeroExitCode","message":"m"})",
           R"({"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"x"}]}})",
           R"({"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"256"}]}})",
           R"({"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"-1"}]}})",
           R"({"status":"Failure","reason":"NonZeroExitCode","details":{"causes":"no"}})",
       }) {
    absl::StatusOr<int> c = ParseExecStatus(bad);
    CHECK(!c.ok());
    CHECK(absl::IsInvalidArgument(c.status()));
  }
}

TEST_CASE("other failures are errors with the server's message on the code their reason means") {
  absl::StatusOr<int> c = ParseExecStatus(
      R"({"status":"Failure","reason":"InternalError","message":"exec: \"nope\": executable file not found in $PATH"})");
  REQUIRE(!c.ok());
  CHECK(absl::IsInternal(c.status()));
  CHECK(c.status().message().find("executable file not found") != std::string_view::npos);
  c = ParseExecStatus(R"({"status":"Failure","reason":"NotFound","message":"container \"x\" not found"})");
  REQUIRE(!c.ok());
  CHECK(absl::IsNotFound(c.status()));
  c = ParseExecStatus(R"({"status":"Failure","reason":"Forbidden","message":"no"})");
  CHECK(absl::IsPermissionDenied(c.status()));
  c = ParseExecStatus(R"({"status":"Failure","reason":"Unauthorized"})");
  CHECK(absl::IsUnauthenticated(c.status()));
  CHECK(c.status().message().find("no message") != std::string_view::npos);
  c = ParseExecStatus(R"({"status":"Failure"})");
  REQUIRE(!c.ok());
  CHECK(absl::IsInternal(c.status()));
}

TEST_CASE("control bytes in the server's message are escaped, and long ones cut") {
  absl::StatusOr<int> c = ParseExecStatus("{\"status\":\"Failure\",\"message\":\"a\\u001b[31mb\"}");
  REQUIRE(!c.ok());
  CHECK(c.status().message().find('\x1b') == std::string_view::npos);
  const std::string longmsg(5000, 'm');
  c = ParseExecStatus("{\"status\":\"Failure\",\"message\":\"" + longmsg + "\"}");
  REQUIRE(!c.ok());
  CHECK(c.status().message().size() < 1000);
}

TEST_CASE("what is not a Status is refused") {
  for (const char* bad : {"", "not json", "[]", "{}", R"({"status":"Pending"})", R"({"status":1})", "{\"status\":"}) {
    absl::StatusOr<int> c = ParseExecStatus(bad);
    CHECK(!c.ok());
    CHECK(absl::IsInvalidArgument(c.status()));
    CHECK(!c.status().message().empty());
  }
}

}  // namespace
}  // namespace tether::k8s
