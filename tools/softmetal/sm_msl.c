/* softmetal MSL: finds the kernels of a source, generates trampolines,
 * compiles with clang++ against the compat metal_stdlib, caches, dlopens. */
#define _GNU_SOURCE /* posix_spawn extras, strdup */
#include "sm_internal.h"
#include "sm_front.h"

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
enum { MAX_THREADS = 1024, MAX_TG_MEMORY = 32768 };
/* SIMD-group functions act over the lanes at the same call (sm_exec.c tells
 * calls apart by the chain of return addresses): frame pointers and no tail
 * calls keep the chain; no merging of calls from different branches (hoist,
 * sink, tail merge) and every call convergent (no unswitching or jump
 * threading that duplicates a call for lanes that belong together).
 * -fsigned-char: MSL's char is signed, C++'s is unsigned on aarch64 Linux.
 * Integer division by zero faults on x86-64 (SIGFPE, sm_fault.c); elsewhere
 * (aarch64 gives 0) a check traps instead, which sm_fault.c recognises. */
static const char *const CXX_FLAGS[] = {
    "-std=c++17", "-O2", "-fPIC", "-shared", "-w", "-fno-exceptions", "-fno-rtti",
    "-fno-omit-frame-pointer", "-fno-optimize-sibling-calls", "-Xclang", "-fconvergent-functions",
    "-mllvm", "-simplifycfg-sink-common=false", "-mllvm", "-simplifycfg-hoist-common=false",
    "-mllvm", "-enable-tail-merge=false", "-fsigned-char",
#if !defined(__x86_64__)
    "-fsanitize=integer-divide-by-zero", "-fsanitize-trap=integer-divide-by-zero",
#endif
};
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

/* ------------------------------------------------------------- cache and compile */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 0x100000001b3ull;
  }
  return h;
}
static uint64_t fnv_str(uint64_t h, const char *s) { return fnv(h, s, strlen(s) + 1); }

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

/* The cache holds code that gets loaded: it must be ours alone. Creates it
 * 0700; refuses one owned by another user or writable by group or others. */
static bool check_cache_dir(const char *dir, char **diag) {
  struct stat st;
  if (!mkdirs(dir) || stat(dir, &st) != 0) {
    sm_text b = {0};
    sm__text_printf(&b, "cannot create the kernel cache directory %s (%s); set SOFTMETAL_CACHE_DIR",
              dir, strerror(errno));
    *diag = b.p;
    return false;
  }
  const char *why = !S_ISDIR(st.st_mode)          ? "is not a directory"
                    : st.st_uid != geteuid()      ? "is owned by another user"
                    : (st.st_mode & 022) != 0     ? "is writable by group or others"
                                                  : NULL;
  if (!why) return true;
  sm_text b = {0};
  sm__text_printf(&b, "the kernel cache directory %s %s (owner uid %u, mode %03o): softmetal does not "
            "load compiled kernels from it; set SOFTMETAL_CACHE_DIR to a directory of your own "
            "with mode 0700", dir, why, (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777));
  *diag = b.p;
  return false;
}

static bool write_file(const char *path, const char *text, size_t n) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%.3500s.tmp-%d-%u", path, (int)getpid(), atomic_fetch_add(&g_tmp_counter, 1));
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0600);
  FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
  if (!f) {
    if (fd >= 0) close(fd);
    return false;
  }
  bool ok = fwrite(text, 1, n, f) == n;
  ok = fclose(f) == 0 && ok;
  if (ok) ok = rename(tmp, path) == 0;
  if (!ok) unlink(tmp);
  return ok;
}

static bool file_exists(const char *path) { return access(path, R_OK) == 0; }

static char *read_text(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  sm_text b = {0};
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) sm__text_put(&b, chunk, n);
  fclose(f);
  if (!b.p) sm__text_put(&b, "", 0);
  if (b.oom) {
    free(b.p);
    return NULL;
  }
  if (len) *len = b.n;
  return b.p;
}

/* Runs argv with stdout and stderr to log; on failure returns false with its
 * output in *diag. */
static bool run_tool(const char *const *argv, const char *log, char **diag) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  char *const *args;
  memcpy(&args, &argv, sizeof args);
  int rc = posix_spawnp(&pid, argv[0], &fa, NULL, args, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    sm_text b = {0};
    sm__text_printf(&b, "cannot run the C++ compiler '%s' (%s); set SOFTMETAL_CXX", argv[0],
              strerror(rc));
    *diag = b.p;
    return false;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
  *diag = read_text(log, NULL);
  if (!*diag) *diag = strdup("the C++ compiler failed without output");
  return false;
}

