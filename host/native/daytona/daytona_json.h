// What the daytona provider's two parsers (daytona_api.cc for the session
// API, daytona_v2.cc for the process API v2) share: the protocol error
// they make, a string field read strictly, and the id rule for anything
// that goes into a path. Internal to host/native/daytona/; sans-I/O.
#pragma once

#include <boost/json/object.hpp>
#include <algorithm>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tether/errors.h"

namespace tether::daytona::internal {

// kProtocol: "daytona: <what> <detail>".
inline absl::Status Protocol(std::string_view what, std::string_view detail) {
  return MakeError(ErrorCode::kProtocol, absl::StrCat("daytona: ", std::string(what), " ", std::string(detail)));
}

// A string field: "" when absent or null; kProtocol when another type.
inline absl::StatusOr<std::string> StringField(const boost::json::object& o, const char* key, std::string_view what) {
  const boost::json::value* f = o.if_contains(key);
  if (f == nullptr || f->is_null()) return std::string();
  if (!f->is_string()) return Protocol(what, absl::StrCat("has a ", key, " that is not a string"));
  return std::string(f->get_string().data(), f->get_string().size());
}

// An id safe in a path: 1-256 characters of [A-Za-z0-9._-], not dots only.
inline bool SafeId(std::string_view id) {
  const auto ok = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
           c == '.';
  };
  return !id.empty() && id.size() <= 256 && std::all_of(id.begin(), id.end(), ok) &&
         id.find_first_not_of('.') != std::string_view::npos;
}

}  // namespace tether::daytona::internal
