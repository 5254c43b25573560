// The C interface (include/tether/tether.h) over the process API.
//
// One io_context runs on the runtime's thread; every handle and every call
// lives there. Callers on other threads only post work to it and take
// completions from a mutex-guarded queue, whose non-emptiness an eventfd
// mirrors (written when the queue becomes non-empty, drained when it
// becomes empty, both under the mutex, so the fd is readable exactly while
// something waits). The fd is kept only once tether_runtime_fd() was
// called: a caller woken by the notify callback alone (the Node addon)
// saves two system calls per completion. Each call is a coroutine with its
// own cancellation signal, found by token: tether_cancel() emits the
// terminal type on it, which the process API turns into WAIT_ABORTED for
// that call alone.
#include "tether/tether.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "tether/errors.h"
#include "tether/process.h"
#include "tether/providers.h"

namespace asio = boost::asio;
using tether::Process;

namespace {

char* CopyString(std::string_view s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out == nullptr) return nullptr;
  std::memcpy(out, s.data(), s.size());
  out[s.size()] = '\0';
  return out;
}

// A process handle's state on the runtime's thread: the Process (shared by
// its calls in flight, so freeing the handle never destroys it under one)
// and the tokens of those calls.
struct ProcessCell {
  std::shared_ptr<Process> process;
  // A chunk a read took but did not return (another stream's), returned
  // first by the next read.
  std::optional<tether::OutputChunk> stash;
  std::unordered_set<std::uint64_t> tokens;
  bool freed = false;
};

}  // namespace

struct tether_runtime {
  asio::io_context io{1};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  std::thread thread;
  std::promise<void> stopped_promise;  // set when io.run() returned
  std::future<void> stopped;
  int efd = -1;

  mutable std::mutex mu;  // guards queue, notify, notify_user, fd_wanted
  std::deque<tether_completion> queue;
  mutable bool fd_wanted = false;  // efd mirrors the queue (tether_runtime_fd was called)
  void (*notify)(void*) = nullptr;
  void* notify_user = nullptr;

  // The runtime's thread only.
  std::unordered_map<std::uint64_t, std::shared_ptr<asio::cancellation_signal>> inflight;
  std::unordered_set<tether_process*> processes;
  std::unordered_set<tether_transport*> transports;

  void Push(tether_completion c) {
    void (*fn)(void*) = nullptr;
    void* user = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (queue.empty() && fd_wanted) {
        std::uint64_t one = 1;
        ssize_t n = ::write(efd, &one, sizeof one);
        (void)n;  // cannot fail: the counter is 0 or 1 here
      }
      queue.push_back(c);
      fn = notify;
      user = notify_user;
    }
    if (fn != nullptr) fn(user);
  }
};

struct tether_transport {
  tether_runtime* rt;
  std::shared_ptr<tether::Transport> transport;
};

struct tether_process {
  tether_runtime* rt;
  std::shared_ptr<ProcessCell> cell;
};