/* The preprocessor's diagnostics name the source by its path in the work
 * directory: call it program_source, as Metal does. */
static void rename_source(char **diag, const char *path) {
  size_t n = strlen(path);
  char *p;
  while (*diag && (p = strstr(*diag, path)) != NULL) {
    memcpy(p, SM_PROGRAM_SOURCE, strlen(SM_PROGRAM_SOURCE));
    memmove(p + strlen(SM_PROGRAM_SOURCE), p + n, strlen(p + n) + 1);
  }
}

/* The other standard headers MSL sources include all mean metal_stdlib. */
static const char *const aliases[] = {
    "metal_math",      "metal_atomic",          "metal_compute", "metal_simdgroup",
    "metal_integer",   "metal_common",          "metal_geometric", "metal_relational",
    "metal_simdgroup_matrix", "metal_limits",   "metal_pack",    "metal_matrix",
    "metal_types"};
enum { N_ALIASES = sizeof aliases / sizeof aliases[0] };
static const char alias_text[] = "#include <metal_stdlib>\n";

/* Where cxx is: a path, or the first match on PATH. */
static bool resolve_exe(const char *cxx, char *out, size_t cap) {
  if (strchr(cxx, '/')) return realpath(cxx, out) != NULL;
  const char *path = getenv("PATH");
  if (!path) path = "/usr/bin:/bin";
  while (*path) {
    const char *colon = strchr(path, ':');
    size_t n = colon ? (size_t)(colon - path) : strlen(path);
    char cand[4096];
    snprintf(cand, sizeof cand, "%.*s/%s", (int)n, n ? path : ".", cxx);
    if (access(cand, X_OK) == 0 && realpath(cand, out)) return true;
    path += n + (colon ? 1 : 0);
  }
  (void)cap;
  return false;
}

/* Identity of the compiler for the cache key: its `--version` output (once
 * per process and compiler; kept in the cache by the binary's path, size and
 * time, so that a cache hit runs nothing) and the library's own build. */
static uint64_t g_id_hash, g_id_file;
static char g_id_cxx[256];

/* *file_key: the key of the --version file (cc-<key>.txt), which binary
 * archives keep too. */
static bool compiler_identity(const char *cxx, const char *dir, uint64_t *out, uint64_t *file_key,
                              char **diag) {
  pthread_mutex_lock(&g_cache_lock);
  if (g_id_hash && strcmp(g_id_cxx, cxx) == 0) {
    *out = g_id_hash;
    *file_key = g_id_file;
    pthread_mutex_unlock(&g_cache_lock);
    return true;
  }
  pthread_mutex_unlock(&g_cache_lock);
  char exe[4096];
  struct stat st;
  if (!resolve_exe(cxx, exe, sizeof exe) || stat(exe, &st) != 0) {
    sm_text b = {0};
    sm__text_printf(&b, "cannot find the C++ compiler '%s' on PATH; set SOFTMETAL_CXX", cxx);
    *diag = b.p;
    return false;
  }
  uint64_t h = fnv_str(0xcbf29ce484222325ull, exe);
  h = fnv(h, &st.st_size, sizeof st.st_size);
  h = fnv(h, &st.st_mtime, sizeof st.st_mtime);
  h = fnv(h, &st.st_ino, sizeof st.st_ino);
  char vpath[4200], log[4300];
  snprintf(vpath, sizeof vpath, "%.3000s/cc-%016llx.txt", dir, (unsigned long long)h);
  *file_key = h;
  if (!file_exists(vpath)) sm__archive_restore(SM_ARCHIVE_COMPILER, h, vpath);
  char *version = read_text(vpath, NULL);
  if (!version) {
    snprintf(log, sizeof log, "%.3000s/cc-%016llx-%d-%u.log", dir, (unsigned long long)h,
             (int)getpid(), atomic_fetch_add(&g_tmp_counter, 1));
    const char *argv[] = {exe, "--version", NULL};
    if (!run_tool(argv, log, diag)) {
      unlink(log);
      return false;
    }
    version = read_text(log, NULL);
    unlink(log);
    if (!version || !*version) {
      free(version);
      *diag = strdup("the C++ compiler printed no --version");
      return false;
    }
    write_file(vpath, version, strlen(version));
  }
  h = fnv_str(h, version);
  free(version);
  /* the code generator's sources: an edited front end writes other code */
  h = fnv_str(h, SM_GENERATOR_HASH);
  pthread_mutex_lock(&g_cache_lock);
  g_id_hash = h;
  g_id_file = *file_key;
  snprintf(g_id_cxx, sizeof g_id_cxx, "%s", cxx);
  pthread_mutex_unlock(&g_cache_lock);
  *out = h;
  return true;
}

