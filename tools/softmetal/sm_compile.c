/* SPDX-License-Identifier: MIT */
/* softmetal's compile driver: Metal's compile model on clang++ (see
 * sm_compile.h): newLibraryWithSource: checks, a pipeline generates code
 * for its function; the kernel cache and metal_stdlib's precompiled
 * header. */
#define _GNU_SOURCE /* posix_spawn extras, strdup */
#include "sm_internal.h"
#include "sm_compile.h"
#include "sm_front.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <unistd.h>

extern char **environ;

/* Embedded at build time (sm_embedded.c). */
extern const char sm__metal_stdlib_text[];
extern const char sm__abi_text[];
extern const char sm__metal_stdlib_text_sha256[];
extern const char sm__abi_text_sha256[];
extern const char sm__ccserver_text[];
extern const char sm__ccserver_text_sha256[];

atomic_long sm__syntax_checks, sm__function_compiles, sm__function_cache_hits;

/* ------------------------------------------------------------- flags */
/* Every flag of every compiler run is here (the key covers them all).
 * SIMD-group functions act over the lanes at the same call (sm_exec.c tells
 * calls apart by the chain of return addresses): frame pointers and no tail
 * calls keep the chain; no merging of calls from different branches (hoist,
 * sink, tail merge) and every call convergent (no unswitching or jump
 * threading that duplicates a call for lanes that belong together).
 * -fsigned-char: MSL's char is signed, C++'s is unsigned on aarch64 Linux.
 * -ffloat16-excess-precision=none: half (_Float16) arithmetic rounds to half
 * at each operation, as MSL's, instead of keeping float between them.
 * Integer division by zero faults on x86-64 (SIGFPE, sm_fault.c); elsewhere
 * (aarch64 gives 0) a check traps instead, which sm_fault.c recognises.
 * -fmax-type-align=8: an access through a pointer assumes at most 8-byte
 * alignment (no aligned 16-byte vector moves), so a vector at an address
 * aligned only to its element works, as on Apple GPUs (metal_stdlib's vec). */
static const char *const CXX_FLAGS[] = {
    "-std=c++17",
    "-O2",
    "-fPIC",
    "-shared",
    "-w",
    "-fno-exceptions",
    "-fno-rtti",
    "-fno-omit-frame-pointer",
    "-fno-optimize-sibling-calls",
    "-Xclang",
    "-fconvergent-functions",
    "-mllvm",
    "-simplifycfg-sink-common=false",
    "-mllvm",
    "-simplifycfg-hoist-common=false",
    "-mllvm",
    "-enable-tail-merge=false",
    "-fsigned-char",
    "-fmax-type-align=8",
    "-Xclang",
    "-ffloat16-excess-precision=none",
    "-fdeclspec", /* swizzles: metal_stdlib */
#if !defined(__x86_64__)
    "-fsanitize=integer-divide-by-zero",
    "-fsanitize-trap=integer-divide-by-zero",
#endif
};
enum { N_CXX_FLAGS = sizeof CXX_FLAGS / sizeof CXX_FLAGS[0] };

/* A function's tracked code (concurrent compute passes, sm_hazard.c): every
 * load, store, atomic and memory intrinsic calls __sm_touch_* with its
 * address, through the address sanitizer's instrumentation with its own
 * callback prefix and nothing else of it (no shadow checks, no runtime, no
 * constructor). TOUCH_CALLBACKS, appended to the unit, defines them. They
 * read the calling thread's tracking state (sm_exec.c's t_track and its
 * struct sm_touched ranges, whose layouts they repeat) at
 * softmetal_touch_window bytes from the thread pointer: an address outside
 * every binding (threadgroup memory, the stack, constants) returns at once,
 * one in the range hit last widens that range's bounds in place, and only
 * the rest call softmetal_touch (sm__touch), which finds the range. */
static const char *const TOUCH_FLAGS[] = {
    "-fsanitize=address",
    "-fsanitize-address-use-after-return=never",
    "-fno-sanitize-address-use-after-scope",
    "-mllvm",
    "-asan-instrumentation-with-call-threshold=0",
    "-mllvm",
    "-asan-memory-access-callback-prefix=__sm_touch_",
    "-mllvm",
    "-asan-stack=0",
    "-mllvm",
    "-asan-globals=0",
    "-mllvm",
    "-asan-constructor-kind=none",
};
enum { N_TOUCH_FLAGS = sizeof TOUCH_FLAGS / sizeof TOUCH_FLAGS[0] };
static const char TOUCH_CALLBACKS[] =
    "\n#define SM_TOUCH_FN extern \"C\" __attribute__((no_sanitize(\"address\"), "
    "visibility(\"hidden\")))\n"
    "#define SM_TOUCH_EXPORT extern \"C\" __attribute__((visibility(\"default\")))\n"
    "SM_TOUCH_EXPORT void (*softmetal_touch)(unsigned long, unsigned long, int);\n"
    "void (*softmetal_touch)(unsigned long, unsigned long, int);\n"
    "SM_TOUCH_EXPORT long softmetal_touch_window;\n"
    "long softmetal_touch_window;\n"
    "struct sm_touch_range {\n"
    "  unsigned long start, end;\n"
    "  const void *owner;\n"
    "  unsigned long rlo, rhi, wlo, whi;\n"
    "};\n"
    "struct sm_touch_state {\n"
    "  unsigned long lo, hi;\n"
    "  sm_touch_range *all;\n"
    "  unsigned n, last;\n"
    "};\n"
    "__attribute__((no_sanitize(\"address\"), always_inline)) static inline void\n"
    "sm_touch_at(unsigned long a, unsigned long n, int w) {\n"
    "  char *tp;\n"
    "#if defined(__x86_64__)\n"
    "  __asm__ volatile(\"movq %%fs:0, %0\" : \"=r\"(tp));\n"
    "#else\n"
    "  __asm__ volatile(\"mrs %0, tpidr_el0\" : \"=r\"(tp));\n"
    "#endif\n"
    "  volatile sm_touch_state *s = (volatile sm_touch_state *)(tp + softmetal_touch_window);\n"
    "  if (a < s->lo || a >= s->hi) return;\n"
    "  volatile sm_touch_range *t = s->all + s->last;\n"
    "  if (a < t->start || a >= t->end) {\n"
    "    softmetal_touch(a, n, w);\n"
    "    return;\n"
    "  }\n"
    "  unsigned long z = a + n < a ? ~0ul : a + n;\n"
    "  if (w) {\n"
    "    if (a < t->wlo) t->wlo = a;\n"
    "    if (z > t->whi) t->whi = z;\n"
    "  } else {\n"
    "    if (a < t->rlo) t->rlo = a;\n"
    "    if (z > t->rhi) t->rhi = z;\n"
    "  }\n"
    "}\n"
    "#define SM_TOUCH_SIZE(n) \\\n"
    "  SM_TOUCH_FN void __sm_touch_load##n(unsigned long a) { sm_touch_at(a, n, 0); } \\\n"
    "  SM_TOUCH_FN void __sm_touch_store##n(unsigned long a) { sm_touch_at(a, n, 1); }\n"
    "SM_TOUCH_SIZE(1) SM_TOUCH_SIZE(2) SM_TOUCH_SIZE(4) SM_TOUCH_SIZE(8) SM_TOUCH_SIZE(16)\n"
    "SM_TOUCH_FN void __sm_touch_loadN(unsigned long a, unsigned long n) { sm_touch_at(a, n, 0); "
    "}\n"
    "SM_TOUCH_FN void __sm_touch_storeN(unsigned long a, unsigned long n) { sm_touch_at(a, n, 1); "
    "}\n"
    "SM_TOUCH_FN void *__sm_touch_memcpy(void *d, const void *s, unsigned long n) {\n"
    "  sm_touch_at((unsigned long)s, n, 0);\n"
    "  sm_touch_at((unsigned long)d, n, 1);\n"
    "  return __builtin_memcpy(d, s, n);\n"
    "}\n"
    "SM_TOUCH_FN void *__sm_touch_memmove(void *d, const void *s, unsigned long n) {\n"
    "  sm_touch_at((unsigned long)s, n, 0);\n"
    "  sm_touch_at((unsigned long)d, n, 1);\n"
    "  return __builtin_memmove(d, s, n);\n"
    "}\n"
    "SM_TOUCH_FN void *__sm_touch_memset(void *d, int c, unsigned long n) {\n"
    "  sm_touch_at((unsigned long)d, n, 1);\n"
    "  return __builtin_memset(d, c, n);\n"
    "}\n";

