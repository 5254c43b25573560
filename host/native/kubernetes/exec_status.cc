#include "host/native/kubernetes/exec_status.h"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "host/codec/k8s_channel.h"

namespace tether::k8s {
namespace {

namespace json = boost::json;

constexpr std::size_t kMaxMessageShown = 512;  // bytes of the server's message in an error

std::string_view StringField(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_string()) return {};
  return std::string_view(v->get_string().data(), v->get_string().size());
}

std::string Shown(std::string_view message) {
  std::string s = absl::CHexEscape(std::string(message.substr(0, kMaxMessageShown)));
  if (message.size() > kMaxMessageShown) s += "...";
  return s;
}

absl::StatusCode CodeOfReason(std::string_view reason) {
  if (reason == "NotFound") return absl::StatusCode::kNotFound;
  if (reason == "Unauthorized") return absl::StatusCode::kUnauthenticated;
  if (reason == "Forbidden") return absl::StatusCode::kPermissionDenied;
  if (reason == "BadRequest" || reason == "Invalid") return absl::StatusCode::kInvalidArgument;
  return absl::StatusCode::kInternal;
}

}  // namespace

absl::StatusOr<int> ParseExecStatus(std::string_view text) {
  if (text.size() > codec::kMaxK8sStatusBytes) {
    return absl::InvalidArgumentError(absl::StrCat("kubernetes exec status: ", text.size(), " bytes (at most ",
                                                   codec::kMaxK8sStatusBytes, ")"));
  }
  boost::system::error_code ec;
  const json::value v = json::parse(json::string_view(text.data(), text.size()), ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("kubernetes exec status is not JSON: ", ec.message()));
  if (!v.is_object()) return absl::InvalidArgumentError("kubernetes exec status is not a JSON object");
  const json::object& o = v.get_object();
  const std::string_view status = StringField(o, "status");
  if (status == "Success") return 0;
  if (status != "Failure") {
    return absl::InvalidArgumentError(
        absl::StrCat("kubernetes exec status has no \"status\" of Success or Failure (got '", Shown(status), "')"));
  }
  const std::string_view reason = StringField(o, "reason");
  const std::string_view message = StringField(o, "message");
  if (reason != "NonZeroExitCode") {
    return absl::Status(CodeOfReason(reason),
                        absl::StrCat("kubernetes exec failed", reason.empty() ? "" : absl::StrCat(" (", Shown(reason), ")"),
                                     ": ", message.empty() ? "no message" : Shown(message)));
  }
  const json::value* details = o.if_contains("details");
  const json::value* causes = details && details->is_object() ? details->get_object().if_contains("causes") : nullptr;
  if (causes != nullptr && causes->is_array()) {
    for (const json::value& c : causes->get_array()) {
      if (!c.is_object() || StringField(c.get_object(), "reason") != "ExitCode") continue;
      const std::string_view m = StringField(c.get_object(), "message");
      int code = 0;
      if (!absl::SimpleAtoi(std::string(m), &code) || code < 0 || code > 255) {
        return absl::InvalidArgumentError(
            absl::StrCat("kubernetes exec status: the ExitCode cause is not a code 0..255: '", Shown(m), "'"));
      }
      return code;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("kubernetes exec status: NonZeroExitCode without an ExitCode cause (",
                                                 message.empty() ? "no message" : Shown(message), ")"));
}

}  // namespace tether::k8s
