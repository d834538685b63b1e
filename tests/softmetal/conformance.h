/* SPDX-License-Identifier: MIT */
/* The conformance suites (conformance_*.c): cases taken from the Metal
 * Shading Language Specification, each naming its section. A chapter's
 * cases share one kernel: case i writes the bits of one MSL expression to
 * o[thread * n + i], and the C side compares them with the value the text
 * gives (or a C reference of it), exactly or within the ulp bound of the
 * specification's precision tables. Inputs come from buffers so that nothing
 * is folded at compile time: u[i] = i for i < 128 and the values u_special
 * lists from 128 on; f[] holds float_inputs. The kernel runs on CONF_THREADS
 * threads of one threadgroup, so the compiler's vectorised loop over the
 * threads runs the same code as a thread alone; every thread must agree. */
#ifndef CONFORMANCE_H
#define CONFORMANCE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_run.h"

struct conf_case {
  const char *sec;  /* the specification's section */
  const char *expr; /* an MSL expression: a scalar, whose bits are compared */
  uint64_t want;    /* bits: floats as their uint, integers sign-extended */
  unsigned ulps;    /* 0: exact; else a float within that many ulp */
};

enum { CONF_THREADS = 32, CONF_U = 256, CONF_F = 64 };

/* u[128 + k] */
static const uint32_t conf_u_special[] = {
    0xffffffffu, 0x80000000u, 0x12345678u, 0xdeadbeefu, 0x7fffffffu, 16777217u, 16777219u,
    200u,        300u,        0x40000000u, 0xc0000000u, 0xfffffffeu, 0x8000u,   0xff00807fu,
};
/* f[k] */
static const float conf_f_inputs[] = {
    0.0f,
    1.0f,
    NAN,
    INFINITY,
    -INFINITY,
    -0.0f,
    0.5f,
    1.5f,
    2.5f,
    -1.5f,
    -2.5f,
    2.0f,
    3.0f,
    4.0f,
    0.1f,
    -1.0f,
    1e-40f,
    65504.0f,
    70000.0f,
    100.0f,
    5.5f,
    -5.5f,
    0.25f,
    -0.75f,
    1.00048828125f /* 1 + 2^-11 */,
    1.00146484375f /* 1 + 3 * 2^-11 */,
    5.9604644775390625e-8f /* 2^-24 */,
    10.0f,
    0.3f,
    6.0f,
    8.0f,
    16.0f,
    1.00390625f /* 1 + 2^-8 */,
    1.01171875f /* 1 + 3 * 2^-8 */,
};

#define CONF_PRELUDE                                                                               \
  "#include <metal_stdlib>\n"                                                                      \
  "using namespace metal;\n"                                                                       \
  "static inline ulong conf_bits(float v) { return as_type<uint>(v); }\n"                          \
  "static inline ulong conf_bits(half v) { return as_type<ushort>(v); }\n"                         \
  "static inline ulong conf_bits(bool v) { return v ? 1 : 0; }\n"                                  \
  "template <class T> static inline ulong conf_bits(T v) { return ulong(long(v)); }\n"

static inline uint64_t conf_fbits(float v) {
  uint32_t b;
  memcpy(&b, &v, 4);
  return b;
}

/* Distance in ulps between two floats given by their bits. */
static inline uint64_t conf_ulp_distance(uint32_t a, uint32_t b) {
  int64_t x = (a & 0x80000000u) ? -(int64_t)(a & 0x7fffffffu) : (int64_t)a;
  int64_t y = (b & 0x80000000u) ? -(int64_t)(b & 0x7fffffffu) : (int64_t)b;
  return (uint64_t)(x > y ? x - y : y - x);
}

/* The kernel `conf` of extra (helpers, program-scope declarations) and the
 * cases; malloc'd. */
static inline char *conf_source(const char *extra, const struct conf_case *c, int n) {
  size_t len = strlen(CONF_PRELUDE) + strlen(extra) + 512;
  for (int i = 0; i < n; i++) len += strlen(c[i].expr) + 48;
  char *s = malloc(len), *p = s;
  cr_assert_not_null(s);
  p += sprintf(p, "%s%s", CONF_PRELUDE, extra);
  p += sprintf(p,
               "kernel void conf(device const uint *u [[buffer(0)]],\n"
               "                 device const float *f [[buffer(1)]],\n"
               "                 device ulong *out [[buffer(2)]],\n"
               "                 uint tid [[thread_position_in_grid]]) {\n"
               "  device ulong *o = out + tid * %d;\n",
               n);
  for (int i = 0; i < n; i++) p += sprintf(p, "  o[%d] = conf_bits(%s);\n", i, c[i].expr);
  sprintf(p, "}\n");
  return s;
}

/* Compiles and runs the cases (math_mode as sm_compile_mode); every case that
 * differs fails the test with its section. Returns the number that differ. */
static inline int conf_run(const char *extra, const struct conf_case *c, int n, long math_mode) {
  char *src = conf_source(extra, c, n);
  id error = 0;
  id lib = sm_compile_mode(src, math_mode, &error);
  free(src);
  cr_assert_not_null(lib, "%s", sm_error_text(error));
  uint32_t u[CONF_U];
  float fl[CONF_F] = {0};
  for (uint32_t i = 0; i < CONF_U; i++) u[i] = i;
  memcpy(u + 128, conf_u_special, sizeof conf_u_special);
  memcpy(fl, conf_f_inputs, sizeof conf_f_inputs);
  size_t out_len = (size_t)CONF_THREADS * (size_t)n * sizeof(uint64_t);
  id bufs[3] = {sm_buffer(u, sizeof u), sm_buffer(fl, sizeof fl), sm_buffer(NULL, out_len)};
  sm_dispatch(lib, "conf", bufs, 3, SM_SIZE(CONF_THREADS, 1, 1), SM_SIZE(CONF_THREADS, 1, 1), false,
              0);
  const uint64_t *o = sm_contents(bufs[2]);
  int bad = 0;
  for (int i = 0; i < n; i++) {
    for (int t = 0; t < CONF_THREADS; t++) {
      uint64_t got = o[(size_t)t * (size_t)n + (size_t)i];
      bool ok = c[i].ulps ? conf_ulp_distance((uint32_t)got, (uint32_t)c[i].want) <= c[i].ulps &&
                                got >> 32 == 0
                          : got == c[i].want;
      if (!ok) {
        float gf, wf;
        uint32_t g32 = (uint32_t)got, w32 = (uint32_t)c[i].want;
        memcpy(&gf, &g32, 4);
        memcpy(&wf, &w32, 4);
        cr_expect_fail("MSL %s: %s = 0x%llx (as float %.9g), expected 0x%llx (%.9g)%s, thread %d",
                       c[i].sec, c[i].expr, (unsigned long long)got, gf,
                       (unsigned long long)c[i].want, wf, c[i].ulps ? " within the ulp bound" : "",
                       t);
        bad++;
        break;
      }
    }
  }
  for (int i = 0; i < 3; i++) sm_release(bufs[i]);
  sm_release(lib);
  return bad;
}

#define CONF_N(a) ((int)(sizeof(a) / sizeof((a)[0])))
/* a case whose value is an integer; a float given by its value; a float
 * within ulps */
#define CI(sec, expr, v) {sec, expr, (uint64_t)(int64_t)(v), 0}
#define CU(sec, expr, v) {sec, expr, (uint64_t)(v), 0}
#define CF(sec, expr, v) {sec, expr, conf_fbits(v), 0}
#define CFU(sec, expr, v, ulps) {sec, expr, conf_fbits(v), ulps}

#endif
