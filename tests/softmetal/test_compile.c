/* SPDX-License-Identifier: MIT */
/* softmetal's compile model, as Metal's: newLibraryWithSource: checks the
 * whole source and generates no code; a pipeline generates its function's
 * code alone; a cache entry is used only for its own key; softmetal-metallib
 * fails on a bad source. Each test has a kernel cache of its own. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "softmetal/sm_run.h"
#include "sm_sha256.h"

static char cache[64];

static void remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    struct stat st;
    if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
      remove_tree(p);
    else
      unlink(p);
  }
  closedir(d);
  rmdir(dir);
}

/* A fresh, empty kernel cache for the test. */
static void use_new_cache(char *dir, size_t cap) {
  snprintf(dir, cap, "/tmp/sm-compile-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  cr_assert_eq(setenv("SOFTMETAL_CACHE_DIR", dir, 1), 0);
}

static void open_suite(void) {
  sm_run_open();
  use_new_cache(cache, sizeof cache);
}
static void close_suite(void) {
  sm_run_close();
  remove_tree(cache);
}
TestSuite(compile, .init = open_suite, .fini = close_suite);

/* Files in dir whose name starts with prefix and ends with suffix. */
static int count_files(const char *dir, const char *prefix, const char *suffix) {
  DIR *d = opendir(dir);
  cr_assert_not_null(d, "%s: %s", dir, strerror(errno));
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name), sl = strlen(suffix);
    n += strncmp(e->d_name, prefix, strlen(prefix)) == 0 && len >= sl &&
         strcmp(e->d_name + len - sl, suffix) == 0;
  }
  closedir(d);
  return n;
}

