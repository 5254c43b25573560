/* The Node-API addon under @tether/node: a thin layer over the C interface
 * (include/tether/tether.h). Policy lives in lib/index.mjs; this file only
 * turns calls into promises and completions into values.
 *
 * Design
 * - One runtime box per Sandbox: the C runtime (its own thread), a
 *   threadsafe function that wakes the JS thread, and the promises of the
 *   calls in flight keyed by the caller's token.
 * - The C runtime's notify callback (on its thread) queues one wake-up at a
 *   time (an atomic flag); the wake-up, on the JS thread, clears the flag
 *   and then takes every waiting completion, so none is left behind.
 * - The threadsafe function keeps Node's event loop alive only while calls
 *   are in flight: an idle program exits.
 * - Handles (transport, process) are boxes owned by JS externals. Closing
 *   the runtime frees every handle made through it (the C contract) and
 *   empties the boxes; a box is freed with its external. The runtime is also
 *   closed when the environment is torn down (process exit, a worker's end).
 * - Every call rejects, never throws, for what the sandbox or the library
 *   says; it throws a TypeError only for arguments of the wrong JS type
 *   (lib/index.mjs checks them first). Errors carry the stable code
 *   (err.code = "OUTCOME_UNKNOWN", ...).
 */
#define NAPI_VERSION 8
#include <node_api.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tether/tether.h"

typedef struct rt_box rt_box;

enum { BOX_TRANSPORT = 1, BOX_PROCESS = 2 };

typedef struct handle_box {
  int kind;
  void* h; /* tether_transport* or tether_process*; NULL once freed */
  rt_box* rt;
  struct handle_box *prev, *next;
} handle_box;

/* How a read's bytes become JS values (the read's argument). */
enum { PIECES_BYTES = 0, PIECES_TEXT = 1 };

typedef struct pending {
  uint64_t token;
  napi_deferred deferred;
  int pieces; /* a read's PIECES_* */
} pending;

struct rt_box {
  tether_runtime* rt;
  napi_env env;
  napi_threadsafe_function tsfn;
  atomic_int woken;
  int closed;
  int loop_held; /* the tsfn is ref'd: calls are in flight */
  int refs;      /* the external and the tsfn: freed when both are finalized */
  pending* calls;
  size_t ncalls, cap;
  handle_box* handles;
};

#define CHECK_NAPI(env, call)                                              \
  do {                                                                     \
    if ((call) != napi_ok) {                                               \
      const napi_extended_error_info* info_ = NULL;                        \
      napi_get_last_error_info((env), &info_);                             \
      bool pending_ = false;                                               \
      napi_is_exception_pending((env), &pending_);                         \
      if (!pending_)                                                       \
        napi_throw_error((env), NULL,                                      \
                         info_ && info_->error_message ? info_->error_message \
                                                       : "tether: a Node-API call failed"); \
      return NULL;                                                         \
    }                                                                      \
  } while (0)

/* --- handles -------------------------------------------------------------- */

static void link_box(rt_box* rb, handle_box* b) {
  b->rt = rb;
  b->prev = NULL;
  b->next = rb->handles;
  if (rb->handles) rb->handles->prev = b;
  rb->handles = b;
}

static void unlink_box(handle_box* b) {
  if (!b->rt) return;
  if (b->prev) b->prev->next = b->next;
  else b->rt->handles = b->next;
  if (b->next) b->next->prev = b->prev;
  b->prev = b->next = NULL;
  b->rt = NULL;
}

static void free_box_handle(handle_box* b) {
  if (b->h && b->rt && !b->rt->closed) {
    if (b->kind == BOX_PROCESS) tether_process_free((tether_process*)b->h);
    else tether_transport_free((tether_transport*)b->h);
  }
  b->h = NULL;
  unlink_box(b);
}

static void finalize_box(napi_env env, void* data, void* hint) {
  (void)env;
  (void)hint;
  handle_box* b = (handle_box*)data;
  free_box_handle(b);
  free(b);
}

static napi_value wrap_handle(napi_env env, rt_box* rb, int kind, void* h) {
  handle_box* b = (handle_box*)calloc(1, sizeof *b);
  napi_value ext;
  if (!b) {
    if (kind == BOX_PROCESS) tether_process_free((tether_process*)h);
    else tether_transport_free((tether_transport*)h);
    napi_throw_error(env, "RESOURCE_EXHAUSTED", "tether: out of memory");
    return NULL;
  }
  b->kind = kind;
  b->h = h;
  link_box(rb, b);
  if (napi_create_external(env, b, finalize_box, NULL, &ext) != napi_ok) {
    free_box_handle(b);
    free(b);
    return NULL;
  }
  return ext;
}

/* The box behind `v`, of `kind`; NULL (and a TypeError thrown) otherwise. */
static handle_box* box_of(napi_env env, napi_value v, int kind) {
  napi_valuetype t;
  void* data = NULL;
  if (napi_typeof(env, v, &t) != napi_ok || t != napi_external || napi_get_value_external(env, v, &data) != napi_ok ||
      data == NULL || ((handle_box*)data)->kind != kind) {
    napi_throw_type_error(env, NULL, kind == BOX_PROCESS ? "tether: not a process handle" : "tether: not a transport");
    return NULL;
  }
  return (handle_box*)data;
}