/* MTLMathMode (NSInteger) and the flags that give the CPU compile the same
 * licence as Metal's: Safe compiles as IEEE; Relaxed allows unsafe
 * optimisations but keeps infinities and NaNs; Fast (Metal's default, also
 * fastMathEnabled = YES and options = nil) assumes neither exists, so
 * isnan() folds to false and NaN propagation is not kept, as on a GPU.
 * These are the parts of -ffast-math (the same compiler settings), spelt
 * out because -ffast-math also links crtfastmath.o, whose constructor
 * would turn on flush-to-zero in the process that loads the kernel.
 * SM_UNSAFE_MATH tells metal_stdlib to keep precise:: precise.
 * -mrecip=none: no reciprocal or square-root estimates refined by Newton
 * steps, which LLVM uses for vector division under full fast math and
 * which give NaN where a GPU gives 0 (x / inf: 0 * inf in the refinement);
 * GPUs' fast division multiplies by a reciprocal, and 1/inf is 0 there. */
enum { MAX_MATH_FLAGS = 10 };
#define UNSAFE_MATH_FLAGS                                                                          \
  "-DSM_UNSAFE_MATH=1", "-fno-signed-zeros", "-fassociative-math", "-freciprocal-math",            \
      "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=fast", "-fapprox-func",              \
      "-mrecip=none"
static const char *const MATH_FLAGS[][MAX_MATH_FLAGS] = {
    [0] = {NULL},                                    /* Safe */
    [1] = {UNSAFE_MATH_FLAGS, NULL},                 /* Relaxed */
    [2] = {UNSAFE_MATH_FLAGS, "-ffinite-math-only"}, /* Fast */
};
#undef UNSAFE_MATH_FLAGS
static const char *const MATH_MODE_NAMES[] = {"Safe", "Relaxed", "Fast"};
/* metal_stdlib is read by the front end's preprocessing with the
 * address-space words left as words; its precompiled form the same way. */
static const char FRONTEND_FLAG[] = "-DSM_FRONTEND=1";

enum { MAX_ARGS = N_CXX_FLAGS + MAX_MATH_FLAGS + N_TOUCH_FLAGS + 25 };
/* MTLMathFloatingPointFunctions: whether unqualified exp, log... are the fast
 * ones (metal_stdlib reads SM_FAST_FUNCTIONS). */
static const char *functions_flag(bool fast_functions) {
  return fast_functions ? "-DSM_FAST_FUNCTIONS=1" : "-DSM_FAST_FUNCTIONS=0";
}

/* Key material: each item with its length, so that items cannot run into
 * each other. */
static void key_str(sm_sha256 *s, const char *text) {
  uint64_t n = strlen(text);
  sm__sha256_update(s, &n, sizeof n);
  sm__sha256_update(s, text, n);
}
static void key_digest(sm_sha256 *s, const sm_digest *d) { sm__sha256_update(s, d->d, 32); }
static void short_hex(const sm_digest *d, char out[17]) {
  char full[65];
  sm__digest_hex(d, full);
  memcpy(out, full, 16);
  out[16] = 0;
}

/* ------------------------------------------------------------- files and tools */
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
  if (d && *d)
    snprintf(out, cap, "%s", d);
  else if (x && *x)
    snprintf(out, cap, "%s/softmetal", x);
  else
    snprintf(out, cap, "/tmp/softmetal-%u", (unsigned)getuid());
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
  const char *why = !S_ISDIR(st.st_mode)      ? "is not a directory"
                    : st.st_uid != geteuid()  ? "is owned by another user"
                    : (st.st_mode & 022) != 0 ? "is writable by group or others"
                                              : NULL;
  if (!why) return true;
  sm_text b = {0};
  sm__text_printf(
      &b,
      "the kernel cache directory %s %s (owner uid %u, mode %03o): softmetal does not "
      "load compiled kernels from it; set SOFTMETAL_CACHE_DIR to a directory of your own "
      "with mode 0700",
      dir, why, (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777));
  *diag = b.p;
  return false;
}

static bool write_file(const char *path, const char *text, size_t n) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%.3500s.tmp-%d-%u", path, (int)getpid(),
           atomic_fetch_add(&g_tmp_counter, 1));
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
  int status = 0;
  if (!sm__run_command(argv, log, &status, diag)) return false;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
  *diag = read_text(log, NULL);
  if (!*diag || !**diag) {
    free(*diag);
    *diag = strdup("the C++ compiler failed without output");
  }
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
    "metal_math",      "metal_atomic",     "metal_compute",
    "metal_simdgroup", "metal_integer",    "metal_common",
    "metal_geometric", "metal_relational", "metal_simdgroup_matrix",
    "metal_limits",    "metal_pack",       "metal_matrix",
    "metal_types",     "metal_logging",    "metal_uniform",
    "metal_array",     "metal_type_traits"};
enum { N_ALIASES = sizeof aliases / sizeof aliases[0] };
static const char alias_text[] = "#include <metal_stdlib>\n";

/* <simd/simd.h> (Apple's simd vector and matrix types, as MSL sees them), and
 * the headers of Metal's other stages, refused by name at the #include. */
#define SM_SIMD_V(T)                                                                               \
  "typedef ::" #T "2 simd_" #T "2; typedef ::" #T "3 simd_" #T "3; typedef ::" #T "4 simd_" #T     \
  "4;\nnamespace simd { using ::" #T "2; using ::" #T "3; using ::" #T "4; }\n"
#define SM_SIMD_M(T)                                                                               \
  "typedef ::" #T "2x2 simd_" #T "2x2; typedef ::" #T "2x3 simd_" #T "2x3; typedef ::" #T          \
  "2x4 simd_" #T "2x4; typedef ::" #T "3x2 simd_" #T "3x2; typedef ::" #T "3x3 simd_" #T           \
  "3x3; typedef ::" #T "3x4 simd_" #T "3x4; typedef ::" #T "4x2 simd_" #T "4x2; typedef ::" #T     \
  "4x3 simd_" #T "4x3; typedef ::" #T "4x4 simd_" #T "4x4;\nnamespace simd { using ::" #T          \
  "2x2; using ::" #T "2x3; using ::" #T "2x4; using ::" #T "3x2; using ::" #T "3x3; using ::" #T   \
  "3x4; using ::" #T "4x2; using ::" #T "4x3; using ::" #T "4x4; }\n"
static const char simd_text[] =
    "#pragma once\n#include <metal_stdlib>\n" SM_SIMD_V(float) SM_SIMD_V(half) SM_SIMD_V(int)
        SM_SIMD_V(uint) SM_SIMD_V(short) SM_SIMD_V(ushort) SM_SIMD_V(char) SM_SIMD_V(uchar)
            SM_SIMD_V(long) SM_SIMD_V(ulong) SM_SIMD_M(float) SM_SIMD_M(half);
#undef SM_SIMD_V
#undef SM_SIMD_M
#define SM_REFUSED(h, what)                                                                        \
  {h, "#error \"<" h "> is not supported by softmetal (compute kernels over buffers only: "        \
      "no " what ")\"\n"}
