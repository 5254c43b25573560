#include "host/conformance/conformance.h"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <exception>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "host/conformance/cases.h"

namespace tether {

namespace asio = boost::asio;
using asio::awaitable;

namespace {

using namespace conformance;  // the case functions

struct Case {
  const char* name;
  const char* capability;
  awaitable<absl::Status> (*run)(Transport&);
};

constexpr Case kCases[] = {
    {"bytes.stdout_all_values", "core", StdoutAllValues},
    {"bytes.stdin_round_trip", "core", StdinRoundTrip},
    {"bytes.stderr_apart", "core", StderrApart},
    {"bytes.text_mode", "core", TextMode},
    {"eof.wc_counts_256k", "core", StdinWcCounts},
    {"eof.closed_stdin", "core", StdinClosed},
    {"exit.codes", "core", ExitCodes},
    {"exit.signal", "core", ExitBySignal},
    {"start.errors", "core", StartErrors},
    {"start.environment_exact", "core", EnvironmentExact},
    {"limits.rejected", "core", LimitsRejected},
    {"flow.slow_reader", "core", SlowReader},
    {"signal.group", "core", SignalGroup},
    {"terminate.ignores_sigterm", "core", TerminateIgnoringTerm},
    {"terminate.setsid_grandchild", "subreaper", TerminateSetsidGrandchild},
    {"pty.size_and_resize", "pty", PtySizeAndResize},
    {"pty.eof", "pty", PtyEof},
    {"wait.aborted", "core", AbortedWait},
    {"reopen.disconnect", "reopen", DisconnectReopen},
    {"reopen.after_detach", "reopen", DetachLeavesItRunning},
    {"reopen.after_cut", "reopen", ReopenAfterCut},
    {"reopen.one_attachment", "reopen", OneAttachment},
    {"reopen.bad_references", "core", BadReferences},
    {"cancel.setup_timeout", "cancel", CancelledSetup},
};

awaitable<ConformanceResult> RunCase(Transport& t, const Case& c) {
  ConformanceResult r;
  r.name = c.name;
  r.capability = c.capability;
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status st;
  try {
    using namespace asio::experimental::awaitable_operators;
    asio::steady_timer limit(co_await asio::this_coro::executor, std::chrono::seconds(90));
    auto raced = co_await (c.run(t) || limit.async_wait(asio::use_awaitable));
    st = raced.index() == 0 ? std::get<0>(raced) : absl::DeadlineExceededError("no result within 90 s");
  } catch (const std::exception& e) {
    st = absl::InternalError(absl::StrCat("exception: ", e.what()));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (st.ok()) {
    r.outcome = ConformanceResult::Outcome::kPass;
  } else if (absl::IsUnimplemented(st)) {
    r.outcome = ConformanceResult::Outcome::kUnsupported;
    r.detail = std::string(st.message());
  } else {
    r.detail = st.ToString();
  }
  co_return r;
}

}  // namespace

std::vector<std::string> ConformanceCaseNames() {
  std::vector<std::string> names;
  for (const Case& c : kCases) names.push_back(c.name);
  return names;
}

// A failure that is a fault target's cut landing where the honest answer is
// OUTCOME_UNKNOWN: the case's own start losing its setup, or a control
// request (Signal, Resize) whose connection broke before the supervisor
// acknowledged it (never resent: it could arrive twice). The case runs once
// more and that run's result is the one counted.
bool SetupCut(const ConformanceResult& r) {
  return r.outcome == ConformanceResult::Outcome::kFail &&
         (absl::StrContains(r.detail, "OUTCOME_UNKNOWN: setup lost its connection") ||
          absl::StrContains(r.detail, "OUTCOME_UNKNOWN: the connection broke before the supervisor acknowledged") ||
          absl::StrContains(r.detail, "OUTCOME_UNKNOWN: the process exited and the attachment ended before"));
}

awaitable<std::vector<ConformanceResult>> RunConformance(Transport& transport, ConformanceOptions options) {
  std::vector<ConformanceResult> results;
  for (const Case& c : kCases) {
    if (!options.only.empty() && !absl::StrContains(c.name, options.only)) continue;
    ConformanceResult r = co_await RunCase(transport, c);
    if (options.rerun_setup_cuts && SetupCut(r)) {
      const std::string first = r.detail;
      r = co_await RunCase(transport, c);
      absl::StrAppend(&r.detail, r.detail.empty() ? "" : " ", "(run again: the first run's setup was cut: ", first,
                      ")");
    }
    if (options.on_result) options.on_result(r);
    results.push_back(std::move(r));
  }
  co_return results;
}

}  // namespace tether