/* --- the runtime ---------------------------------------------------------- */

static void hold_loop(rt_box* rb, int hold) {
  if (rb->closed || hold == rb->loop_held) return;
  if (hold) napi_ref_threadsafe_function(rb->env, rb->tsfn);
  else napi_unref_threadsafe_function(rb->env, rb->tsfn);
  rb->loop_held = hold;
}

static napi_value error_value(napi_env env, int code, const char* message, size_t message_len) {
  napi_value c, m, err;
  const char* name = tether_error_name(code);
  napi_create_string_utf8(env, name, NAPI_AUTO_LENGTH, &c);
  if (message && message_len > 0) napi_create_string_utf8(env, message, message_len, &m);
  else napi_create_string_utf8(env, name, NAPI_AUTO_LENGTH, &m);
  napi_create_error(env, c, m, &err);
  napi_value num;
  napi_create_int32(env, code, &num);
  napi_set_named_property(env, err, "errno", num);
  return err;
}

static pending* find_call(rt_box* rb, uint64_t token, size_t* at) {
  for (size_t i = 0; i < rb->ncalls; ++i) {
    if (rb->calls[i].token == token) {
      *at = i;
      return &rb->calls[i];
    }
  }
  return NULL;
}

static void drop_call(rt_box* rb, size_t at) {
  rb->calls[at] = rb->calls[rb->ncalls - 1];
  --rb->ncalls;
  if (rb->ncalls == 0) hold_loop(rb, 0);
}

static void set_num(napi_env env, napi_value obj, const char* name, double v) {
  napi_value n;
  napi_create_double(env, v, &n);
  napi_set_named_property(env, obj, name, n);
}

static void set_bool(napi_env env, napi_value obj, const char* name, int v) {
  napi_value b;
  napi_get_boolean(env, v != 0, &b);
  napi_set_named_property(env, obj, name, b);
}

static napi_value exit_value(napi_env env, const tether_exit* e) {
  napi_value o, nul;
  napi_create_object(env, &o);
  napi_get_null(env, &nul);
  if (e->has_code) set_num(env, o, "code", e->code);
  else napi_set_named_property(env, o, "code", nul);
  if (e->has_signal) set_num(env, o, "signal", e->signal);
  else napi_set_named_property(env, o, "signal", nul);
  set_bool(env, o, "coreDumped", e->core_dumped);
  set_bool(env, o, "outputCut", e->output_cut);
  set_bool(env, o, "outputComplete", e->output_complete);
  set_num(env, o, "userUs", (double)e->user_us);
  set_num(env, o, "systemUs", (double)e->system_us);
  set_num(env, o, "maxRssKib", (double)e->max_rss_kib);
  return o;
}

/* A read's bytes as an array of pieces of at most kPieceBytes, made here in
 * one pass: each a Uint8Array with an ArrayBuffer of its own (one copy; no
 * view into a buffer a later read reuses), or for text a string, cut only
 * between characters (the library hands over valid UTF-8, characters split
 * across reads already joined). NULL with an exception pending. */
enum { kPieceBytes = 16 * 1024 }; /* limits.maxChunkBytes in lib/index.mjs */

static napi_value pieces_value(napi_env env, const uint8_t* data, size_t size, int kind) {
  napi_value arr, v, ab;
  uint32_t n = 0;
  if (napi_create_array(env, &arr) != napi_ok) return NULL;
  for (size_t from = 0; from < size;) {
    size_t end = size - from > kPieceBytes ? from + kPieceBytes : size;
    if (kind == PIECES_TEXT && end < size) {
      size_t cut = end;
      while (cut > from && (data[cut] & 0xC0) == 0x80) --cut;
      if (cut > from) end = cut;
    }
    if (kind == PIECES_TEXT) {
      if (napi_create_string_utf8(env, (const char*)data + from, end - from, &v) != napi_ok) return NULL;
    } else {
      /* A Buffer's memory is not zeroed first (an ArrayBuffer's is: 6% of
       * the JS thread's time at full speed); the chunk is a plain
       * Uint8Array over the Buffer's own ArrayBuffer. */
      void* dst = NULL;
      napi_value buf;
      napi_typedarray_type type;
      size_t len, off;
      if (napi_create_buffer(env, end - from, &dst, &buf) != napi_ok ||
          napi_get_typedarray_info(env, buf, &type, &len, NULL, &ab, &off) != napi_ok)
        return NULL;
      memcpy(dst, data + from, end - from);
      if (napi_create_typedarray(env, napi_uint8_array, end - from, ab, off, &v) != napi_ok) return NULL;
    }
    if (napi_set_element(env, arr, n++, v) != napi_ok) return NULL;
    from = end;
  }
  return arr;
}

/* The value a completion resolves its promise with; NULL on a failure to
 * build it (an exception is then pending). */
