/* softmetal MSL: finds the kernels of a source, generates trampolines,
 * compiles with clang++ against the compat metal_stdlib, caches, dlopens. */
#define _GNU_SOURCE /* posix_spawn extras, strdup */
#include "sm_internal.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Embedded at build time (sm_embedded.c). */
extern const char sm__metal_stdlib_text[];
extern const char sm__abi_text[];

#define LIB_ERROR_DOMAIN "MTLLibraryErrorDomain"
enum { LIB_ERROR_COMPILE_FAILURE = 3, LIB_ERROR_INTERNAL = 2 };
enum { MAX_THREADS = 1024 };
/* -fsigned-char: MSL's char is signed, C++'s is unsigned on aarch64 Linux. */
static const char *const CXX_FLAGS[] = {"-std=c++17", "-O2", "-fPIC", "-shared", "-w",
                                        "-fno-exceptions", "-fno-rtti", "-fsigned-char"};
enum { N_CXX_FLAGS = sizeof CXX_FLAGS / sizeof CXX_FLAGS[0] };

/* MTLMathMode (NSInteger) and the flags that give the CPU compile the same
 * licence as Metal's: Safe compiles as IEEE; Relaxed allows unsafe
 * optimisations but keeps infinities and NaNs; Fast (Metal's default, also
 * fastMathEnabled = YES and options = nil) assumes neither exists, so
 * isnan() folds to false and NaN propagation is not kept, as on a GPU.
 * These are the parts of -ffast-math (the same compiler settings), spelt
 * out because -ffast-math also links crtfastmath.o, whose constructor
 * would turn on flush-to-zero in the process that loads the kernel.
 * SM_UNSAFE_MATH tells metal_stdlib to keep precise:: precise. */
enum { MATH_MODE_SAFE = 0, MATH_MODE_RELAXED = 1, MATH_MODE_FAST = 2, MAX_MATH_FLAGS = 9 };
#define UNSAFE_MATH_FLAGS                                                                  \
  "-DSM_UNSAFE_MATH=1", "-fno-signed-zeros", "-fassociative-math", "-freciprocal-math", "-fno-math-errno",       \
      "-fno-trapping-math", "-ffp-contract=fast", "-fapprox-func"
static const char *const MATH_FLAGS[][MAX_MATH_FLAGS] = {
    [MATH_MODE_SAFE] = {NULL},
    [MATH_MODE_RELAXED] = {UNSAFE_MATH_FLAGS, NULL},
    [MATH_MODE_FAST] = {UNSAFE_MATH_FLAGS, "-ffinite-math-only"},
};
#undef UNSAFE_MATH_FLAGS
static const char *const MATH_MODE_NAMES[] = {"Safe", "Relaxed", "Fast"};