static const struct {
  const char *name, *text;
} extra_headers[] = {
    {"simd/simd.h", simd_text},
    {"simd/vector_types.h", "#pragma once\n#include <simd/simd.h>\n"},
    SM_REFUSED("metal_texture", "textures"),
    SM_REFUSED("metal_graphics", "graphics functions"),
    SM_REFUSED("metal_imageblocks", "imageblocks"),
    SM_REFUSED("metal_raytracing", "ray tracing"),
    SM_REFUSED("metal_tensor", "tensors"),
    SM_REFUSED("MetalPerformancePrimitives/MetalPerformancePrimitives.h",
               "Metal 4 performance primitives"),
};
#undef SM_REFUSED
enum { N_EXTRA = sizeof extra_headers / sizeof extra_headers[0] };

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

static void remove_dir(const char *dir, const char *const *names, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char p[4400];
    snprintf(p, sizeof p, "%.4000s/%s", dir, names[i]);
    unlink(p);
  }
  rmdir(dir);
}

/* ------------------------------------------------------------- settings */
/* metal_stdlib needs clang's _Float16 arithmetic rounded per operation
 * (-ffloat16-excess-precision=none, clang 16) and is tested with clang 19,
 * the oldest release it is known to compile with: an older clang, or
 * another compiler, is refused by name. */
enum { MIN_CLANG_MAJOR = 19 };
static bool clang_recent(const char *cxx, const char *version, char **diag) {
  const char *v = strstr(version, "clang version ");
  int major = v ? atoi(v + strlen("clang version ")) : 0;
  if (major >= MIN_CLANG_MAJOR) return true;
  size_t line = strcspn(version, "\n");
  sm_text b = {0};
  sm__text_printf(&b,
                  "the C++ compiler '%s' is %s%.*s; softmetal needs clang %d or newer "
                  "(install clang-19, or set SOFTMETAL_CXX to clang++-19 or newer)",
                  cxx, v ? "" : "not clang: ", (int)(line > 200 ? 200 : line), version,
                  MIN_CLANG_MAJOR);
  *diag = b.p;
  return false;
}

/* Identity of the compiler for the cache key: its `--version` output (once
 * per process and compiler; kept in the cache by the binary's path, size,
 * time and inode, so that a cache hit runs nothing) and the code
 * generator's own sources. */
static sm_digest g_id, g_id_file;
static bool g_id_ok;
static char g_id_cxx[256];