static napi_value result_value(napi_env env, rt_box* rb, tether_completion* c, int pieces) {
  napi_value o, v;
  switch (c->op) {
    case TETHER_OP_START:
    case TETHER_OP_REOPEN: {
      napi_value ext = wrap_handle(env, rb, BOX_PROCESS, c->process);
      c->process = NULL; /* the box owns it now */
      if (!ext) return NULL;
      napi_create_object(env, &o);
      napi_set_named_property(env, o, "process", ext);
      set_num(env, o, "pid", c->pid);
      set_bool(env, o, "hasPty", c->has_pty);
      return o;
    }
    case TETHER_OP_READ:
      napi_create_object(env, &o);
      set_num(env, o, "stream", c->stream);
      set_bool(env, o, "gap", c->output_gap);
      if (c->stream != TETHER_STREAM_END) {
        set_num(env, o, "offset", (double)c->offset);
        if (!(v = pieces_value(env, c->data, c->size, pieces))) return NULL;
        napi_set_named_property(env, o, "pieces", v);
      }
      return o;
    case TETHER_OP_WAIT:
      return exit_value(env, &c->exit);
    case TETHER_OP_STATUS:
      napi_create_object(env, &o);
      set_num(env, o, "state", c->state);
      if (c->state == TETHER_STATE_EXITED) napi_set_named_property(env, o, "exit", exit_value(env, &c->exit));
      return o;
    default:
      napi_get_undefined(env, &v);
      return v;
  }
}

static void complete(napi_env env, rt_box* rb, tether_completion* c) {
  size_t at = 0;
  pending* p = find_call(rb, c->token, &at);
  if (!p) {
    /* Nobody waits for it (cannot happen with tokens from register_call;
     * kept safe): free what it made. */
    if (c->error == TETHER_OK && c->process) tether_process_free(c->process);
    return;
  }
  napi_deferred d = p->deferred;
  const int pieces = p->pieces;
  drop_call(rb, at);
  if (c->error != TETHER_OK) {
    napi_reject_deferred(env, d, error_value(env, c->error, c->message, c->message ? strlen(c->message) : 0));
    return;
  }
  napi_value v = result_value(env, rb, c, pieces);
  if (!v) {
    napi_value exc;
    if (napi_get_and_clear_last_exception(env, &exc) != napi_ok) exc = error_value(env, TETHER_E_INTERNAL, NULL, 0);
    napi_reject_deferred(env, d, exc);
    return;
  }
  napi_resolve_deferred(env, d, v);
}

/* On the JS thread: every completion waiting. */
static void wake(napi_env env, napi_value js_cb, void* context, void* data) {
  (void)js_cb;
  (void)data;
  if (env == NULL) return; /* torn down */
  rt_box* rb = (rt_box*)context;
  if (rb->closed) return;
  atomic_store(&rb->woken, 0); /* first: a completion queued from here on wakes us again */
  tether_completion c;
  while (!rb->closed && tether_runtime_next(rb->rt, &c)) {
    napi_handle_scope scope;
    napi_open_handle_scope(env, &scope);
    complete(env, rb, &c);
    tether_completion_release(&c);
    napi_close_handle_scope(env, scope);
  }
}

/* On the runtime's thread, after each completion is queued. */
static void notify(void* user) {
  rt_box* rb = (rt_box*)user;
  if (atomic_exchange(&rb->woken, 1) == 0) napi_call_threadsafe_function(rb->tsfn, NULL, napi_tsfn_nonblocking);
}

/* Stops the C runtime (joining its thread); every handle goes with it (the
 * C contract), so the boxes are emptied. The calls in flight are left to
 * the caller. */
static void stop_c_runtime(rt_box* rb) {
  tether_runtime_set_notify(rb->rt, NULL, NULL);
  for (handle_box* b = rb->handles; b;) {
    handle_box* next = b->next;
    b->h = NULL;
    b->prev = b->next = NULL;
    b->rt = NULL;
    b = next;
  }
  rb->handles = NULL;
  tether_runtime_free(rb->rt);
  rb->rt = NULL;
  rb->closed = 1;
}

static void close_runtime(rt_box* rb) {
  if (rb->closed) return;
  napi_env env = rb->env;
  hold_loop(rb, 0);
  stop_c_runtime(rb);
  napi_release_threadsafe_function(rb->tsfn, napi_tsfn_abort);
  /* The calls in flight end here, each with UNAVAILABLE. */
  for (size_t i = 0; i < rb->ncalls; ++i) {
    napi_reject_deferred(env, rb->calls[i].deferred,
                         error_value(env, TETHER_E_UNAVAILABLE, "tether: the sandbox was closed", 30));
  }
  free(rb->calls);
  rb->calls = NULL;
  rb->ncalls = rb->cap = 0;
}

static void cleanup_hook(void* arg) {
  rt_box* rb = (rt_box*)arg;
  /* At teardown no promise can be settled any more: only the C side. */
  if (rb->closed) return;
  stop_c_runtime(rb);
  free(rb->calls);
  rb->calls = NULL;
  rb->ncalls = rb->cap = 0;
}