/* ------------------------------------------------------------- text buffer */
typedef struct {
  char *p;
  size_t n, cap;
  bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = (b->n + n + 1) * 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
  char tmp[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof tmp) {
    sb_put(b, tmp, (size_t)n);
    return;
  }
  char *big = malloc((size_t)n + 1);
  if (!big) {
    b->oom = true;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  sb_put(b, big, (size_t)n);
  free(big);
}

/* ------------------------------------------------------------- scanner */
typedef struct {
  char name[128];
  size_t body_start, body_end;
  uint32_t buffer_mask, tg_mask;
  bool fibers;
  sbuf call; /* trampoline arguments */
} kernel_info;

typedef struct {
  const char *src;
  char *clean;  /* comments and literals blanked, same length */
  char *out;    /* source with kernel parameter attributes blanked */
  size_t len;
  kernel_info *k;
  size_t nk;
  bool global_fibers;
  char err[1024];
} scan;

static bool ident_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

static int line_of(const scan *s, size_t pos) {
  int line = 1;
  for (size_t i = 0; i < pos && i < s->len; i++) line += s->src[i] == '\n';
  return line;
}

static void blank_comments(scan *s) {
  char *c = s->clean;
  size_t n = s->len;
  for (size_t i = 0; i < n;) {
    if (c[i] == '/' && i + 1 < n && c[i + 1] == '/') {
      while (i < n && c[i] != '\n') c[i++] = ' ';
    } else if (c[i] == '/' && i + 1 < n && c[i + 1] == '*') {
      c[i++] = ' ';
      c[i++] = ' ';
      while (i < n && !(c[i] == '*' && i + 1 < n && c[i + 1] == '/')) {
        if (c[i] != '\n') c[i] = ' ';
        i++;
      }
      if (i < n) c[i++] = ' ';
      if (i < n) c[i++] = ' ';
    } else if (c[i] == '"' || c[i] == '\'') {
      char q = c[i++];
      while (i < n && c[i] != q && c[i] != '\n') {
        if (c[i] == '\\' && i + 1 < n) c[i++] = ' ';
        c[i++] = ' ';
      }
      i++;
    } else {
      i++;
    }
  }
}

static size_t skip_space(const scan *s, size_t i) {
  while (i < s->len && isspace((unsigned char)s->clean[i])) i++;
  return i;
}

static size_t read_ident(const scan *s, size_t i, char *out, size_t cap) {
  size_t j = i;
  while (j < s->len && ident_char(s->clean[j])) j++;
  size_t n = j - i < cap - 1 ? j - i : cap - 1;
  memcpy(out, s->clean + i, n);
  out[n] = 0;
  return j;
}

/* Index of the bracket closing the one at open, or len. */
static size_t match_close(const scan *s, size_t open) {
  int depth = 0;
  for (size_t i = open; i < s->len; i++) {
    char c = s->clean[i];
    if (c == '(' || c == '[' || c == '{') depth++;
    else if (c == ')' || c == ']' || c == '}') {
      if (--depth == 0) return i;
    }
  }
  return s->len;
}

static bool on_directive_line(const scan *s, size_t pos) {
  size_t i = pos;
  while (i > 0 && s->clean[i - 1] != '\n') i--;
  while (i < pos && isspace((unsigned char)s->clean[i])) i++;
  return s->clean[i] == '#';
}

static void trim(const char **a, const char **b) {
  while (*a < *b && isspace((unsigned char)**a)) (*a)++;
  while (*b > *a && isspace((unsigned char)(*b)[-1])) (*b)--;
}

static const struct {
  const char *attr;
  const char *field;
  bool vector;
} BUILTINS[] = {
    {"thread_position_in_grid", "tpig", true},
    {"threads_per_grid", "tpg", true},
    {"thread_position_in_threadgroup", "tpitg", true},
    {"threadgroup_position_in_grid", "tgpig", true},
    {"threads_per_threadgroup", "tptg", true},
    {"threadgroups_per_grid", "tgpg", true},
    {"thread_index_in_threadgroup", "tiitg", false},
    {"thread_index_in_simdgroup", "lane", false},
    {"simdgroup_index_in_threadgroup", "simdgroup", false},
    {"threads_per_simdgroup", "32u", false},
    {"thread_execution_width", "32u", false},
    {"simdgroups_per_threadgroup", "((t->tg_threads + 31u) / 32u)", false},
};

/* Parses one kernel parameter [a, b) and appends its trampoline argument. */
static bool scan_param(scan *s, kernel_info *k, size_t a, size_t b, int index) {
  const char *c = s->clean;
  while (a < b && isspace((unsigned char)c[a])) a++;
  size_t at = a;
  while (at + 1 < b && !(c[at] == '[' && c[at + 1] == '[')) at++;
  if (at + 1 >= b) {
    snprintf(s->err, sizeof s->err,
             "program_source:%d: error: parameter %d of kernel %s has no attribute "
             "([[buffer(n)]], [[threadgroup(n)]] or a built-in such as "
             "[[thread_position_in_grid]])", line_of(s, a), index, k->name);
    return false;
  }
  size_t close = at + 2;
  while (close + 1 < b && !(c[close] == ']' && c[close + 1] == ']')) close++;
  if (close + 1 >= b) {
    snprintf(s->err, sizeof s->err, "program_source:%d: error: unterminated attribute",
             line_of(s, at));
    return false;
  }
  char attr[128];
  const char *aa = c + at + 2, *ab = c + close;
  trim(&aa, &ab);
  snprintf(attr, sizeof attr, "%.*s", (int)(ab - aa), aa);
  for (size_t i = at; i < close + 2; i++) s->out[i] = ' ';
  /* The declaration without the attribute: type, then name. */
  const char *da = c + a, *db = c + at;
  trim(&da, &db);
  const char *name = db;
  while (name > da && ident_char(name[-1])) name--;
  const char *ta = da, *tb = name;
  trim(&ta, &tb);
  if (name == db || ta == tb) {
    snprintf(s->err, sizeof s->err,
             "program_source:%d: error: cannot read the type and name of parameter %d of "
             "kernel %s", line_of(s, a), index, k->name);
    return false;
  }
  int type_len = (int)(tb - ta);
  const char *type = s->src + (ta - c); /* original text: same offsets */
  if (index) sb_put(&k->call, ", ", 2);
  unsigned n = 0;
  char extra = 0;
  if (sscanf(attr, "buffer ( %u ) %c", &n, &extra) == 1 ||
      sscanf(attr, "buffer(%u)%c", &n, &extra) == 1) {
    if (n >= SM_MAX_BINDINGS) goto bad_index;
    k->buffer_mask |= 1u << n;
    if (tb[-1] == '&') sb_printf(&k->call, "*(%.*s*)(t->buffers[%u])", type_len - 1, type, n);
    else if (memchr(ta, '*', (size_t)type_len))
      sb_printf(&k->call, "(%.*s)(t->buffers[%u])", type_len, type, n);
    else goto bad_type;
    return true;
  }
  if (sscanf(attr, "threadgroup ( %u ) %c", &n, &extra) == 1 ||
      sscanf(attr, "threadgroup(%u)%c", &n, &extra) == 1) {
    if (n >= SM_MAX_BINDINGS) goto bad_index;
    k->tg_mask |= 1u << n;
    if (!memchr(ta, '*', (size_t)type_len)) goto bad_type;
    sb_printf(&k->call, "(%.*s)(t->tgmem[%u])", type_len, type, n);
    return true;
  }
  for (size_t i = 0; i < sizeof BUILTINS / sizeof BUILTINS[0]; i++) {
    if (strcmp(attr, BUILTINS[i].attr) != 0) continue;
    if (BUILTINS[i].vector)
      sb_printf(&k->call, "::sm::pick<%.*s>(t->%s)", type_len, type, BUILTINS[i].field);
    else if (BUILTINS[i].field[0] == '3' || BUILTINS[i].field[0] == '(')
      sb_printf(&k->call, "(%.*s)%s", type_len, type, BUILTINS[i].field);
    else
      sb_printf(&k->call, "(%.*s)(t->%s)", type_len, type, BUILTINS[i].field);
    return true;
  }
  snprintf(s->err, sizeof s->err,
           "program_source:%d: error: parameter %d of kernel %s: attribute [[%s]] is not "
           "supported by softmetal", line_of(s, a), index, k->name, attr);
  return false;
bad_index:
  snprintf(s->err, sizeof s->err,
           "program_source:%d: error: parameter %d of kernel %s: [[%s]] index must be < %u",
           line_of(s, a), index, k->name, attr, SM_MAX_BINDINGS);
  return false;
bad_type:
  snprintf(s->err, sizeof s->err,
           "program_source:%d: error: parameter %d of kernel %s: [[%s]] needs a %s type, "
           "got '%.*s'", line_of(s, a), index, k->name, attr,
           attr[0] == 'b' ? "pointer or reference" : "pointer", type_len, type);
  return false;
}

static bool scan_kernel(scan *s, size_t after_kernel, size_t *resume) {
  char word[128];
  size_t i = skip_space(s, after_kernel);
  i = read_ident(s, i, word, sizeof word);
  if (strcmp(word, "void") != 0) {
    snprintf(s->err, sizeof s->err,
             "program_source:%d: error: a kernel function must return void",
             line_of(s, after_kernel));
    return false;
  }
  kernel_info *ks = realloc(s->k, (s->nk + 1) * sizeof *ks);
  if (!ks) {
    snprintf(s->err, sizeof s->err, "out of memory");
    return false;
  }
  s->k = ks;
  kernel_info *k = &s->k[s->nk++];
  memset(k, 0, sizeof *k);
  i = skip_space(s, i);
  i = read_ident(s, i, k->name, sizeof k->name);
  i = skip_space(s, i);
  if (!k->name[0] || i >= s->len || s->clean[i] != '(') {
    snprintf(s->err, sizeof s->err,
             "program_source:%d: error: expected 'kernel void name(' (templates are not "
             "supported by softmetal)", line_of(s, after_kernel));
    return false;
  }
  size_t close = match_close(s, i);
  if (close >= s->len) {
    snprintf(s->err, sizeof s->err, "program_source:%d: error: unbalanced '(' in kernel %s",
             line_of(s, i), k->name);
    return false;
  }
  sb_put(&k->call, "", 0);
  size_t start = i + 1;
  int index = 0, depth = 0;
  const char *c = s->clean;
  for (size_t j = start; j <= close; j++) {
    char ch = c[j];
    if (ch == '(' || ch == '[' || ch == '{' || ch == '<') depth++;
    else if (ch == ']' || ch == '}' || ch == '>' || (ch == ')' && j < close)) depth--;
    if ((ch == ',' && depth == 0) || j == close) {
      const char *pa = c + start, *pb = c + j;
      trim(&pa, &pb);
      if (pa < pb) {
        if (!scan_param(s, k, start, j, index)) return false;
        index++;
      }
      start = j + 1;
    }
  }
  size_t body = skip_space(s, close + 1);
  if (body >= s->len || s->clean[body] != '{') {
    snprintf(s->err, sizeof s->err,
             "program_source:%d: error: kernel %s: expected a function body",
             line_of(s, close), k->name);
    return false;
  }
  k->body_start = body;
  k->body_end = match_close(s, body);
  *resume = close + 1;
  return true;
}

static bool starts_with(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

static bool scan_source(scan *s) {
  const char *c = s->clean;
  for (size_t i = 0; i < s->len;) {
    if (!ident_char(c[i]) || (i > 0 && ident_char(c[i - 1]))) {
      i++;
      continue;
    }
    char word[128];
    size_t end = read_ident(s, i, word, sizeof word);
    if (strcmp(word, "kernel") == 0 && !on_directive_line(s, i)) {
      size_t resume = end;
      if (!scan_kernel(s, end, &resume)) return false;
      end = resume;
    }
    i = end;
  }
  /* Which kernels synchronize: by the names they (or any helper) use. */
  for (size_t i = 0; i < s->len;) {
    if (!ident_char(c[i]) || (i > 0 && ident_char(c[i - 1]))) {
      i++;
      continue;
    }
    char word[128];
    size_t end = read_ident(s, i, word, sizeof word);
    if (strcmp(word, "threadgroup_barrier") == 0 || strcmp(word, "simdgroup_barrier") == 0 ||
        starts_with(word, "simd_") || starts_with(word, "quad_")) {
      bool inside = false;
      for (size_t k = 0; k < s->nk; k++)
        if (i > s->k[k].body_start && i < s->k[k].body_end) {
          s->k[k].fibers = true;
          inside = true;
        }
      if (!inside) s->global_fibers = true;
    }
    i = end;
  }
  return true;
}

/* Length of the pp-number at i, 0 when none starts there. */
static size_t number_length(const scan *s, size_t i) {
  const char *c = s->clean;
  if (i > 0 && (ident_char(c[i - 1]) || c[i - 1] == '.')) return 0;
  if (!isdigit((unsigned char)c[i]) &&
      !(c[i] == '.' && i + 1 < s->len && isdigit((unsigned char)c[i + 1])))
    return 0;
  size_t j = i;
  while (j < s->len) {
    char ch = c[j];
    if (ident_char(ch) || ch == '.') j++;
    else if ((ch == '+' || ch == '-') && strchr("eEpP", c[j - 1])) j++;
    else break;
  }
  return j - i;
}

/* The source to compile: attributes blanked, threadgroup locals shared by the
 * threadgroup, half literals (1.5h) spelled as user-defined literals. */
static void emit_source(const scan *s, sbuf *b) {
  size_t from = 0;
  const char *c = s->clean;
  for (size_t i = 0; i < s->len; i++) {
    size_t num = number_length(s, i);
    if (num) {
      size_t last = i + num - 1;
      bool hex = c[i] == '0' && num > 1 && (c[i + 1] == 'x' || c[i + 1] == 'X');
      if (!hex && (c[last] == 'h' || c[last] == 'H')) {
        sb_put(b, s->out + from, last - from);
        sb_put(b, "_h", 2);
        from = last + 1;
      }
      i = last;
      continue;
    }
    if (!(c[i] == 't' && (i == 0 || !ident_char(c[i - 1])) && starts_with(c + i, "threadgroup") &&
          !ident_char(c[i + 11])))
      continue;
    size_t p = i;
    while (p > 0 && isspace((unsigned char)c[p - 1])) p--;
    if (p > 0 && c[p - 1] != '{' && c[p - 1] != ';' && c[p - 1] != '}') continue;
    sb_put(b, s->out + from, i - from);
    sb_put(b, "SM_THREADGROUP_VAR", 18);
    from = i + 11;
  }
  sb_put(b, s->out + from, s->len - from);
}

/* ------------------------------------------------------------- cache and compile */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

static pthread_mutex_t g_cache_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_uint g_tmp_counter;

static bool mkdirs(const char *path) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST) return false;
    *p = '/';
  }
  return mkdir(tmp, 0700) == 0 || errno == EEXIST;
}

