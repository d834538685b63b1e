/* SPDX-License-Identifier: MIT */
/* softmetal-bench: softmetal's execution speed, as ratios measured in one run.
 *
 *   softmetal-bench exec [--n ELEMENTS] [--reps R] [--threads N]
 *
 * 1. y = 2x + 1 over n float32 (default 16M): bytes read and written per
 *    second, against memcpy of the same bytes (8n) in the same process.
 * 2. A compute-bound kernel (a dependent chain of multiply-adds per thread,
 *    4096 threadgroups): one participant (SOFTMETAL_THREADS=1) against N
 *    (default: the online cores), wall time and process CPU time.
 * 3. The same kind of kernel with threadgroup barriers (a fiber switch per
 *    thread and barrier), N participants: softmetal's own fiber switch
 *    against glibc's swapcontext (SOFTMETAL_FIBER_SWITCH=ucontext), runs
 *    alternating: process CPU time (the figure on a shared machine), system
 *    time and wall time of the run with the least CPU time.
 * 4. y = 2x + 1 and the compute-bound kernel as two dispatches over the
 *    two halves of the buffers, in a concurrent compute pass
 *    (MTLDispatchTypeConcurrent, no barrier: tracked code, every memory
 *    access recorded for the hazard check) against a serial pass,
 *    alternating: the cost of the tracking.
 * 5. half arithmetic (a chain of half multiply-adds per thread) compiled
 *    without F16C (SOFTMETAL_F16C=0: each conversion a call) and with it
 *    where the CPU has it, alternating; the results must be the same bits.
 * Each figure is the best of R runs (default 5). Kernels are compiled (or
 * taken from the kernel cache) before any timing. */
#define _POSIX_C_SOURCE 200809L
#include <objc/message.h>
#include <objc/runtime.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "softmetal.h"

typedef unsigned long NSUInteger;
typedef struct {
  NSUInteger width, height, depth;
} MTLSize;
id MTLCreateSystemDefaultDevice(void);
void *objc_autoreleasePoolPush(void);
void objc_autoreleasePoolPop(void *token);

#define SEND(R, PROTO, obj, sel, ...)                                                              \
  ((R(*) PROTO)(void (*)(void))objc_msg_lookup((obj), sel_registerName(sel)))(                     \
      (obj), sel_registerName(sel), __VA_ARGS__)
#define SEND0(R, obj, sel)                                                                         \
  ((R(*)(id, SEL))(void (*)(void))objc_msg_lookup((obj), sel_registerName(sel)))(                  \
      (obj), sel_registerName(sel))