static void finalize_runtime(napi_env env, void* data, void* hint) {
  (void)hint;
  rt_box* rb = (rt_box*)data;
  if (!rb->closed) {
    napi_remove_env_cleanup_hook(env, cleanup_hook, rb);
    cleanup_hook(rb);
    napi_release_threadsafe_function(rb->tsfn, napi_tsfn_abort);
  }
  if (--rb->refs == 0) free(rb);
}

/* The wake-up is gone: a queued wake() cannot reach the box any more. */
static void tsfn_finalized(napi_env env, void* data, void* hint) {
  (void)env;
  (void)hint;
  rt_box* rb = (rt_box*)data;
  if (--rb->refs == 0) free(rb);
}

static rt_box* runtime_of(napi_env env, napi_value v) {
  napi_valuetype t;
  void* data = NULL;
  if (napi_typeof(env, v, &t) != napi_ok || t != napi_external || napi_get_value_external(env, v, &data) != napi_ok ||
      data == NULL) {
    napi_throw_type_error(env, NULL, "tether: not a runtime");
    return NULL;
  }
  return (rt_box*)data;
}

/* A promise for the call `token`, registered before the C call is made
 * (its completion can come before the C call returns). */
static napi_value register_call(napi_env env, rt_box* rb, uint64_t token) {
  napi_value promise;
  napi_deferred d;
  CHECK_NAPI(env, napi_create_promise(env, &d, &promise));
  if (rb->ncalls == rb->cap) {
    size_t cap = rb->cap ? rb->cap * 2 : 16;
    pending* grown = (pending*)realloc(rb->calls, cap * sizeof *grown);
    if (!grown) {
      napi_reject_deferred(env, d, error_value(env, TETHER_E_RESOURCE_EXHAUSTED, "tether: out of memory", 21));
      return promise;
    }
    rb->calls = grown;
    rb->cap = cap;
  }
  rb->calls[rb->ncalls].token = token;
  rb->calls[rb->ncalls].deferred = d;
  rb->calls[rb->ncalls].pieces = PIECES_BYTES;
  ++rb->ncalls;
  hold_loop(rb, 1);
  return promise;
}

/* After the C call: rc != 0 means no completion follows; reject now. */
static void settle_refused(napi_env env, rt_box* rb, uint64_t token, int rc, const char* why) {
  if (rc == 0) return;
  size_t at = 0;
  pending* p = find_call(rb, token, &at);
  if (!p) return;
  napi_deferred d = p->deferred;
  drop_call(rb, at);
  napi_reject_deferred(env, d, error_value(env, rc, why, strlen(why)));
}

/* --- argument helpers ----------------------------------------------------- */

/* A malloc'd NUL-terminated copy of the string `v` (its UTF-8), or NULL with
 * a TypeError thrown. */
static char* string_arg(napi_env env, napi_value v, size_t* len_out) {
  size_t len = 0;
  if (napi_get_value_string_utf8(env, v, NULL, 0, &len) != napi_ok) {
    napi_throw_type_error(env, NULL, "tether: expected a string");
    return NULL;
  }
  char* s = (char*)malloc(len + 1);
  if (!s) {
    napi_throw_error(env, "RESOURCE_EXHAUSTED", "tether: out of memory");
    return NULL;
  }
  napi_get_value_string_utf8(env, v, s, len + 1, &len);
  if (len_out) *len_out = len;
  return s;
}

static int u64_arg(napi_env env, napi_value v, uint64_t* out) {
  double d;
  if (napi_get_value_double(env, v, &d) != napi_ok || !(d >= 0) || d > 9007199254740991.0) {
    napi_throw_type_error(env, NULL, "tether: expected a non-negative integer");
    return 0;
  }
  *out = (uint64_t)d;
  return 1;
}

static int u32_arg(napi_env env, napi_value v, unsigned* out) {
  uint64_t x;
  if (!u64_arg(env, v, &x)) return 0;
  if (x > 0xFFFFFFFFu) {
    napi_throw_range_error(env, NULL, "tether: a value over 2^32-1");
    return 0;
  }
  *out = (unsigned)x;
  return 1;
}

/* A string array: a malloc'd array of malloc'd strings; NULL with an
 * exception, or with *n == 0 for an empty array. */
static char** strings_arg(napi_env env, napi_value arr, size_t* n) {
  bool is_array = false;
  uint32_t len = 0;
  *n = 0;
  if (napi_is_array(env, arr, &is_array) != napi_ok || !is_array) {
    napi_throw_type_error(env, NULL, "tether: expected an array of strings");
    return NULL;
  }
  napi_get_array_length(env, arr, &len);
  if (len == 0) return NULL;
  char** out = (char**)calloc(len, sizeof *out);
  if (!out) {
    napi_throw_error(env, "RESOURCE_EXHAUSTED", "tether: out of memory");
    return NULL;
  }
  for (uint32_t i = 0; i < len; ++i) {
    napi_value e;
    napi_get_element(env, arr, i, &e);
    out[i] = string_arg(env, e, NULL);
    if (!out[i]) {
      for (uint32_t j = 0; j < i; ++j) free(out[j]);
      free(out);
      return NULL;
    }
  }
  *n = len;
  return out;
}