static void cache_dir(char *out, size_t cap) {
  const char *d = getenv("SOFTMETAL_CACHE_DIR");
  const char *x = getenv("XDG_CACHE_HOME");
  if (d && *d) snprintf(out, cap, "%s", d);
  else if (x && *x) snprintf(out, cap, "%s/softmetal", x);
  else snprintf(out, cap, "/tmp/softmetal-%u", (unsigned)getuid());
}

static bool write_file(const char *path, const char *text, size_t n) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%.3500s.tmp-%d-%u", path, (int)getpid(), atomic_fetch_add(&g_tmp_counter, 1));
  FILE *f = fopen(tmp, "wb");
  if (!f) return false;
  bool ok = fwrite(text, 1, n, f) == n;
  ok = fclose(f) == 0 && ok;
  if (ok) ok = rename(tmp, path) == 0;
  if (!ok) unlink(tmp);
  return ok;
}

static bool file_exists(const char *path) { return access(path, R_OK) == 0; }

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  sbuf b = {0};
  char chunk[4096];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) sb_put(&b, chunk, n);
  fclose(f);
  if (!b.p) sb_put(&b, "", 0);
  return b.p;
}

/* Runs the compiler; on failure returns false with its output in *diag. */
static bool run_cxx(const char *cxx, NSInteger math_mode, const char *inc, const char *src,
                    const char *obj, const char *log, char **diag) {
  char incflag[3500];
  snprintf(incflag, sizeof incflag, "-I%s", inc);
  const char *argv[N_CXX_FLAGS + MAX_MATH_FLAGS + 8];
  int a = 0;
  argv[a++] = cxx;
  for (int i = 0; i < N_CXX_FLAGS; i++) argv[a++] = CXX_FLAGS[i];
  for (int i = 0; i < MAX_MATH_FLAGS && MATH_FLAGS[math_mode][i]; i++)
    argv[a++] = MATH_FLAGS[math_mode][i];
  argv[a++] = incflag;
  argv[a++] = "-o";
  argv[a++] = obj;
  argv[a++] = src;
  argv[a] = NULL;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  char *const *args;
  memcpy(&args, &(const char *const *){argv}, sizeof args);
  int rc = posix_spawnp(&pid, cxx, &fa, NULL, args, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    sbuf b = {0};
    sb_printf(&b, "cannot run the C++ compiler '%s' (%s); set SOFTMETAL_CXX", cxx, strerror(rc));
    *diag = b.p;
    return false;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
  *diag = read_text(log);
  if (!*diag) *diag = strdup("the C++ compiler failed without output");
  return false;
}

/* The other standard headers MSL sources include all mean metal_stdlib. */
static const char *const aliases[] = {"metal_math",    "metal_atomic",     "metal_compute",
                                      "metal_simdgroup", "metal_integer",  "metal_common",
                                      "metal_geometric", "metal_relational"};
enum { N_ALIASES = sizeof aliases / sizeof aliases[0] };
static const char alias_text[] = "#include <metal_stdlib>\n";

/* Compiles (or finds in the cache) the library for tu under math_mode;
 * returns a dlopen handle. The cache key covers the math mode. */
static void *compile_tu(const char *tu, NSInteger math_mode, char **diag) {
  const char *cxx = getenv("SOFTMETAL_CXX");
  if (!cxx || !*cxx) cxx = "clang++";
  char dir[3072], inc[3200], so[3400], src[3400], tmp_so[3400], log[3400];
  cache_dir(dir, sizeof dir);
  uint64_t hh = fnv(0xcbf29ce484222325ull, sm__metal_stdlib_text, strlen(sm__metal_stdlib_text));
  hh = fnv(hh, sm__abi_text, strlen(sm__abi_text));
  for (size_t i = 0; i < N_ALIASES; i++) hh = fnv(hh, aliases[i], strlen(aliases[i]) + 1);
  uint64_t h = fnv(hh, tu, strlen(tu));
  h = fnv(h, cxx, strlen(cxx));
  for (int i = 0; i < N_CXX_FLAGS; i++) h = fnv(h, CXX_FLAGS[i], strlen(CXX_FLAGS[i]) + 1);
  const char *mode_name = MATH_MODE_NAMES[math_mode];
  h = fnv(h, mode_name, strlen(mode_name) + 1);
  for (int i = 0; i < MAX_MATH_FLAGS && MATH_FLAGS[math_mode][i]; i++)
    h = fnv(h, MATH_FLAGS[math_mode][i], strlen(MATH_FLAGS[math_mode][i]) + 1);
  snprintf(inc, sizeof inc, "%s/include-%016llx", dir, (unsigned long long)hh);
  snprintf(so, sizeof so, "%s/k-%016llx.so", dir, (unsigned long long)h);
  if (file_exists(so)) {
    void *dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (dl) {
      atomic_fetch_add(&sm__cache_hits, 1);
      return dl;
    }
  }
  pthread_mutex_lock(&g_cache_lock);
  char hdr[3400], abi[3400];
  snprintf(hdr, sizeof hdr, "%s/metal_stdlib", inc);
  snprintf(abi, sizeof abi, "%s/sm_abi.h", inc);
  bool ok = mkdirs(inc);
  if (ok && !file_exists(hdr)) {
    for (size_t i = 0; ok && i < N_ALIASES; i++) {
      char path[3400];
      snprintf(path, sizeof path, "%.3000s/%s", inc, aliases[i]);
      ok = write_file(path, alias_text, sizeof alias_text - 1);
    }
    ok = ok && write_file(abi, sm__abi_text, strlen(sm__abi_text)) &&
         write_file(hdr, sm__metal_stdlib_text, strlen(sm__metal_stdlib_text));
  }
  pthread_mutex_unlock(&g_cache_lock);
  if (!ok) {
    sbuf b = {0};
    sb_printf(&b, "cannot write the kernel cache directory %s (%s); set SOFTMETAL_CACHE_DIR",
              inc, strerror(errno));
    *diag = b.p;
    return NULL;
  }
  unsigned n = atomic_fetch_add(&g_tmp_counter, 1);
  snprintf(src, sizeof src, "%s/k-%016llx-%d-%u.cpp", dir, (unsigned long long)h, (int)getpid(), n);
  snprintf(tmp_so, sizeof tmp_so, "%s/k-%016llx-%d-%u.so", dir, (unsigned long long)h,
           (int)getpid(), n);
  snprintf(log, sizeof log, "%s/k-%016llx-%d-%u.log", dir, (unsigned long long)h, (int)getpid(), n);
  FILE *f = fopen(src, "wb");
  if (!f || fputs(tu, f) < 0 || fclose(f) != 0) {
    sbuf b = {0};
    sb_printf(&b, "cannot write %s (%s)", src, strerror(errno));
    *diag = b.p;
    return NULL;
  }
  atomic_fetch_add(&sm__compiles, 1);
  ok = run_cxx(cxx, math_mode, inc, src, tmp_so, log, diag);
  unlink(src);
  unlink(log);
  if (ok && rename(tmp_so, so) != 0) {
    unlink(tmp_so);
    ok = false;
    *diag = strdup("cannot move the compiled kernel into the cache");
  }
  if (!ok) return NULL;
  void *dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    const char *e = dlerror();
    *diag = strdup(e ? e : "dlopen failed");
  }
  return dl;
}