static const char THREE_KERNELS[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "template <typename T> T twice(T x) { return x + x; }\n"
    "template <typename T>\n"
    "kernel void scale(device T *o [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
    "  o[i] = twice(T(i)) * T(3);\n"
    "}\n"
    "template [[host_name(\"scale_f\")]] kernel void scale<float>(device float *, uint);\n"
    "template [[host_name(\"scale_i\")]] kernel void scale<int>(device int *, uint);\n"
    "kernel void plain(device float *o [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
    "  o[i] = float(i) + 0.5f;\n"
    "}\n";

Test(compile, a_library_is_checked_and_a_pipeline_generates_its_function_alone) {
  struct softmetal_stats s0, s1, s2, s3;
  softmetal_stats(&s0);
  id error = 0;
  id lib = sm_compile(THREE_KERNELS, &error);
  cr_assert_not_null(lib, "%s", sm_error_text(error));
  softmetal_stats(&s1);
  cr_assert_eq(count_files(cache, "f-", ".so"), 0, "newLibraryWithSource: generated code");
  cr_assert_eq(s1.syntax_checks - s0.syntax_checks, 1);
  cr_assert_eq(s1.function_compiles, s0.function_compiles);
  id names = SEND0(id, lib, "functionNames");
  cr_assert_eq(sm_u(names, "count"), 3, "every kernel is in the library before any code");

  id out = sm_buffer(NULL, 8 * 4);
  sm_dispatch(lib, "scale_i", &out, 1, SM_SIZE(8, 1, 1), SM_SIZE(8, 1, 1), false, 0);
  softmetal_stats(&s2);
  cr_assert_eq(s2.function_compiles - s1.function_compiles, 1, "one function's code");
  cr_assert_eq(count_files(cache, "f-", ".so"), 1);
  for (int i = 0; i < 8; i++) cr_assert_eq(((int *)sm_contents(out))[i], 6 * i);
  sm_dispatch(lib, "scale_i", &out, 1, SM_SIZE(8, 1, 1), SM_SIZE(8, 1, 1), false, 0);
  sm_dispatch(lib, "plain", &out, 1, SM_SIZE(8, 1, 1), SM_SIZE(8, 1, 1), false, 0);
  softmetal_stats(&s3);
  cr_assert_eq(s3.function_compiles - s2.function_compiles, 1,
               "the same function again generates nothing; another one is generated");
  for (int i = 0; i < 8; i++) cr_assert_eq(((float *)sm_contents(out))[i], (float)i + 0.5f);
  sm_release(lib);

  /* a new library of the same source, as in a new process: both from the
   * cache, nothing run */
  lib = sm_compile(THREE_KERNELS, &error);
  cr_assert_not_null(lib, "%s", sm_error_text(error));
  sm_dispatch(lib, "scale_i", &out, 1, SM_SIZE(8, 1, 1), SM_SIZE(8, 1, 1), false, 0);
  struct softmetal_stats s4;
  softmetal_stats(&s4);
  cr_assert_eq(s4.syntax_checks, s3.syntax_checks);
  cr_assert_eq(s4.function_compiles, s3.function_compiles);
  cr_assert_eq(s4.kernel_cache_hits - s3.kernel_cache_hits, 1);
  cr_assert_eq(s4.function_cache_hits - s3.function_cache_hits, 1);
  sm_release(lib);
  sm_release(out);
}

/* A syntax error anywhere fails the library, with the line and column of
 * the user's text, and no code is generated. */
Test(compile, a_syntax_error_fails_the_library_before_any_code) {
  static const char src[] =
      "#include <metal_stdlib>\n"
      "using namespace metal;\n"
      "kernel void good(device float *o [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
      "  o[i] = 1.0f;\n"
      "}\n"
      "kernel void bad(device float *o [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
      "  o[i] = 1.0f + * ;\n"
      "}\n";
  struct softmetal_stats s0, s1;
  softmetal_stats(&s0);
  id error = 0;
  cr_assert_null(sm_compile(src, &error));
  softmetal_stats(&s1);
  const char *text = sm_error_text(error);
  cr_assert(strstr(text, "program_source:7:"), "%s", text);
  cr_assert_eq(s1.syntax_checks - s0.syntax_checks, 1);
  cr_assert_eq(s1.function_compiles, s0.function_compiles, "no code was generated");
  cr_assert_eq(count_files(cache, "f-", ".so"), 0);
}

/* A semantic error in one instantiation of a kernel template fails the
 * library too, though no pipeline is ever made of it: the check
 * instantiates every kernel. */
Test(compile, a_semantic_error_in_one_kernel_instantiation_fails_the_library) {
  static const char src[] =
      "#include <metal_stdlib>\n"
      "using namespace metal;\n"
      "template <typename T>\n"
      "kernel void k(device T *o [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
      "  o[i] = T(i).value;\n"
      "}\n"
      "struct wrapped { float value; wrapped(uint v) : value(v) {} wrapped() = default; };\n"
      "template [[host_name(\"k_w\")]] kernel void k<wrapped>(device wrapped *, uint);\n"
      "template [[host_name(\"k_f\")]] kernel void k<float>(device float *, uint);\n";
  struct softmetal_stats s0, s1;
  softmetal_stats(&s0);
  id error = 0;
  cr_assert_null(sm_compile(src, &error));
  softmetal_stats(&s1);
  const char *text = sm_error_text(error);
  cr_assert(strstr(text, "program_source:5:"), "%s", text);
  cr_assert_eq(s1.function_compiles, s0.function_compiles);
}

/* Runs kernel k of src once; everything it made is gone when it returns
 * (its own autorelease pool), so its code is unloaded. */
static float run_one(const char *src) {
  void *pool = objc_autoreleasePoolPush();
  id error = 0;
  id lib = sm_compile(src, &error);
  cr_assert_not_null(lib, "%s", sm_error_text(error));
  id out = sm_buffer(NULL, 4);
  sm_dispatch(lib, "k", &out, 1, SM_SIZE(1, 1, 1), SM_SIZE(1, 1, 1), false, 0);
  float v = *(float *)sm_contents(out);
  sm_release(out);
  sm_release(lib);
  objc_autoreleasePoolPop(pool);
  softmetal_quiesce();
  return v;
}

/* Copies the file of dir `from` whose name starts with prefix over the one
 * of dir `to` (one each), as a collision of their cache keys would. */
static void plant(const char *from, const char *to, const char *prefix) {
  char names[2][512] = {"", ""};
  const char *dirs[2] = {from, to};
  for (int k = 0; k < 2; k++) {
    DIR *d = opendir(dirs[k]);
    cr_assert_not_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
      if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 && !strstr(e->d_name, ".tmp"))
        snprintf(names[k], sizeof names[k], "%s/%s", dirs[k], e->d_name);
    closedir(d);
  }
  if (!names[0][0] || !names[1][0]) return; /* no such entry in this cache layout */
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.planted", names[1]);
  FILE *in = fopen(names[0], "rb"), *out = fopen(tmp, "wb");
  cr_assert(in && out);
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, in)) > 0) cr_assert_eq(fwrite(buf, 1, n, out), n);
  fclose(in);
  cr_assert_eq(fclose(out), 0);
  cr_assert_eq(rename(tmp, names[1]), 0);
}

