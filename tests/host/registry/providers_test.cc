#include "tether/providers.h"

#include <doctest.h>

#include <boost/asio/io_context.hpp>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "tether/command_transport.h"
#include "tether/local_transport.h"
#include "tether/providers/boat.h"
#include "tether/providers/runloop.h"
#include "tether/providers/daytona.h"
#include "tether/providers/docker.h"

namespace tether {
namespace {

TEST_CASE("an unknown provider is refused with the list of known ones") {
  absl::StatusOr<const ProviderInfo*> p = FindProvider("nowhere");
  REQUIRE(!p.ok());
  CHECK(absl::IsInvalidArgument(p.status()));
  const std::string msg(p.status().message());
  for (const ProviderInfo& info : Providers()) {
    CAPTURE(msg);
    CHECK(msg.find(std::string(info.name)) != std::string::npos);
  }
}

TEST_CASE("local and command are registered, local first, names unique") {
  REQUIRE(Providers().size() >= 2);
  CHECK(Providers()[0].name == "local");
  CHECK(FindProvider("command").ok());
  for (std::size_t i = 0; i < Providers().size(); ++i) {
    const ProviderInfo& a = Providers()[i];
    CHECK(!a.help.empty());
    CHECK(a.parse);
    CHECK(a.make);
    for (std::size_t j = i + 1; j < Providers().size(); ++j) CHECK(a.name != Providers()[j].name);
    for (const ProviderOption& o : a.options) {
      CHECK(o.flag.substr(0, 2) == "--");
      CHECK(IsProviderFlag(o.flag));
    }
  }
  CHECK(!IsProviderFlag("--cwd"));
}

TEST_CASE("each registered provider parses its options") {
  const ProviderInfo& local = **FindProvider("local");
  CHECK(local.same_machine);
  absl::StatusOr<std::any> l = ParseProviderFlags(local, {});
  REQUIRE(l.ok());
  CHECK(std::any_cast<LocalOptions>(&*l) != nullptr);

  const ProviderInfo& command = **FindProvider("command");
  CHECK(!command.same_machine);
  const ProviderFlags flags = {{"--prefix", "ssh -T 'my host'"}, {"--arch", "aarch64"},
                               {"--emulator", "qemu-aarch64"}, {"--tunnel", "text"}};
  absl::StatusOr<std::any> c = ParseProviderFlags(command, flags);
  REQUIRE(c.ok());
  const CommandOptions* o = std::any_cast<CommandOptions>(&*c);
  REQUIRE(o != nullptr);
  CHECK(o->prefix == std::vector<std::string>{"ssh", "-T", "my host"});
  CHECK(o->arch == "aarch64");
  CHECK(o->emulator == "qemu-aarch64");
  CHECK(o->tunnel == TunnelMode::kText);
  absl::StatusOr<std::any> ex = ParseProviderFlags(command, {{"--prefix", "sh -c"}, {"--tunnel", "exchange"}});
  REQUIRE(ex.ok());
  CHECK(std::any_cast<CommandOptions>(&*ex)->tunnel == TunnelMode::kExchange);
}

TEST_CASE("bad provider options are refused, naming the reason") {
  const ProviderInfo& local = **FindProvider("local");
  const ProviderInfo& command = **FindProvider("command");
  absl::StatusOr<std::any> st = ParseProviderFlags(local, {{"--prefix", "sh -c"}});
  REQUIRE(!st.ok());
  CHECK(std::string(st.status().message()).find("--provider command") != std::string::npos);
  CHECK(!ParseProviderFlags(command, {}).ok());  // --prefix is required
  CHECK(!ParseProviderFlags(command, {{"--prefix", "sh -c"}, {"--arch", "riscv64"}}).ok());
  CHECK(!ParseProviderFlags(command, {{"--prefix", "sh -c"}, {"--tunnel", "carrier-pigeon"}}).ok());
  CHECK(!ParseProviderFlags(command, {{"--prefix", "sh 'unterminated"}}).ok());
  CHECK(!ParseProviderFlags(command, {{"--bogus", "x"}}).ok());
}

TEST_CASE("a registered provider makes its transport") {
  char tmpl[] = "/tmp/tether-providers-test-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  ::setenv("TETHER_LOCAL_ROOT", tmpl, 1);
  boost::asio::io_context io;
  absl::StatusOr<std::shared_ptr<Transport>> local = MakeProviderTransport(io.get_executor(), "local", {});
  REQUIRE(local.ok());
  CHECK((*local)->name() == "local");
  absl::StatusOr<std::shared_ptr<Transport>> command =
      MakeProviderTransport(io.get_executor(), "command", {{"--prefix", "sh -c"}});
  REQUIRE(command.ok());
  CHECK((*command)->name() == "command");
  CHECK((*command)->sandbox_id() == "sh -c");
  CHECK(!MakeProviderTransport(io.get_executor(), "nowhere", {}).ok());
  ::unsetenv("TETHER_LOCAL_ROOT");
  std::error_code ec;
  std::filesystem::remove_all(tmpl, ec);
}

TEST_CASE("a flag several providers take is accepted by each of them, refused by the others naming all") {
  // (docker and kubernetes both take --container, --endpoint and --ca-file.)
  for (const ProviderInfo& p : Providers()) {
    for (const ProviderInfo& owner : Providers()) {
      for (const ProviderOption& o : owner.options) {
        const std::string flag(o.flag);
        CAPTURE(p.name);
        CAPTURE(flag);
        bool takes = false;
        std::vector<std::string> takers;
        for (const ProviderInfo& q : Providers()) {
          for (const ProviderOption& qo : q.options) {
            if (qo.flag == o.flag) takers.emplace_back(q.name);
            if (qo.flag == o.flag && q.name == p.name) takes = true;
          }
        }
        absl::StatusOr<std::any> parsed = ParseProviderFlags(p, {{flag, "x"}});
        const std::string msg(parsed.status().message());
        CAPTURE(msg);
        if (takes) {
          // Accepted as its own (it may still miss a required flag).
          CHECK(msg.find(" is for --provider") == std::string::npos);
        } else {
          REQUIRE(!parsed.ok());
          for (const std::string& t : takers) CHECK(msg.find("--provider " + t) != std::string::npos);
        }
      }
    }
  }
}

TEST_CASE("docker takes --container, --endpoint and --ca-file; the container is required") {
  const ProviderInfo& docker = **FindProvider("docker");
  CHECK(!docker.same_machine);
  absl::StatusOr<std::any> d = ParseProviderFlags(
      docker, {{"--container", "box"}, {"--endpoint", "unix:///tmp/x.sock"}, {"--ca-file", "/etc/ca.pem"}});
  REQUIRE(d.ok());
  const DockerOptions* o = std::any_cast<DockerOptions>(&*d);
  REQUIRE(o != nullptr);
  CHECK(o->container == "box");
  CHECK(o->endpoint == "unix:///tmp/x.sock");
  CHECK(o->ca_file == "/etc/ca.pem");
  CHECK(!o->tls.has_value());  // from the environment, never from flags
  absl::StatusOr<std::any> none = ParseProviderFlags(docker, {{"--endpoint", "unix:///tmp/x.sock"}});
  REQUIRE(!none.ok());
  CHECK(std::string(none.status().message()).find("--container") != std::string::npos);
  absl::StatusOr<std::any> foreign = ParseProviderFlags(docker, {{"--container", "box"}, {"--prefix", "sh -c"}});
  REQUIRE(!foreign.ok());
  CHECK(std::string(foreign.status().message()).find("--provider command") != std::string::npos);

  boost::asio::io_context io;
  absl::StatusOr<std::shared_ptr<Transport>> t =
      MakeProviderTransport(io.get_executor(), "docker", {{"--container", "box"}, {"--endpoint", "unix:///tmp/x.sock"}});
  REQUIRE(t.ok());
  CHECK((*t)->name() == "docker");
  CHECK((*t)->sandbox_id() == "docker:box");
  CHECK((*t)->capabilities().cut_prone);
  CHECK((*t)->capabilities().exact_bytes);
  CHECK(!MakeProviderTransport(io.get_executor(), "docker", {{"--container", "box"}, {"--endpoint", "ftp://x"}}).ok());
}

TEST_CASE("boat takes --sandbox, --endpoint and --ca-file; the sandbox is required, the key never a flag") {
  const ProviderInfo& boat = **FindProvider("boat");
  CHECK(!boat.same_machine);
  absl::StatusOr<std::any> b = ParseProviderFlags(
      boat, {{"--sandbox", "sb-1"}, {"--endpoint", "https://boat.example.com"}, {"--ca-file", "/etc/ca.pem"}});
  REQUIRE(b.ok());
  const BoatOptions* o = std::any_cast<BoatOptions>(&*b);
  REQUIRE(o != nullptr);
  CHECK(o->sandbox_id == "sb-1");
  CHECK(o->api_url == "https://boat.example.com");
  CHECK(o->ca_file == "/etc/ca.pem");
  CHECK(o->api_key.empty());  // from BOAT_API_KEY, never from flags
  absl::StatusOr<std::any> none = ParseProviderFlags(boat, {{"--endpoint", "https://boat.example.com"}});
  REQUIRE(!none.ok());
  CHECK(std::string(none.status().message()).find("--sandbox") != std::string::npos);
  CHECK(!ParseProviderFlags(boat, {{"--sandbox", "sb-1"}, {"--container", "c"}}).ok());
}

TEST_CASE("runloop takes --devbox, --endpoint, --ca-file and --runloop-exec; the devbox is required") {
  const ProviderInfo& runloop = **FindProvider("runloop");
  CHECK(!runloop.same_machine);
  absl::StatusOr<std::any> r = ParseProviderFlags(runloop, {{"--devbox", "dbx_1"},
                                                            {"--endpoint", "https://api.example.com"},
                                                            {"--ca-file", "/etc/ca.pem"},
                                                            {"--runloop-exec", "exchange"}});
  REQUIRE(r.ok());
  const RunloopOptions* o = std::any_cast<RunloopOptions>(&*r);
  REQUIRE(o != nullptr);
  CHECK(o->devbox_id == "dbx_1");
  CHECK(o->api_url == "https://api.example.com");
  CHECK(o->ca_file == "/etc/ca.pem");
  CHECK(o->mode == RunloopOptions::Mode::kExchange);
  CHECK(o->api_key.empty());  // from RUNLOOP_API_KEY, never from flags
  absl::StatusOr<std::any> none = ParseProviderFlags(runloop, {{"--endpoint", "https://api.example.com"}});
  REQUIRE(!none.ok());
  CHECK(std::string(none.status().message()).find("--devbox") != std::string::npos);
  absl::StatusOr<std::any> bad = ParseProviderFlags(runloop, {{"--devbox", "d"}, {"--runloop-exec", "maybe"}});
  REQUIRE(!bad.ok());
  CHECK(std::string(bad.status().message()).find("auto, stream or exchange") != std::string::npos);
  CHECK(!ParseProviderFlags(runloop, {{"--devbox", "d"}, {"--sandbox", "s"}}).ok());
}

TEST_CASE("daytona takes --sandbox, --endpoint and --ca-file; the sandbox is required, the key never a flag") {
  const ProviderInfo& daytona = **FindProvider("daytona");
  CHECK(!daytona.same_machine);
  absl::StatusOr<std::any> d = ParseProviderFlags(
      daytona, {{"--sandbox", "sb-1"}, {"--endpoint", "https://api.example.com/api"}, {"--ca-file", "/etc/ca.pem"}});
  REQUIRE(d.ok());
  const DaytonaOptions* o = std::any_cast<DaytonaOptions>(&*d);
  REQUIRE(o != nullptr);
  CHECK(o->sandbox_id == "sb-1");
  CHECK(o->api_url == "https://api.example.com/api");
  CHECK(o->ca_file == "/etc/ca.pem");
  CHECK(o->api_key.empty());  // from DAYTONA_API_KEY, never from flags
  absl::StatusOr<std::any> none = ParseProviderFlags(daytona, {{"--endpoint", "https://api.example.com"}});
  REQUIRE(!none.ok());
  CHECK(std::string(none.status().message()).find("--sandbox") != std::string::npos);
  CHECK(!ParseProviderFlags(daytona, {{"--sandbox", "sb-1"}, {"--pod", "p"}}).ok());
}

// Every flag of `provider`, given with an empty value, is refused with the
// same message, whichever provider it is for (they used to differ: only
// kubernetes and modal refused one).
void CheckEmptyValuesRefused(std::string_view provider) {
  const ProviderInfo& p = **FindProvider(provider);
  REQUIRE(!p.options.empty());
  for (const ProviderOption& o : p.options) {
    const std::string flag(o.flag);
    CAPTURE(flag);
    absl::StatusOr<std::any> parsed = ParseProviderFlags(p, {{flag, ""}});
    REQUIRE(!parsed.ok());
    CHECK(absl::IsInvalidArgument(parsed.status()));
    CHECK(std::string(parsed.status().message()) == flag + " needs a non-empty value");
  }
}

TEST_CASE("command refuses an empty flag value") { CheckEmptyValuesRefused("command"); }
TEST_CASE("docker refuses an empty flag value") { CheckEmptyValuesRefused("docker"); }
TEST_CASE("e2b refuses an empty flag value") { CheckEmptyValuesRefused("e2b"); }
TEST_CASE("kubernetes refuses an empty flag value") { CheckEmptyValuesRefused("kubernetes"); }
TEST_CASE("boat refuses an empty flag value") { CheckEmptyValuesRefused("boat"); }
TEST_CASE("runloop refuses an empty flag value") { CheckEmptyValuesRefused("runloop"); }
TEST_CASE("daytona refuses an empty flag value") { CheckEmptyValuesRefused("daytona"); }
TEST_CASE("modal refuses an empty flag value") { CheckEmptyValuesRefused("modal"); }

TEST_CASE("SplitShellWords quotes like a shell") {
  CHECK(*SplitShellWords("a  'b c' \"d\\\"e\" f\\ g") == std::vector<std::string>{"a", "b c", "d\"e", "f g"});
  CHECK(SplitShellWords("").value().empty());
  CHECK(!SplitShellWords("\"open").ok());
}

}  // namespace
}  // namespace tether