/* ------------------------------------------------------------- objects */
typedef struct {
  sm_obj hdr;
  id device;
  void *dl;
  const struct sm_kernel_desc *kernels;
  unsigned n;
} sm_library;

typedef struct {
  sm_obj hdr;
  sm_library *library;
  const struct sm_kernel_desc *desc;
  id name;
} sm_function;

/* MTLCompileOptions: only the math settings are kept; mathMode is the
 * truth, fastMathEnabled its older view (YES for Relaxed and Fast). */
typedef struct {
  sm_obj hdr;
  NSInteger math_mode;
  bool initialized; /* alloc without init is misuse */
} sm_compile_options;

static sm_class options_class = {"MTLCompileOptions", sizeof(sm_compile_options), NULL, Nil, 0};

static id options_init(id self, SEL cmd) {
  (void)cmd;
  ((sm_compile_options *)self)->math_mode = MATH_MODE_FAST; /* Metal's default */
  ((sm_compile_options *)self)->initialized = true;
  return self;
}
static BOOL options_fast_math(id self, SEL cmd) {
  (void)cmd;
  return ((sm_compile_options *)self)->math_mode != MATH_MODE_SAFE;
}
static void options_set_fast_math(id self, SEL cmd, BOOL enabled) {
  (void)cmd;
  ((sm_compile_options *)self)->math_mode = enabled ? MATH_MODE_FAST : MATH_MODE_SAFE;
}
static NSInteger options_math_mode(id self, SEL cmd) {
  (void)cmd;
  return ((sm_compile_options *)self)->math_mode;
}
static void options_set_math_mode(id self, SEL cmd, NSInteger mode) {
  if (mode < MATH_MODE_SAFE || mode > MATH_MODE_FAST)
    sm__fatal("-[MTLCompileOptions %s]: mathMode = %ld is not an MTLMathMode "
              "(Safe 0, Relaxed 1, Fast 2)", sel_getName(cmd), (long)mode);
  ((sm_compile_options *)self)->math_mode = mode;
}

