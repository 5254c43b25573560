#include "supervisor/proc_scrub.h"

#include <string>
#include <string_view>
#include <vector>

#include <doctest.h>

extern char** environ;

namespace tether::supervisor {
namespace {

// An argument and environment block laid out as the kernel does: strings
// back to back, each ended by a NUL.
struct Block {
  explicit Block(const std::vector<std::string>& args, const std::vector<std::string>& env) {
    for (const std::string& s : args) bytes += s + '\0';
    for (const std::string& s : env) bytes += s + '\0';
    std::size_t at = 0;
    for (const std::string& s : args) {
      argv.push_back(bytes.data() + at);
      at += s.size() + 1;
    }
    argv.push_back(nullptr);
    for (const std::string& s : env) {
      envp.push_back(bytes.data() + at);
      at += s.size() + 1;
    }
    envp.push_back(nullptr);
  }
  int argc() const { return static_cast<int>(argv.size()) - 1; }
  std::string bytes;
  std::vector<char*> argv, envp;
};

// Restores the test process's environ after a scrub pointed it elsewhere.
struct KeepEnviron {
  char** saved = environ;
  ~KeepEnviron() { environ = saved; }
};

TEST_CASE("the environment is copied, then the block after argv[1] is zeroed in place and environ emptied") {
  Block b({"/bin/tether-supervisor", "launch", "--exchange", "relay1", "BASE85-WITH-SECRET"},
          {"PATH=/bin", "API_KEY=hunter2", "EMPTY="});
  KeepEnviron keep;
  const std::vector<std::string> copy = CopyEnvironment(b.envp.data());
  CHECK(copy == std::vector<std::string>{"PATH=/bin", "API_KEY=hunter2", "EMPTY="});
  ScrubProcessStrings(b.argc(), b.argv.data(), 2, b.envp.data());
  REQUIRE(environ != nullptr);
  CHECK(environ[0] == nullptr);
  const std::string kept = std::string("/bin/tether-supervisor") + '\0' + "launch" + '\0';
  CHECK(b.bytes.substr(0, kept.size()) == kept);
  CHECK(b.bytes.substr(kept.size()) == std::string(b.bytes.size() - kept.size(), '\0'));
  CHECK(std::string_view(b.argv[1]) == "launch");
  CHECK(std::string_view(b.argv[3]).empty());
  CHECK(std::string_view(b.envp[1]).empty());
}

TEST_CASE("strings that are not where the kernel put them are zeroed too") {
  Block b({"prog", "bridge", "/state/dir"}, {"A=1", "B=2"});
  std::string moved = "TOKEN=moved-elsewhere";
  b.envp[1] = moved.data();  // as if someone had replaced B before us
  KeepEnviron keep;
  ScrubProcessStrings(b.argc(), b.argv.data(), 2, b.envp.data());
  CHECK(moved == std::string(moved.size(), '\0'));
  // "/state/dir" and "A=1" are zeroed. (The replaced "B=2" is referenced by
  // nothing any more, so nothing can find it: hence "first thing in main".)
  CHECK(b.bytes.substr(12, 15) == std::string(15, '\0'));
  CHECK(environ[0] == nullptr);
}

TEST_CASE("the transport's exec tag stays visible; anything like it but not it is zeroed") {
  const std::string tag = "TETHER_EXEC_TAG=0123456789abcdef";
  Block b({"prog", "bridge", "/state/dir"},
          {"API_KEY=hunter2", tag, "TETHER_EXEC_TAG=NOT-HEX-secret", "TETHER_EXEC_TAGX=1", "B=2"});
  KeepEnviron keep;
  ScrubProcessStrings(b.argc(), b.argv.data(), 2, b.envp.data());
  CHECK(std::string_view(b.envp[1]) == tag);
  for (int i : {0, 2, 3, 4}) CHECK(std::string_view(b.envp[i]).empty());
  // What /proc shows: the kept strings, NULs, the tag, NULs.
  std::string expect = std::string("prog") + '\0' + "bridge" + '\0' + std::string(11 + 16, '\0') + tag + '\0';
  expect += std::string(b.bytes.size() - expect.size(), '\0');
  CHECK(b.bytes == expect);
  CHECK(environ[0] == nullptr);
}

TEST_CASE("no arguments to erase and no environment are fine") {
  Block b({"prog"}, {});
  KeepEnviron keep;
  ScrubProcessStrings(b.argc(), b.argv.data(), 2, b.envp.data());
  CHECK(b.bytes == std::string("prog") + '\0');
  CHECK(environ[0] == nullptr);
  CHECK(CopyEnvironment(nullptr).empty());
}

TEST_CASE("EraseStrings empties a copy") {
  std::vector<std::string> v = {"API_KEY=hunter2", "", std::string(1000, 'x')};
  EraseStrings(&v);
  CHECK(v.empty());
  CHECK(v.capacity() == 0);
}

}  // namespace
}  // namespace tether::supervisor