static void remove_dir(const char *dir, const char *const *names, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char p[4400];
    snprintf(p, sizeof p, "%.4000s/%s", dir, names[i]);
    unlink(p);
  }
  rmdir(dir);
}

/* Compiles (or finds in the cache) the library for source under math_mode;
 * returns a dlopen handle. A cache hit stats the directory and the compiler
 * identity file, and runs no compiler. */
static void *compile_source(const char *source, NSInteger math_mode, unsigned metal_version,
                            char **diag, bool *internal, sm_code *code) {
  const char *cxx = getenv("SOFTMETAL_CXX");
  if (!cxx || !*cxx) cxx = "clang++";
  if (strlen(cxx) >= sizeof g_id_cxx) {
    *diag = strdup("SOFTMETAL_CXX is too long");
    return NULL;
  }
  char dir[3072], inc[3200], so[3400], work[3400];
  cache_dir(dir, sizeof dir);
  *internal = true;
  uint64_t ident, ident_file;
  if (!check_cache_dir(dir, diag) || !compiler_identity(cxx, dir, &ident, &ident_file, diag))
    return NULL;
  *internal = false;
  uint64_t hh = fnv_str(0xcbf29ce484222325ull, sm__metal_stdlib_text);
  hh = fnv_str(hh, sm__abi_text);
  for (size_t i = 0; i < N_ALIASES; i++) hh = fnv_str(hh, aliases[i]);
  uint64_t h = fnv_str(hh, source);
  h = fnv_str(h, cxx);
  h = fnv(h, &ident, sizeof ident);
  for (int i = 0; i < N_CXX_FLAGS; i++) h = fnv_str(h, CXX_FLAGS[i]);
  h = fnv_str(h, MATH_MODE_NAMES[math_mode]);
  for (int i = 0; i < MAX_MATH_FLAGS && MATH_FLAGS[math_mode][i]; i++)
    h = fnv_str(h, MATH_FLAGS[math_mode][i]);
  char version_flag[40] = "";
  if (metal_version)
    snprintf(version_flag, sizeof version_flag, "-D__METAL_VERSION__=%u", metal_version);
  h = fnv_str(h, version_flag);
  snprintf(inc, sizeof inc, "%s/include-%016llx", dir, (unsigned long long)hh);
  snprintf(so, sizeof so, "%s/k-%016llx.so", dir, (unsigned long long)h);
  /* binary archives (sm_archive.c) keep the code and the compiler's
   * identity by these keys */
  code->key = h;
  code->path = strdup(so);
  code->compiler_key = ident_file;
  code->compiler_path = malloc(strlen(dir) + 32);
  if (code->compiler_path)
    sprintf(code->compiler_path, "%s/cc-%016llx.txt", dir, (unsigned long long)ident_file);
  if (!file_exists(so)) sm__archive_restore(SM_ARCHIVE_CODE, h, so);
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
    sm_text b = {0};
    sm__text_printf(&b, "cannot write the kernel cache directory %s (%s); set SOFTMETAL_CACHE_DIR",
              inc, strerror(errno));
    *diag = b.p;
    *internal = true;
    return NULL;
  }
  /* A private work directory: program_source (named so for diagnostics),
   * its preprocessed form, the translation unit, the compiler's log. */
  snprintf(work, sizeof work, "%s/w-%016llx-%d-%u", dir, (unsigned long long)h, (int)getpid(),
           atomic_fetch_add(&g_tmp_counter, 1));
  static const char *const files[] = {SM_PROGRAM_SOURCE, "pp.ii", "k.ii", "k.so", "log"};
  if (mkdir(work, 0700) != 0) {
    sm_text b = {0};
    sm__text_printf(&b, "cannot create %s (%s)", work, strerror(errno));
    *diag = b.p;
    *internal = true;
    return NULL;
  }
  char src[3500], pp[3500], tu[3500], tmp_so[3500], log[3500], incflag[3300];
  snprintf(src, sizeof src, "%s/%s", work, SM_PROGRAM_SOURCE);
  snprintf(pp, sizeof pp, "%s/pp.ii", work);
  snprintf(tu, sizeof tu, "%s/k.ii", work);
  snprintf(tmp_so, sizeof tmp_so, "%s/k.so", work);
  snprintf(log, sizeof log, "%s/log", work);
  snprintf(incflag, sizeof incflag, "-I%s", inc);
  void *dl = NULL;
  char *pp_text = NULL, *tu_text = NULL;
  if (!write_file(src, source, strlen(source))) {
    *diag = strdup("cannot write the source into the kernel cache");
    *internal = true;
    goto out;
  }
  atomic_fetch_add(&sm__compiles, 1);
  const char *argv[N_CXX_FLAGS + MAX_MATH_FLAGS + 13];
  int a = 0;
  argv[a++] = cxx;
  argv[a++] = "-E";
  argv[a++] = "-DSM_FRONTEND=1";
  for (int i = 0; i < N_CXX_FLAGS; i++) argv[a++] = CXX_FLAGS[i];
  for (int i = 0; i < MAX_MATH_FLAGS && MATH_FLAGS[math_mode][i]; i++)
    argv[a++] = MATH_FLAGS[math_mode][i];
  if (version_flag[0]) argv[a++] = version_flag;
  argv[a++] = incflag;
  argv[a++] = "-include"; /* as before: every source sees metal_stdlib */
  argv[a++] = "metal_stdlib";
  argv[a++] = "-x";
  argv[a++] = "c++";
  argv[a++] = "-o";
  argv[a++] = pp;
  argv[a++] = src;
  argv[a] = NULL;
  if (!run_tool(argv, log, diag)) {
    rename_source(diag, src);
    goto out;
  }
  size_t pp_len = 0;
  pp_text = read_text(pp, &pp_len);
  if (!pp_text) {
    *diag = strdup("cannot read the preprocessed source");
    *internal = true;
    goto out;
  }
  tu_text = sm__front(pp_text, pp_len, src, diag);
  if (!tu_text) goto out;
  if (!write_file(tu, tu_text, strlen(tu_text))) {
    *diag = strdup("cannot write the translation unit into the kernel cache");
    *internal = true;
    goto out;
  }
  a = 0;
  argv[a++] = cxx;
  for (int i = 0; i < N_CXX_FLAGS; i++) argv[a++] = CXX_FLAGS[i];
  for (int i = 0; i < MAX_MATH_FLAGS && MATH_FLAGS[math_mode][i]; i++)
    argv[a++] = MATH_FLAGS[math_mode][i];
  if (version_flag[0]) argv[a++] = version_flag;
  int flags_end = a;
  argv[a++] = "-x";
  argv[a++] = "c++-cpp-output";
  argv[a++] = "-o";
  argv[a++] = tmp_so;
  argv[a++] = tu;
  argv[a] = NULL;
  if (!run_tool(argv, log, diag)) {
    /* half is a class here, so `c ? h : f` is ambiguous in C++: find every
     * such conditional with their operands' ranges, cast as MSL converts,
     * and compile once more (sm__front_fix_conditionals) */
    if (!strstr(*diag, "conditional expression is ambiguous")) goto out;
    const char *check[N_CXX_FLAGS + MAX_MATH_FLAGS + 12];
    memcpy(check, argv, (size_t)flags_end * sizeof *argv);
    int c = flags_end;
    check[c++] = "-fsyntax-only";
    check[c++] = "-ferror-limit=0";
    check[c++] = "-fdiagnostics-print-source-range-info";
    check[c++] = "-x";
    check[c++] = "c++-cpp-output";
    check[c++] = tu;
    check[c] = NULL;
    char *ranges = NULL;
    if (run_tool(check, log, &ranges)) goto out; /* cannot happen: keep the first diagnostics */
    char *fixed = ranges ? sm__front_fix_conditionals(tu_text, ranges) : NULL;
    free(ranges);
    if (!fixed) goto out;
    free(tu_text);
    tu_text = fixed;
    if (!write_file(tu, tu_text, strlen(tu_text))) {
      free(*diag);
      *diag = strdup("cannot write the translation unit into the kernel cache");
      *internal = true;
      goto out;
    }
    free(*diag);
    *diag = NULL;
    if (!run_tool(argv, log, diag)) goto out;
  }
  if (rename(tmp_so, so) != 0) {
    *diag = strdup("cannot move the compiled kernel into the cache");
    *internal = true;
    goto out;
  }
  dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    const char *e = dlerror();
    *diag = strdup(e ? e : "dlopen failed");
    *internal = true;
  }