static void library_destroy(sm_obj *o) {
  sm_library *l = (sm_library *)o;
  if (l->dl) dlclose(l->dl);
  sm__release(l->device);
}
static void function_destroy(sm_obj *o) {
  sm_function *f = (sm_function *)o;
  sm__release(f->name);
  sm__release((id)f->library);
}
static void pipeline_destroy(sm_obj *o) { sm__release(((sm_pipeline *)o)->function); }

static sm_class library_class = {"SMLibrary", sizeof(sm_library), library_destroy, Nil, 0};
static sm_class function_class = {"SMFunction", sizeof(sm_function), function_destroy, Nil, 0};
sm_class sm__pipeline_class = {"SMComputePipelineState", sizeof(sm_pipeline), pipeline_destroy,
                               Nil, 0};

static void set_error(id *error, id e) {
  if (error) *error = sm__autorelease(e);
  else sm__release(e);
}

static id device_new_library(id self, SEL cmd, id source, id options, id *error) {
  if (options && !sm__is(options, &options_class))
    sm__fatal("-[SMDevice %s]: options is a %s, not an MTLCompileOptions", sel_getName(cmd),
              object_getClassName(options));
  if (options && !((sm_compile_options *)options)->initialized)
    sm__fatal("-[SMDevice %s]: options was allocated but never sent init", sel_getName(cmd));
  NSInteger math_mode = options ? ((sm_compile_options *)options)->math_mode : MATH_MODE_FAST;
  const char *text = sm__string_utf8(source);
  if (!text) {
    set_error(error, sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_COMPILE_FAILURE,
                               "%s: source = nil", sel_getName(cmd)));
    return nil;
  }
  scan s;
  memset(&s, 0, sizeof s);
  s.src = text;
  s.len = strlen(text);
  s.clean = strdup(text);
  s.out = strdup(text);
  sbuf tu = {0};
  id result = nil;
  if (!s.clean || !s.out) {
    set_error(error, sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_INTERNAL, "%s: out of memory",
                               sel_getName(cmd)));
    goto done;
  }
  blank_comments(&s);
  if (!scan_source(&s)) {
    set_error(error, sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_COMPILE_FAILURE,
                               "%s: compilation failed:\n%s", sel_getName(cmd), s.err));
    goto done;
  }
  sb_put(&tu, "#include <metal_stdlib>\n#line 1 \"program_source\"\n", 49);
  emit_source(&s, &tu);
  sb_put(&tu, "\n#line 1 \"softmetal_trampolines\"\n", 33);
  for (size_t i = 0; i < s.nk; i++)
    sb_printf(&tu, "extern \"C\" void sm_tramp_%zu(sm_thread *t) { ::sm::cur = t; %s(%s); }\n",
              i, s.k[i].name, s.k[i].call.p ? s.k[i].call.p : "");
  sb_printf(&tu, "extern \"C\" const unsigned softmetal_abi_version = SM_ABI_VERSION;\n"
                 "extern \"C\" const unsigned softmetal_kernel_count = %zu;\n"
                 "extern \"C\" const sm_kernel_desc softmetal_kernels[] = {\n", s.nk);
  for (size_t i = 0; i < s.nk; i++)
    sb_printf(&tu, "  {\"%s\", sm_tramp_%zu, %u, 0x%xu, 0x%xu},\n", s.k[i].name, i,
              (s.k[i].fibers || s.global_fibers) ? 1u : 0u, s.k[i].buffer_mask, s.k[i].tg_mask);
  sb_put(&tu, "  {0, 0, 0, 0, 0}};\n", 20);
  if (tu.oom) {
    set_error(error, sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_INTERNAL, "%s: out of memory",
                               sel_getName(cmd)));
    goto done;
  }
  char *diag = NULL;
  void *dl = compile_tu(tu.p, math_mode, &diag);
  if (!dl) {
    set_error(error, sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_COMPILE_FAILURE,
                               "%s: compilation failed:\n%s", sel_getName(cmd),
                               diag ? diag : "?"));
    free(diag);
    goto done;
  }
  const unsigned *abi = dlsym(dl, "softmetal_abi_version");
  const unsigned *count = dlsym(dl, "softmetal_kernel_count");
  const struct sm_kernel_desc *kernels = dlsym(dl, "softmetal_kernels");
  if (!abi || *abi != SM_ABI_VERSION || !count || !kernels) {
    dlclose(dl);
    set_error(error, sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_INTERNAL,
                               "%s: compiled library has no kernel table of ABI %u",
                               sel_getName(cmd), SM_ABI_VERSION));
    goto done;
  }
  sm_library *l = sm__new(&library_class);
  if (!l) {
    dlclose(dl);
    goto done;
  }
  l->device = sm__retain(self);
  l->dl = dl;
  l->kernels = kernels;
  l->n = *count;
  if (math_mode != MATH_MODE_SAFE) atomic_fetch_add(&sm__unsafe_math_libraries, 1);
  result = (id)l;