namespace {

tether_completion Completion(std::uint64_t token, int op, const absl::Status& st) {
  tether_completion c;
  std::memset(&c, 0, sizeof c);
  c.token = token;
  c.op = op;
  c.error = static_cast<int>(tether::ErrorCodeOf(st));
  if (!st.ok()) c.message = CopyString(tether::PrintableMessage(st.message()));
  c.state = TETHER_STATE_UNKNOWN;
  return c;
}

void FillExit(const tether::ExitStatus& e, tether_exit& out) {
  out.has_code = e.code.has_value();
  out.code = e.code.value_or(0);
  out.has_signal = e.signal.has_value();
  out.signal = e.signal.value_or(0);
  out.core_dumped = e.core_dumped;
  out.output_cut = e.output_cut;
  out.output_complete = e.output_complete;
  out.user_us = e.user_us;
  out.system_us = e.system_us;
  out.max_rss_kib = e.max_rss_kib;
}

// Runs `body` (a coroutine returning the completion) on the runtime's thread
// under token's cancellation signal, and queues what it returns. `cell`,
// when given, records the token so that freeing the handle aborts it.
template <typename Body>
void Launch(tether_runtime* rt, std::uint64_t token, int op, std::shared_ptr<ProcessCell> cell, Body body) {
  asio::post(rt->io, [rt, token, op, cell = std::move(cell), body = std::move(body)]() mutable {
    if (cell && cell->freed) {
      rt->Push(Completion(token, op, tether::WaitAbortedError("the process handle was freed")));
      return;
    }
    auto sig = std::make_shared<asio::cancellation_signal>();
    rt->inflight[token] = sig;
    if (cell) cell->tokens.insert(token);
    auto finish = [rt, token, op, cell, sig](std::exception_ptr e, tether_completion c) {
      auto it = rt->inflight.find(token);
      if (it != rt->inflight.end() && it->second == sig) rt->inflight.erase(it);
      if (cell) cell->tokens.erase(token);
      if (e) {
        // The process API reports failures as values; only a cancellation
        // that reached a later co_await gets here.
        c = Completion(token, op, tether::WaitAbortedError("aborted"));
      }
      rt->Push(c);
    };
    asio::co_spawn(rt->io, std::move(body), asio::bind_cancellation_slot(sig->slot(), std::move(finish)));
  });
}

bool Has(const tether_start_options* o, std::size_t offset, std::size_t size) {
  return o->struct_size >= offset + size;
}

#define TETHER_OPT(o, field, fallback) \
  (Has(o, offsetof(tether_start_options, field), sizeof((o)->field)) ? (o)->field : (fallback))

absl::StatusOr<tether::StartOptions> ToStartOptions(const tether_start_options* o) {
  if (o == nullptr) return absl::InvalidArgumentError("tether_start: options are NULL");
  if (o->struct_size < offsetof(tether_start_options, argc) + sizeof(o->argc)) {
    return absl::InvalidArgumentError("tether_start: struct_size is too small (call tether_start_options_init)");
  }
  tether::StartOptions s;
  if (o->argc > 0 && o->argv == nullptr) return absl::InvalidArgumentError("tether_start: argv is NULL");
  for (std::size_t i = 0; i < o->argc; ++i) {
    if (o->argv[i] == nullptr) return absl::InvalidArgumentError("tether_start: argv has a NULL entry");
    s.argv.emplace_back(o->argv[i]);
  }
  if (const char* cwd = TETHER_OPT(o, cwd, nullptr)) s.cwd = cwd;
  const char* const* env = TETHER_OPT(o, env, nullptr);
  std::size_t pairs = TETHER_OPT(o, env_pairs, std::size_t{0});
  if (pairs > 0 && env == nullptr) return absl::InvalidArgumentError("tether_start: env is NULL");
  for (std::size_t i = 0; i < pairs; ++i) {
    if (env[2 * i] == nullptr || env[2 * i + 1] == nullptr) {
      return absl::InvalidArgumentError("tether_start: env has a NULL entry");
    }
    s.env.emplace_back(env[2 * i], env[2 * i + 1]);
  }
  s.inherit_env = TETHER_OPT(o, inherit_env, 1) != 0;
  s.stdin_pipe = TETHER_OPT(o, stdin_pipe, 0) != 0;
  if (TETHER_OPT(o, pty, 0) != 0) {
    s.pty = tether::StartOptions::PtySize{TETHER_OPT(o, pty_cols, 80u), TETHER_OPT(o, pty_rows, 24u)};
  }
  int mode = TETHER_OPT(o, output_mode, static_cast<int>(TETHER_OUTPUT_FINITE));
  if (mode != TETHER_OUTPUT_FINITE && mode != TETHER_OUTPUT_STREAM) {
    return absl::InvalidArgumentError("tether_start: output_mode must be TETHER_OUTPUT_FINITE or TETHER_OUTPUT_STREAM");
  }
  s.output_mode = mode == TETHER_OUTPUT_STREAM ? tether::OutputMode::kStream : tether::OutputMode::kFinite;
  s.output_format = TETHER_OPT(o, output_text, 0) != 0 ? tether::OutputFormat::kText : tether::OutputFormat::kBytes;
  s.max_output_bytes = TETHER_OPT(o, max_output_bytes, std::size_t{0});
  if (std::size_t w = TETHER_OPT(o, output_window_bytes, std::size_t{0}); w != 0) s.output_window_bytes = w;
  s.backpressure = TETHER_OPT(o, backpressure, 1) != 0;
  s.reconnect = TETHER_OPT(o, reconnect, 0) != 0;
  if (unsigned t = TETHER_OPT(o, setup_timeout_ms, 0u); t != 0) s.setup_timeout_ms = t;
  if (const char* sp = TETHER_OPT(o, supervisor_path, nullptr)) s.supervisor_path = sp;
  s.upload_supervisor = TETHER_OPT(o, upload_supervisor, 1) != 0;
  return s;
}

// The new handle of a Start or Reopen, registered with the runtime.
tether_completion Attached(tether_runtime* rt, std::uint64_t token, int op,
                           absl::StatusOr<std::unique_ptr<Process>> p) {
  tether_completion c = Completion(token, op, p.status());
  if (!p.ok()) return c;
  auto cell = std::make_shared<ProcessCell>();
  cell->process = std::shared_ptr<Process>(std::move(*p));
  auto* h = new tether_process{rt, cell};
  rt->processes.insert(h);
  c.process = h;
  c.pid = cell->process->pid();
  c.has_pty = cell->process->has_pty();
  return c;
}

// A call on a process handle: `fn(Process&)` is a coroutine returning the
// completion. 0 when queued.
template <typename Fn>
int OnProcess(tether_process* p, std::uint64_t token, int op, Fn fn) {
  if (p == nullptr) return TETHER_E_INVALID_ARGUMENT;
  std::shared_ptr<ProcessCell> cell = p->cell;
  Launch(p->rt, token, op, cell, [cell, fn = std::move(fn)]() mutable -> asio::awaitable<tether_completion> {
    std::shared_ptr<Process> keep = cell->process;
    co_return co_await fn(*keep);
  });
  return 0;
}

// For calls that return only a Status.
template <typename Call>
int StatusCall(tether_process* p, std::uint64_t token, int op, Call call) {
  return OnProcess(p, token, op, [token, op, call = std::move(call)](Process& proc) mutable
                                     -> asio::awaitable<tether_completion> {
    absl::Status st = co_await call(proc);
    co_return Completion(token, op, st);
  });
}


// The calls' coroutines. (They are functions of their own, not lambdas in
// the extern "C" functions: g++ 12 gives coroutine lambdas there clashing
// symbol names.)
asio::awaitable<tether_completion> Failed(std::uint64_t token, int op, absl::Status st) {
  co_return Completion(token, op, st);
}

asio::awaitable<tether_completion> DoStart(tether_runtime* rt, std::uint64_t token,
                                           std::shared_ptr<tether::Transport> transport, tether::StartOptions opts) {
  absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Start(*transport, std::move(opts));
  co_return Attached(rt, token, TETHER_OP_START, std::move(p));
}

asio::awaitable<tether_completion> DoReopen(tether_runtime* rt, std::uint64_t token,
                                            std::shared_ptr<tether::Transport> transport, tether::ReopenOptions ro,
                                            std::string ref) {
  absl::StatusOr<std::unique_ptr<Process>> p = co_await Process::Reopen(*transport, ref, ro);
  co_return Attached(rt, token, TETHER_OP_REOPEN, std::move(p));
}

// A read returns the chunks already waiting, joined while they are one
// stream's consecutive bytes, up to kReadBatchBytes (or the caller's cap): one completion (two
// thread hand-offs) per window of output instead of per 16 KiB chunk.
constexpr std::size_t kReadBatchBytes = 256 * 1024;

asio::awaitable<tether_completion> DoRead(std::shared_ptr<ProcessCell> cell, std::uint64_t token,
                                          std::size_t max_bytes) {
  Process& proc = *cell->process;
  std::optional<tether::OutputChunk> first = std::move(cell->stash);
  cell->stash.reset();
  if (!first) {
    absl::StatusOr<std::optional<tether::OutputChunk>> r = co_await proc.Read();
    tether_completion c = Completion(token, TETHER_OP_READ, r.status());
    c.output_gap = proc.output_gap();
    if (!r.ok()) co_return c;
    if (!r->has_value()) {
      c.stream = TETHER_STREAM_END;
      co_return c;
    }
    first = std::move(**r);
  }
  // The chunks are kept apart and copied once, into the completion's
  // buffer (joined into a string first, each byte was copied twice or more).
  std::vector<std::string> parts;
  parts.push_back(std::move(first->bytes));
  std::size_t size = parts.back().size();
  // Only what Read() returns without waiting (read_ready: in text mode a
  // received chunk can be part of a character whose rest has not come, and
  // waiting for it would hold back what this read already has), and never
  // an error or the end while a chunk is unread.
  while (size < max_bytes && proc.unread_chunks() > 0 && proc.read_ready()) {
    absl::StatusOr<std::optional<tether::OutputChunk>> r = co_await proc.Read();
    if (!r.ok() || !r->has_value()) break;  // not reached (see above)
    tether::OutputChunk& next = **r;
    if (next.stream != first->stream || next.offset != first->offset + size ||
        size + next.bytes.size() > max_bytes) {
      cell->stash = std::move(next);
      break;
    }
    size += next.bytes.size();
    parts.push_back(std::move(next.bytes));
  }
  tether_completion c = Completion(token, TETHER_OP_READ, absl::OkStatus());
  c.output_gap = proc.output_gap();
  c.stream = static_cast<int>(first->stream);
  c.offset = first->offset;
  c.data = static_cast<uint8_t*>(std::malloc(size + 1));
  if (c.data == nullptr) {
    co_return Completion(token, TETHER_OP_READ, absl::ResourceExhaustedError("out of memory for a chunk"));
  }
  std::size_t at = 0;
  for (const std::string& part : parts) {
    std::memcpy(c.data + at, part.data(), part.size());
    at += part.size();
  }
  c.size = size;
  co_return c;
}

asio::awaitable<tether_completion> DoWait(Process& proc, std::uint64_t token) {
  absl::StatusOr<tether::ExitStatus> e = co_await proc.Wait();
  tether_completion c = Completion(token, TETHER_OP_WAIT, e.status());
  if (e.ok()) {
    c.state = TETHER_STATE_EXITED;
    FillExit(*e, c.exit);
  }
  co_return c;
}

asio::awaitable<tether_completion> DoStatus(Process& proc, std::uint64_t token) {
  absl::StatusOr<tether::ProcessStatus> s = co_await proc.Status();
  tether_completion c = Completion(token, TETHER_OP_STATUS, s.status());
  if (!s.ok()) co_return c;
  switch (s->state) {
    case tether::ProcessStatus::State::kRunning: c.state = TETHER_STATE_RUNNING; break;
    case tether::ProcessStatus::State::kExited: c.state = TETHER_STATE_EXITED; break;
    case tether::ProcessStatus::State::kUnknown: c.state = TETHER_STATE_UNKNOWN; break;
  }
  if (s->exit) FillExit(*s->exit, c.exit);
  co_return c;
}


template <typename F>
auto OnRuntimeThread(tether_runtime* rt, F f) -> decltype(f()) {
  if (rt->io.get_executor().running_in_this_thread()) return f();
  std::packaged_task<decltype(f())()> task(std::move(f));
  auto result = task.get_future();
  asio::post(rt->io, [&task] { task(); });
  return result.get();
}

}  // namespace