/* Two sources whose cache entries share a name (as two sources with one
 * 64-bit key would) each get their own kernel: an entry is used only when
 * the key material it stores is the request's. */
Test(compile, cache_entries_under_one_name_are_not_confused) {
  static const char a[] = "kernel void k(device float *o [[buffer(0)]]) { o[0] = 1.0f; }\n";
  static const char b[] = "kernel void k(device float *o [[buffer(0)]]) { o[0] = 2.0f; }\n";
  char of_a[64], of_b[64];
  use_new_cache(of_a, sizeof of_a);
  cr_assert_eq(run_one(a), 1.0f);
  use_new_cache(of_b, sizeof of_b);
  cr_assert_eq(run_one(b), 2.0f);
  /* every entry of b's cache now holds a's bytes */
  plant(of_a, of_b, "k-");
  plant(of_a, of_b, "l-");
  plant(of_a, of_b, "f-");
  cr_assert_eq(run_one(b), 2.0f, "b ran a's code from an entry of another key");
  cr_assert_eq(setenv("SOFTMETAL_CACHE_DIR", cache, 1), 0);
  remove_tree(of_a);
  remove_tree(of_b);
}

static int run_metallib(const char *src, const char *out, char *log, size_t cap) {
  char in[] = "/tmp/sm-metallib-XXXXXX";
  int fd = mkstemp(in);
  cr_assert_geq(fd, 0);
  cr_assert_eq(write(fd, src, strlen(src)), (ssize_t)strlen(src));
  close(fd);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "'%s' -o '%s' '%s' 2>&1", SOFTMETAL_METALLIB, out, in);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  size_t n = fread(log, 1, cap - 1, p);
  log[n] = 0;
  int status = pclose(p);
  unlink(in);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* As `xcrun metal`, softmetal-metallib fails a build on a compile error,
 * with the diagnostic, and writes no library. */
Test(compile, softmetal_metallib_fails_on_a_bad_source) {
  /* tools/ci/qemu/run.sh sets CMETAL_QEMU: the shell cannot start the
   * aarch64 tool there; x86-64 runs this test. */
  if (getenv("CMETAL_QEMU") != NULL) cr_skip_test("the tool runs as a host program");
  char out[] = "/tmp/sm-metallib-out-XXXXXX";
  int fd = mkstemp(out);
  cr_assert_geq(fd, 0);
  close(fd);
  unlink(out);
  char log[4096];
  int rc = run_metallib("kernel void k(device float *o [[buffer(0)]]) { o[0] = nope; }\n", out, log,
                        sizeof log);
  cr_assert_neq(rc, 0, "%s", log);
  cr_assert(strstr(log, ":1:") && strstr(log, "nope"), "%s", log);
  cr_assert_neq(access(out, F_OK), 0, "no library is written");
  rc = run_metallib("kernel void k(device float *o [[buffer(0)]]) { o[0] = 1.0f; }\n", out, log,
                    sizeof log);
  cr_assert_eq(rc, 0, "%s", log);
  cr_assert_eq(access(out, F_OK), 0);
  unlink(out);
}