static bool compiler_identity(const char *cxx, const char *dir, sm_digest *out, sm_digest *file_key,
                              char **diag) {
  pthread_mutex_lock(&g_cache_lock);
  if (g_id_ok && strcmp(g_id_cxx, cxx) == 0) {
    *out = g_id;
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
  sm_sha256 s;
  sm__sha256_init(&s);
  key_str(&s, "softmetal compiler binary");
  key_str(&s, exe);
  uint64_t stat_words[3] = {(uint64_t)st.st_size, (uint64_t)st.st_mtime, (uint64_t)st.st_ino};
  sm__sha256_update(&s, stat_words, sizeof stat_words);
  sm__sha256_final(&s, file_key);
  char hex[17], vpath[4200], log[4300];
  short_hex(file_key, hex);
  snprintf(vpath, sizeof vpath, "%.3000s/cc-%s.txt", dir, hex);
  if (!file_exists(vpath)) sm__archive_restore(SM_ARCHIVE_COMPILER, file_key->d, vpath);
  char *version = read_text(vpath, NULL);
  if (!version) {
    snprintf(log, sizeof log, "%.3000s/cc-%s-%d-%u.log", dir, hex, (int)getpid(),
             atomic_fetch_add(&g_tmp_counter, 1));
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
  if (!clang_recent(cxx, version, diag)) {
    free(version);
    return false;
  }
  sm__sha256_init(&s);
  key_str(&s, "softmetal compiler");
  key_str(&s, cxx);
  key_str(&s, version);
  /* the code generator's sources: an edited front end writes other code */
  key_str(&s, SM_GENERATOR_HASH);
  sm__sha256_final(&s, out);
  free(version);
  pthread_mutex_lock(&g_cache_lock);
  g_id = *out;
  g_id_file = *file_key;
  g_id_ok = true;
  snprintf(g_id_cxx, sizeof g_id_cxx, "%s", cxx);
  pthread_mutex_unlock(&g_cache_lock);
  return true;
}

/* What every compile of one setting shares. */
typedef struct {
  const char *cxx;
  char dir[3072], inc[3200], pch[3400], macros[3400];
  sm_digest headers, ident, ident_file, flags;
  char version_flag[40];
  char target_flag[80]; /* --target=SOFTMETAL_TARGET, or empty */
  const char *cpu_flag; /* -DSM_F16C=1 where the CPU has F16C, or NULL */
  int math_mode;
  bool fast_functions;
} setting;

/* Appends the compile flags of st to argv at *a. */
static void put_flags(const char **argv, int *a, const setting *st) {
  if (st->target_flag[0]) argv[(*a)++] = st->target_flag;
  if (st->cpu_flag) argv[(*a)++] = st->cpu_flag;
  for (int i = 0; i < N_CXX_FLAGS; i++) argv[(*a)++] = CXX_FLAGS[i];
  for (int i = 0; i < MAX_MATH_FLAGS && MATH_FLAGS[st->math_mode][i]; i++)
    argv[(*a)++] = MATH_FLAGS[st->math_mode][i];
  argv[(*a)++] = functions_flag(st->fast_functions);
  if (st->version_flag[0]) argv[(*a)++] = st->version_flag;
}

/* half <-> float conversions in kernels. Baseline x86-64 has no
 * instruction for them: every conversion (each half operation is two or
 * three) is a call to the compiler's runtime routine (__extendhfsf2,
 * __truncsfhf2). Where this CPU has F16C, kernels for it are compiled with
 * SM_F16C=1, and metal_stdlib defines those two routines in the kernel's own
 * unit with one F16C instruction each (the same results: round to nearest
 * even, the MXCSR default, which softmetal leaves alone). Not -mf16c: clang
 * 19 lowers vector unsigned-int -> half conversions (uint4 -> half4, and the
 * vectoriser's own) to NaN under it. Not for kernels of another target
 * (SOFTMETAL_TARGET), nor with SOFTMETAL_F16C=0 (comparisons). The flag is
 * part of the cache key. */
static const char *half_conversion_flag(bool cross) {
#if defined(__x86_64__)
  const char *v = getenv("SOFTMETAL_F16C");
  if (cross || (v && strcmp(v, "0") == 0)) return NULL;
  /* CPUID.1:ECX: F16C (29), AVX (28), OSXSAVE (27); XCR0 bits 1-2: the OS
   * saves the SSE and AVX registers (F16C's instructions are VEX). Asked
   * directly: not every compiler's __builtin_cpu_supports knows "f16c". */
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return NULL;
  const unsigned need = 1u << 29 | 1u << 28 | 1u << 27;
  if ((c & need) != need) return NULL;
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  (void)hi;
  return (lo & 6u) == 6u ? "-DSM_F16C=1" : NULL;
#else
  (void)cross;
  return NULL;
#endif
}

static bool setting_init(setting *st, const char *cxx, int math_mode, bool fast_functions,
                         unsigned metal_version, char **diag, bool *internal) {
  memset(st, 0, sizeof *st);
  *internal = true;
  if (!cxx || !*cxx) cxx = getenv("SOFTMETAL_CXX");
  if (!cxx || !*cxx) cxx = "clang++-19";
  if (strlen(cxx) >= sizeof g_id_cxx) {
    *diag = strdup("SOFTMETAL_CXX is too long");
    return false;
  }
  if (math_mode < 0 || math_mode > 2) {
    *diag = strdup("math mode out of range");
    return false;
  }
  st->cxx = cxx;
  st->math_mode = math_mode;
  st->fast_functions = fast_functions;
  cache_dir(st->dir, sizeof st->dir);
  if (!check_cache_dir(st->dir, diag) ||
      !compiler_identity(cxx, st->dir, &st->ident, &st->ident_file, diag))
    return false;
  *internal = false;
  if (metal_version)
    snprintf(st->version_flag, sizeof st->version_flag, "-D__METAL_VERSION__=%u", metal_version);
  /* a compiler whose own architecture is not the program's (a program
   * under qemu-user, the compiler a host program): kernels for this one */
  const char *target = getenv("SOFTMETAL_TARGET");
  if (target && *target) {
    size_t n = strlen(target);
    bool ok = n < sizeof st->target_flag - sizeof "--target=";
    for (size_t i = 0; ok && i < n; i++)
      ok = isalnum((unsigned char)target[i]) || strchr("_.-", target[i]) != NULL;
    if (!ok) {
      sm_text b = {0};
      sm__text_printf(&b,
                      "SOFTMETAL_TARGET '%.100s' is not a target triple "
                      "(letters, digits, '_', '.', '-'; e.g. aarch64-linux-gnu)",
                      target);
      *diag = b.p ? b.p : strdup("SOFTMETAL_TARGET is not a target triple");
      *internal = true;
      return false;
    }
    snprintf(st->target_flag, sizeof st->target_flag, "--target=%s", target);
  }
  st->cpu_flag = half_conversion_flag(st->target_flag[0] != 0);
  sm_sha256 s;
  sm__sha256_init(&s);
  key_str(&s, "softmetal headers");
  /* the two large headers by their SHA-256, taken when they were embedded */
  key_str(&s, sm__metal_stdlib_text_sha256);
  key_str(&s, sm__abi_text_sha256);
  for (size_t i = 0; i < N_ALIASES; i++) key_str(&s, aliases[i]);
  for (size_t i = 0; i < N_EXTRA; i++) {
    key_str(&s, extra_headers[i].name);
    key_str(&s, extra_headers[i].text);
  }
  sm__sha256_final(&s, &st->headers);
  sm__sha256_init(&s);
  key_str(&s, "softmetal flags");
  for (int i = 0; i < N_CXX_FLAGS; i++) key_str(&s, CXX_FLAGS[i]);
  key_str(&s, MATH_MODE_NAMES[math_mode]);
  for (int i = 0; i < MAX_MATH_FLAGS && MATH_FLAGS[math_mode][i]; i++)
    key_str(&s, MATH_FLAGS[math_mode][i]);
  key_str(&s, functions_flag(st->fast_functions));
  key_str(&s, st->version_flag);
  key_str(&s, st->target_flag);
  key_str(&s, st->cpu_flag ? st->cpu_flag : "");
  key_str(&s, FRONTEND_FLAG);
  sm__sha256_final(&s, &st->flags);
  char hex[65];
  short_hex(&st->headers, hex);
  snprintf(st->inc, sizeof st->inc, "%s/include-%s", st->dir, hex);
  /* the precompiled header is named by its whole key */
  sm__sha256_init(&s);
  key_str(&s, "softmetal pch");
  key_digest(&s, &st->headers);
  key_digest(&s, &st->ident);
  key_digest(&s, &st->flags);
  sm_digest p;
  sm__sha256_final(&s, &p);
  sm__digest_hex(&p, hex);
  snprintf(st->pch, sizeof st->pch, "%s/p-%s.pch", st->dir, hex);
  snprintf(st->macros, sizeof st->macros, "%s/m-%s", st->dir, hex);
  return true;
}

/* The include directory: metal_stdlib, sm_abi.h, the aliases, <simd/simd.h>
 * and the refused headers. */
static bool write_headers(const setting *st, char **diag) {
  char hdr[3400], abi[3400];
  snprintf(hdr, sizeof hdr, "%s/metal_stdlib", st->inc);
  snprintf(abi, sizeof abi, "%s/sm_abi.h", st->inc);
  pthread_mutex_lock(&g_cache_lock);
  bool ok = mkdirs(st->inc);
  if (ok && !file_exists(hdr)) {
    for (size_t i = 0; ok && i < N_ALIASES; i++) {
      char path[3400];
      snprintf(path, sizeof path, "%.3000s/%s", st->inc, aliases[i]);
      ok = write_file(path, alias_text, sizeof alias_text - 1);
    }
    for (size_t i = 0; ok && i < N_EXTRA; i++) {
      char path[3400];
      const char *slash = strchr(extra_headers[i].name, '/');
      if (slash) { /* simd/, MetalPerformancePrimitives/ */
        snprintf(path, sizeof path, "%.3000s/%.*s", st->inc, (int)(slash - extra_headers[i].name),
                 extra_headers[i].name);
        ok = mkdirs(path);
      }
      snprintf(path, sizeof path, "%.3000s/%s", st->inc, extra_headers[i].name);
      ok = ok && write_file(path, extra_headers[i].text, strlen(extra_headers[i].text));
    }
    ok = ok && write_file(abi, sm__abi_text, strlen(sm__abi_text)) &&
         write_file(hdr, sm__metal_stdlib_text, strlen(sm__metal_stdlib_text));
  }
  pthread_mutex_unlock(&g_cache_lock);
  if (!ok) {
    sm_text b = {0};
    sm__text_printf(&b, "cannot write the kernel cache directory %s (%s); set SOFTMETAL_CACHE_DIR",
                    st->inc, strerror(errno));
    *diag = b.p;
  }
  return ok;
}

/* A private work directory in the cache. */
static const char *const WORK_FILES[] = {SM_PROGRAM_SOURCE, "pp.ii",  "k.ii", "k.o",  "k.so", "log",
                                         "p.pch",           "macros", "cs.c", "cs.so"};
static bool make_work(const setting *st, const char *what, char *work, size_t cap, char **diag) {
  snprintf(work, cap, "%s/w-%s-%d-%u", st->dir, what, (int)getpid(),
           atomic_fetch_add(&g_tmp_counter, 1));
  if (mkdir(work, 0700) == 0) return true;
  sm_text b = {0};
  sm__text_printf(&b, "cannot create %s (%s)", work, strerror(errno));
  *diag = b.p;
  return false;
}
static void drop_work(const char *work) {
  if (!getenv("SOFTMETAL_KEEP_WORK"))
    remove_dir(work, WORK_FILES, sizeof WORK_FILES / sizeof *WORK_FILES);
}

/* Runs the compiler on metal_stdlib with the setting's flags, writing out
 * (a scratch file in work): precompiled (pch) or, else, the macros it
 * leaves defined (-E -dM). */
static bool run_on_metal_stdlib(const setting *st, bool pch, const char *work, const char *out,
                                char **diag) {
  char log[3600], hdr[3400], incflag[3300];
  snprintf(log, sizeof log, "%s/log", work);
  snprintf(hdr, sizeof hdr, "%s/metal_stdlib", st->inc);
  snprintf(incflag, sizeof incflag, "-I%s", st->inc);
  const char *argv[MAX_ARGS];
  int a = 0;
  argv[a++] = st->cxx;
  if (!pch) {
    argv[a++] = "-E";
    argv[a++] = "-dM";
  }
  argv[a++] = FRONTEND_FLAG;
  put_flags(argv, &a, st);
  argv[a++] = incflag;
  if (pch) { /* the instantiations its inline functions need, made once here
                rather than at the end of every unit that includes it */
    argv[a++] = "-Xclang";
    argv[a++] = "-fpch-instantiate-templates";
  }
  argv[a++] = "-x";
  argv[a++] = pch ? "c++-header" : "c++";
  argv[a++] = "-o";
  argv[a++] = out;
  argv[a++] = hdr;
  argv[a] = NULL;
  return run_tool(argv, log, diag);
}

/* What preprocessing a source needs of metal_stdlib: its macros. The
 * library's preprocessing step (-E) reads, instead of metal_stdlib, a file
 * of that name holding the macros metal_stdlib leaves defined (clang -dM,
 * with the same flags, so predefined ones and include guards too), in
 * m-<key>/ before the include directory: every #if, macro and include of
 * the user's source sees what it saw after metal_stdlib, without the
 * preprocessor reading metal_stdlib and its C++ headers for each library
 * (the front end keeps only the user's part of the output anyway). Built
 * with the precompiled header, under the same key. */
static bool ensure_macros(const setting *st, const char *work, char **diag) {
  char file[3500];
  snprintf(file, sizeof file, "%s/metal_stdlib", st->macros);
  if (file_exists(file)) return true;
  char out[3600], tmp[3600], tmpfile[3700];
  snprintf(out, sizeof out, "%s/macros", work);
  if (!run_on_metal_stdlib(st, false, work, out, diag)) return false;
  /* a directory of its own, renamed into place whole */
  snprintf(tmp, sizeof tmp, "%s.tmp-%d-%u", st->macros, (int)getpid(),
           atomic_fetch_add(&g_tmp_counter, 1));
  snprintf(tmpfile, sizeof tmpfile, "%s/metal_stdlib", tmp);
  bool ok = mkdir(tmp, 0700) == 0 && rename(out, tmpfile) == 0;
  if (ok && rename(tmp, st->macros) != 0) ok = file_exists(file); /* another process's */
  if (!ok) {
    unlink(tmpfile);
    rmdir(tmp);
    *diag = strdup("cannot move metal_stdlib's macros into the kernel cache");
    return false;
  }
  if (file_exists(tmpfile)) { /* lost the race: drop ours */
    unlink(tmpfile);
    rmdir(tmp);
  }
  return true;
}

/* metal_stdlib precompiled with the setting's flags, built once per key,
 * with its macros for preprocessing (ensure_macros). */
static void ensure_ccserver(const setting *st);
static bool ensure_pch(const setting *st, char **diag) {
  ensure_ccserver(st); /* from here on the compiler runs through it */
  char macros[3500];
  snprintf(macros, sizeof macros, "%s/metal_stdlib", st->macros);
  if (file_exists(st->pch) && file_exists(macros)) return true;
  if (!write_headers(st, diag)) return false;
  char work[3500], out[3600];
  if (!make_work(st, "pch", work, sizeof work, diag)) return false;
  bool ok = ensure_macros(st, work, diag);
  if (!ok || file_exists(st->pch)) {
    drop_work(work);
    return ok;
  }
  snprintf(out, sizeof out, "%s/p.pch", work);
  ok = run_on_metal_stdlib(st, true, work, out, diag);
  if (ok && rename(out, st->pch) != 0) {
    *diag = strdup("cannot move the precompiled metal_stdlib into the cache");
    ok = false;
  }
  drop_work(work);
  return ok;
}

/* The compile of a translation unit against the precompiled header. The
 * header's files are named by its key, so the compiler need not check
 * them (a concurrent rewrite of the same bytes would fail the check). */
static void put_pch(const char **argv, int *a, const setting *st) {
  argv[(*a)++] = "-Xclang";
  argv[(*a)++] = "-fno-validate-pch";
  argv[(*a)++] = "-include-pch";
  argv[(*a)++] = st->pch;
}

/* ------------------------------------------------------------- manifest */
static bool parse_manifest(sm_compiled_library *l, char **diag) {
  const char *b = NULL;
  for (const char *p = l->tu; (p = strstr(p, SM_MANIFEST_BEGIN)) != NULL; p++) b = p;
  const char *e = b ? strstr(b, SM_MANIFEST_END) : NULL;
  if (!b || !e) {
    *diag = strdup("the translation unit has no kernel manifest");
    return false;
  }
  b += strlen(SM_MANIFEST_BEGIN);
  size_t n = (size_t)(e - b);
  l->strings = malloc(n + 1);
  if (!l->strings) return false;
  memcpy(l->strings, b, n);
  l->strings[n] = 0;
  size_t nk = 0, nc = 0, nums = 1;
  for (char *p = l->strings; *p; p++) {
    if (p == l->strings || p[-1] == '\n') nk += *p == 'K', nc += *p == 'C';
    if (*p == ' ') nums++;
  }
  l->kernels = calloc(nk + 1, sizeof *l->kernels);
  l->constants = calloc(nc + 1, sizeof *l->constants);
  l->arrays = calloc(nums, sizeof *l->arrays);
  l->fc_guards = calloc(nk + 1, sizeof *l->fc_guards);
  l->fc_guard_count = calloc(nk + 1, sizeof *l->fc_guard_count);
  if (!l->kernels || !l->constants || !l->arrays || !l->fc_guards || !l->fc_guard_count)
    return false;
  uint32_t *arr = l->arrays;
  for (char *p = l->strings; *p;) {
    char *eol = strchr(p, '\n');
    if (!eol) break;
    *eol = 0;
    char kind = *p++;
    unsigned long v[4];
    char *q = p;
    if (kind == 'K') {
      struct sm_kernel_desc *k = &l->kernels[l->n_kernels++];
      for (int i = 0; i < 4; i++) v[i] = strtoul(q, &q, 10);
      k->needs_fibers = (uint32_t)v[0] & 1u;
      k->features = (uint32_t)v[0] >> 1;
      k->buffer_mask = (uint32_t)v[1];
      k->threadgroup_mask = (uint32_t)v[2];
      k->fc_used = arr;
      k->fc_used_count = (uint32_t)v[3];
      for (unsigned long i = 0; i < v[3]; i++) *arr++ = (uint32_t)strtoul(q, &q, 10);
      k->fc_cond_count = (uint32_t)strtoul(q, &q, 10);
      k->fc_conds = arr;
      for (uint32_t i = 0; i < 3 * k->fc_cond_count; i++) *arr++ = (uint32_t)strtoul(q, &q, 10);
      k->name = q + (*q == ' ');
    } else if (kind == 'G' && l->n_kernels) {
      unsigned k = l->n_kernels - 1;
      if (!l->fc_guard_count[k]++) l->fc_guards[k] = p + (*p == ' ');
    } else if (kind == 'C') {
      struct sm_constant_desc *c = &l->constants[l->n_constants++];
      for (int i = 0; i < 4; i++) v[i] = strtoul(q, &q, 10);
      c->index = (uint32_t)v[0];
      c->type = (uint32_t)v[1];
      c->size = (uint32_t)v[2];
      c->optional = (uint32_t)v[3];
      c->name = q + (*q == ' ');
    }
    p = eol + 1;
  }
  return true;
}

void sm__compiled_library_free(sm_compiled_library *l) {
  free(l->tu);
  free(l->kernels);
  free(l->constants);
  free(l->strings);
  free(l->arrays);
  free(l->fc_guards);
  free(l->fc_guard_count);
  free(l->path);
  free(l->compiler_path);
  memset(l, 0, sizeof *l);
}

/* ------------------------------------------------------------- libraries */
static const char LIB_MAGIC[] = "softmetal-library ";

/* The part of the preprocessed source after the forced metal_stdlib (which
 * the precompiled header holds), from a line marker of its own. */
static char *user_part(const char *pp, size_t len, const char *src, size_t *out_len) {
  sm_text want = {0}, b = {0};
  sm__text_printf(&want, "\n# 1 \"%s\" 2\n", src);
  const char *at = want.p ? strstr(pp, want.p) : NULL;
  if (at && (size_t)(at - pp) < len) {
    sm__text_printf(&b, "# 1 \"%s\"\n", src);
    const char *rest = at + want.n;
    sm__text_put(&b, rest, len - (size_t)(rest - pp));
  }
  free(want.p);
  if (b.oom) {
    free(b.p);
    return NULL;
  }
  *out_len = b.n;
  return b.p;
}

/* clang -fsyntax-only of the unit at tu against the precompiled header. */
static bool syntax_check(const setting *st, const char *tu, const char *log, char **diag,
                         bool ranges) {
  const char *argv[MAX_ARGS];
  int a = 0;
  argv[a++] = st->cxx;
  put_flags(argv, &a, st);
  put_pch(argv, &a, st);
  argv[a++] = "-fsyntax-only";
  if (ranges) {
    argv[a++] = "-ferror-limit=0";
    argv[a++] = "-fdiagnostics-print-source-range-info";
  }
  argv[a++] = "-x";
  argv[a++] = "c++";
  argv[a++] = tu;
  argv[a] = NULL;
  atomic_fetch_add(&sm__syntax_checks, 1);
  return run_tool(argv, log, diag);
}

/* Removes the source ranges -fdiagnostics-print-source-range-info adds
 * (`L:C:{L1:C1-L2:C2}{...}: error` becomes `L:C: error`). */
static void strip_ranges(char *d) {
  for (char *p = d ? strstr(d, ":{") : NULL; p; p = strstr(p + 1, ":{")) {
    char *q = p + 1;
    while (*q == '{') {
      char *e = q + 1;
      while (isdigit((unsigned char)*e) || *e == ':' || *e == '-') e++;
      if (*e != '}') break;
      q = e + 1;
    }
    if (q == p + 1 || *q != ':') continue;
    memmove(p, q, strlen(q) + 1);
  }
}

static bool check_source(const setting *st, const char *source, const sm_digest *key,
                         const char *path, char **tu_out, char **diag, bool *internal) {
  char hex[17];
  short_hex(key, hex);
  char work[3500];
  if (!write_headers(st, diag) || !ensure_pch(st, diag) ||
      !make_work(st, hex, work, sizeof work, diag)) {
    *internal = true;
    return false;
  }
  char src[3600], pp[3600], tu[3600], log[3600], incflag[3300], macflag[3500];
  snprintf(src, sizeof src, "%s/%s", work, SM_PROGRAM_SOURCE);
  snprintf(pp, sizeof pp, "%s/pp.ii", work);
  snprintf(tu, sizeof tu, "%s/k.ii", work);
  snprintf(log, sizeof log, "%s/log", work);
  snprintf(incflag, sizeof incflag, "-I%s", st->inc);
  snprintf(macflag, sizeof macflag, "-I%s", st->macros);
  bool ok = false;
  char *pp_text = NULL, *user = NULL, *tu_text = NULL;
  if (!write_file(src, source, strlen(source))) {
    *diag = strdup("cannot write the source into the kernel cache");
    *internal = true;
    goto out;
  }
  atomic_fetch_add(&sm__compiles, 1);
  const char *argv[MAX_ARGS];
  int a = 0;
  argv[a++] = st->cxx;
  argv[a++] = "-E";
  argv[a++] = FRONTEND_FLAG;
  put_flags(argv, &a, st);
  argv[a++] = macflag; /* metal_stdlib's macros, found first */
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
  size_t pp_len = 0, user_len = 0;
  pp_text = read_text(pp, &pp_len);
  user = pp_text ? user_part(pp_text, pp_len, src, &user_len) : NULL;
  if (!user) {
    *diag = strdup("cannot read the preprocessed source");
    *internal = true;
    goto out;
  }
  tu_text = sm__front(user, user_len, src, diag);
  if (!tu_text) goto out;
  if (!write_file(tu, tu_text, strlen(tu_text))) {
    *diag = strdup("cannot write the translation unit into the kernel cache");
    *internal = true;
    goto out;
  }
  /* with the operands' ranges: a source that needs the fix below costs one
   * pass less */
  if (!syntax_check(st, tu, log, diag, true)) {
    /* bfloat is a class here (half is _Float16), so `c ? b : f` is
     * ambiguous in C++: find every such conditional with their operands'
     * ranges, cast as MSL converts, and check once more
     * (sm__front_fix_conditionals) */
    char *fixed = strstr(*diag, "conditional expression is ambiguous")
                      ? sm__front_fix_conditionals(tu_text, *diag)
                      : NULL;
    if (!fixed) {
      strip_ranges(*diag);
      goto out;
    }
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
    if (!syntax_check(st, tu, log, diag, false)) goto out;
  }
  /* the checked unit, under its key */
  char full[65];
  sm__digest_hex(key, full);
  sm_text entry = {0};
  sm__text_printf(&entry, "%s%s\n", LIB_MAGIC, full);
  sm__text_put(&entry, tu_text, strlen(tu_text));
  bool stored = !entry.oom && write_file(path, entry.p, entry.n);
  free(entry.p);
  if (!stored) {
    *diag = strdup("cannot write the checked library into the kernel cache");
    *internal = true;
    goto out;
  }
  *tu_out = tu_text;
  tu_text = NULL;
  ok = true;
out:
  free(pp_text);
  free(user);
  free(tu_text);
  drop_work(work);
  return ok;
}

bool sm__compile_library(const char *source, int math_mode, bool fast_functions,
                         unsigned metal_version, sm_compiled_library *out, char **diag,
                         bool *internal) {
  memset(out, 0, sizeof *out);
  setting st;
  if (!setting_init(&st, NULL, math_mode, fast_functions, metal_version, diag, internal))
    return false;
  sm_sha256 s;
  sm__sha256_init(&s);
  key_str(&s, "softmetal library");
  key_digest(&s, &st.headers);
  key_digest(&s, &st.ident);
  key_digest(&s, &st.flags);
  key_str(&s, source);
  sm__sha256_final(&s, &out->key);
  char hex[17], full[65];
  short_hex(&out->key, hex);
  sm__digest_hex(&out->key, full);
  out->math_mode = math_mode;
  out->fast_functions = fast_functions;
  out->metal_version = metal_version;
  snprintf(out->cxx, sizeof out->cxx, "%s", st.cxx);
  out->compiler_key = st.ident_file;
  size_t plen = strlen(st.dir) + 64;
  out->path = malloc(plen);
  out->compiler_path = malloc(plen);
  if (!out->path || !out->compiler_path) {
    sm__compiled_library_free(out);
    *diag = strdup("out of memory");
    *internal = true;
    return false;
  }
  snprintf(out->path, plen, "%s/l-%s.ii", st.dir, hex);
  short_hex(&st.ident_file, hex);
  snprintf(out->compiler_path, plen, "%s/cc-%s.txt", st.dir, hex);
  if (!file_exists(out->path)) sm__archive_restore(SM_ARCHIVE_LIBRARY, out->key.d, out->path);
  size_t len = 0;
  char *text = read_text(out->path, &len);
  size_t head = strlen(LIB_MAGIC) + 65;
  if (text && len >= head && memcmp(text, LIB_MAGIC, strlen(LIB_MAGIC)) == 0 &&
      memcmp(text + strlen(LIB_MAGIC), full, 64) == 0 && text[head - 1] == '\n') {
    memmove(text, text + head, len - head + 1);
    out->tu = text;
    if (parse_manifest(out, diag)) {
      atomic_fetch_add(&sm__cache_hits, 1);
      return true;
    }
    free(*diag);
    *diag = NULL;
    free(out->kernels), free(out->constants), free(out->strings), free(out->arrays);
    out->kernels = NULL, out->constants = NULL, out->strings = NULL, out->arrays = NULL;
    out->n_kernels = out->n_constants = 0;
    out->tu = NULL;
  }
  free(text);
  /* not in the cache, or another key's entry under this name */
  if (!check_source(&st, source, &out->key, out->path, &out->tu, diag, internal) ||
      !parse_manifest(out, diag)) {
    if (*diag && !*internal) { /* quote the user's lines, not the rewrite */
      char *quoted = sm__front_quote(*diag, source);
      if (quoted) {
        free(*diag);
        *diag = quoted;
      }
    }
    sm__compiled_library_free(out);
    return false;
  }
  return true;
}

/* ------------------------------------------------------------- functions */
static const char KEY_TRAILER[] = "\nsoftmetal-key ";
enum { TRAILER_LEN = sizeof KEY_TRAILER - 1 + 64 + 1 };

void sm__function_key(const sm_compiled_library *l, unsigned index, bool tracked, sm_digest *key,
                      char **path) {
  sm_sha256 s;
  sm__sha256_init(&s);
  key_str(&s, tracked ? "softmetal function tracked" : "softmetal function");
  if (tracked) key_str(&s, TOUCH_CALLBACKS);
  key_digest(&s, &l->key);
  uint32_t i = index;
  sm__sha256_update(&s, &i, sizeof i);
  key_str(&s, index < l->n_kernels ? l->kernels[index].name : "");
  sm__sha256_final(&s, key);
  if (!path) return;
  char hex[17];
  short_hex(key, hex);
  size_t n = strlen(l->path) + 32;
  *path = malloc(n);
  if (!*path) return;
  snprintf(*path, n, "%s", l->path);
  char *slash = strrchr(*path, '/');
  snprintf(slash ? slash + 1 : *path, 32, "f-%s.so", hex);
}

/* Whether the file at path ends with key's trailer. */
static bool append_trailer(const char *path, const sm_digest *key) {
  char full[65], trailer[TRAILER_LEN + 1];
  sm__digest_hex(key, full);
  snprintf(trailer, sizeof trailer, "%s%s\n", KEY_TRAILER, full);
  FILE *f = fopen(path, "ab");
  bool ok = f && fwrite(trailer, 1, TRAILER_LEN, f) == TRAILER_LEN;
  return f && fclose(f) == 0 && ok;
}

static bool trailer_matches(const char *path, const sm_digest *key) {
  char want[TRAILER_LEN + 1], got[TRAILER_LEN];
  char full[65];
  sm__digest_hex(key, full);
  snprintf(want, sizeof want, "%s%s\n", KEY_TRAILER, full);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  bool ok = fstat(fd, &st) == 0 && st.st_size > TRAILER_LEN &&
            pread(fd, got, TRAILER_LEN, st.st_size - TRAILER_LEN) == TRAILER_LEN &&
            memcmp(got, want, TRAILER_LEN) == 0;
  close(fd);
  return ok;
}

/* ------------------------------------------------------------- compiler server */
/* The compiler server's object (sm_ccserver.c, embedded at build time),
 * compiled by the kernel compiler into cs-<key>.so, keyed by the
 * compiler's identity and the object's source, and ending in the key
 * trailer as a function's code does. Built if need be and started once per
 * process, for the first setting that runs the compiler;
 * SOFTMETAL_CCSERVER=0 leaves it off. Any failure here only means that
 * each command starts the compiler (sm_spawn.c). */
static bool g_ccserver_asked;
static void ensure_ccserver(const setting *st) {
  pthread_mutex_lock(&g_cache_lock);
  bool asked = g_ccserver_asked;
  g_ccserver_asked = true;
  pthread_mutex_unlock(&g_cache_lock);
  const char *off = getenv("SOFTMETAL_CCSERVER");
  if (asked || (off && strcmp(off, "0") == 0)) return;
  sm_sha256 s;
  sm__sha256_init(&s);
  key_str(&s, "softmetal compiler server");
  key_digest(&s, &st->ident);
  key_str(&s, sm__ccserver_text_sha256);
  sm_digest key;
  sm__sha256_final(&s, &key);
  char hex[17], path[3200];
  short_hex(&key, hex);
  snprintf(path, sizeof path, "%.3000s/cs-%s.so", st->dir, hex);
  if (!trailer_matches(path, &key)) {
    char work[3500] = "", src[3600], so[3600], log[3600], *diag = NULL;
    if (!make_work(st, "cs", work, sizeof work, &diag)) {
      free(diag);
      return;
    }
    snprintf(src, sizeof src, "%s/cs.c", work);
    snprintf(so, sizeof so, "%s/cs.so", work);
    snprintf(log, sizeof log, "%s/log", work);
    const char *argv[] = {st->cxx,       "-x", "c",  "-std=gnu11", "-O2", "-fPIC", "-shared",
                          "-nostdlib++", "-w", "-o", so,           src,   NULL};
    bool ok = write_file(src, sm__ccserver_text, strlen(sm__ccserver_text)) &&
              run_tool(argv, log, &diag) && append_trailer(so, &key) && rename(so, path) == 0;
    free(diag);
    drop_work(work);
    if (!ok) return;
  }
  char exe[4096];
  if (resolve_exe(st->cxx, exe, sizeof exe)) sm__ccserver_start(st->cxx, exe, path);
}

/* The unit with every guarded span of another kernel than `keep` blanked
 * (spaces, keeping newlines and directive lines). */
static char *select_kernel(const char *tu, unsigned keep) {
  char *s = strdup(tu);
  if (!s) return NULL;
  const size_t open_len = strlen(SM_GUARD_OPEN), close_len = strlen(SM_GUARD_CLOSE);
  for (char *p = s; (p = strstr(p, SM_GUARD_OPEN)) != NULL;) {
    char *num = p + open_len, *end;
    unsigned long k = strtoul(num, &end, 10);
    if (end == num || strncmp(end, "*/", 2) != 0) {
      p = num;
      continue;
    }
    char *body = end + 2, *stop = strstr(body, SM_GUARD_CLOSE);
    if (!stop) break;
    if (k != keep) {
      bool line_start = false, directive = false;
      for (char *c = body; c < stop; c++) {
        if (*c == '\n') {
          line_start = true;
          directive = false;
          continue;
        }
        if (line_start && *c == '#') directive = true;
        if (*c != ' ' && *c != '\t') line_start = false;
        if (!directive) *c = ' ';
      }
    }
    p = stop + close_len;
  }
  return s;
}

/* ------------------------------------------------------------- linking */
/* A function's code is compiled with -c and linked by the linker itself.
 * Compiling and linking in one driver call makes the driver run the
 * compiler in a process of its own (a second start of clang), and the
 * driver's link pulls in libstdc++, whose symbol tables cost the linker
 * more than the kernel does. Kernels need no C++ runtime (-fno-exceptions,
 * -fno-rtti; metal_stdlib has no allocation, static locals or virtual
 * functions): the link is the driver's own with -nostdlib++, asked once
 * with -### and kept in the cache as ld-<key>.txt, keyed by the compiler's
 * identity and the flags, less the shared libraries (-lc, -lm, -lgcc_s):
 * reading their symbol tables was four fifths of the link. A shared object
 * may leave symbols undefined, so the kernel's calls into libc and libm
 * bind when it is loaded, to the process's libc and to libm, which
 * softmetal loads into the global scope first (runtime_libs). The static
 * libgcc stays (half conversions, aarch64's outline atomics), and so do
 * the start files. A symbol no loaded library defines (a C++ runtime
 * function) fails the pipeline, naming the symbol (dlopen's error). Sanitizers: kernels are
 * not instrumented (only the trapping divide check on aarch64, which needs
 * no runtime), so they link to nothing of a sanitizer's. */
static const char LINK_MAGIC[] = "softmetal-link ";
static const char LINK_IN[] = "@softmetal-object@", LINK_OUT[] = "@softmetal-shared-object@";
enum { MAX_LINK_ARGS = 256 };

/* Parses clang's -### line (each argument in double quotes, with \ before
 * ", \ and $) into NUL-separated arguments appended to b; obj and so become
 * the placeholders. Returns the number of arguments, 0 if it is no command. */
static int parse_driver_line(const char *line, const char *obj, const char *so, sm_text *b) {
  int n = 0, in = 0, out = 0;
  const char *p = line;
  sm_text arg = {0};
  while (*p == ' ') p++;
  while (*p == '"') {
    arg.n = 0;
    for (p++; *p && *p != '"'; p++) {
      if (*p == '\\' && p[1]) p++;
      sm__text_put(&arg, p, 1);
    }
    if (*p != '"') break;
    p++;
    sm__text_put(&arg, "", 0);
    const char *a = arg.p ? arg.p : "";
    if (strcmp(a, "-lc") == 0 || strcmp(a, "-lm") == 0 || strcmp(a, "-lgcc_s") == 0) {
      while (*p == ' ') p++;
      continue; /* bound at load time instead (above) */
    }
    if (strcmp(a, obj) == 0)
      a = LINK_IN, in++;
    else if (strcmp(a, so) == 0)
      a = LINK_OUT, out++;
    sm__text_put(b, a, strlen(a) + 1);
    n++;
    while (*p == ' ') p++;
  }
  bool ok = !arg.oom && (*p == 0 || *p == '\n') && in == 1 && out == 1 && n < MAX_LINK_ARGS;
  free(arg.p);
  return ok ? n : 0;
}

/* The link command of st's compiler for obj -> so, as argv (one block: the
 * pointers, then the strings; free it). */
static char **link_command(const setting *st, const char *obj, const char *so, const char *log,
                           char **diag) {
  sm_sha256 s;
  sm__sha256_init(&s);
  key_str(&s, "softmetal link");
  key_digest(&s, &st->ident);
  key_digest(&s, &st->flags);
  sm_digest key;
  sm__sha256_final(&s, &key);
  char hex[17], full[65], path[3200];
  short_hex(&key, hex);
  sm__digest_hex(&key, full);
  snprintf(path, sizeof path, "%.3000s/ld-%s.txt", st->dir, hex);
  size_t head = strlen(LINK_MAGIC) + 65, len = 0;
  char *text = read_text(path, &len);
  if (!text || len <= head || memcmp(text, LINK_MAGIC, strlen(LINK_MAGIC)) != 0 ||
      memcmp(text + strlen(LINK_MAGIC), full, 64) != 0 || text[head - 1] != '\n' ||
      text[len - 1] != 0) {
    /* absent, or another key's: ask the driver */
    free(text);
    text = NULL;
    const char *argv[MAX_ARGS];
    int a = 0;
    argv[a++] = st->cxx;
    put_flags(argv, &a, st);
    argv[a++] = "-nostdlib++";
    argv[a++] = "-###";
    argv[a++] = "-o";
    argv[a++] = so;
    argv[a++] = obj;
    argv[a] = NULL;
    if (!run_tool(argv, log, diag)) return NULL;
    char *out = read_text(log, NULL);
    sm_text b = {0};
    sm__text_printf(&b, "%s%s\n", LINK_MAGIC, full);
    int n = 0;
    for (char *line = out; line && *line && !n;) {
      char *next = strchr(line, '\n');
      if (line[0] == ' ' && line[1] == '"') n = parse_driver_line(line, obj, so, &b);
      line = next ? next + 1 : NULL;
    }
    free(out);
    if (!n || b.oom) {
      free(b.p);
      sm_text e = {0};
      sm__text_printf(&e, "cannot read the link command from '%s -###'", st->cxx);
      *diag = e.p;
      return NULL;
    }
    write_file(path, b.p, b.n); /* a later process reads it */
    text = b.p;
    len = b.n;
  }
  /* argv: the placeholders replaced */
  const char *args[MAX_LINK_ARGS];
  size_t n = 0, bytes = 0;
  for (const char *p = text + head; p < text + len && n < MAX_LINK_ARGS - 1; p += strlen(p) + 1) {
    args[n] = strcmp(p, LINK_IN) == 0 ? obj : strcmp(p, LINK_OUT) == 0 ? so : p;
    bytes += strlen(args[n++]) + 1;
  }
  char **argv = n ? malloc((n + 1) * sizeof *argv + bytes) : NULL;
  if (argv) {
    char *q = (char *)(argv + n + 1);
    for (size_t i = 0; i < n; i++) {
      size_t k = strlen(args[i]) + 1;
      memcpy(q, args[i], k);
      argv[i] = q;
      q += k;
    }
    argv[n] = NULL;
  } else {
    *diag = strdup(n ? "out of memory" : "the kept link command is empty");
  }
  free(text);
  return argv;
}

/* libm in the global scope, where a kernel's undefined math calls find it
 * (kernels are linked without it, above; the program may not have it). */
static pthread_once_t g_runtime_libs_once = PTHREAD_ONCE_INIT;
static void load_runtime_libs(void) { (void)dlopen("libm.so.6", RTLD_NOW | RTLD_GLOBAL); }

/* Loads a function's shared object: its symbols stay its own. */
static void *load_function(const char *path) {
  pthread_once(&g_runtime_libs_once, load_runtime_libs);
  return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

void *sm__compile_function(const sm_compiled_library *l, unsigned index, bool tracked,
                           char **diag) {
  sm_digest key;
  char *path = NULL;
  sm__function_key(l, index, tracked, &key, &path);
  if (!path) {
    *diag = strdup("out of memory");
    return NULL;
  }
  if (!file_exists(path)) sm__archive_restore(SM_ARCHIVE_CODE, key.d, path);
  if (trailer_matches(path, &key)) {
    void *dl = load_function(path);
    if (dl) {
      atomic_fetch_add(&sm__function_cache_hits, 1);
      free(path);
      return dl;
    }
  }
  void *dl = NULL;
  char *unit = NULL;
  setting st;
  bool internal = false;
  char work[3500] = "";
  char hex[17];
  short_hex(&key, hex);
  if (!setting_init(&st, l->cxx, l->math_mode, l->fast_functions, l->metal_version, diag,
                    &internal) ||
      !write_headers(&st, diag) || !ensure_pch(&st, diag) ||
      !make_work(&st, hex, work, sizeof work, diag))
    goto out;
  char tu[3600], obj[3600], so[3600], log[3600];
  snprintf(tu, sizeof tu, "%s/k.ii", work);
  snprintf(obj, sizeof obj, "%s/k.o", work);
  snprintf(so, sizeof so, "%s/k.so", work);
  snprintf(log, sizeof log, "%s/log", work);
  unit = select_kernel(l->tu, index);
  if (unit && tracked) {
    size_t n = strlen(unit);
    char *grown = realloc(unit, n + sizeof TOUCH_CALLBACKS);
    if (grown)
      memcpy(grown + n, TOUCH_CALLBACKS, sizeof TOUCH_CALLBACKS);
    else
      free(unit);
    unit = grown;
  }
  if (!unit || !write_file(tu, unit, strlen(unit))) {
    *diag = strdup("cannot write the function's translation unit into the kernel cache");
    goto out;
  }
  const char *argv[MAX_ARGS];
  int a = 0;
  argv[a++] = st.cxx;
  put_flags(argv, &a, &st);
  for (int i = 0; tracked && i < N_TOUCH_FLAGS; i++) argv[a++] = TOUCH_FLAGS[i];
  put_pch(argv, &a, &st);
  argv[a++] = "-c";
  argv[a++] = "-x";
  argv[a++] = "c++";
  argv[a++] = "-o";
  argv[a++] = obj;
  argv[a++] = tu;
  argv[a] = NULL;
  atomic_fetch_add(&sm__function_compiles, 1);
  if (!run_tool(argv, log, diag)) goto out;
  char **link = link_command(&st, obj, so, log, diag);
  if (!link) goto out;
  bool linked = run_tool((const char *const *)link, log, diag);
  free(link);
  if (!linked) goto out;
  if (!append_trailer(so, &key) || rename(so, path) != 0) {
    *diag = strdup("cannot move the compiled function into the cache");
    goto out;
  }
  dl = load_function(path);
  if (!dl) {
    const char *e = dlerror();
    sm_text b = {0};
    sm__text_printf(&b, "%s", e ? e : "dlopen failed");
    if (e && strstr(e, "undefined symbol: __cxa_"))
      sm__text_printf(&b, " (a C++ runtime function: kernels are linked without libstdc++, as "
                          "a GPU has none; a function-scope static variable with an "
                          "initialiser computed at run time needs it: make it constant, or "
                          "compute the value in each thread)");
    *diag = b.p ? b.p : strdup("dlopen failed");
  }
out:
  free(unit);
  free(path);
  if (work[0]) drop_work(work);
  return dl;
}