static void free_strings(char** s, size_t n) {
  for (size_t i = 0; i < n; ++i) free(s[i]);
  free(s);
}

static napi_value prop(napi_env env, napi_value obj, const char* name) {
  napi_value v;
  napi_valuetype t;
  if (napi_get_named_property(env, obj, name, &v) != napi_ok) return NULL;
  if (napi_typeof(env, v, &t) != napi_ok || t == napi_undefined || t == napi_null) return NULL;
  return v;
}

static int int_prop(napi_env env, napi_value obj, const char* name, int* out) {
  napi_value v = prop(env, obj, name);
  if (!v) return 1;
  bool b;
  if (napi_get_value_bool(env, v, &b) == napi_ok) {
    *out = b;
    return 1;
  }
  unsigned u;
  if (!u32_arg(env, v, &u)) return 0;
  *out = (int)u;
  return 1;
}

static int uint_prop(napi_env env, napi_value obj, const char* name, unsigned* out) {
  napi_value v = prop(env, obj, name);
  return !v || u32_arg(env, v, out);
}

static int size_prop(napi_env env, napi_value obj, const char* name, size_t* out) {
  napi_value v = prop(env, obj, name);
  uint64_t x;
  if (!v) return 1;
  if (!u64_arg(env, v, &x)) return 0;
  *out = (size_t)x;
  return 1;
}

#define ARGS(n)                                                        \
  size_t argc = (n);                                                   \
  napi_value argv[(n) > 0 ? (n) : 1];                                  \
  CHECK_NAPI(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL)); \
  if (argc < (n)) {                                                    \
    napi_throw_type_error(env, NULL, "tether: too few arguments");     \
    return NULL;                                                       \
  }

/* --- exported functions --------------------------------------------------- */

static napi_value js_runtime_new(napi_env env, napi_callback_info info) {
  (void)info;
  rt_box* rb = (rt_box*)calloc(1, sizeof *rb);
  if (!rb) {
    napi_throw_error(env, "RESOURCE_EXHAUSTED", "tether: out of memory");
    return NULL;
  }
  rb->env = env;
  atomic_init(&rb->woken, 0);
  rb->rt = tether_runtime_new();
  if (!rb->rt) {
    free(rb);
    napi_throw_error(env, "RESOURCE_EXHAUSTED", "tether: could not start the runtime's thread");
    return NULL;
  }
  napi_value name;
  napi_create_string_utf8(env, "tether", NAPI_AUTO_LENGTH, &name);
  rb->refs = 2;
  if (napi_create_threadsafe_function(env, NULL, NULL, name, 0, 1, rb, tsfn_finalized, rb, wake, &rb->tsfn) !=
      napi_ok) {
    tether_runtime_free(rb->rt);
    free(rb);
    napi_throw_error(env, "INTERNAL", "tether: could not make the wake-up");
    return NULL;
  }
  napi_unref_threadsafe_function(env, rb->tsfn); /* held only while calls are in flight */
  tether_runtime_set_notify(rb->rt, notify, rb);
  napi_add_env_cleanup_hook(env, cleanup_hook, rb);
  napi_value ext;
  if (napi_create_external(env, rb, finalize_runtime, NULL, &ext) != napi_ok) {
    napi_remove_env_cleanup_hook(env, cleanup_hook, rb);
    close_runtime(rb); /* releases the tsfn, which frees the box when it goes */
    --rb->refs;
    return NULL;
  }
  return ext;
}

static napi_value js_runtime_close(napi_env env, napi_callback_info info) {
  ARGS(1);
  rt_box* rb = runtime_of(env, argv[0]);
  if (!rb) return NULL;
  if (!rb->closed) {
    napi_remove_env_cleanup_hook(env, cleanup_hook, rb);
    close_runtime(rb);
  }
  return NULL;
}

static napi_value js_transport_new(napi_env env, napi_callback_info info) {
  ARGS(3);
  rt_box* rb = runtime_of(env, argv[0]);
  if (!rb) return NULL;
  if (rb->closed) {
    napi_throw(env, error_value(env, TETHER_E_UNAVAILABLE, "tether: the sandbox was closed", 30));
    return NULL;
  }
  char* provider = string_arg(env, argv[1], NULL);
  if (!provider) return NULL;
  size_t nflags = 0;
  char** flags = strings_arg(env, argv[2], &nflags);
  if (!flags && nflags == 0) {
    bool exc = false;
    napi_is_exception_pending(env, &exc);
    if (exc) {
      free(provider);
      return NULL;
    }
  }
  if (nflags % 2 != 0) {
    free(provider);
    free_strings(flags, nflags);
    napi_throw_type_error(env, NULL, "tether: flags come in pairs");
    return NULL;
  }
  tether_transport* t = NULL;
  char* message = NULL;
  const int rc = tether_transport_new(rb->rt, provider, (const char* const*)flags, nflags / 2, &t, &message);
  free(provider);
  free_strings(flags, nflags);
  if (rc != 0) {
    napi_value err = error_value(env, rc, message, message ? strlen(message) : 0);
    tether_free_string(message);
    napi_throw(env, err);
    return NULL;
  }
  return wrap_handle(env, rb, BOX_TRANSPORT, t);
}