done:
  for (size_t i = 0; i < s.nk; i++) free(s.k[i].call.p);
  free(s.k);
  free(s.clean);
  free(s.out);
  free(tu.p);
  return result;
}

static id library_new_function(id self, SEL cmd, id name) {
  (void)cmd;
  sm_library *l = (sm_library *)self;
  const char *n = sm__string_utf8(name);
  if (!n) return nil;
  for (unsigned i = 0; i < l->n; i++) {
    if (strcmp(l->kernels[i].name, n) != 0) continue;
    sm_function *f = sm__new(&function_class);
    if (!f) return nil;
    f->library = (sm_library *)sm__retain(self);
    f->desc = &l->kernels[i];
    f->name = sm__string(n);
    return (id)f;
  }
  return nil;
}

static id library_function_names(id self, SEL cmd) {
  (void)cmd;
  sm_library *l = (sm_library *)self;
  id *names = calloc(l->n ? l->n : 1, sizeof(id));
  if (!names) return nil;
  for (unsigned i = 0; i < l->n; i++) names[i] = sm__string(l->kernels[i].name);
  id arr = sm__array(names, l->n);
  for (unsigned i = 0; i < l->n; i++) sm__release(names[i]);
  free(names);
  return sm__autorelease(arr);
}

static id library_device(id self, SEL cmd) { (void)cmd; return ((sm_library *)self)->device; }
static id function_device(id self, SEL cmd) {
  (void)cmd;
  return ((sm_function *)self)->library->device;
}
static id pipeline_device(id self, SEL cmd) {
  (void)cmd;
  return ((sm_function *)((sm_pipeline *)self)->function)->library->device;
}