static const char SRC[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "kernel void axpb(device const float *x [[buffer(0)]], device float *y [[buffer(1)]],\n"
    "                 uint i [[thread_position_in_grid]]) {\n"
    "  y[i] = 2.0f * x[i] + 1.0f;\n"
    "}\n"
    "kernel void spin(device float *out [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
    "  float a = float(i & 255u) * 1e-3f, b = 0.5f;\n"
    "  for (int k = 0; k < 512; k++) b = b * 0.999f + a;\n"
    "  out[i] = b;\n"
    "}\n"
    "kernel void spin_sync(device float *out [[buffer(0)]], uint i [[thread_position_in_grid]],\n"
    "                      uint l [[thread_index_in_threadgroup]]) {\n"
    "  threadgroup float t[256];\n"
    "  float a = float(i & 255u) * 1e-3f, b = 0.5f;\n"
    "  for (int r = 0; r < 16; r++) {\n"
    "    for (int k = 0; k < 32; k++) b = b * 0.999f + a;\n"
    "    t[l] = b;\n"
    "    threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "    b += t[255u - l] * 1e-6f;\n"
    "    threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  }\n"
    "  out[i] = b;\n"
    "}\n";

static const char HALF_SRC[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "kernel void halves(device const half *x [[buffer(0)]], device half *y [[buffer(1)]],\n"
    "                   uint i [[thread_position_in_grid]]) {\n"
    "  half a = x[i], b = 0.5h;\n"
    "  for (int k = 0; k < 64; k++) b = b * 0.999h + a;\n"
    "  y[i] = b;\n"
    "}\n";

static double sys_seconds(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)u.ru_stime.tv_sec + (double)u.ru_stime.tv_usec * 1e-6;
}

static double now(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static id str(const char *s) {
  return SEND(id, (id, SEL, const char *, NSUInteger), (id)objc_getClass("NSString"),
              "stringWithCString:encoding:", s, 4ul);
}

typedef struct {
  id dev, queue, lib, axpb, spin, spin_sync;
} ctx;

static id pipeline(ctx *c, const char *name) {
  id fn = SEND(id, (id, SEL, id), c->lib, "newFunctionWithName:", str(name));
  id err = 0;
  id p =
      SEND(id, (id, SEL, id, id *), c->dev, "newComputePipelineStateWithFunction:error:", fn, &err);
  SEND0(void, fn, "release");
  if (!p) {
    fprintf(stderr, "softmetal-bench: no pipeline for %s\n", name);
    exit(1);
  }
  return p;
}

/* A device (and pool) of `threads` participants, 0 for the default. */
static void open_ctx(ctx *c, unsigned threads) {
  if (threads) {
    char v[16];
    snprintf(v, sizeof v, "%u", threads);
    setenv("SOFTMETAL_THREADS", v, 1);
  } else {
    unsetenv("SOFTMETAL_THREADS");
  }
  c->dev = MTLCreateSystemDefaultDevice();
  if (!c->dev) {
    fprintf(stderr, "softmetal-bench: no device\n");
    exit(1);
  }
  c->queue = SEND0(id, c->dev, "newCommandQueue");
  id err = 0;
  c->lib = SEND(id, (id, SEL, id, id, id *), c->dev,
                "newLibraryWithSource:options:error:", str(SRC), (id)0, &err);
  if (!c->lib) {
    fprintf(stderr, "softmetal-bench: compile failed\n");
    exit(1);
  }
  c->axpb = pipeline(c, "axpb");
  c->spin = pipeline(c, "spin");
  c->spin_sync = pipeline(c, "spin_sync");
}

static void close_ctx(ctx *c) {
  SEND0(void, c->axpb, "release");
  SEND0(void, c->spin, "release");
  SEND0(void, c->spin_sync, "release");
  SEND0(void, c->lib, "release");
  SEND0(void, c->queue, "release");
  SEND0(void, c->dev, "release");
  /* Queues let go of their command buffers (and so of the queue and the
   * device) on their own threads: once they have, the device is gone and
   * the pool's workers are joined; the next device starts a new pool that
   * reads SOFTMETAL_THREADS again. */
  softmetal_quiesce();
}

static id buffer(ctx *c, size_t len) {
  id b = SEND(id, (id, SEL, NSUInteger, NSUInteger), c->dev,
              "newBufferWithLength:options:", (NSUInteger)len, 0ul);
  if (!b) {
    fprintf(stderr, "softmetal-bench: no buffer of %zu bytes\n", len);
    exit(1);
  }
  return b;
}

/* Seconds (wall, and process CPU in *cpu) of n threads of p over 4-byte
 * elements, in a serial pass or a concurrent one, as `parts` dispatches over
 * consecutive ranges of the buffers with no barrier between them (a lone
 * dispatch of a concurrent pass cannot race and runs untracked). */
static double run_in(ctx *c, id p, id *bufs, int nbufs, size_t n, double *cpu, bool concurrent,
                     size_t parts) {
  void *pool = objc_autoreleasePoolPush();
  double c0 = now(CLOCK_PROCESS_CPUTIME_ID), t0 = now(CLOCK_MONOTONIC);
  id cb = SEND0(id, c->queue, "commandBuffer");
  id enc = concurrent ? SEND(id, (id, SEL, NSUInteger), cb,
                             "computeCommandEncoderWithDispatchType:", (NSUInteger)1)
                      : SEND0(id, cb, "computeCommandEncoder");
  SEND(void, (id, SEL, id), enc, "setComputePipelineState:", p);
  for (size_t k = 0; k < parts; k++) {
    size_t first = n / parts * k, count = k + 1 < parts ? n / parts : n - first;
    for (int i = 0; i < nbufs; i++)
      SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", bufs[i],
           (NSUInteger)(first * 4), (NSUInteger)i);
    SEND(void, (id, SEL, MTLSize, MTLSize), enc,
         "dispatchThreads:threadsPerThreadgroup:", ((MTLSize){count, 1, 1}),
         ((MTLSize){256, 1, 1}));
  }
  SEND0(void, enc, "endEncoding");
  SEND0(void, cb, "commit");
  SEND0(void, cb, "waitUntilCompleted");
  double t = now(CLOCK_MONOTONIC) - t0;
  if (cpu) *cpu = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
  if (SEND0(NSUInteger, cb, "status") != 4) {
    fprintf(stderr, "softmetal-bench: the command buffer failed\n");
    exit(1);
  }
  objc_autoreleasePoolPop(pool);
  return t;
}

static double run(ctx *c, id p, id *bufs, int nbufs, size_t n, double *cpu) {
  return run_in(c, p, bufs, nbufs, n, cpu, false, 1);
}

/* Best wall seconds of p in a serial pass (best[0]) and a concurrent one
 * (best[1]), runs alternating after one warm run of each. */
static void serial_vs_concurrent(ctx *c, id p, id *bufs, int nbufs, size_t n, int reps,
                                 double best[2]) {
  best[0] = best[1] = 1e30;
  for (int r = 0; r <= reps; r++)
    for (int k = 0; k < 2; k++) {
      double t = run_in(c, p, bufs, nbufs, n, NULL, k == 1, 2);
      if (r > 0 && t < best[k]) best[k] = t;
    }
}

int sm_bench_exec_main(int argc, char **argv); /* softmetal_bench.c */
int sm_bench_exec_main(int argc, char **argv) {
  size_t n = 16u << 20;
  int reps = 5;
  unsigned threads = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--n") == 0 && i + 1 < argc)
      n = strtoul(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
      threads = (unsigned)atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: softmetal-bench exec [--n ELEMENTS] [--reps R] [--threads N]\n");
      return 2;
    }
  }
  if (n == 0 || reps < 1) return 2;
  if (!threads) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    threads = c < 1 ? 1 : (unsigned)c;
  }
  void *pool = objc_autoreleasePoolPush();
  ctx c;
  open_ctx(&c, threads);

  /* 1. y = 2x + 1 against memcpy */
  id bufs[2] = {buffer(&c, n * 4), buffer(&c, n * 4)};
  float *x = SEND0(void *, bufs[0], "contents");
  for (size_t i = 0; i < n; i++) x[i] = (float)(i & 1023);
  char *src = malloc(n * 4), *dst = malloc(n * 4);
  if (!src || !dst) return 1;
  memset(src, 1, n * 4);
  memset(dst, 0, n * 4);
  double best_k = 1e30, best_m = 1e30;
  run(&c, c.axpb, bufs, 2, n, NULL); /* warm: pages touched, workers started */
  for (int r = 0; r < reps; r++) {
    double t = run(&c, c.axpb, bufs, 2, n, NULL);
    if (t < best_k) best_k = t;
    double t0 = now(CLOCK_MONOTONIC);
    memcpy(dst, src, n * 4);
    t = now(CLOCK_MONOTONIC) - t0;
    if (t < best_m) best_m = t;
    src[r] = dst[n * 4 - 1 - (size_t)r]; /* keep the copy */
  }
  const float *y = SEND0(void *, bufs[1], "contents");
  if (y[n - 1] != 2.0f * x[n - 1] + 1.0f) {
    fprintf(stderr, "softmetal-bench: wrong result\n");
    return 1;
  }
  double bytes = 8.0 * (double)n;
  printf("y = 2x + 1, %zu float32, %u participants: %.2f GB/s; memcpy of the same bytes: "
         "%.2f GB/s; ratio %.2f\n",
         n, threads, bytes / best_k * 1e-9, bytes / best_m * 1e-9, best_m / best_k);
  free(src);
  free(dst);
  SEND0(void, bufs[0], "release");
  SEND0(void, bufs[1], "release");

  /* 2. compute-bound: 1 participant against `threads` */
  size_t m = 4096 * 256;
  double wall[2], cpu[2];
  unsigned parts[2] = {1, threads};
  for (int k = 0; k < 2; k++) {
    if (k == 1) {
      close_ctx(&c);
      open_ctx(&c, parts[1]);
    } else {
      close_ctx(&c);
      open_ctx(&c, parts[0]);
    }
    id out = buffer(&c, m * 4);
    run(&c, c.spin, &out, 1, m, NULL);
    wall[k] = cpu[k] = 1e30;
    for (int r = 0; r < reps; r++) {
      double cp, t = run(&c, c.spin, &out, 1, m, &cp);
      if (t < wall[k]) wall[k] = t, cpu[k] = cp;
    }
    SEND0(void, out, "release");
  }
  printf("compute-bound kernel, %zu threads: 1 participant %.3f s (CPU %.3f s); %u: %.3f s "
         "(CPU %.3f s); speed-up %.2fx\n",
         m, wall[0], cpu[0], parts[1], wall[1], cpu[1], wall[0] / wall[1]);

  /* 3. barriers: own fiber switch against swapcontext, alternating */
  size_t ms = 256 * 256;
  id out = buffer(&c, ms * 4);
  const char *mode[2] = {"ucontext", "own"};
  double swall[2] = {1e30, 1e30}, ssys[2] = {1e30, 1e30}, scpu[2] = {1e30, 1e30};
  float first = 0;
  for (int r = 0; r <= reps; r++) {
    for (int k = 0; k < 2; k++) {
      setenv("SOFTMETAL_FIBER_SWITCH", mode[k], 1);
      double s0 = sys_seconds();
      double cp, t = run(&c, c.spin_sync, &out, 1, ms, &cp);
      double st = sys_seconds() - s0;
      float v = ((const float *)SEND0(void *, out, "contents"))[ms - 1];
      if (r == 0 && k == 0) first = v;
      if (v != first) {
        fprintf(stderr, "softmetal-bench: the fiber switches disagree\n");
        return 1;
      }
      if (r > 0 && cp < scpu[k]) scpu[k] = cp, swall[k] = t, ssys[k] = st; /* run 0 warms */
    }
  }
  unsetenv("SOFTMETAL_FIBER_SWITCH");
  SEND0(void, out, "release");

  printf("kernel with barriers, %zu threads, 32 barriers each, %u participants (best CPU "
         "time of %d): swapcontext CPU %.3f s (system %.3f s, wall %.3f s); own switch CPU "
         "%.3f s (system %.3f s, wall %.3f s); CPU ratio %.2fx\n",
         ms, threads, reps, scpu[0], ssys[0], swall[0], scpu[1], ssys[1], swall[1],
         scpu[0] / scpu[1]);

  /* 4. concurrent pass (tracked code) against serial */
  size_t nc = n < ((size_t)4 << 20) ? n : (size_t)4 << 20;
  id cbufs[2] = {buffer(&c, nc * 4), buffer(&c, nc * 4)};
  double ax[2], sp[2];
  serial_vs_concurrent(&c, c.axpb, cbufs, 2, nc, reps, ax);
  serial_vs_concurrent(&c, c.spin, cbufs, 1, m, reps, sp);
  printf("concurrent pass (every access tracked) against serial, %u participants: y = 2x + 1 "
         "over %zu float32 %.3f s against %.3f s, ratio %.2fx; compute-bound kernel %.3f s "
         "against %.3f s, ratio %.2fx\n",
         threads, nc, ax[1], ax[0], ax[1] / ax[0], sp[1], sp[0], sp[1] / sp[0]);
  SEND0(void, cbufs[0], "release");
  SEND0(void, cbufs[1], "release");

  /* 5. half arithmetic without and with F16C, alternating */
  id hp[2];
  for (int k = 0; k < 2; k++) {
    if (k == 0)
      setenv("SOFTMETAL_F16C", "0", 1);
    else
      unsetenv("SOFTMETAL_F16C");
    id err = 0;
    id lib = SEND(id, (id, SEL, id, id, id *), c.dev,
                  "newLibraryWithSource:options:error:", str(HALF_SRC), (id)0, &err);
    if (!lib) {
      fprintf(stderr, "softmetal-bench: the half kernel did not compile\n");
      return 1;
    }
    id saved = c.lib;
    c.lib = lib;
    hp[k] = pipeline(&c, "halves");
    c.lib = saved;
    SEND0(void, lib, "release");
  }
  size_t nh = 4096 * 256;
  id hbufs[3] = {buffer(&c, nh * 2), buffer(&c, nh * 2), buffer(&c, nh * 2)};
  uint16_t *hx = SEND0(void *, hbufs[0], "contents");
  for (size_t i = 0; i < nh; i++) hx[i] = (uint16_t)(0x2000u + (i & 0x1fffu)); /* small halves */
  double hbest[2] = {1e30, 1e30};
  for (int r = 0; r <= reps; r++)
    for (int k = 0; k < 2; k++) {
      id io[2] = {hbufs[0], hbufs[1 + k]};
      double t = run(&c, hp[k], io, 2, nh, NULL);
      if (r > 0 && t < hbest[k]) hbest[k] = t;
    }
  if (memcmp(SEND0(void *, hbufs[1], "contents"), SEND0(void *, hbufs[2], "contents"), nh * 2)) {
    fprintf(stderr, "softmetal-bench: half results differ with and without F16C\n");
    return 1;
  }
  printf("half arithmetic, %zu threads, 64 multiply-adds each, %u participants: without F16C "
         "%.3f s, with it where the CPU has it %.3f s, ratio %.2fx (same bits)\n",
         nh, threads, hbest[0], hbest[1], hbest[0] / hbest[1]);
  for (int k = 0; k < 3; k++) SEND0(void, hbufs[k], "release");
  for (int k = 0; k < 2; k++) SEND0(void, hp[k], "release");
  close_ctx(&c);
  objc_autoreleasePoolPop(pool);
  return 0;
}