static napi_value js_start(napi_env env, napi_callback_info info) {
  ARGS(4);
  rt_box* rb = runtime_of(env, argv[0]);
  if (!rb) return NULL;
  handle_box* tb = box_of(env, argv[1], BOX_TRANSPORT);
  if (!tb) return NULL;
  uint64_t token;
  if (!u64_arg(env, argv[3], &token)) return NULL;
  napi_value opts = argv[2];
  tether_start_options o;
  tether_start_options_init(&o);
  size_t argc_s = 0, nenv = 0;
  char **args = NULL, **envs = NULL, *cwd = NULL, *sup = NULL;
  napi_value v;
  int ok = 1;
  if ((v = prop(env, opts, "argv"))) ok = (args = strings_arg(env, v, &argc_s)) != NULL || argc_s == 0;
  if (ok && (v = prop(env, opts, "env"))) ok = (envs = strings_arg(env, v, &nenv)) != NULL || nenv == 0;
  if (ok && (v = prop(env, opts, "cwd"))) ok = (cwd = string_arg(env, v, NULL)) != NULL;
  if (ok && (v = prop(env, opts, "supervisorPath"))) ok = (sup = string_arg(env, v, NULL)) != NULL;
  ok = ok && int_prop(env, opts, "inheritEnv", &o.inherit_env) && int_prop(env, opts, "stdinPipe", &o.stdin_pipe) &&
       int_prop(env, opts, "pty", &o.pty) && uint_prop(env, opts, "columns", &o.pty_cols) &&
       uint_prop(env, opts, "rows", &o.pty_rows) && int_prop(env, opts, "outputMode", &o.output_mode) &&
       int_prop(env, opts, "outputText", &o.output_text) &&
       size_prop(env, opts, "maxOutputBytes", &o.max_output_bytes) &&
       size_prop(env, opts, "outputWindowBytes", &o.output_window_bytes) &&
       int_prop(env, opts, "backpressure", &o.backpressure) && int_prop(env, opts, "reconnect", &o.reconnect) &&
       uint_prop(env, opts, "setupTimeoutMs", &o.setup_timeout_ms) &&
       int_prop(env, opts, "uploadSupervisor", &o.upload_supervisor);
  bool exc = false;
  napi_is_exception_pending(env, &exc);
  napi_value promise = NULL;
  if (ok && !exc && nenv % 2 != 0) {
    napi_throw_type_error(env, NULL, "tether: env comes in pairs");
    exc = true;
  }
  if (ok && !exc) {
    o.argv = (const char* const*)args;
    o.argc = argc_s;
    o.env = (const char* const*)envs;
    o.env_pairs = nenv / 2;
    o.cwd = cwd;
    o.supervisor_path = sup;
    promise = register_call(env, rb, token);
    if (promise) {
      const int rc = rb->closed ? TETHER_E_UNAVAILABLE
                     : tb->h    ? tether_start(rb->rt, (tether_transport*)tb->h, &o, token)
                                : TETHER_E_INVALID_ARGUMENT;
      settle_refused(env, rb, token, rc, rb->closed ? "tether: the sandbox was closed" : "tether: a closed transport");
    }
  }
  free_strings(args, argc_s);
  free_strings(envs, nenv);
  free(cwd);
  free(sup);
  return promise;
}

static napi_value js_reopen(napi_env env, napi_callback_info info) {
  ARGS(6);
  rt_box* rb = runtime_of(env, argv[0]);
  if (!rb) return NULL;
  handle_box* tb = box_of(env, argv[1], BOX_TRANSPORT);
  if (!tb) return NULL;
  size_t len = 0;
  bool control = false;
  unsigned timeout_ms = 0;
  uint64_t token;
  if (napi_get_value_bool(env, argv[3], &control) != napi_ok) {
    napi_throw_type_error(env, NULL, "tether: control is a boolean");
    return NULL;
  }
  if (!u32_arg(env, argv[4], &timeout_ms) || !u64_arg(env, argv[5], &token)) return NULL;
  char* ref = string_arg(env, argv[2], &len);
  if (!ref) return NULL;
  napi_value promise = register_call(env, rb, token);
  if (promise) {
    const int rc = rb->closed ? TETHER_E_UNAVAILABLE
                   : tb->h    ? tether_reopen(rb->rt, (tether_transport*)tb->h, ref, len, control, timeout_ms, token)
                              : TETHER_E_INVALID_ARGUMENT;
    settle_refused(env, rb, token, rc, rb->closed ? "tether: the sandbox was closed" : "tether: a closed transport");
  }
  free(ref);
  return promise;
}

/* The process box of argv[0] and the call's promise; rejects at once when the
 * handle is closed. */
typedef int (*process_call)(tether_process* p, napi_env env, napi_value* argv, uint64_t token);

