/* SPDX-License-Identifier: MIT */
/* softmetal-bench: what softmetal's compile model costs (issue 28's table).
 *
 *   softmetal-bench compile [--corpus DIR] [--no-ggml] [--no-mlx]
 *
 * Each figure starts from a kernel cache of its own (a new directory, so
 * "cold": nothing compiled), except where it says warm. Printed per figure:
 * wall-clock seconds and the CPU seconds of the compiler processes it ran
 * (less sensitive to a loaded machine than the wall clock). The corpus
 * (DIR/ggml/ggml-metal.metal, DIR/mlx/steel_gemm_fused.metal) is laid out
 * by tools/softmetal/corpus.sh; $CMETAL_MSL_CORPUS by default. Prints the machine's
 * cores and load average first: figures from a loaded machine are slower. */
#define _GNU_SOURCE
#include <objc/message.h>
#include <objc/runtime.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "softmetal.h"

typedef unsigned long NSUInteger;
typedef long NSInteger;
id MTLCreateSystemDefaultDevice(void);
void *objc_autoreleasePoolPush(void);
void objc_autoreleasePoolPop(void *token);

#define SEND(R, PROTO, obj, sel, ...)                                                              \
  ((R(*) PROTO)(void (*)(void))objc_msg_lookup((obj), sel_registerName(sel)))(                     \
      (obj), sel_registerName(sel), __VA_ARGS__)
#define SEND0(R, obj, sel)                                                                         \
  ((R(*)(id, SEL))(void (*)(void))objc_msg_lookup((obj), sel_registerName(sel)))(                  \
      (obj), sel_registerName(sel))

static id g_dev;

static id str(const char *s) {
  return SEND(id, (id, SEL, const char *, NSUInteger), (id)objc_getClass("NSString"),
              "stringWithCString:encoding:", s, 4);
}
static const char *error_text(id e) {
  return e ? SEND0(const char *, SEND0(id, e, "localizedDescription"), "UTF8String") : "?";
}

typedef struct {
  struct timespec t;
  double child_cpu;
} mark;
static mark now(void) {
  mark m;
  clock_gettime(CLOCK_MONOTONIC, &m.t);
  struct softmetal_stats s; /* the compiler's and linker's CPU time, forks of */
  softmetal_stats(&s);      /* the compiler server included */
  m.child_cpu = 1e-6 * (double)s.tool_cpu_us;
  return m;
}
static double secs(mark a, mark b) {
  return (double)(b.t.tv_sec - a.t.tv_sec) + 1e-9 * (double)(b.t.tv_nsec - a.t.tv_nsec);
}
static void row(const char *figure, mark a, mark b, const char *target) {
  printf("| %-58s | %9.3f s | %8.2f s | %-8s |\n", figure, secs(a, b), b.child_cpu - a.child_cpu,
         target);
  fflush(stdout);
}

/* Safe math (0), as the corpus tests and mlx; fast (-1: options nil). */
static id library(const char *src, long math) {
  id opts = 0;
  if (math >= 0) {
    id fresh = SEND0(id, (id)objc_getClass("MTLCompileOptions"), "alloc");
    opts = SEND0(id, fresh, "init");
    SEND(void, (id, SEL, NSInteger), opts, "setMathMode:", (NSInteger)math);
  }
  id error = 0;
  id lib = SEND(id, (id, SEL, id, id, id *), g_dev, "newLibraryWithSource:options:error:", str(src),
                opts, &error);
  if (opts) SEND0(void, opts, "release");
  if (!lib) {
    fprintf(stderr, "softmetal-bench: library failed: %s\n", error_text(error));
    exit(1);
  }
  return lib;
}

/* A pipeline of kernel name; bools (index, value) pairs specialize it. */
static id pipeline(id lib, const char *name, const NSUInteger *idx, const bool *val, int n) {
  id error = 0, fn;
  if (n) {
    id fresh = SEND0(id, (id)objc_getClass("MTLFunctionConstantValues"), "alloc");
    id cv = SEND0(id, fresh, "init");
    for (int i = 0; i < n; i++)
      SEND(void, (id, SEL, const void *, NSUInteger, NSUInteger), cv,
           "setConstantValue:type:atIndex:", &val[i], 53ul, idx[i]);
    fn = SEND(id, (id, SEL, id, id, id *), lib,
              "newFunctionWithName:constantValues:error:", str(name), cv, &error);
    SEND0(void, cv, "release");
  } else {
    fn = SEND(id, (id, SEL, id), lib, "newFunctionWithName:", str(name));
  }
  id p = fn ? SEND(id, (id, SEL, id, id *), g_dev, "newComputePipelineStateWithFunction:error:", fn,
                   &error)
            : 0;
  if (!p) {
    fprintf(stderr, "softmetal-bench: pipeline %s failed: %s\n", name, error_text(error));
    exit(1);
  }
  SEND0(void, fn, "release");
  return p;
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
    free(s);
    s = NULL;
  }
  if (s) s[n] = 0;
  fclose(f);
  return s;
}