// The C codes are the C++ ones, by number (tether.h says so; the Python
// package's table is checked against tether_error_name in its tests).
static_assert(TETHER_MAX_CHUNK_BYTES == tether::kMaxChunkBytes);
#define TETHER_SAME_CODE(c, k) static_assert(c == static_cast<int>(tether::ErrorCode::k), #c)
TETHER_SAME_CODE(TETHER_OK, kOk);
TETHER_SAME_CODE(TETHER_E_INVALID_ARGUMENT, kInvalidArgument);
TETHER_SAME_CODE(TETHER_E_UNSUPPORTED, kUnsupported);
TETHER_SAME_CODE(TETHER_E_UNAVAILABLE, kUnavailable);
TETHER_SAME_CODE(TETHER_E_BUSY, kBusy);
TETHER_SAME_CODE(TETHER_E_EXPIRED, kExpired);
TETHER_SAME_CODE(TETHER_E_INPUT_CLOSED, kInputClosed);
TETHER_SAME_CODE(TETHER_E_OUTCOME_UNKNOWN, kOutcomeUnknown);
TETHER_SAME_CODE(TETHER_E_NOT_FOUND, kNotFound);
TETHER_SAME_CODE(TETHER_E_PERMISSION_DENIED, kPermissionDenied);
TETHER_SAME_CODE(TETHER_E_PROTOCOL, kProtocol);
TETHER_SAME_CODE(TETHER_E_CANCELLED, kCancelled);
TETHER_SAME_CODE(TETHER_E_OUTPUT_CAPACITY, kOutputCapacity);
TETHER_SAME_CODE(TETHER_E_WAIT_ABORTED, kWaitAborted);
TETHER_SAME_CODE(TETHER_E_RESOURCE_EXHAUSTED, kResourceExhausted);
TETHER_SAME_CODE(TETHER_E_INTERNAL, kInternal);
#undef TETHER_SAME_CODE