out:
  free(pp_text);
  free(tu_text);
  if (!getenv("SOFTMETAL_KEEP_WORK")) remove_dir(work, files, sizeof files / sizeof *files);
  return dl;
}

/* ------------------------------------------------------------- objects */
typedef struct {
  sm_obj hdr;
  id device;
  void *dl;
  const struct sm_kernel_desc *kernels;
  unsigned n;
  const struct sm_constant_desc *constants;
  unsigned n_constants;
  void (*constant_value)(const unsigned char *v, const unsigned char *d, unsigned pos, void *out);
  unsigned long long (*tg_static_bytes)(unsigned kernel);
  sm_code code; /* where the kernel cache keeps the compiled code */
} sm_library;

typedef struct {
  sm_obj hdr;
  sm_library *library;
  const struct sm_kernel_desc *desc;
  id name;
  bool specialized; /* made by newFunctionWithName:constantValues:error: */
  unsigned char *fc_values, *fc_defined; /* [n_constants][SM_FC_SLOT], [n_constants] */
} sm_function;

/* MTLFunctionConstantValues: values by index or by name, last one wins. */
typedef struct {
  NSUInteger index; /* when name is NULL */
  char *name;
  NSUInteger type;  /* MTLDataType */
  unsigned char value[SM_FC_SLOT];
} fc_entry;
typedef struct {
  sm_obj hdr;
  fc_entry *e;
  size_t n;
} sm_constant_values;