static void new_cache(char *dir, size_t cap) {
  snprintf(dir, cap, "/tmp/softmetal-bench-XXXXXX");
  if (!mkdtemp(dir) || setenv("SOFTMETAL_CACHE_DIR", dir, 1) != 0) {
    perror("softmetal-bench: cache directory");
    exit(1);
  }
}
static void remove_cache(const char *dir) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "softmetal-bench: cannot remove %s\n", dir);
}

/* A 20-line kernel (made unique so that no cache has it). */
static void small_kernel(char *out, size_t cap, int salt) {
  snprintf(out, cap,
           "// softmetal-bench %d %d\n"
           "#include <metal_stdlib>\n"
           "using namespace metal;\n"
           "\n"
           "struct params {\n"
           "  float scale;\n"
           "  float bias;\n"
           "  uint n;\n"
           "};\n"
           "\n"
           "kernel void axpb(device const float *x [[buffer(0)]],\n"
           "                 device float *y [[buffer(1)]],\n"
           "                 constant params &p [[buffer(2)]],\n"
           "                 uint i [[thread_position_in_grid]]) {\n"
           "  if (i >= p.n) return;\n"
           "  float v = x[i] * p.scale + p.bias;\n"
           "  y[i] = max(v, 0.0f);\n"
           "}\n",
           (int)getpid(), salt);
}

/* Child: library + pipeline of the source in file, from the cache given. */
static int hit_child(const char *file) {
  char *src = read_file(file);
  if (!src) return 1;
  void *pool = objc_autoreleasePoolPush();
  g_dev = MTLCreateSystemDefaultDevice();
  mark a = now();
  id lib = library(src, 0);
  id p = pipeline(lib, "axpb", NULL, NULL, 0);
  mark b = now();
  struct softmetal_stats s;
  softmetal_stats(&s);
  printf("%.6f %ld %ld\n", secs(a, b), s.kernel_compiles + s.function_compiles,
         s.kernel_cache_hits + s.function_cache_hits);
  SEND0(void, p, "release");
  SEND0(void, lib, "release");
  objc_autoreleasePoolPop(pool);
  free(src);
  return 0;
}

