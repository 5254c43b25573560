/* tether's C interface: the process API (include/tether/process.h) for
 * programs that are not C++, such as the Python package (python/).
 *
 * Design
 * - A runtime owns one thread running the host library's event loop. Every
 *   function here may be called from any thread; none blocks on the
 *   sandbox. Work is handed to the runtime's thread and its result comes
 *   back as a completion.
 * - Asynchronous calls take a caller-chosen token (any 64-bit value, unique
 *   among the caller's calls in flight) and return at once: 0 when the call
 *   was queued, else an error code (TETHER_E_INVALID_ARGUMENT for a NULL
 *   handle, for example) and no completion follows. Exactly one completion
 *   follows a queued call.
 * - Completions wait in the runtime's queue. tether_runtime_fd() is readable
 *   while the queue is not empty (an event loop watches it: asyncio's
 *   add_reader, epoll, poll); tether_runtime_next() takes one without
 *   blocking. A notify callback, when set, is called on the runtime's
 *   thread after each completion is queued (to wake a loop of one's own).
 * - tether_cancel() aborts one call: it completes with
 *   TETHER_E_WAIT_ABORTED and nothing else is affected (the process API's
 *   WAIT_ABORTED, docs/process-api.md; a write not yet sent is dropped
 *   unsent; an aborted start after its launch was dispatched is
 *   OUTCOME_UNKNOWN).
 * - Handles: a transport (a provider by name, with the CLI's flags) and a
 *   process. Freeing a process aborts its calls in flight and releases the
 *   attachment; the child goes on in the sandbox (tether_process_terminate
 *   ends it). Freeing the runtime frees every handle made through it.
 * - Errors are the stable codes of include/tether/errors.h with a message a
 *   person can act on. Bytes are exact: lengths, never NUL-terminated.
 *
 *   tether_runtime* rt = tether_runtime_new();
 *   tether_transport* t;
 *   char* err = NULL;
 *   if (tether_transport_new(rt, "local", NULL, 0, &t, &err) != 0) { ...; tether_free_string(err); }
 *   const char* argv[] = {"sh", "-c", "echo hi"};
 *   tether_start_options o;
 *   tether_start_options_init(&o);
 *   o.argv = argv; o.argc = 3;
 *   tether_start(rt, t, &o, 1);
 *   tether_completion c;
 *   while (!tether_runtime_next(rt, &c)) poll_for_readable(tether_runtime_fd(rt));
 *   ... c.process, then tether_process_read(c.process, 2), ...
 *   tether_completion_release(&c);
 */
#ifndef TETHER_TETHER_H_
#define TETHER_TETHER_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TETHER_API __attribute__((visibility("default")))
#else
#define TETHER_API
#endif

/* Bumped when an existing declaration changes incompatibly. */
#define TETHER_C_API_VERSION 1

/* A read's pieces: the library hands out output in chunks of at most this. */
#define TETHER_MAX_CHUNK_BYTES (16 * 1024)

/* The stable error codes (tether::ErrorCode, in its order). */
enum tether_error {
  TETHER_OK = 0,
  TETHER_E_INVALID_ARGUMENT = 1,
  TETHER_E_UNSUPPORTED = 2,
  TETHER_E_UNAVAILABLE = 3,
  TETHER_E_BUSY = 4,
  TETHER_E_EXPIRED = 5,
  TETHER_E_INPUT_CLOSED = 6,
  TETHER_E_OUTCOME_UNKNOWN = 7,
  TETHER_E_NOT_FOUND = 8,
  TETHER_E_PERMISSION_DENIED = 9,
  TETHER_E_PROTOCOL = 10,
  TETHER_E_CANCELLED = 11,
  TETHER_E_OUTPUT_CAPACITY = 12,
  TETHER_E_WAIT_ABORTED = 13,
  TETHER_E_RESOURCE_EXHAUSTED = 14,
  TETHER_E_INTERNAL = 15
};

/* "OUTCOME_UNKNOWN", ...; "?" for an unknown value. Static storage. */
TETHER_API const char* tether_error_name(int code);

typedef struct tether_runtime tether_runtime;
typedef struct tether_transport tether_transport;
typedef struct tether_process tether_process;