/* MTLCompileOptions: only the math settings are kept; mathMode is the
 * truth, fastMathEnabled its older view (YES for Relaxed and Fast). */
typedef struct {
  sm_obj hdr;
  NSInteger math_mode;
  NSUInteger language_version; /* MTLLanguageVersion (major << 16 | minor); 0: newest */
  bool initialized; /* alloc without init is misuse */
} sm_compile_options;

/* MTLLanguageVersion values (Apple's MTLLibrary.h), as __METAL_VERSION__
 * (major * 100 + minor * 10); 0 when the value is none of them. */
static unsigned metal_version_of(NSUInteger v) {
  static const NSUInteger known[] = {0x10000, 0x10001, 0x10002, 0x20000, 0x20001, 0x20002,
                                     0x20003, 0x20004, 0x30000, 0x30001, 0x30002, 0x40000};
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (v == known[i]) return (unsigned)((v >> 16) * 100 + (v & 0xffff) * 10);
  return 0;
}

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
static NSUInteger options_language_version(id self, SEL cmd) {
  (void)cmd;
  return ((sm_compile_options *)self)->language_version;
}
static void options_set_language_version(id self, SEL cmd, NSUInteger v) {
  (void)cmd;
  ((sm_compile_options *)self)->language_version = v; /* checked when compiling, as Metal */
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
  sm__code_free(&l->code);
  sm__release(l->device);
}
static void function_destroy(sm_obj *o) {
  sm_function *f = (sm_function *)o;
  free(f->fc_values);
  free(f->fc_defined);
  sm__release(f->name);
  sm__release((id)f->library);
}
static void pipeline_destroy(sm_obj *o) { sm__release(((sm_pipeline *)o)->function); }

static sm_class library_class = {"SMLibrary", sizeof(sm_library), library_destroy, Nil, 0};
static sm_class function_class = {"SMFunction", sizeof(sm_function), function_destroy, Nil, 0};
static void values_destroy(sm_obj *o) {
  sm_constant_values *v = (sm_constant_values *)o;
  for (size_t i = 0; i < v->n; i++) free(v->e[i].name);
  free(v->e);
}
static sm_class values_class = {"MTLFunctionConstantValues", sizeof(sm_constant_values),
                                values_destroy, Nil, 0};
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
  const NSUInteger language = options ? ((sm_compile_options *)options)->language_version : 0;
  const unsigned metal_version = metal_version_of(language);
  const char *text = sm__string_utf8(source);
  if (!text) {
    set_error(error, sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_COMPILE_FAILURE,
                               "%s: source = nil", sel_getName(cmd)));
    return nil;
  }
  if (language != 0 && metal_version == 0) {
    set_error(error, sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_COMPILE_FAILURE,
                               "%s: languageVersion = 0x%lx (%lu.%lu) is not an MTLLanguageVersion "
                               "(1.0 to 1.2, 2.0 to 2.4, 3.0 to 3.2, 4.0)",
                               sel_getName(cmd), (unsigned long)language,
                               (unsigned long)(language >> 16), (unsigned long)(language & 0xffff)));
    return nil;
  }
  char *diag = NULL;
  bool internal = false;
  sm_code code = {0};
  void *dl = compile_source(text, math_mode, metal_version, &diag, &internal, &code);
  if (!dl) {
    sm__code_free(&code);
    set_error(error, sm__error(LIB_ERROR_DOMAIN,
                               internal ? LIB_ERROR_INTERNAL : LIB_ERROR_COMPILE_FAILURE,
                               "%s: %s:\n%s", sel_getName(cmd),
                               internal ? "softmetal cannot compile" : "compilation failed",
                               diag ? diag : "?"));
    free(diag);
    return nil;
  }
  const unsigned *abi = dlsym(dl, "softmetal_abi_version");
  const unsigned *count = dlsym(dl, "softmetal_kernel_count");
  const struct sm_kernel_desc *kernels = dlsym(dl, "softmetal_kernels");
  const unsigned *n_constants = dlsym(dl, "softmetal_constant_count");
  const struct sm_constant_desc *constants = dlsym(dl, "softmetal_constants");
  void *value_fn = dlsym(dl, "softmetal_constant_value");
  void *tg_fn = dlsym(dl, "softmetal_tg_static_bytes");
  if (!abi || *abi != SM_ABI_VERSION || !count || !kernels || !n_constants || !constants ||
      !value_fn || !tg_fn) {
    dlclose(dl);
    sm__code_free(&code);
    set_error(error, sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_INTERNAL,
                               "%s: compiled library has no kernel table of ABI %u",
                               sel_getName(cmd), SM_ABI_VERSION));
    return nil;
  }
  sm_library *l = sm__new(&library_class);
  if (!l) {
    dlclose(dl);
    sm__code_free(&code);
    return nil;
  }
  l->code = code;
  l->device = sm__retain(self);
  l->dl = dl;
  l->kernels = kernels;
  l->n = *count;
  l->constants = constants;
  l->n_constants = *n_constants;
  memcpy(&l->constant_value, &value_fn, sizeof value_fn);
  memcpy(&l->tg_static_bytes, &tg_fn, sizeof tg_fn);
  if (math_mode != MATH_MODE_SAFE) atomic_fetch_add(&sm__unsafe_math_libraries, 1);
  return (id)l;
}

