// The daytona provider's process API v2 as data (host/native/daytona/
// daytona_v2.h): the bodies tether sends and what it accepts of the
// toolbox's answers, since v2's endpoint runs inside the sandbox. End to
// end it runs against tests/emulators/daytona.mjs --process-api both
// (conformance.daytona-v2, conformance.daytona-v2-faults).
#include "host/native/daytona/daytona_v2.h"

#include <doctest.h>

#include <boost/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace tether::daytona::v2 {
namespace {

namespace json = boost::json;

TEST_CASE("v2: a create request carries argv, a piped stdin, our name; bad argv is refused") {
  absl::StatusOr<std::string> b = CreateProcessJson({"sh", "-c", "echo 'é'"}, "tether-0011");
  REQUIRE(b.ok());
  const json::object o = json::parse(*b).as_object();
  CHECK(o.at("argv").as_array().size() == 3);
  CHECK(o.at("argv").as_array()[2].as_string() == "echo 'é'");
  CHECK(o.at("stdin").as_string() == "pipe");
  CHECK(o.at("kind").as_string() == "exec");
  CHECK(o.at("name").as_string() == "tether-0011");
  CHECK(!CreateProcessJson({}, "n").ok());
  CHECK(!CreateProcessJson({std::string("a\0b", 3)}, "n").ok());
  CHECK(!CreateProcessJson({"\xff"}, "n").ok());
}

TEST_CASE("v2: a process record's id must be safe in a path; exit code or signal give the status") {
  absl::StatusOr<ProcessView> p =
      ParseProcess(R"({"id":"p_1.a-b","name":"tether-1","state":"terminal","exitCode":7,"signal":null})");
  REQUIRE(p.ok());
  CHECK(p->terminal);
  CHECK(ExitStatusOf(*p) == 7);
  p = ParseProcess(R"({"id":"p2","state":"terminal","exitCode":null,"signal":"KILL"})");
  REQUIRE(p.ok());
  CHECK(ExitStatusOf(*p) == 137);
  p = ParseProcess(R"({"id":"p3","state":"running"})");
  REQUIRE(p.ok());
  CHECK(!p->terminal);
  CHECK(!ExitStatusOf(*p).has_value());
  for (const char* bad : {R"({"id":"../etc"})", R"({"id":".."})", R"({"id":""})", R"({"id":7})",
                          R"({"id":"a/b"})", R"({"id":"ok","exitCode":256})", R"({"id":"ok","exitCode":-1})",
                          R"([])", "not json"}) {
    CHECK_MESSAGE(!ParseProcess(bad).ok(), bad);
  }
  CHECK(!ParseProcess(std::string(kMaxRecordBytes + 1, ' ')).ok());
  absl::StatusOr<std::vector<ProcessView>> l = ParseProcessList(R"([{"id":"a","name":"x"},{"id":"b"}])");
  REQUIRE(l.ok());
  CHECK(l->size() == 2);
  CHECK(!ParseProcessList(R"({"id":"a"})").ok());
}

TEST_CASE("v2: a log frame gives its exact bytes (all 256 values) and its cursor; text encoding is refused") {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  const std::string ev = absl::StrCat(R"({"channel":"stdout","cursor":"c9","seq":9,"data":")", absl::Base64Escape(all),
                                      R"(","encoding":"base64"})");
  absl::StatusOr<LogFrame> f = ParseLogFrame(ev);
  REQUIRE(f.ok());
  CHECK(f->stream == 1);
  CHECK(f->cursor == "c9");
  CHECK(f->bytes == all);
  f = ParseLogFrame(R"({"channel":"stderr","cursor":"x","data":"aGk=","encoding":"base64"})");
  REQUIRE(f.ok());
  CHECK(f->stream == 2);
  CHECK(f->bytes == "hi");
  f = ParseLogFrame(R"({"channel":"system","cursor":"x","data":"","encoding":"base64"})");
  REQUIRE(f.ok());
  CHECK(f->stream == 0);
  CHECK(!ParseLogFrame(R"({"channel":"stdout","cursor":"x","data":"hi","encoding":"text"})").ok());
  CHECK(!ParseLogFrame(R"({"channel":"stdout","cursor":"x","data":"!!","encoding":"base64"})").ok());
  CHECK(!ParseLogFrame(R"({"channel":"stdout","cursor":"","data":"","encoding":"base64"})").ok());
  CHECK(!ParseLogFrame(R"({"channel":"stdout","cursor":"a b","data":"","encoding":"base64"})").ok());
  CHECK(!ParseLogFrame(absl::StrCat(R"({"channel":"stdout","cursor":")", std::string(257, 'c'),
                                    R"(","data":"","encoding":"base64"})"))
             .ok());
}

TEST_CASE("v2: eof cursors, error codes, stdin bodies, cursors in a query") {
  CHECK(*ParseEofCursor(R"({"cursor":"c40"})") == "c40");
  CHECK(*ParseEofCursor("") == "");
  CHECK(!ParseEofCursor("[1]").ok());
  CHECK(ErrorCodeOf(R"({"code":"CURSOR_EXPIRED","details":{"firstAvailableCursor":"c3"}})") == "CURSOR_EXPIRED");
  CHECK(ErrorCodeOf("<html>") == "");
  CHECK(ErrorCodeOf(R"({"code":7})") == "");
  CHECK(*StdinJson("abc\n", false) == R"({"data":"abc\n"})");
  CHECK(*StdinJson("", true) == R"({"eof":true})");
  CHECK(!StdinJson("\xff", false).ok());
  CHECK(!StdinJson(std::string(kMaxStdinBytes + 1, 'a'), false).ok());
  CHECK(SignalJson("KILL") == R"({"signal":"KILL"})");
  CHECK(CursorQuery("a b&c=d") == "a%20b%26c%3Dd");
}

}  // namespace
}  // namespace tether::daytona::v2