int sm_bench_compile_main(int argc, char **argv); /* softmetal_bench.c */
int sm_bench_compile_main(int argc, char **argv) {
  const char *corpus = getenv("CMETAL_MSL_CORPUS");
  bool ggml = true, mlx = true;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--hit") == 0 && i + 1 < argc) return hit_child(argv[i + 1]);
    if (strcmp(argv[i], "--corpus") == 0 && i + 1 < argc)
      corpus = argv[++i];
    else if (strcmp(argv[i], "--no-ggml") == 0)
      ggml = false;
    else if (strcmp(argv[i], "--no-mlx") == 0)
      mlx = false;
    else {
      fprintf(stderr, "usage: softmetal-bench compile [--corpus DIR] [--no-ggml] [--no-mlx]\n");
      return 2;
    }
  }
  const char *cxx = getenv("SOFTMETAL_CXX");
  char load[128] = "?";
  FILE *lf = fopen("/proc/loadavg", "r");
  if (lf) {
    if (!fgets(load, sizeof load, lf)) snprintf(load, sizeof load, "?");
    load[strcspn(load, "\n")] = 0;
    fclose(lf);
  }
  printf("softmetal-bench: %ld cores, load average %s, compiler %s\n",
         sysconf(_SC_NPROCESSORS_ONLN), load, cxx && *cxx ? cxx : "clang++-19");
  printf("| %-58s | %11s | %10s | %-8s |\n", "figure", "wall", "cc CPU", "target");
  printf("|%s|%s|%s|%s|\n", "------------------------------------------------------------",
         "-------------", "------------", "----------");
  void *pool = objc_autoreleasePoolPush();
  g_dev = MTLCreateSystemDefaultDevice();
  char dir[64], src[2048];

  /* 20 lines: an empty cache (metal_stdlib is precompiled first), then a
   * kernel-cold library in a cache that has the precompiled header. */
  new_cache(dir, sizeof dir);
  small_kernel(src, sizeof src, 0);
  mark a = now();
  id lib = library(src, 0);
  id p = pipeline(lib, "axpb", NULL, NULL, 0);
  mark b = now();
  row("20-line kernel: library + pipeline, empty cache", a, b, "-");
  SEND0(void, p, "release");
  SEND0(void, lib, "release");
  small_kernel(src, sizeof src, 1);
  a = now();
  lib = library(src, 0);
  mark m = now();
  p = pipeline(lib, "axpb", NULL, NULL, 0);
  b = now();
  row("20-line kernel: library (metal_stdlib precompiled)", a, m, "-");
  row("20-line kernel: pipeline", m, b, "-");
  row("20-line kernel: library + pipeline", a, b, "<= 0.1 s");
  SEND0(void, p, "release");
  SEND0(void, lib, "release");
  /* the same source in a new process: the kernel cache's entries */
  char file[128], self[512], cmd[800];
  snprintf(file, sizeof file, "%s/bench-src.metal", dir);
  FILE *f = fopen(file, "w");
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (!f || sl <= 0) return 1;
  self[sl] = 0;
  fputs(src, f);
  fclose(f);
  double best = 1e9;
  long compiles = -1;
  for (int r = 0; r < 5; r++) {
    snprintf(cmd, sizeof cmd, "'%s' compile --hit '%s'", self, file);
    FILE *c = popen(cmd, "r");
    double t = 0;
    long comp = 0, hits = 0;
    if (!c || fscanf(c, "%lf %ld %ld", &t, &comp, &hits) != 3) return 1;
    pclose(c);
    if (t < best) best = t;
    compiles = comp;
  }
  printf("| %-58s | %9.4f s | %8s | %-8s |\n",
         "20-line kernel: library + pipeline, cached, new process", best,
         compiles == 0 ? "none" : "RAN", "<= 2 ms");
  /* a new kernel in a new process (metal_stdlib precompiled): a program's
   * first compile, which starts the compiler server (sm_spawn.c) */
  best = 1e9;
  for (int r = 0; r < 3; r++) {
    small_kernel(src, sizeof src, 2 + r);
    f = fopen(file, "w");
    if (!f) return 1;
    fputs(src, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' compile --hit '%s'", self, file);
    FILE *c = popen(cmd, "r");
    double t = 0;
    long comp = 0, hits = 0;
    if (!c || fscanf(c, "%lf %ld %ld", &t, &comp, &hits) != 3 || comp != 2) return 1;
    pclose(c);
    if (t < best) best = t;
  }
  printf("| %-58s | %9.3f s | %8s | %-8s |\n", "20-line kernel: library + pipeline, new process",
         best, "-", "-");
  remove_cache(dir);

  char path[1024];
  if ((mlx || ggml) && !corpus) {
    printf("(the mlx and ggml figures need the third-party corpus: --corpus DIR or "
           "CMETAL_MSL_CORPUS, laid out by tools/softmetal/corpus.sh)\n");
    mlx = ggml = false;
  }
  if (mlx) {
    snprintf(path, sizeof path, "%s/mlx/steel_gemm_fused.metal", corpus);
    char *text = read_file(path);
    if (!text) {
      fprintf(stderr, "softmetal-bench: %s: cannot read\n", path);
      return 1;
    }
    new_cache(dir, sizeof dir);
    /* the precompiled header first, so that the figures are the library's */
    small_kernel(src, sizeof src, 2);
    SEND0(void, library(src, 0), "release");
    a = now();
    lib = library(text, 0);
    m = now();
    const NSUInteger idx[6] = {10, 100, 110, 200, 201, 202};
    const bool val[6] = {false, false, false, true, true, true};
    p = pipeline(lib, "steel_gemm_fused_nn_float32_float32_bm32_bn32_bk16_wm2_wn2", idx, val, 6);
    b = now();
    row("mlx steel GEMM: library", a, m, "<= 3 s");
    row("mlx steel GEMM: one pipeline (bm32 bn32 float32)", m, b, "<= 3 s");
    SEND0(void, p, "release");
    SEND0(void, lib, "release");
    remove_cache(dir);
    free(text);
  }
  if (ggml) {
    snprintf(path, sizeof path, "%s/ggml/ggml-metal.metal", corpus);
    char *text = read_file(path);
    if (!text) {
      fprintf(stderr, "softmetal-bench: %s: cannot read\n", path);
      return 1;
    }
    new_cache(dir, sizeof dir);
    small_kernel(src, sizeof src, 3);
    SEND0(void, library(src, 0), "release");
    a = now();
    lib = library(text, 0);
    m = now();
    p = pipeline(lib, "kernel_get_rows_q4_0", NULL, NULL, 0);
    b = now();
    row("ggml-metal.metal: library", a, m, "<= 10 s");
    row("ggml-metal.metal: one pipeline (kernel_get_rows_q4_0)", m, b, "<= 3 s");
    SEND0(void, p, "release");
    SEND0(void, lib, "release");
    remove_cache(dir);
    free(text);
  }
  objc_autoreleasePoolPop(pool);
  SEND0(void, g_dev, "release");
  return 0;
}