/* What a completion reports (tether_completion.kind): the call it ends. */
enum tether_op {
  TETHER_OP_START = 1,
  TETHER_OP_REOPEN,
  TETHER_OP_WRITE,
  TETHER_OP_CLOSE_STDIN,
  TETHER_OP_READ,
  TETHER_OP_WAIT,
  TETHER_OP_STATUS,
  TETHER_OP_SIGNAL,
  TETHER_OP_TERMINATE,
  TETHER_OP_RESIZE,
  TETHER_OP_DISCONNECT,
  TETHER_OP_DETACH
};

enum tether_stream { TETHER_STREAM_END = 0, TETHER_STREAM_STDOUT = 1, TETHER_STREAM_STDERR = 2, TETHER_STREAM_PTY = 3 };

enum tether_state { TETHER_STATE_RUNNING = 0, TETHER_STATE_EXITED = 1, TETHER_STATE_UNKNOWN = 2 };

typedef struct tether_exit {
  int has_code, code;      /* exited normally with `code` */
  int has_signal, signal;  /* ended by `signal` */
  int core_dumped;
  int output_cut;          /* background descendants held the output open */
  int output_complete;     /* every byte was read through this handle */
  uint64_t user_us, system_us, max_rss_kib;
} tether_exit;

typedef struct tether_completion {
  uint64_t token;  /* the caller's */
  int op;          /* enum tether_op */
  int error;       /* TETHER_OK or an enum tether_error */
  char* message;   /* the error's message (NULL when OK) */
  /* START, REOPEN: the new handle (free it with tether_process_free), its
   * pid and whether it runs on a pty. */
  tether_process* process;
  int32_t pid;
  int has_pty;
  /* READ: `size` bytes of `stream` at `offset` within it; stream
   * TETHER_STREAM_END (size 0) once all output was read. A read returns
   * the output already received, consecutive chunks of one stream joined
   * (at most 256 KiB, or tether_process_read_some's max_bytes, and never
   * more than the output window). */
  int stream;
  uint64_t offset;
  uint8_t* data;
  size_t size;
  /* WAIT, and STATUS when `state` is TETHER_STATE_EXITED. */
  int state;
  tether_exit exit;
  /* READ: the supervisor reported output lost while nobody was attached. */
  int output_gap;
} tether_completion;

/* Frees what a completion owns (message, data); not its process. */
TETHER_API void tether_completion_release(tether_completion* c);
/* Frees a string this library returned. */
TETHER_API void tether_free_string(char* s);

/* A runtime and its thread; NULL only when a thread or an fd could not be
 * made (errno tells). */
TETHER_API tether_runtime* tether_runtime_new(void);
/* Frees every handle made through `rt`, aborts their calls, stops the
 * thread and closes the fd. Completions not taken are dropped. Must not be
 * called from a notify callback. */
TETHER_API void tether_runtime_free(tether_runtime* rt);
/* Readable while completions wait (level-triggered), from this call on: a
 * program that never asks for the fd (it takes the notify callback's word)
 * pays no system call on it per completion. */
TETHER_API int tether_runtime_fd(const tether_runtime* rt);
/* Takes the oldest completion into `out`: 1, or 0 when none waits. */
TETHER_API int tether_runtime_next(tether_runtime* rt, tether_completion* out);
/* `fn(user)` on the runtime's thread after each completion is queued;
 * NULL to stop. It must not block or call tether_runtime_free. */
TETHER_API void tether_runtime_set_notify(tether_runtime* rt, void (*fn)(void* user), void* user);
/* Aborts the call `token` (see above); unknown or finished tokens are
 * ignored. */
TETHER_API void tether_cancel(tether_runtime* rt, uint64_t token);

/* A transport to the provider `provider` ("local", "command", "e2b", ...)
 * with its flags as pairs: flags[2i] the flag ("--prefix"), flags[2i+1] its
 * value; npairs pairs. Nothing is contacted yet. 0 and *out, or an error
 * code and *message (free it with tether_free_string). */
TETHER_API int tether_transport_new(tether_runtime* rt, const char* provider, const char* const* flags,
                                    size_t npairs, tether_transport** out, char** message);
