// The checks every native factory makes of a sandbox id and an API key
// (host/native/native_options.h), and that the factories use them.
#include "host/native/native_options.h"

#include <doctest.h>
#include <stdlib.h>

#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "absl/strings/match.h"
#include "tether/providers/boat.h"
#include "tether/providers/e2b.h"
#include "tether/providers/runloop.h"

namespace tether {
namespace {

// Sets (or, with nullptr, unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST_CASE("CheckId: required, at most 128 bytes, letters, digits, '-', '_' and the extras named") {
  CHECK(native::CheckId("boat", "sandbox id", "--sandbox ID", "sb-1_A").ok());
  CHECK(native::CheckId("boat", "sandbox id", "--sandbox ID", std::string(128, 'a')).ok());
  absl::Status st = native::CheckId("boat", "sandbox id", "--sandbox ID", "");
  CHECK(absl::IsInvalidArgument(st));
  CHECK(st.message() == "boat: a sandbox id is required (--sandbox ID)");
  st = native::CheckId("runloop", "devbox id", "--devbox ID", std::string(129, 'a'));
  CHECK(absl::IsInvalidArgument(st));
  CHECK(st.message() == "runloop: the devbox id is too long (128 at most)");
  for (const char* bad : {"a b", "a/b", "../x", "a\nb", "a.b", "\xff"}) {
    CAPTURE(bad);
    st = native::CheckId("e2b", "sandbox id", "--sandbox ID", bad);
    CHECK(absl::IsInvalidArgument(st));
    CHECK(st.message() == "e2b: a sandbox id is letters, digits, '-' and '_'");
  }
  CHECK(native::CheckId("daytona", "sandbox id", "--sandbox ID", "a.b", ".").ok());
  st = native::CheckId("daytona", "sandbox id", "--sandbox ID", "a/b", ".");
  CHECK(st.message() == "daytona: a sandbox id is letters, digits, '.', '-' and '_'");
}

TEST_CASE("ApiKeyOrEnv: the key given, else the environment's; never quoted in an error") {
  ScopedEnv env("TETHER_TEST_API_KEY", "from-env");
  std::string key = "given";
  CHECK(native::ApiKeyOrEnv("boat", "TETHER_TEST_API_KEY", key).ok());
  CHECK(key == "given");
  key.clear();
  CHECK(native::ApiKeyOrEnv("boat", "TETHER_TEST_API_KEY", key).ok());
  CHECK(key == "from-env");
  {
    ScopedEnv unset("TETHER_TEST_API_KEY", nullptr);
    key.clear();
    absl::Status st = native::ApiKeyOrEnv("boat", "TETHER_TEST_API_KEY", key);
    CHECK(absl::IsUnauthenticated(st));
    CHECK(st.message() == "boat: set TETHER_TEST_API_KEY to your API key");
  }
  const std::vector<std::string> bad_keys = {"sec ret", "secret\r\nX-Evil: 1", std::string("sec\0ret", 7),
                                             "secret\x7f"};
  for (std::string bad : bad_keys) {
    absl::Status st = native::ApiKeyOrEnv("boat", "TETHER_TEST_API_KEY", bad);
    CHECK(absl::IsInvalidArgument(st));
    CHECK(st.message() == "boat: TETHER_TEST_API_KEY contains a space or a control character");
    CHECK_FALSE(absl::StrContains(st.message(), "secret"));
  }
}

TEST_CASE("the factories refuse a bad id or key before any call, e2b's key included") {
  boost::asio::io_context io;
  ScopedEnv e2b_key("E2B_API_KEY", nullptr);
  ScopedEnv boat_key("BOAT_API_KEY", nullptr);
  ScopedEnv runloop_key("RUNLOOP_API_KEY", nullptr);
  E2bOptions e;
  e.sandbox_id = "sbx";
  e.api_key = "key with\nnewline";
  absl::Status st = MakeE2bTransport(io.get_executor(), e).status();
  CHECK(absl::IsInvalidArgument(st));
  CHECK(st.message() == "e2b: E2B_API_KEY contains a space or a control character");
  e.api_key.clear();
  CHECK(absl::IsUnauthenticated(MakeE2bTransport(io.get_executor(), e).status()));
  e.sandbox_id = std::string(129, 'a');
  CHECK(MakeE2bTransport(io.get_executor(), e).status().message() == "e2b: the sandbox id is too long (128 at most)");
  BoatOptions b;
  b.sandbox_id = "a/b";
  CHECK(absl::IsInvalidArgument(MakeBoatTransport(io.get_executor(), b).status()));
  RunloopOptions r;
  r.devbox_id = "dbx";
  CHECK(MakeRunloopTransport(io.get_executor(), r).status().message() ==
        "runloop: set RUNLOOP_API_KEY to your API key");
}

}  // namespace
}  // namespace tether
