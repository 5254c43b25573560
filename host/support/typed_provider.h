// A provider's registry entry written with its own Options type: each flag
// names how it sets one field, a required flag names what it asks for, and
// the factory takes Options. MakeProviderInfo turns it into the registry's
// untyped ProviderInfo (tether/provider_info.h) and does, once for every
// provider, what each used to do for itself: refuses an empty flag value,
// checks the required flags, downcasts the parsed std::any and hands the
// ProviderHooks to the options (as envoy's FactoryBase<Config> does for its
// extensions).
//
//   registry.push_back(internal::MakeProviderInfo(internal::TypedProvider<BoatOptions>{
//       "boat", "a Boat sandbox ...",
//       {{"--sandbox", "the sandbox id, required", internal::Into(&BoatOptions::sandbox_id), "--sandbox ID"}},
//       MakeBoatTransport}));
#pragma once

#include <any>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tether/provider_info.h"
#include "tether/transport.h"

namespace tether::internal {

template <class Options>
struct TypedFlag {
  std::string_view flag;  // "--sandbox"
  std::string_view help;  // one line for the usage text
  // Stores a value (never empty: refused before) into the options; an error refuses it.
  std::function<absl::Status(Options&, const std::string&)> set;
  // Non-empty: the flag is required, and a set of flags without it is
  // refused as "--provider NAME needs <required>" ("--sandbox ID").
  std::string_view required = {};
};

// A setter that stores the value into `field` as it is.
template <class Options>
std::function<absl::Status(Options&, const std::string&)> Into(std::string Options::*field) {
  return [field](Options& o, const std::string& value) {
    o.*field = value;
    return absl::OkStatus();
  };
}

template <class Options>
struct TypedProvider {
  std::string_view name;  // "boat"
  std::string_view help;  // a few lines for the usage text
  std::vector<TypedFlag<Options>> flags;
  std::function<absl::StatusOr<std::shared_ptr<Transport>>(boost::asio::any_io_executor, Options)> make;
  bool same_machine = false;  // ProviderInfo::same_machine
  // Optional: checks the options once every flag is set (what no one flag can).
  std::function<absl::Status(const Options&)> check = {};
};

// The options `given` sets, in order (a later flag wins). Every flag's value
// must be non-empty ("--endpoint needs a non-empty value"), whichever
// provider it is for; flags the provider does not take are passed over
// (ParseProviderFlags refuses them first).
template <class Options>
absl::StatusOr<Options> ParseTyped(const TypedProvider<Options>& p, const ProviderFlags& given) {
  Options o;
  for (const auto& [flag, value] : given) {
    if (value.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " needs a non-empty value"));
    }
    for (const TypedFlag<Options>& f : p.flags) {
      if (f.flag != flag) continue;
      if (absl::Status st = f.set(o, value); !st.ok()) return st;
    }
  }
  for (const TypedFlag<Options>& f : p.flags) {
    if (f.required.empty()) continue;
    const std::string* last = nullptr;  // (a later flag wins)
    for (const auto& g : given) last = g.first == f.flag ? &g.second : last;
    if (last == nullptr || last->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--provider ", std::string(p.name), " needs ", std::string(f.required)));
    }
  }
  if (p.check) {
    if (absl::Status st = p.check(o); !st.ok()) return st;
  }
  return o;
}

// The registry entry: parse is ParseTyped, make downcasts once, applies the
// hooks (upload_progress, where Options has one) and calls p.make.
template <class Options>
ProviderInfo MakeProviderInfo(TypedProvider<Options> p) {
  ProviderInfo info;
  info.name = p.name;
  info.help = p.help;
  info.same_machine = p.same_machine;
  for (const TypedFlag<Options>& f : p.flags) info.options.push_back(ProviderOption{f.flag, f.help});
  auto shared = std::make_shared<const TypedProvider<Options>>(std::move(p));
  info.parse = [shared](const ProviderFlags& flags) -> absl::StatusOr<std::any> {
    absl::StatusOr<Options> o = ParseTyped(*shared, flags);
    if (!o.ok()) return o.status();
    return std::any(*std::move(o));
  };
  info.make = [shared](boost::asio::any_io_executor ex, const std::any& parsed,
                       const ProviderHooks& hooks) -> absl::StatusOr<std::shared_ptr<Transport>> {
    const Options* o = std::any_cast<Options>(&parsed);
    if (o == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(std::string(shared->name), ": options not made by its parser"));
    }
    Options copy = *o;
    if constexpr (requires { copy.upload_progress = hooks.upload_progress; }) {
      if (hooks.upload_progress) copy.upload_progress = hooks.upload_progress;
    }
    return shared->make(std::move(ex), std::move(copy));
  };
  return info;
}

}  // namespace tether::internal