/* Processes started through it keep what they need. NULL is ignored. */
TETHER_API void tether_transport_free(tether_transport* t);
/* The registered providers' names, comma-separated. Static storage. */
TETHER_API const char* tether_providers(void);

enum tether_output_mode { TETHER_OUTPUT_FINITE = 0, TETHER_OUTPUT_STREAM = 1 };

typedef struct tether_start_options {
  size_t struct_size; /* sizeof(tether_start_options), set by _init */
  const char* const* argv;
  size_t argc;
  const char* cwd;               /* NULL: the sandbox's default */
  const char* const* env;        /* pairs: env[2i] name, env[2i+1] value */
  size_t env_pairs;
  int inherit_env;               /* default 1 */
  int stdin_pipe;                /* default 0: stdin is /dev/null */
  int pty;                       /* 1: run on a terminal of pty_cols x pty_rows */
  unsigned pty_cols, pty_rows;   /* default 80 x 24 */
  int output_mode;               /* enum tether_output_mode; default finite */
  int output_text;               /* 1: valid UTF-8 (U+FFFD for invalid bytes); default 0: exact bytes */
  size_t max_output_bytes;       /* finite mode's cap; 0: 1 MiB */
  size_t output_window_bytes;    /* 0: 64 KiB */
  int backpressure;              /* default 1 */
  int reconnect;                 /* default 0 */
  unsigned setup_timeout_ms;     /* 0: 30 s */
  const char* supervisor_path;   /* NULL: the well-known places, then upload */
  int upload_supervisor;         /* default 1 */
} tether_start_options;

/* The defaults above. */
TETHER_API void tether_start_options_init(tether_start_options* o);

/* Asynchronous calls: 0 when queued (one completion follows), else an error
 * code and no completion. Strings and bytes are copied before returning. */
TETHER_API int tether_start(tether_runtime* rt, tether_transport* t, const tether_start_options* o, uint64_t token);
/* A reference from tether_process_reference; control: a control-only
 * handle (status, signal, terminate, resize). */
TETHER_API int tether_reopen(tether_runtime* rt, tether_transport* t, const char* reference, size_t reference_size,
                             int control, unsigned timeout_ms, uint64_t token);
TETHER_API int tether_process_write(tether_process* p, const void* data, size_t size, uint64_t token);
TETHER_API int tether_process_close_stdin(tether_process* p, uint64_t token);
TETHER_API int tether_process_read(tether_process* p, uint64_t token);
/* A read of at most max_bytes (at least TETHER_MAX_CHUNK_BYTES, else
 * TETHER_E_INVALID_ARGUMENT): an embedder that holds what it read in a
 * bounded queue of its own asks for no more than the room left in it, while
 * a wider output window keeps the sandbox sending meanwhile. */
TETHER_API int tether_process_read_some(tether_process* p, size_t max_bytes, uint64_t token);
TETHER_API int tether_process_wait(tether_process* p, uint64_t token);
TETHER_API int tether_process_status(tether_process* p, uint64_t token);
/* "TERM", "SIGTERM" or "15". */
TETHER_API int tether_process_signal(tether_process* p, const char* signal, uint64_t token);
TETHER_API int tether_process_terminate(tether_process* p, unsigned grace_ms, uint64_t token);
TETHER_API int tether_process_resize(tether_process* p, unsigned cols, unsigned rows, uint64_t token);
TETHER_API int tether_process_disconnect(tether_process* p, uint64_t token);
TETHER_API int tether_process_detach(tether_process* p, uint64_t token);
/* Synchronous (nothing crosses to the sandbox): the private text that
 * reopens this process later, in *out (*size bytes, NUL-terminated; free it
 * with tether_free_string). An error code and *message otherwise, e.g.
 * TETHER_E_INTERNAL while written input is not yet acknowledged. */
TETHER_API int tether_process_reference(tether_process* p, char** out, size_t* size, char** message);
/* Aborts the handle's calls in flight and releases it (see above). NULL is
 * ignored. */
TETHER_API void tether_process_free(tether_process* p);

#ifdef __cplusplus
}
#endif

#endif /* TETHER_TETHER_H_ */