static id function_name(id self, SEL cmd) { (void)cmd; return ((sm_function *)self)->name; }

static id device_new_pipeline(id self, SEL cmd, id function, id *error) {
  (void)self;
  if (!sm__is(function, &function_class)) {
    set_error(error, sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_INTERNAL,
                               "%s: function = %s is not a kernel function", sel_getName(cmd),
                               function ? object_getClassName(function) : "nil"));
    return nil;
  }
  sm_pipeline *p = sm__new(&sm__pipeline_class);
  if (!p) return nil;
  p->function = sm__retain(function);
  p->desc = ((sm_function *)function)->desc;
  p->max_threads = MAX_THREADS;
  return (id)p;
}

static id device_new_library_url(id self, SEL cmd, id url, id *error) {
  (void)self;
  (void)url;
  set_error(error, sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_INTERNAL,
                             "%s: softmetal compiles MSL source only; metallib files cannot "
                             "run on the CPU (use newLibraryWithSource:options:error:)",
                             sel_getName(cmd)));
  return nil;
}

static NSUInteger pipeline_max_threads(id self, SEL cmd) {
  (void)cmd;
  return ((sm_pipeline *)self)->max_threads;
}
static NSUInteger pipeline_width(id self, SEL cmd) { (void)self; (void)cmd; return SM_SIMD_WIDTH; }