static const struct sm_kernel_desc *find_kernel(sm_library *l, const char *n) {
  for (unsigned i = 0; n && i < l->n; i++)
    if (strcmp(l->kernels[i].name, n) == 0) return &l->kernels[i];
  return NULL;
}

static sm_function *new_function(sm_library *l, const struct sm_kernel_desc *k) {
  sm_function *f = sm__new(&function_class);
  if (!f) return NULL;
  f->library = (sm_library *)sm__retain((id)l);
  f->desc = k;
  f->name = sm__string(k->name);
  return f;
}

static id library_new_function(id self, SEL cmd, id name) {
  (void)cmd;
  sm_library *l = (sm_library *)self;
  const struct sm_kernel_desc *k = find_kernel(l, sm__string_utf8(name));
  return k ? (id)new_function(l, k) : nil;
}

/* MTLDataType: bytes of one value as the host gives it, 0 when unsupported. */
static size_t data_type_size(NSUInteger t) {
  static const struct {
    NSUInteger base;
    size_t esize;
  } V[] = {{3, 4}, {16, 2}, {29, 4}, {33, 4}, {37, 2}, {41, 2}, {45, 1}, {49, 1}, {53, 1}};
  if (t == 81 || t == 85) return 8; /* Long, ULong */
  /* 3-vectors take four elements, as simd_float3 and MSL's float3 */
  for (size_t i = 0; i < sizeof V / sizeof *V; i++)
    if (t >= V[i].base && t < V[i].base + 4) {
      size_t w = t - V[i].base + 1;
      return V[i].esize * (w == 3 ? 4 : w);
    }
  return 0;
}

static const fc_entry *find_value(const sm_constant_values *v, const struct sm_constant_desc *c) {
  for (size_t i = v ? v->n : 0; i-- > 0;)
    if (!v->e[i].name && v->e[i].index == c->index) return &v->e[i];
  for (size_t i = v ? v->n : 0; i-- > 0;)
    if (v->e[i].name && strcmp(v->e[i].name, c->name) == 0) return &v->e[i];
  return NULL;
}

/* Specializes a kernel: values are looked up by index, then by name; values
 * that match no constant are ignored; a required constant the kernel uses
 * must have a value of its type. */