/* Compiles THREE_KERNELS and runs two of its kernels against their values,
 * with softmetal's counters before and after. */
static void run_three_kernels(struct softmetal_stats *before, struct softmetal_stats *after) {
  softmetal_stats(before);
  id error = 0;
  id lib = sm_compile(THREE_KERNELS, &error);
  cr_assert_not_null(lib, "%s", sm_error_text(error));
  id out = sm_buffer(NULL, 8 * 4);
  sm_dispatch(lib, "plain", &out, 1, SM_SIZE(8, 1, 1), SM_SIZE(8, 1, 1), false, 0);
  for (int i = 0; i < 8; i++) cr_assert_eq(((float *)sm_contents(out))[i], (float)i + 0.5f);
  sm_dispatch(lib, "scale_i", &out, 1, SM_SIZE(8, 1, 1), SM_SIZE(8, 1, 1), false, 0);
  for (int i = 0; i < 8; i++) cr_assert_eq(((int *)sm_contents(out))[i], 6 * i);
  softmetal_stats(after);
  sm_release(lib);
  sm_release(out);
}

static const char SECOND_SOURCE[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "kernel void twice(device float *o [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
    "  o[i] = 2.0f * float(i);\n"
    "}\n";

/* The compiler runs as a server (sm_ccserver.c): in a new cache, the
 * process starts the compiler for its --version, to build the server's
 * object and as the server, and the linker once per function; the server's
 * worker runs metal_stdlib's macros and precompiled header, the library's
 * preprocessing and check, each function's code and the driver's link
 * command (-###, asked once), one after another in one process: every
 * command after its first finds LLVM's options and the heap of the ones
 * before (what a second main in one process must not break, and does
 * here if the worker's replacements fail). A failed command ends its
 * worker; the next command gets a new one, and the same results. */
Test(compile, the_compiler_server_runs_every_compiler_command_in_one_worker) {
  struct softmetal_stats s0, s1, s2, s3;
  run_three_kernels(&s0, &s1);
  cr_assert_eq(s1.compiler_served - s0.compiler_served, 7, "%ld commands through the server",
               s1.compiler_served - s0.compiler_served);
  cr_assert_eq(s1.compiler_forks - s0.compiler_forks, 1, "%ld workers",
               s1.compiler_forks - s0.compiler_forks);
  cr_assert_eq(s1.tool_spawns - s0.tool_spawns, 5, "%ld processes started",
               s1.tool_spawns - s0.tool_spawns);
  cr_assert_eq(count_files(cache, "cs-", ".so"), 1, "the server's object is cached");
  cr_assert_gt(s1.tool_cpu_us, s0.tool_cpu_us, "the workers' CPU time is counted");
  /* a compile error comes back through the server as it would directly */
  id error = 0;
  id lib =
      sm_compile("kernel void k(device float *o [[buffer(0)]]) {\n  o[0] = nope;\n}\n", &error);
  cr_assert_null(lib);
  const char *text = sm_error_text(error);
  cr_assert(strstr(text, "program_source:2:") && strstr(text, "nope"), "%s", text);
  softmetal_stats(&s2);
  cr_assert_eq(s2.compiler_served - s1.compiler_served, 2, "preprocessing and the check");
  cr_assert_eq(s2.compiler_forks, s1.compiler_forks, "the same worker");
  cr_assert_eq(s2.tool_spawns, s1.tool_spawns);
  /* the failed check ended that worker: a new one, the same answers */
  lib = sm_compile(SECOND_SOURCE, &error);
  cr_assert_not_null(lib, "%s", sm_error_text(error));
  id out = sm_buffer(NULL, 8 * 4);
  sm_dispatch(lib, "twice", &out, 1, SM_SIZE(8, 1, 1), SM_SIZE(8, 1, 1), false, 0);
  for (int i = 0; i < 8; i++) cr_assert_eq(((float *)sm_contents(out))[i], 2.0f * (float)i);
  softmetal_stats(&s3);
  cr_assert_eq(s3.compiler_forks - s2.compiler_forks, 1);
  cr_assert_eq(s3.compiler_served - s2.compiler_served, 3, "preprocessing, check, code");
  sm_release(lib);
  sm_release(out);
}

/* Libraries and pipelines made on several threads at once: the server
 * gives each concurrent command a worker of its own (no more workers than
 * commands at once), and every kernel gets its own code. */
enum { CONCURRENT = 4 };
typedef struct {
  int salt;
  id pipeline;
  char error[1024];
} compile_job;

static void *compile_on_thread(void *arg) {
  compile_job *job = arg;
  void *pool = objc_autoreleasePoolPush();
  char src[512];
  snprintf(
      src, sizeof src,
      "kernel void times(device float *o [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
      "  o[i] = float(i) * %d.0f;\n"
      "}\n",
      job->salt);
  id error = 0;
  id lib = sm_compile(src, &error);
  id fn = lib ? SEND(id, (id, SEL, id), lib, "newFunctionWithName:", sm_str("times")) : 0;
  if (fn)
    job->pipeline = SEND(id, (id, SEL, id, id *), sm_dev,
                         "newComputePipelineStateWithFunction:error:", fn, &error);
  if (!job->pipeline) snprintf(job->error, sizeof job->error, "%s", sm_error_text(error));
  if (fn) sm_release(fn);
  if (lib) sm_release(lib);
  objc_autoreleasePoolPop(pool);
  return NULL;
}

Test(compile, concurrent_compiles_each_get_their_own_kernel) {
  struct softmetal_stats s0, s1;
  /* metal_stdlib precompiled and the link command known first */
  id warm = sm_compile(SECOND_SOURCE, &(id){0});
  cr_assert_not_null(warm);
  sm_release(sm_pipeline(warm, "twice"));
  sm_release(warm);
  softmetal_stats(&s0);
  compile_job jobs[CONCURRENT];
  pthread_t threads[CONCURRENT];
  for (int t = 0; t < CONCURRENT; t++) {
    jobs[t] = (compile_job){.salt = t + 2};
    cr_assert_eq(pthread_create(&threads[t], NULL, compile_on_thread, &jobs[t]), 0);
  }
  for (int t = 0; t < CONCURRENT; t++) pthread_join(threads[t], NULL);
  softmetal_stats(&s1);
  id out = sm_buffer(NULL, 16 * 4);
  for (int t = 0; t < CONCURRENT; t++) {
    cr_assert_not_null(jobs[t].pipeline, "thread %d: %s", t, jobs[t].error);
    sm_dispatch_pipeline(jobs[t].pipeline, "times", &out, 1, SM_SIZE(16, 1, 1), SM_SIZE(16, 1, 1),
                         false, 0);
    for (int i = 0; i < 16; i++)
      cr_assert_eq(((float *)sm_contents(out))[i], (float)(i * jobs[t].salt), "thread %d", t);
  }
  sm_release(out);
  long forks = s1.compiler_forks - s0.compiler_forks;
  cr_assert(forks <= CONCURRENT, "%ld workers for %d threads", forks, CONCURRENT);
  cr_assert_eq(s1.compiler_served - s0.compiler_served, CONCURRENT * 3,
               "preprocessing, check and code each");
}

/* SOFTMETAL_TARGET: kernels for another triple than the compiler's own
 * (tools/ci/qemu: aarch64 programs, the host's clang). The compiler's own
 * triple gives the same kernels; what is not a triple is refused, naming
 * the variable and the value. */
Test(compile, softmetal_target_names_the_kernels_triple_and_is_checked) {
#if defined(__x86_64__)
  const char *own = "x86_64-linux-gnu";
#elif defined(__aarch64__)
  const char *own = "aarch64-linux-gnu";
#else
  cr_skip_test("no triple known for this architecture");
  const char *own = "";
#endif
  cr_assert_eq(setenv("SOFTMETAL_TARGET", own, 1), 0);
  struct softmetal_stats s0, s1;
  run_three_kernels(&s0, &s1);
  cr_assert_eq(setenv("SOFTMETAL_TARGET", "aarch64 linux", 1), 0);
  id error = 0;
  id lib = sm_compile(SECOND_SOURCE, &error);
  cr_assert_null(lib);
  const char *text = sm_error_text(error);
  cr_assert(strstr(text, "SOFTMETAL_TARGET") && strstr(text, "aarch64 linux"), "%s", text);
  cr_assert_eq(unsetenv("SOFTMETAL_TARGET"), 0);
}

/* SOFTMETAL_CCSERVER=0: every command starts the compiler, with the same
 * results. */
Test(compile, without_the_compiler_server_every_command_starts_the_compiler) {
  cr_assert_eq(setenv("SOFTMETAL_CCSERVER", "0", 1), 0);
  struct softmetal_stats s0, s1;
  run_three_kernels(&s0, &s1);
  cr_assert_eq(s1.compiler_forks, s0.compiler_forks);
  cr_assert_eq(s1.compiler_served, s0.compiler_served);
  cr_assert_eq(s1.tool_spawns - s0.tool_spawns, 10, "%ld", s1.tool_spawns - s0.tool_spawns);
  cr_assert_eq(count_files(cache, "cs-", ".so"), 0);
}

/* A compiler that cannot host the server (here a wrapper that drops
 * LD_PRELOAD; also a compiler of another architecture than the process)
 * never says hello: softmetal starts it for each command instead. */
Test(compile, a_compiler_that_cannot_host_the_server_is_started_per_command) {
  if (getenv("CMETAL_QEMU") != NULL) cr_skip_test("the wrapper is a host script");
  /* named clang*: valgrind's stage does not trace the compiler */
  char dir[] = "/tmp/sm-cxx-XXXXXX", wrapper[64];
  cr_assert_not_null(mkdtemp(dir));
  snprintf(wrapper, sizeof wrapper, "%s/clang++-wrapper", dir);
  int fd = open(wrapper, O_WRONLY | O_CREAT | O_EXCL, 0700);
  cr_assert_geq(fd, 0);
  const char *cxx = getenv("SOFTMETAL_CXX");
  char text[512];
  int n = snprintf(text, sizeof text, "#!/bin/sh\nunset LD_PRELOAD\nexec %s \"$@\"\n",
                   cxx && *cxx ? cxx : "clang++-19");
  cr_assert_eq(write(fd, text, (size_t)n), n);
  cr_assert_eq(fchmod(fd, 0700), 0);
  close(fd);
  cr_assert_eq(setenv("SOFTMETAL_CXX", wrapper, 1), 0);
  struct softmetal_stats s0, s1;
  run_three_kernels(&s0, &s1);
  cr_assert_eq(s1.compiler_forks, s0.compiler_forks);
  cr_assert_eq(s1.compiler_served, s0.compiler_served);
  cr_assert_eq(count_files(cache, "cs-", ".so"), 1, "the object was built and tried");
  unlink(wrapper);
  rmdir(dir);
}

/* A program that compiled ends with its compiler server: nothing is left
 * running (this process is a subreaper, so an orphaned server would become
 * its child). */
Test(compile, the_compiler_server_ends_with_its_process) {
  if (getenv("CMETAL_QEMU") != NULL) cr_skip_test("the tool runs as a host program");
  cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  char out[] = "/tmp/sm-metallib-out-XXXXXX";
  int fd = mkstemp(out);
  cr_assert_geq(fd, 0);
  close(fd);
  char log[4096];
  int rc = run_metallib("kernel void k(device float *o [[buffer(0)]]) { o[0] = 2.0f; }\n", out, log,
                        sizeof log);
  cr_assert_eq(rc, 0, "%s", log);
  unlink(out);
  errno = 0;
  cr_assert_eq(waitpid(-1, NULL, WNOHANG), -1, "a process outlived softmetal-metallib");
  cr_assert_eq(errno, ECHILD);
}

static void sha_hex(const void *data, size_t n, size_t pieces, char hex[65]) {
  sm_sha256 s;
  sm_digest d;
  sm__sha256_init(&s);
  for (size_t i = 0; i < pieces; i++) sm__sha256_update(&s, (const char *)data + i * n, n);
  sm__sha256_final(&s, &d);
  sm__digest_hex(&d, hex);
}

/* The cache keys' hash is SHA-256: FIPS 180-4's examples, fed whole and in
 * pieces that straddle blocks. */
Test(compile, the_cache_keys_are_sha256) {
  char hex[65];
  sha_hex("abc", 3, 1, hex);
  cr_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  sha_hex("", 0, 1, hex);
  cr_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  static const char two[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  sha_hex(two, strlen(two), 1, hex);
  cr_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  static char million[1000000];
  memset(million, 'a', sizeof million);
  sha_hex(million, 1000, 1000, hex); /* 1000-byte pieces: not multiples of 64 */
  cr_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

/* MSL 3.2's memory orders reach the operations: a kernel whose atomic store
 * is seq_cst gets the ordered store instruction (x86-64 xchg, aarch64 stlr)
 * that its relaxed twin does not, read from each function's code in the
 * kernel cache. */
static const char ORDERS[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "kernel void relaxed_k(device atomic_int *a [[buffer(0)]], device int *d [[buffer(1)]],\n"
    "                      uint i [[thread_position_in_grid]]) {\n"
    "  d[i] = 1;\n"
    "  atomic_store_explicit(a, 1, memory_order_relaxed);\n"
    "}\n"
    "kernel void seq_cst_k(device atomic_int *a [[buffer(0)]], device int *d [[buffer(1)]],\n"
    "                      uint i [[thread_position_in_grid]]) {\n"
    "  d[i] = 1;\n"
    "  atomic_store_explicit(a, 1, memory_order_seq_cst);\n"
    "}\n";

/* Ordered-store instructions in the f-*.so of the cache other than skip
 * (whose name is stored there). */
static int ordered_stores(char *skip, size_t cap) {
  DIR *d = opendir(cache);
  cr_assert_not_null(d);
  char name[256] = "";
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (strncmp(e->d_name, "f-", 2) == 0 && len > 3 && strcmp(e->d_name + len - 3, ".so") == 0 &&
        strcmp(e->d_name, skip) != 0)
      snprintf(name, sizeof name, "%s", e->d_name);
  }
  closedir(d);
  cr_assert(name[0], "a function's code in the cache");
  snprintf(skip, cap, "%s", name);
#if defined(__aarch64__)
  const char *tool = "aarch64-linux-gnu-objdump", *insn = "stlr";
#else
  const char *tool = "objdump", *insn = "xchg";
#endif
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s -d --no-show-raw-insn '%s/%s' 2>&1", tool, cache, name);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  char line[512];
  int n = 0, lines = 0;
  while (fgets(line, sizeof line, p)) {
    lines++;
    char *tab = strchr(line, '\t');
    n += tab && strncmp(tab + 1, insn, strlen(insn)) == 0;
  }
  cr_assert_eq(pclose(p), 0, "%s", cmd);
  cr_assert_gt(lines, 10, "%s printed a disassembly", tool);
  return n;
}

Test(compile, memory_orders_stronger_than_relaxed_reach_the_atomics) {
  if (getenv("CMETAL_QEMU") != NULL) cr_skip_test("objdump runs as a host program");
  id error = 0;
  id lib = sm_compile(ORDERS, &error);
  cr_assert_not_null(lib, "%s", sm_error_text(error));
  char seen[256] = "";
  id p = sm_pipeline(lib, "relaxed_k");
  int relaxed = ordered_stores(seen, sizeof seen);
  id q = sm_pipeline(lib, "seq_cst_k");
  int seq_cst = ordered_stores(seen, sizeof seen);
  cr_assert_gt(seq_cst, relaxed, "seq_cst store: %d ordered stores, relaxed: %d", seq_cst, relaxed);
  sm_release(q);
  sm_release(p);
  sm_release(lib);
}