static napi_value process_op(napi_env env, napi_callback_info info, size_t nargs, process_call fn) {
  size_t argc = nargs;
  napi_value argv[4];
  CHECK_NAPI(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < nargs) {
    napi_throw_type_error(env, NULL, "tether: too few arguments");
    return NULL;
  }
  handle_box* b = box_of(env, argv[0], BOX_PROCESS);
  if (!b) return NULL;
  uint64_t token;
  if (!u64_arg(env, argv[nargs - 1], &token)) return NULL;
  napi_value promise;
  if (!b->h || !b->rt || b->rt->closed) {
    napi_deferred d;
    CHECK_NAPI(env, napi_create_promise(env, &d, &promise));
    napi_reject_deferred(env, d, error_value(env, TETHER_E_INVALID_ARGUMENT, "tether: the process handle is closed", 36));
    return promise;
  }
  rt_box* rb = b->rt;
  promise = register_call(env, rb, token);
  if (!promise) return NULL;
  const int rc = fn((tether_process*)b->h, env, argv, token);
  bool exc = false;
  napi_is_exception_pending(env, &exc);
  if (exc) {
    /* A bad argument: no C call was made. */
    napi_value e;
    napi_get_and_clear_last_exception(env, &e);
    size_t at = 0;
    pending* p = find_call(rb, token, &at);
    if (p) {
      napi_deferred d = p->deferred;
      drop_call(rb, at);
      napi_reject_deferred(env, d, e);
    }
    return promise;
  }
  settle_refused(env, rb, token, rc, "tether: the call was refused");
  return promise;
}

static int do_write(tether_process* p, napi_env env, napi_value* argv, uint64_t token) {
  bool is_ta = false;
  napi_is_typedarray(env, argv[1], &is_ta);
  if (!is_ta) {
    napi_throw_type_error(env, NULL, "tether: write takes a Uint8Array");
    return -1;
  }
  napi_typedarray_type type;
  size_t length = 0, offset = 0;
  void* data = NULL;
  napi_value ab;
  napi_get_typedarray_info(env, argv[1], &type, &length, &data, &ab, &offset);
  if (type != napi_uint8_array) {
    napi_throw_type_error(env, NULL, "tether: write takes a Uint8Array");
    return -1;
  }
  return tether_process_write(p, data, length, token); /* copied before it returns */
}
static int do_close_stdin(tether_process* p, napi_env env, napi_value* argv, uint64_t token) {
  (void)env, (void)argv;
  return tether_process_close_stdin(p, token);
}
static int do_read(tether_process* p, napi_env env, napi_value* argv, uint64_t token) {
  unsigned max_bytes = 0;
  if (!u32_arg(env, argv[2], &max_bytes)) return -1;
  return tether_process_read_some(p, max_bytes, token);
}
static int do_wait(tether_process* p, napi_env env, napi_value* argv, uint64_t token) {
  (void)env, (void)argv;
  return tether_process_wait(p, token);
}
static int do_status(tether_process* p, napi_env env, napi_value* argv, uint64_t token) {
  (void)env, (void)argv;
  return tether_process_status(p, token);
}
static int do_signal(tether_process* p, napi_env env, napi_value* argv, uint64_t token) {
  char* name = string_arg(env, argv[1], NULL);
  if (!name) return -1;
  const int rc = tether_process_signal(p, name, token);
  free(name);
  return rc;
}
static int do_terminate(tether_process* p, napi_env env, napi_value* argv, uint64_t token) {
  unsigned grace = 0;
  if (!u32_arg(env, argv[1], &grace)) return -1;
  return tether_process_terminate(p, grace, token);
}
static int do_resize(tether_process* p, napi_env env, napi_value* argv, uint64_t token) {
  unsigned cols = 0, rows = 0;
  if (!u32_arg(env, argv[1], &cols) || !u32_arg(env, argv[2], &rows)) return -1;
  return tether_process_resize(p, cols, rows, token);
}
static int do_disconnect(tether_process* p, napi_env env, napi_value* argv, uint64_t token) {
  (void)env, (void)argv;
  return tether_process_disconnect(p, token);
}
static int do_detach(tether_process* p, napi_env env, napi_value* argv, uint64_t token) {
  (void)env, (void)argv;
  return tether_process_detach(p, token);
}

static napi_value js_write(napi_env env, napi_callback_info info) { return process_op(env, info, 3, do_write); }
static napi_value js_close_stdin(napi_env env, napi_callback_info info) {
  return process_op(env, info, 2, do_close_stdin);
}
/* read(handle, text, maxBytes, token): `text` cuts the pieces between
 * characters and makes strings of them; at most maxBytes (>= 16 KiB). */
