#include "host/native/runloop/runloop_options.h"

#include "absl/strings/str_cat.h"
#include "host/support/typed_provider.h"
#include "tether/providers/runloop.h"

namespace tether {
namespace {

absl::Status SetMode(RunloopOptions& o, const std::string& value) {
  if (value == "auto") {
    o.mode = RunloopOptions::Mode::kAuto;
  } else if (value == "stream") {
    o.mode = RunloopOptions::Mode::kStream;
  } else if (value == "exchange") {
    o.mode = RunloopOptions::Mode::kExchange;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--runloop-exec takes auto, stream or exchange, not '", value, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

ProviderInfo RunloopProvider() {
  using O = RunloopOptions;
  return internal::MakeProviderInfo(internal::TypedProvider<O>{
      "runloop",
      "a Runloop devbox through its execution API (text only: the text\n"
      "tunnel over execute_async + SSE; the exchange tunnel where stdin\n"
      "kills an execution); the API key comes from RUNLOOP_API_KEY (never a flag)",
      {{"--devbox", "the devbox id, required", internal::Into(&O::devbox_id), "--devbox ID"},
       {"--endpoint", "the API URL (default $RUNLOOP_BASE_URL, else https://api.runloop.ai)",
        internal::Into(&O::api_url)},
       {"--ca-file", "a PEM CA file trusted besides the system's", internal::Into(&O::ca_file)},
       {"--runloop-exec", "auto|stream|exchange (default auto: stream unless stdin kills executions)", SetMode}},
      MakeRunloopTransport});
}

}  // namespace tether