extern "C" {

const char* tether_error_name(int code) {
  if (code < 0 || code > TETHER_E_INTERNAL) return "?";
  static const std::string* names = [] {
    auto* n = new std::string[TETHER_E_INTERNAL + 1];
    for (int i = 0; i <= TETHER_E_INTERNAL; ++i) n[i] = std::string(tether::ErrorCodeName(static_cast<tether::ErrorCode>(i)));
    return n;
  }();
  return names[code].c_str();
}

void tether_completion_release(tether_completion* c) {
  if (c == nullptr) return;
  std::free(c->message);
  std::free(c->data);
  c->message = nullptr;
  c->data = nullptr;
  c->size = 0;
}

void tether_free_string(char* s) { std::free(s); }

tether_runtime* tether_runtime_new(void) {
  auto rt = std::make_unique<tether_runtime>();
  rt->efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (rt->efd < 0) return nullptr;
  rt->guard.emplace(rt->io.get_executor());
  try {
    rt->stopped = rt->stopped_promise.get_future();
    rt->thread = std::thread([r = rt.get()] {
      r->io.run();
      r->stopped_promise.set_value();
    });
  } catch (const std::system_error& e) {
    ::close(rt->efd);
    errno = e.code().value();
    return nullptr;
  }
  return rt.release();
}

void tether_runtime_free(tether_runtime* rt) {
  if (rt == nullptr) return;
  asio::post(rt->io, [rt] {
    for (auto& [token, sig] : rt->inflight) sig->emit(asio::cancellation_type::terminal);
    for (tether_process* p : rt->processes) {
      p->cell->freed = true;
      delete p;
    }
    rt->processes.clear();
    for (tether_transport* t : rt->transports) delete t;
    rt->transports.clear();
    rt->guard.reset();
  });
  // Handles dropped just now finish in the background (a detach, an exit
  // acknowledged); past this grace whatever remains is abandoned.
  if (rt->stopped.wait_for(std::chrono::seconds(2)) != std::future_status::ready) rt->io.stop();
  rt->thread.join();
  {
    std::lock_guard<std::mutex> lock(rt->mu);
    for (tether_completion& c : rt->queue) tether_completion_release(&c);
    rt->queue.clear();
  }
  ::close(rt->efd);
  delete rt;
}

int tether_runtime_fd(const tether_runtime* rt) {
  if (rt == nullptr) return -1;
  std::lock_guard<std::mutex> lock(rt->mu);
  if (!rt->fd_wanted) {
    rt->fd_wanted = true;
    if (!rt->queue.empty()) {
      std::uint64_t one = 1;
      ssize_t n = ::write(rt->efd, &one, sizeof one);
      (void)n;  // cannot fail: the counter is 0 here
    }
  }
  return rt->efd;
}

int tether_runtime_next(tether_runtime* rt, tether_completion* out) {
  if (rt == nullptr || out == nullptr) return 0;
  std::lock_guard<std::mutex> lock(rt->mu);
  if (rt->queue.empty()) return 0;
  *out = rt->queue.front();
  rt->queue.pop_front();
  if (rt->queue.empty() && rt->fd_wanted) {
    std::uint64_t n;
    ssize_t r = ::read(rt->efd, &n, sizeof n);
    (void)r;  // EAGAIN cannot happen: the counter was set when it filled
  }
  return 1;
}

void tether_runtime_set_notify(tether_runtime* rt, void (*fn)(void* user), void* user) {
  if (rt == nullptr) return;
  std::lock_guard<std::mutex> lock(rt->mu);
  rt->notify = fn;
  rt->notify_user = user;
}

void tether_cancel(tether_runtime* rt, uint64_t token) {
  if (rt == nullptr) return;
  asio::post(rt->io, [rt, token] {
    auto it = rt->inflight.find(token);
    if (it != rt->inflight.end()) it->second->emit(asio::cancellation_type::terminal);
  });
}

const char* tether_providers(void) {
  static const std::string* names = [] {
    std::vector<std::string> n;
    for (const tether::ProviderInfo& p : tether::Providers()) n.emplace_back(p.name);
    return new std::string(absl::StrJoin(n, ","));
  }();
  return names->c_str();
}

int tether_transport_new(tether_runtime* rt, const char* provider, const char* const* flags, size_t npairs,
                         tether_transport** out, char** message) {
  auto fail = [message](const absl::Status& st) {
    if (message != nullptr) *message = CopyString(tether::PrintableMessage(st.message()));
    return static_cast<int>(tether::ErrorCodeOf(st));
  };
  if (message != nullptr) *message = nullptr;
  if (rt == nullptr || provider == nullptr || out == nullptr) {
    return fail(absl::InvalidArgumentError("tether_transport_new: rt, provider and out must not be NULL"));
  }
  if (npairs > 0 && flags == nullptr) return fail(absl::InvalidArgumentError("tether_transport_new: flags is NULL"));
  tether::ProviderFlags f;
  for (std::size_t i = 0; i < npairs; ++i) {
    if (flags[2 * i] == nullptr || flags[2 * i + 1] == nullptr) {
      return fail(absl::InvalidArgumentError("tether_transport_new: flags has a NULL entry"));
    }
    f.emplace_back(flags[2 * i], flags[2 * i + 1]);
  }
  std::string name(provider);
  absl::StatusOr<tether_transport*> made = OnRuntimeThread(rt, [&]() -> absl::StatusOr<tether_transport*> {
    absl::StatusOr<std::shared_ptr<tether::Transport>> t =
        tether::MakeProviderTransport(rt->io.get_executor(), name, f);
    if (!t.ok()) return t.status();
    auto* h = new tether_transport{rt, *std::move(t)};
    rt->transports.insert(h);
    return h;
  });
  if (!made.ok()) return fail(made.status());
  *out = *made;
  return 0;
}

void tether_transport_free(tether_transport* t) {
  if (t == nullptr) return;
  tether_runtime* rt = t->rt;
  asio::post(rt->io, [rt, t] {
    if (rt->transports.erase(t) > 0) delete t;
  });
}

void tether_start_options_init(tether_start_options* o) {
  if (o == nullptr) return;
  std::memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->inherit_env = 1;
  o->pty_cols = 80;
  o->pty_rows = 24;
  o->output_mode = TETHER_OUTPUT_FINITE;
  o->backpressure = 1;
  o->upload_supervisor = 1;
}

int tether_start(tether_runtime* rt, tether_transport* t, const tether_start_options* o, uint64_t token) {
  if (rt == nullptr || t == nullptr) return TETHER_E_INVALID_ARGUMENT;
  absl::StatusOr<tether::StartOptions> opts = ToStartOptions(o);
  if (!opts.ok()) {
    // Reported as a completion, so that the caller sees the message.
    Launch(rt, token, TETHER_OP_START, nullptr,
           [token, st = opts.status()] { return Failed(token, TETHER_OP_START, st); });
    return 0;
  }
  Launch(rt, token, TETHER_OP_START, nullptr, [rt, token, transport = t->transport, opts = *std::move(opts)] {
    return DoStart(rt, token, transport, opts);
  });
  return 0;
}

int tether_reopen(tether_runtime* rt, tether_transport* t, const char* reference, size_t reference_size, int control,
                  unsigned timeout_ms, uint64_t token) {
  if (rt == nullptr || t == nullptr || (reference == nullptr && reference_size > 0)) return TETHER_E_INVALID_ARGUMENT;
  tether::ReopenOptions ro;
  ro.control = control != 0;
  if (timeout_ms != 0) ro.timeout_ms = timeout_ms;
  Launch(rt, token, TETHER_OP_REOPEN, nullptr,
         [rt, token, transport = t->transport, ro,
          ref = std::string(reference == nullptr ? "" : reference, reference_size)] {
           return DoReopen(rt, token, transport, ro, ref);
         });
  return 0;
}

int tether_process_write(tether_process* p, const void* data, size_t size, uint64_t token) {
  if (data == nullptr && size > 0) return TETHER_E_INVALID_ARGUMENT;
  std::string bytes(static_cast<const char*>(data == nullptr ? "" : data), size);
  return StatusCall(p, token, TETHER_OP_WRITE,
                    [bytes = std::move(bytes)](Process& proc) { return proc.Write(bytes); });
}

int tether_process_close_stdin(tether_process* p, uint64_t token) {
  return StatusCall(p, token, TETHER_OP_CLOSE_STDIN, [](Process& proc) { return proc.CloseStdin(); });
}

int tether_process_read(tether_process* p, uint64_t token) {
  if (p == nullptr) return TETHER_E_INVALID_ARGUMENT;
  std::shared_ptr<ProcessCell> cell = p->cell;
  Launch(p->rt, token, TETHER_OP_READ, cell, [cell, token] { return DoRead(cell, token, kReadBatchBytes); });
  return 0;
}

int tether_process_read_some(tether_process* p, std::size_t max_bytes, uint64_t token) {
  // A first chunk is never cut (it is at most kMaxChunkBytes), so a smaller
  // cap could not be kept.
  if (p == nullptr || max_bytes < tether::kMaxChunkBytes) return TETHER_E_INVALID_ARGUMENT;
  std::shared_ptr<ProcessCell> cell = p->cell;
  const std::size_t cap = std::min(max_bytes, kReadBatchBytes);
  Launch(p->rt, token, TETHER_OP_READ, cell, [cell, token, cap] { return DoRead(cell, token, cap); });
  return 0;
}

int tether_process_wait(tether_process* p, uint64_t token) {
  return OnProcess(p, token, TETHER_OP_WAIT, [token](Process& proc) { return DoWait(proc, token); });
}

int tether_process_status(tether_process* p, uint64_t token) {
  return OnProcess(p, token, TETHER_OP_STATUS, [token](Process& proc) { return DoStatus(proc, token); });
}

int tether_process_signal(tether_process* p, const char* signal, uint64_t token) {
  if (signal == nullptr) return TETHER_E_INVALID_ARGUMENT;
  return StatusCall(p, token, TETHER_OP_SIGNAL,
                    [name = std::string(signal)](Process& proc) { return proc.Signal(std::string_view(name)); });
}

int tether_process_terminate(tether_process* p, unsigned grace_ms, uint64_t token) {
  return StatusCall(p, token, TETHER_OP_TERMINATE, [grace_ms](Process& proc) { return proc.Terminate(grace_ms); });
}

int tether_process_resize(tether_process* p, unsigned cols, unsigned rows, uint64_t token) {
  return StatusCall(p, token, TETHER_OP_RESIZE, [cols, rows](Process& proc) { return proc.Resize(cols, rows); });
}

int tether_process_reference(tether_process* p, char** out, size_t* size, char** message) {
  if (message != nullptr) *message = nullptr;
  if (p == nullptr || out == nullptr || size == nullptr) return TETHER_E_INVALID_ARGUMENT;
  std::shared_ptr<ProcessCell> cell = p->cell;
  absl::StatusOr<std::string> ref =
      OnRuntimeThread(p->rt, [cell]() -> absl::StatusOr<std::string> { return cell->process->Reference(); });
  if (!ref.ok()) {
    if (message != nullptr) *message = CopyString(tether::PrintableMessage(ref.status().message()));
    return static_cast<int>(tether::ErrorCodeOf(ref.status()));
  }
  *out = CopyString(*ref);
  *size = ref->size();
  return 0;
}

int tether_process_disconnect(tether_process* p, uint64_t token) {
  return StatusCall(p, token, TETHER_OP_DISCONNECT, [](Process& proc) { return proc.Disconnect(); });
}

int tether_process_detach(tether_process* p, uint64_t token) {
  return StatusCall(p, token, TETHER_OP_DETACH, [](Process& proc) { return proc.Detach(); });
}

void tether_process_free(tether_process* p) {
  if (p == nullptr) return;
  tether_runtime* rt = p->rt;
  asio::post(rt->io, [rt, p] {
    if (rt->processes.erase(p) == 0) return;
    p->cell->freed = true;
    for (std::uint64_t token : p->cell->tokens) {
      auto it = rt->inflight.find(token);
      if (it != rt->inflight.end()) it->second->emit(asio::cancellation_type::terminal);
    }
    delete p;
  });
}

}  // extern "C"