static id library_new_function_constants(id self, SEL cmd, id name, id values, id *error) {
  sm_library *l = (sm_library *)self;
  const char *n = sm__string_utf8(name);
  if (values && !sm__is(values, &values_class))
    sm__fatal("-[SMLibrary %s]: constantValues is a %s, not an MTLFunctionConstantValues",
              sel_getName(cmd), object_getClassName(values));
  const struct sm_kernel_desc *k = find_kernel(l, n);
  if (!k) {
    set_error(error, sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_INTERNAL,
                               "%s: function '%s' was not found in the library", sel_getName(cmd),
                               n ? n : "(nil)"));
    return nil;
  }
  const sm_constant_values *v = (const sm_constant_values *)values;
  size_t nc = l->n_constants ? l->n_constants : 1;
  unsigned char *vals = calloc(nc, SM_FC_SLOT), *defined = calloc(nc, 1);
  if (!vals || !defined) {
    free(vals);
    free(defined);
    return nil;
  }
  for (unsigned c = 0; c < l->n_constants; c++) {
    const struct sm_constant_desc *cd = &l->constants[c];
    if (cd->index == UINT32_MAX) continue;
    bool used = false;
    for (uint32_t u = 0; u < k->fc_used_count; u++) used = used || k->fc_used[u] == c;
    const fc_entry *e = find_value(v, cd);
    if (e && e->type != cd->type) {
      set_error(error, sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_COMPILE_FAILURE,
                                 "%s: function constant '%s' (index %u) of function '%s' has "
                                 "MTLDataType %u, but its value was given as MTLDataType %lu",
                                 sel_getName(cmd), cd->name, cd->index, n, cd->type,
                                 (unsigned long)e->type));
      goto fail;
    }
    if (!e && used && !cd->optional) {
      set_error(error, sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_COMPILE_FAILURE,
                                 "%s: function constant '%s' (index %u) is required by function "
                                 "'%s' and has no value (give one by index or name, or test "
                                 "it with is_function_constant_defined)",
                                 sel_getName(cmd), cd->name, cd->index, n));
      goto fail;
    }
    if (e) {
      memcpy(vals + (size_t)c * SM_FC_SLOT, e->value, SM_FC_SLOT);
      defined[c] = 1;
    }
  }
  sm_function *f = new_function(l, k);
  if (!f) goto fail;
  f->specialized = true;
  f->fc_values = vals;
  f->fc_defined = defined;
  return (id)f;
fail:
  free(vals);
  free(defined);
  return nil;
}

static id values_init(id self, SEL cmd) { (void)cmd; return self; }

static void values_add(id self, const void *value, NSUInteger type, NSUInteger index,
                       const char *name, SEL cmd) {
  sm_constant_values *v = (sm_constant_values *)self;
  size_t size = data_type_size(type);
  if (!size)
    sm__fatal("-[MTLFunctionConstantValues %s]: type = %lu is not an MTLDataType softmetal "
              "supports for function constants (scalars and vectors of bool, char, short, int, "
              "half, float; long, ulong)", sel_getName(cmd), (unsigned long)type);
  if (!value) sm__fatal("-[MTLFunctionConstantValues %s]: value = NULL", sel_getName(cmd));
  fc_entry *e = realloc(v->e, (v->n + 1) * sizeof *e);
  if (!e) sm__fatal("-[MTLFunctionConstantValues %s]: out of memory", sel_getName(cmd));
  v->e = e;
  fc_entry *x = &v->e[v->n];
  memset(x, 0, sizeof *x);
  x->index = index;
  x->type = type;
  x->name = name ? strdup(name) : NULL;
  if (name && !x->name) sm__fatal("-[MTLFunctionConstantValues %s]: out of memory", sel_getName(cmd));
  memcpy(x->value, value, size);
  v->n++;
}
static void values_set_index(id self, SEL cmd, const void *value, NSUInteger type, NSUInteger index) {
  values_add(self, value, type, index, NULL, cmd);
}
static void values_set_name(id self, SEL cmd, const void *value, NSUInteger type, id name) {
  const char *n = sm__string_utf8(name);
  if (!n) sm__fatal("-[MTLFunctionConstantValues %s]: name = nil", sel_getName(cmd));
  values_add(self, value, type, 0, n, cmd);
}
static void values_set_range(id self, SEL cmd, const void *values, NSUInteger type, NSRange r) {
  size_t size = data_type_size(type);
  for (NSUInteger i = 0; i < r.length; i++)
    values_add(self, (const unsigned char *)values + i * size, type, r.location + i, NULL, cmd);
}
static void values_reset(id self, SEL cmd) {
  (void)cmd;
  sm_constant_values *v = (sm_constant_values *)self;
  values_destroy(&v->hdr);
  v->e = NULL;
  v->n = 0;
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
  sm_function *fn = (sm_function *)function;
  const struct sm_kernel_desc *k = fn->desc;
  if (k->fc_used_count && !fn->specialized) {
    set_error(error, sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_COMPILE_FAILURE,
                               "%s: function '%s' uses function constants and was not "
                               "specialized (make it with newFunctionWithName:constantValues:"
                               "error:)", sel_getName(cmd), k->name));
    return nil;
  }
  sm_pipeline *p = sm__new(&sm__pipeline_class);
  if (!p) return nil;
  p->function = sm__retain(function);
  p->desc_copy = *k;
  /* Parameters whose [[function_constant(c)]] is false are absent: nothing
   * needs to be bound to them. */
  for (uint32_t i = 0; fn->fc_values && i < k->fc_cond_count; i++) {
    const uint32_t *c = &k->fc_conds[3 * i];
    bool present = false;
    fn->library->constant_value(fn->fc_values, fn->fc_defined, c[2], &present);
    if (present) continue;
    if (c[0] == 0) {
      p->desc_copy.buffer_mask &= ~(1u << c[1]);
      p->desc_copy.written_mask &= ~(1u << c[1]);
    } else {
      p->desc_copy.threadgroup_mask &= ~(1u << c[1]);
    }
  }
  p->desc = &p->desc_copy;
  p->fc_values = fn->fc_values;
  p->fc_defined = fn->fc_defined;
  p->max_threads = MAX_THREADS;
  unsigned long long tg = fn->library->tg_static_bytes((unsigned)(k - fn->library->kernels));
  if (tg > MAX_TG_MEMORY) {
    set_error(error, sm__error(LIB_ERROR_DOMAIN, LIB_ERROR_COMPILE_FAILURE,
                               "%s: kernel '%s' declares %llu bytes of threadgroup variables, "
                               "more than the %d bytes of threadgroup memory",
                               sel_getName(cmd), k->name, tg, MAX_TG_MEMORY));
    sm__release((id)p);
    return nil;
  }
  p->static_tg = (NSUInteger)tg;
  return (id)p;
}