void sm__register_msl(void) {
  Class c = sm__class_begin(&options_class);
  sm__method(c, "init", SM_IMP(options_init), "@@:");
  sm__method(c, "fastMathEnabled", SM_IMP(options_fast_math), "C@:");
  sm__method(c, "setFastMathEnabled:", SM_IMP(options_set_fast_math), "v@:C");
  /* SOFTMETAL_NO_MATH_MODE=1: options as before macOS 15, fastMathEnabled only. */
  const char *old_os = getenv("SOFTMETAL_NO_MATH_MODE");
  if (!old_os || strcmp(old_os, "1") != 0) {
    sm__method(c, "mathMode", SM_IMP(options_math_mode), "q@:");
    sm__method(c, "setMathMode:", SM_IMP(options_set_math_mode), "v@:q");
  }
  sm__class_end(&options_class);

  c = sm__class_begin(&library_class);
  sm__method(c, "newFunctionWithName:", SM_IMP(library_new_function), "@@:@");
  sm__method(c, "functionNames", SM_IMP(library_function_names), "@@:");
  sm__method(c, "device", SM_IMP(library_device), "@@:");
  sm__class_end(&library_class);

  c = sm__class_begin(&function_class);
  sm__method(c, "name", SM_IMP(function_name), "@@:");
  sm__method(c, "device", SM_IMP(function_device), "@@:");
  sm__class_end(&function_class);

  c = sm__class_begin(&sm__pipeline_class);
  sm__method(c, "maxTotalThreadsPerThreadgroup", SM_IMP(pipeline_max_threads), "Q@:");
  sm__method(c, "threadExecutionWidth", SM_IMP(pipeline_width), "Q@:");
  sm__method(c, "device", SM_IMP(pipeline_device), "@@:");
  sm__class_end(&sm__pipeline_class);
}

void sm__add_device_msl_methods(Class device) {
  sm__method(device, "newLibraryWithSource:options:error:", SM_IMP(device_new_library),
             "@@:@@^@");
  sm__method(device, "newLibraryWithURL:error:", SM_IMP(device_new_library_url), "@@:@^@");
  sm__method(device, "newComputePipelineStateWithFunction:error:", SM_IMP(device_new_pipeline),
             "@@:@^@");
}