static napi_value js_read(napi_env env, napi_callback_info info) {
  napi_value promise = process_op(env, info, 4, do_read);
  size_t argc = 4;
  napi_value argv[4];
  bool text = false;
  if (!promise || napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return promise;
  napi_get_value_bool(env, argv[1], &text);
  handle_box* b = NULL;
  napi_get_value_external(env, argv[0], (void**)&b);
  uint64_t token;
  size_t at = 0;
  pending* p;
  if (text && b && b->rt && u64_arg(env, argv[3], &token) && (p = find_call(b->rt, token, &at))) p->pieces = PIECES_TEXT;
  return promise;
}
static napi_value js_wait(napi_env env, napi_callback_info info) { return process_op(env, info, 2, do_wait); }
static napi_value js_status(napi_env env, napi_callback_info info) { return process_op(env, info, 2, do_status); }
static napi_value js_signal(napi_env env, napi_callback_info info) { return process_op(env, info, 3, do_signal); }
static napi_value js_terminate(napi_env env, napi_callback_info info) {
  return process_op(env, info, 3, do_terminate);
}
static napi_value js_resize(napi_env env, napi_callback_info info) { return process_op(env, info, 4, do_resize); }
static napi_value js_disconnect(napi_env env, napi_callback_info info) {
  return process_op(env, info, 2, do_disconnect);
}
static napi_value js_detach(napi_env env, napi_callback_info info) { return process_op(env, info, 2, do_detach); }

static napi_value js_reference(napi_env env, napi_callback_info info) {
  ARGS(1);
  handle_box* b = box_of(env, argv[0], BOX_PROCESS);
  if (!b) return NULL;
  if (!b->h || !b->rt || b->rt->closed) {
    napi_throw(env, error_value(env, TETHER_E_INVALID_ARGUMENT, "tether: the process handle is closed", 36));
    return NULL;
  }
  char *out = NULL, *message = NULL;
  size_t size = 0;
  const int rc = tether_process_reference((tether_process*)b->h, &out, &size, &message);
  if (rc != 0) {
    napi_value err = error_value(env, rc, message, message ? strlen(message) : 0);
    tether_free_string(message);
    napi_throw(env, err);
    return NULL;
  }
  napi_value s;
  napi_status st = napi_create_string_utf8(env, out, size, &s);
  tether_free_string(out);
  CHECK_NAPI(env, st);
  return s;
}

static napi_value js_process_free(napi_env env, napi_callback_info info) {
  ARGS(1);
  handle_box* b = box_of(env, argv[0], BOX_PROCESS);
  if (b) free_box_handle(b);
  return NULL;
}

static napi_value js_cancel(napi_env env, napi_callback_info info) {
  ARGS(2);
  rt_box* rb = runtime_of(env, argv[0]);
  uint64_t token;
  if (!rb || !u64_arg(env, argv[1], &token)) return NULL;
  if (!rb->closed) tether_cancel(rb->rt, token);
  return NULL;
}

static napi_value js_providers(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value s;
  CHECK_NAPI(env, napi_create_string_utf8(env, tether_providers(), NAPI_AUTO_LENGTH, &s));
  return s;
}

static napi_value js_error_name(napi_env env, napi_callback_info info) {
  ARGS(1);
  int32_t code = 0;
  CHECK_NAPI(env, napi_get_value_int32(env, argv[0], &code));
  napi_value s;
  CHECK_NAPI(env, napi_create_string_utf8(env, tether_error_name(code), NAPI_AUTO_LENGTH, &s));
  return s;
}

static napi_value init(napi_env env, napi_value exports) {
  const napi_property_descriptor fns[] = {
      {"runtimeNew", NULL, js_runtime_new, NULL, NULL, NULL, napi_default, NULL},
      {"runtimeClose", NULL, js_runtime_close, NULL, NULL, NULL, napi_default, NULL},
      {"transportNew", NULL, js_transport_new, NULL, NULL, NULL, napi_default, NULL},
      {"start", NULL, js_start, NULL, NULL, NULL, napi_default, NULL},
      {"reopen", NULL, js_reopen, NULL, NULL, NULL, napi_default, NULL},
      {"write", NULL, js_write, NULL, NULL, NULL, napi_default, NULL},
      {"closeStdin", NULL, js_close_stdin, NULL, NULL, NULL, napi_default, NULL},
      {"read", NULL, js_read, NULL, NULL, NULL, napi_default, NULL},
      {"wait", NULL, js_wait, NULL, NULL, NULL, napi_default, NULL},
      {"status", NULL, js_status, NULL, NULL, NULL, napi_default, NULL},
      {"signal", NULL, js_signal, NULL, NULL, NULL, napi_default, NULL},
      {"terminate", NULL, js_terminate, NULL, NULL, NULL, napi_default, NULL},
      {"resize", NULL, js_resize, NULL, NULL, NULL, napi_default, NULL},
      {"disconnect", NULL, js_disconnect, NULL, NULL, NULL, napi_default, NULL},
      {"detach", NULL, js_detach, NULL, NULL, NULL, napi_default, NULL},
      {"reference", NULL, js_reference, NULL, NULL, NULL, napi_default, NULL},
      {"processFree", NULL, js_process_free, NULL, NULL, NULL, napi_default, NULL},
      {"cancel", NULL, js_cancel, NULL, NULL, NULL, napi_default, NULL},
      {"providers", NULL, js_providers, NULL, NULL, NULL, napi_default, NULL},
      {"errorName", NULL, js_error_name, NULL, NULL, NULL, napi_default, NULL},
  };
  CHECK_NAPI(env, napi_define_properties(env, exports, sizeof fns / sizeof fns[0], fns));
  return exports;
}

NAPI_MODULE_INIT() { return init(env, exports); }