const sm_code *sm__function_code(id function) {
  if (!function || !sm__is(function, &function_class)) return NULL;
  const sm_library *l = ((sm_function *)function)->library;
  return l->code.path && l->code.compiler_path ? &l->code : NULL;
}

void sm__code_free(sm_code *c) {
  free(c->path);
  free(c->compiler_path);
  c->path = c->compiler_path = NULL;
}

SM_EXPORT int softmetal_pipeline_bindings(void *pipeline, unsigned *buffers, unsigned *written,
                                          unsigned *threadgroup) {
  id o = (id)pipeline;
  if (!o || !sm__is(o, &sm__pipeline_class)) return -1;
  const struct sm_kernel_desc *k = ((sm_pipeline *)o)->desc;
  *buffers = k->buffer_mask;
  *written = k->written_mask;
  *threadgroup = k->threadgroup_mask;
  return 0;
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
static NSUInteger pipeline_static_tg(id self, SEL cmd) {
  (void)cmd;
  return ((sm_pipeline *)self)->static_tg;
}

void sm__register_msl(void) {
  Class c = sm__class_begin(&options_class);
  sm__method(c, "init", SM_IMP(options_init), "@@:");
  sm__method(c, "fastMathEnabled", SM_IMP(options_fast_math), "C@:");
  sm__method(c, "setFastMathEnabled:", SM_IMP(options_set_fast_math), "v@:C");
  sm__method(c, "languageVersion", SM_IMP(options_language_version), "Q@:");
  sm__method(c, "setLanguageVersion:", SM_IMP(options_set_language_version), "v@:Q");
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

  sm__method(c, "newFunctionWithName:constantValues:error:",
             SM_IMP(library_new_function_constants), "@@:@@^@");
  c = sm__class_begin(&values_class);
  sm__method(c, "init", SM_IMP(values_init), "@@:");
  sm__method(c, "setConstantValue:type:atIndex:", SM_IMP(values_set_index), "v@:^vQQ");
  sm__method(c, "setConstantValue:type:withName:", SM_IMP(values_set_name), "v@:^vQ@");
  sm__method(c, "setConstantValues:type:withRange:", SM_IMP(values_set_range), "v@:^vQ{_NSRange=QQ}");
  sm__method(c, "reset", SM_IMP(values_reset), "v@:");
  sm__class_end(&values_class);

  c = sm__class_begin(&function_class);
  sm__method(c, "name", SM_IMP(function_name), "@@:");
  sm__method(c, "device", SM_IMP(function_device), "@@:");
  sm__class_end(&function_class);

  c = sm__class_begin(&sm__pipeline_class);
  sm__method(c, "maxTotalThreadsPerThreadgroup", SM_IMP(pipeline_max_threads), "Q@:");
  sm__method(c, "threadExecutionWidth", SM_IMP(pipeline_width), "Q@:");
  /* metal-cpp MTLComputePipeline.hpp: NS::UInteger staticThreadgroupMemoryLength() const */
  sm__method(c, "staticThreadgroupMemoryLength", SM_IMP(pipeline_static_tg), "Q@:");
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
