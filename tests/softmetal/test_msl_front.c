/* SPDX-License-Identifier: MIT */
/* softmetal's MSL front end: the MSL people write (templates, host_name,
 * [[kernel]], macros, implicit indices), threadgroup variables, function
 * constants, diagnostics, and the safety of the kernel cache. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "softmetal/sm_test.h"

enum { Completed = 4, Error = 5 };
enum { DataTypeInt = 29, DataTypeUInt = 33, DataTypeBool = 53, DataTypeFloat = 3 };

static id dev, queue;
static void *pool;

static void setup(void) {
  dev = MTLCreateSystemDefaultDevice();
  queue = SEND0(id, dev, "newCommandQueue");
  pool = objc_autoreleasePoolPush();
}
static void teardown(void) {
  objc_autoreleasePoolPop(pool);
  sm_release(queue);
  sm_release(dev);
  sm_check_all_released(__FILE__);
}
TestSuite(front, .init = setup, .fini = teardown, .timeout = 120);

static id compile(const char *src, id *error) {
  return SEND(id, (id, SEL, id, id, id *), dev, "newLibraryWithSource:options:error:", sm_str(src),
              (id)0, error);
}
static id compile_ok(const char *src) {
  id error = 0;
  id lib = compile(src, &error);
  cr_assert_not_null(lib, "%s", sm_error_text(error));
  return lib;
}
static const char *compile_error(const char *src) {
  id error = 0;
  id lib = compile(src, &error);
  cr_assert_null(lib, "compiled, but should not have");
  return sm_error_text(error);
}
static id function(id lib, const char *name) {
  id fn = SEND(id, (id, SEL, id), lib, "newFunctionWithName:", sm_str(name));
  cr_assert_not_null(fn, "kernel %s", name);
  return fn;
}
static id pipeline_of(id fn) {
  id error = 0;
  id p =
      SEND(id, (id, SEL, id, id *), dev, "newComputePipelineStateWithFunction:error:", fn, &error);
  cr_assert_not_null(p, "%s", sm_error_text(error));
  return p;
}
static id buffer(NSUInteger len) {
  return SEND(id, (id, SEL, NSUInteger, NSUInteger), dev, "newBufferWithLength:options:", len, 0ul);
}
static void *contents(id b) { return SEND0(void *, b, "contents"); }

/* Runs p over n threads in groups of tg with buffers bufs[0..nb) at 0..nb-1. */
static void run(id p, id *bufs, int nb, NSUInteger n, NSUInteger tg) {
  id cb = SEND0(id, queue, "commandBuffer");
  id enc = SEND0(id, cb, "computeCommandEncoder");
  SEND(void, (id, SEL, id), enc, "setComputePipelineState:", p);
  for (int i = 0; i < nb; i++)
    SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", bufs[i],
         0ul, (NSUInteger)i);
  SEND(void, (id, SEL, MTLSize, MTLSize), enc,
       "dispatchThreads:threadsPerThreadgroup:", (MTLSize){n, 1, 1}, (MTLSize){tg, 1, 1});
  SEND0(void, enc, "endEncoding");
  SEND0(void, cb, "commit");
  SEND0(void, cb, "waitUntilCompleted");
  cr_assert_eq(sm_u(cb, "status"), Completed, "%s", sm_error_text(SEND0(id, cb, "error")));
}

static const char TEMPLATES[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "namespace ops {\n"
    "struct Twice { template <class T> T operator()(T x) const { return x + x; } };\n"
    "template <typename T, typename Op = Twice>\n"
    "[[kernel]] void unary(device const T *in, device T *out,\n"
    "                      constant uint &n, uint i [[thread_position_in_grid]]) {\n"
    "  if (i < n) out[i] = Op()(in[i]);\n"
    "}\n"
    "template [[host_name(\"unary_float\")]] [[kernel]] decltype(unary<float>) unary<float>;\n"
    "template [[host_name(\"unary_int\")]] [[kernel]] void unary<int>(device const int *in,\n"
    "    device int *out, constant uint &n, uint i [[thread_position_in_grid]]);\n"
    "typedef decltype(unary<uint>) unary_u;\n"
    "template [[host_name(\"unary_\" \"typedef\")]] kernel unary_u unary<uint>;\n"
    "template [[host_name(\"unary_short\")]] kernel void unary<short>(device const short *,\n"
    "    device short *, constant uint &, uint);\n"
    "} // namespace ops\n"
    "#define SCALE_KERNEL(name, k) \\\n"
    "  kernel void name(device float *out [[buffer(1)]], device const float *in,\\\n"
    "                   uint i [[thread_position_in_grid]]) { out[i] = in[i] * k; }\n"
    "SCALE_KERNEL(times3, 3.0f)\n"
    "SCALE_KERNEL(times5, 5.0f)\n"
    "inline float helper(float x [[maybe_unused]], device const float *p [[buffer(7)]]) {\n"
    "  return x + p[0];\n"
    "}\n";

Test(front, templates_host_names_macros_and_implicit_indices) {
  id lib = compile_ok(TEMPLATES);
  id names = SEND0(id, lib, "functionNames");
  cr_assert_eq(sm_u(names, "count"), 6);
  enum { N = 100 };
  id in = buffer(N * 4), out = buffer(N * 4), nbuf = buffer(4);
  float *pi = contents(in);
  for (int i = 0; i < N; i++) pi[i] = (float)i;
  *(unsigned *)contents(nbuf) = N;
  id fn = function(lib, "unary_float"), p = pipeline_of(fn);
  id bufs[] = {in, out, nbuf};
  run(p, bufs, 3, N, 32);
  for (int i = 0; i < N; i++) cr_assert_eq(((float *)contents(out))[i], 2.0f * (float)i, "[%d]", i);
  sm_release(p);
  sm_release(fn);
  int *ii = contents(in);
  for (int i = 0; i < N; i++) ii[i] = -i;
  fn = function(lib, "unary_int");
  p = pipeline_of(fn);
  run(p, bufs, 3, N, 32);
  for (int i = 0; i < N; i++) cr_assert_eq(((int *)contents(out))[i], -2 * i, "[%d]", i);
  sm_release(p);
  sm_release(fn);
  /* times5: out is buffer(1), so the unattributed input takes index 0 */
  for (int i = 0; i < N; i++) pi[i] = (float)i;
  fn = function(lib, "times5");
  p = pipeline_of(fn);
  id bufs2[] = {in, out};
  run(p, bufs2, 2, N, 32);
  for (int i = 0; i < N; i++) cr_assert_eq(((float *)contents(out))[i], 5.0f * (float)i, "[%d]", i);
  sm_release(p);
  sm_release(fn);
  sm_release(in);
  sm_release(out);
  sm_release(nbuf);
  sm_release(lib);
}

Test(front, implicit_indices_and_the_written_mask) {
  id lib = compile_ok("#include <metal_stdlib>\n"
                      "using namespace metal;\n"
                      "struct P { uint n; };\n"
                      "kernel void k(device const float *a, device float *b, constant P &p,\n"
                      "              device float *const c [[buffer(5)]], const device float *d,\n"
                      "              device atomic_uint *e, threadgroup float *t,\n"
                      "              threadgroup uint *u [[threadgroup(0)]],\n"
                      "              uint i [[thread_position_in_grid]]) {}\n");
  id fn = function(lib, "k"), p = pipeline_of(fn);
  unsigned buffers = 0, written = 0, tg = 0;
  cr_assert_eq(softmetal_pipeline_bindings(p, &buffers, &written, &tg), 0);
  /* a 0, b 1, p 2, c 5 (explicit), d 3, e 4; u 0 (explicit), t 1 */
  cr_assert_eq(buffers, 0x3Fu, "%#x", buffers);
  cr_assert_eq(written, (1u << 1) | (1u << 5) | (1u << 4), "%#x", written);
  cr_assert_eq(tg, 0x3u, "%#x", tg);
  cr_assert_eq(softmetal_pipeline_bindings(fn, &buffers, &written, &tg), -1);
  sm_release(p);
  sm_release(fn);
  sm_release(lib);
}

/* Every threadgroup gets fresh, poisoned storage for variables declared in a
 * body, in a switch case or in a helper; pointers to it are per thread. */
static const char TGVARS[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "struct Mirror {\n"
    "  uint run(uint tid) const {\n"
    "    threadgroup uint h[64];\n"
    "    h[tid] = tid * 2u;\n"
    "    threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "    return h[63u - tid];\n"
    "  }\n"
    "};\n"
    "uint from_helper(uint tid) { return Mirror().run(tid); }\n"
    "kernel void tg(device uint *out [[buffer(0)]], constant uint &mode [[buffer(1)]],\n"
    "               uint tid [[thread_index_in_threadgroup]],\n"
    "               uint gid [[thread_position_in_grid]],\n"
    "               uint group [[threadgroup_position_in_grid]]) {\n"
    "  threadgroup uint s[64];\n"
    "  threadgroup uint *p = s + tid;\n"
    "  uint first = s[tid];\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  *p = tid + 1000u * group;\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  uint r = 0;\n"
    "  switch (mode) {\n"
    "  case 0: {\n"
    "    threadgroup atomic_uint count;\n"
    "    if (tid == 0) atomic_store_explicit(&count, 0u, memory_order_relaxed);\n"
    "    threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "    atomic_fetch_add_explicit(&count, 1u, memory_order_relaxed);\n"
    "    threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "    r = atomic_load_explicit(&count, memory_order_relaxed);\n"
    "    break;\n"
    "  }\n"
    "  default: r = from_helper(tid); break;\n"
    "  }\n"
    "  out[4 * gid + 0] = first;\n"
    "  out[4 * gid + 1] = s[63u - tid];\n"
    "  out[4 * gid + 2] = r;\n"
    "  out[4 * gid + 3] = *p;\n"
    "}\n";

static void run_tg(id lib, unsigned mode, unsigned *o) {
  id fn = function(lib, "tg"), p = pipeline_of(fn);
  id out = buffer(4 * 4 * 128), m = buffer(4);
  *(unsigned *)contents(m) = mode;
  id bufs[] = {out, m};
  run(p, bufs, 2, 128, 64);
  memcpy(o, contents(out), 4 * 4 * 128);
  sm_release(out);
  sm_release(m);
  sm_release(p);
  sm_release(fn);
}

Test(front, threadgroup_variables_are_per_threadgroup_and_poisoned) {
  id lib = compile_ok(TGVARS);
  static unsigned o[4 * 128];
  for (unsigned mode = 0; mode < 2; mode++) {
    run_tg(lib, mode, o);
    for (unsigned g = 0; g < 128; g++) {
      unsigned tid = g % 64, group = g / 64;
      cr_assert_eq(o[4 * g + 0], 0xFFFFFFFFu, "thread %u reads poison first, not %#x", g, o[4 * g]);
      cr_assert_eq(o[4 * g + 1], 63u - tid + 1000u * group, "thread %u", g);
      cr_assert_eq(o[4 * g + 2], mode == 0 ? 64u : 2u * (63u - tid), "mode %u thread %u", mode, g);
      cr_assert_eq(o[4 * g + 3], tid + 1000u * group, "thread %u: its own pointer", g);
    }
  }
  sm_release(lib);
}

/* Every form of threadgroup declaration in a body (initialisers of every
 * kind, several declarators, arrays of structs, loops, helpers, template
 * instantiations, const/volatile/alignas, atomics, a declaration over
 * several lines): one instance per threadgroup, shared by its threads, an
 * initialiser's value stored once per threadgroup. */
static const char TGFORMS[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "struct P { float x; int y; };\n"
    "float helper(uint lid) {\n"
    "  threadgroup float h[64];\n"
    "  h[lid] = float(lid) * 3.f;\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  return h[63 - lid];\n"
    "}\n"
    "template <typename T> threadgroup T *slot() {\n"
    "  threadgroup T s[64];\n"
    "  return s;\n"
    "}\n"
    "kernel void forms(device float *o [[buffer(0)]],\n"
    "                  uint lid [[thread_position_in_threadgroup]],\n"
    "                  uint gid [[thread_position_in_grid]],\n"
    "                  uint grp [[threadgroup_position_in_grid]]) {\n"
    "  device float *r = o + 16 * gid;\n"
    "  threadgroup float buf[32] = {0};\n"
    "  r[0] = buf[lid % 32];\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  if (lid < 32) buf[lid] = float(lid + 100 * grp);\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  r[1] = buf[31 - lid % 32];\n"
    "  threadgroup int a[4] = {1, 2, 3, 4}, b[2][2] = {{5, 6}, {7, 8}};\n"
    "  r[2] = float(a[lid % 4] + b[(lid / 2) % 2][lid % 2]);\n"
    "  threadgroup float s = 2.5f;\n"
    "  threadgroup uint c{7};\n"
    "  threadgroup P ps[3] = {{1.f, 2}, {3.f, 4}};\n"
    "  r[3] = s + float(c) + ps[lid % 3].x + float(ps[lid % 3].y);\n"
    "  threadgroup float x8[8], y8[8];\n"
    "  if (lid < 8) { x8[lid] = float(lid); y8[lid] = 10.f * float(lid); }\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  r[4] = x8[7 - lid % 8] + y8[lid % 8];\n"
    "  float accum = 0;\n"
    "  for (int it = 0; it < 3; it++) {\n"
    "    threadgroup int acc[64];\n"
    "    acc[lid] = it * int(lid);\n"
    "    threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "    accum += float(acc[63 - lid]);\n"
    "    threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  }\n"
    "  r[5] = accum;\n"
    "  r[6] = helper(lid);\n"
    "  threadgroup uchar *pu = slot<uchar>();\n"
    "  threadgroup float4 *pf = slot<float4>();\n"
    "  pu[lid] = uchar(lid);\n"
    "  pf[lid] = float4(2.f * float(lid));\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  r[7] = float(pu[63 - lid]) + pf[63 - lid].y;\n"
    "  volatile threadgroup int vv[2];\n"
    "  alignas(16) threadgroup float al[4];\n"
    "  threadgroup alignas(16) float al2[4];\n"
    "  const threadgroup float ck[2] = {3.f, 4.f};\n"
    "  if (lid == 0) { vv[0] = 5; vv[1] = 6; al[0] = 1.f; al2[3] = 2.f; }\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  r[8] = float(vv[lid % 2]) + ck[lid % 2] + al[0] + al2[3];\n"
    "  r[9] = float((ulong(&al[0]) | ulong(&al2[0])) % 16);\n"
    "  threadgroup atomic_int cnt[2];\n"
    "  if (lid < 2) atomic_store_explicit(&cnt[lid], 0, memory_order_relaxed);\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  atomic_fetch_add_explicit(&cnt[lid % 2], int(lid), memory_order_relaxed);\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  r[10] = float(atomic_load_explicit(&cnt[lid % 2], memory_order_relaxed));\n"
    "  threadgroup float from_local = float(grp) + 0.5f;\n"
    "  r[11] = from_local;\n"
    "  threadgroup float ml[2] =\n"
    "      {11.f,\n"
    "       12.f};\n"
    "  r[12] = ml[lid % 2];\n"
    "  r[13] = float(__LINE__);\n"
    "  r[14] = *(const threadgroup float *)&buf[0] + float(sizeof(const threadgroup float));\n"
    "}\n";

Test(front, every_threadgroup_declaration_form_is_one_shared_instance) {
  id lib = compile_ok(TGFORMS);
  id fn = function(lib, "forms"), p = pipeline_of(fn);
  id out = buffer(16 * 4 * 128);
  memset(contents(out), 0, 16 * 4 * 128);
  id bufs[] = {out};
  run(p, bufs, 1, 128, 64);
  const float *r = contents(out);
  static const int a[4] = {1, 2, 3, 4}, b[2][2] = {{5, 6}, {7, 8}};
  static const float psx[3] = {1, 3, 0}, psy[3] = {2, 4, 0}, vv[2] = {5, 6}, ck[2] = {3, 4};
  for (unsigned g = 0; g < 128; g++) {
    unsigned lid = g % 64, grp = g / 64;
    const float want[15] = {0.f,
                            (float)(31 - lid % 32 + 100 * grp),
                            (float)(a[lid % 4] + b[(lid / 2) % 2][lid % 2]),
                            2.5f + 7.f + psx[lid % 3] + psy[lid % 3],
                            (float)(7 - lid % 8) + 10.f * (float)(lid % 8),
                            3.f * (float)(63 - lid),
                            3.f * (float)(63 - lid),
                            3.f * (float)(63 - lid),
                            vv[lid % 2] + ck[lid % 2] + 1.f + 2.f,
                            0.f,
                            lid % 2 ? 1024.f : 992.f,
                            (float)grp + 0.5f,
                            lid % 2 ? 12.f : 11.f,
                            71.f,
                            100.f * (float)grp + 4.f};
    for (int k = 0; k < 15; k++)
      cr_assert_eq(r[16 * g + k], want[k], "thread %u value %d: %g, want %g", g, k,
                   (double)r[16 * g + k], (double)want[k]);
  }
  sm_release(out);
  sm_release(p);
  sm_release(fn);
  sm_release(lib);
}

/* A threadgroup declaration the front end cannot rewrite fails the compile
 * naming its line, never becomes a variable per thread. */
Test(front, a_threadgroup_declaration_not_understood_is_refused_naming_its_line) {
  const char *e = compile_error("#include <metal_stdlib>\n"
                                "using namespace metal;\n"
                                "kernel void k(device float *o [[buffer(0)]], uint i "
                                "[[thread_position_in_grid]]) {\n"
                                "  threadgroup float a[4], *q;\n"
                                "  o[i] = a[i % 4];\n"
                                "}\n");
  cr_assert(strstr(e, "program_source:4:"), "%s", e);
  cr_assert(strstr(e, "threadgroup declaration"), "%s", e);
  /* a declaration over several lines keeps the lines after it */
  e = compile_error("#include <metal_stdlib>\n"
                    "using namespace metal;\n"
                    "kernel void k(device float *o [[buffer(0)]], uint i "
                    "[[thread_position_in_grid]]) {\n"
                    "  threadgroup float a[2] =\n"
                    "      {1.f,\n"
                    "       2.f};\n"
                    "  o[i] = a[i % 2] + undeclared_name;\n"
                    "}\n");
  cr_assert(strstr(e, "program_source:7:"), "%s", e);
}

/* Kernel parameters declared as arrays decay to pointers, as in C (mlx's
 * `constant const int64_t strides[3] [[buffer(5)]]`), with and without an
 * index attribute. */
Test(front, array_parameters_decay_to_pointers) {
  id lib = compile_ok("#include <metal_stdlib>\n"
                      "using namespace metal;\n"
                      "kernel void arr(device const float a[] [[buffer(0)]],\n"
                      "                constant const int64_t strides[3] [[buffer(1)]],\n"
                      "                device float out[],\n"
                      "                uint i [[thread_position_in_grid]]) {\n"
                      "  out[i] = a[i * strides[0]] + float(strides[1] * strides[2]);\n"
                      "}\n");
  id fn = function(lib, "arr"), p = pipeline_of(fn);
  id a = buffer(64 * 4), st = buffer(3 * 8), out = buffer(32 * 4);
  float *av = contents(a);
  for (int k = 0; k < 64; k++) av[k] = (float)k * 0.5f;
  long long *sv = contents(st);
  sv[0] = 2;
  sv[1] = 3;
  sv[2] = 5;
  id bufs[] = {a, st, out};
  run(p, bufs, 3, 32, 32);
  const float *o = contents(out);
  for (int k = 0; k < 32; k++)
    cr_assert_eq(o[k], av[2 * k] + 15.f, "out[%d] = %g", k, (double)o[k]);
  sm_release(a);
  sm_release(st);
  sm_release(out);
  sm_release(p);
  sm_release(fn);
  sm_release(lib);
}

/* Headers of Metal's other stages are refused by name at the #include, not
 * "file not found". */
Test(front, out_of_scope_metal_headers_are_refused_at_their_include) {
  const char *e = compile_error("#include <metal_stdlib>\n"
                                "#include <metal_raytracing>\n"
                                "kernel void k(device float *o [[buffer(0)]]) { o[0] = 1.f; }\n");
  cr_assert(strstr(e, "program_source:2"), "%s", e);
  cr_assert(strstr(e, "<metal_raytracing> is not supported by softmetal"), "%s", e);
  cr_assert(!strstr(e, "not found"), "%s", e);
  /* Metal 4's tensor operations (mlx's *_nax kernels include them) */
  e = compile_error("#include <metal_stdlib>\n"
                    "#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>\n"
                    "kernel void k(device float *o [[buffer(0)]]) { o[0] = 1.f; }\n");
  cr_assert(strstr(e, "program_source:2"), "%s", e);
  cr_assert(strstr(e, "<MetalPerformancePrimitives/MetalPerformancePrimitives.h> is not "
                      "supported by softmetal"),
            "%s", e);
  cr_assert(!strstr(e, "not found"), "%s", e);
}

/* half is a class in softmetal, so C++ finds these conditionals ambiguous;
 * MSL converts: half and float give float, half and an integer give half. */

/* MSL converts: half and float give float, half and an integer give half
 * (half is _Float16: C++ agrees); bfloat is a class in softmetal, so C++
 * finds its conditionals ambiguous and the conditional retry casts them. */
static const char CONDITIONALS[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "struct blk { half d; };\n"
    "#define PICK(c, x) (c ? x : 1u)\n"
    "template <typename T> float scaled(T x, bool c) { return c ? x : x / 3.f; }\n"
    "kernel void cond(device const blk *b [[buffer(0)]], device float *out [[buffer(1)]],\n"
    "                 device half *hout [[buffer(2)]], uint i [[thread_position_in_grid]]) {\n"
    "  out[i] = i < 2 ? b[i].d : b[i].d / 3.f; /* ggml's dequantize_q4_0 */\n"
    "  out[i + 4] = scaled(b[i].d, i % 2 == 0);\n"
    "  hout[i] = PICK(i < 2, b[i].d);\n"
    "  bfloat bf = bfloat(float(b[i].d));\n"
    "  out[i + 8] = i < 2 ? bf : bf / 3.f;\n"
    "}\n";

Test(front, half_and_float_conditionals_convert_as_in_msl) {
  id lib = compile_ok(CONDITIONALS);
  id fn = function(lib, "cond");
  id p = pipeline_of(fn);
  id bufs[3] = {buffer(8), buffer(12 * 4), buffer(8)};
  uint16_t *d = contents(bufs[0]);
  for (int i = 0; i < 4; i++) d[i] = 0x3C00; /* 1.0 */
  run(p, bufs, 3, 4, 4);
  const float *o = contents(bufs[1]);
  const uint16_t *h = contents(bufs[2]);
  for (int i = 0; i < 4; i++) {
    cr_expect_eq(o[i], i < 2 ? 1.0f : 1.0f / 3.f, "[%d]: %.9g", i, o[i]); /* float, not half */
    cr_expect_eq(o[i + 4], i % 2 == 0 ? 1.0f : 1.0f / 3.f, "scaled [%d]: %.9g", i, o[i + 4]);
    cr_expect_eq(h[i], 0x3C00, "half [%d]: %#x", i, h[i]);
    cr_expect_eq(o[i + 8], i < 2 ? 1.0f : 1.0f / 3.f, "bfloat [%d]: %.9g", i, o[i + 8]);
  }
  for (int i = 0; i < 3; i++) sm_release(bufs[i]);
  sm_release(p);
  sm_release(fn);
  sm_release(lib);
}

Test(front, other_errors_survive_the_conditional_retry) {
  const char *msg = compile_error("#include <metal_stdlib>\n"
                                  "kernel void k(device half *a [[buffer(0)]], device float *o,\n"
                                  "              uint i [[thread_position_in_grid]]) {\n"
                                  "  o[i] = i < 2 ? a[i] : a[i] / 3.f;\n"
                                  "  undeclared_name = 1;\n"
                                  "}\n");
  cr_assert(strstr(msg, "program_source:5:3: error") && strstr(msg, "undeclared_name") &&
                !strstr(msg, "ambiguous"),
            "%s", msg);
}

Test(front, double_is_a_compile_error_naming_the_line) {
  const char *msg = compile_error("#include <metal_stdlib>\n"
                                  "kernel void k(device float *a [[buffer(0)]],\n"
                                  "              uint i [[thread_position_in_grid]]) {\n"
                                  "  double d = a[i];\n"
                                  "  a[i] = d;\n"
                                  "}\n");
  cr_assert(strstr(msg, "program_source:4:3: error: 'double' is not supported"), "%s", msg);
}

Test(front, unsupported_features_are_refused_with_the_line) {
  const char *msg = compile_error("#include <metal_stdlib>\n"
                                  "using namespace metal;\n"
                                  "kernel void k(texture2d<float> t [[texture(0)]],\n"
                                  "              uint i [[thread_position_in_grid]]) {}\n");
  cr_assert(strstr(msg, "program_source:3:") && strstr(msg, "texture2d"), "%s", msg);
  msg = compile_error("#include <metal_stdlib>\n"
                      "struct V { float4 p [[position]]; };\n"
                      "vertex V vs(uint v [[vertex_id]]) { return V{}; }\n");
  cr_assert(strstr(msg, "program_source:3:") && strstr(msg, "vertex"), "%s", msg);
  msg = compile_error("kernel void k(device float *a, uint i) { a[i] = 0; }\n");
  cr_assert(strstr(msg, "program_source:1:") && strstr(msg, "parameter 1"), "%s", msg);
  /* clang's own errors in code a macro produced point at the user's line */
  msg = compile_error("#define BAD(n) kernel void n(device float *a) { a[0] = nope; }\n"
                      "\n"
                      "BAD(k)\n");
  cr_assert(strstr(msg, "program_source:3:") && strstr(msg, "nope"), "%s", msg);
  msg = compile_error("kernel void k(device float *a [[buffer(0)]]) {\n  if (a[0] > 0) {\n}\n");
  cr_assert(strstr(msg, "program_source:1:") && strstr(msg, "never closed"), "%s", msg);
  /* and the preprocessor's */
  msg = compile_error("#include <metal_stdlib>\n#error no such thing\n");
  cr_assert(strstr(msg, "program_source:2:2: error: no such thing"), "%s", msg);
}

/* Constructs that must pass through the front end untouched. */
static const char PASSTHROUGH[] =
    "#include <metal_stdlib>\n"
    "#include <metal_simdgroup_matrix>\n"
    "#include <metal_limits>\n"
    "using namespace metal;\n"
    "struct Out { float v [[user(locn0)]]; };\n"
    "struct Table { float w[4]; };\n"
    "constant Table table = {{1.0f, 2.0f, 3.0f, 4.0f}};\n"
    "constant float weights[4] = {10.0f, 20.0f, 30.0f, 40.0f};\n"
    "constexpr uint twice(uint x) { return 2u * x; }\n"
    "struct W { float w; float operator()(float x) const { return x * w; } };\n"
    "inline float operator*(W a, W b) { return a.w * b.w; }\n"
    "#if __METAL_VERSION__ >= 300\n"
    "kernel void pass(device float *out [[buffer(0)]],\n"
    "                 uint3 pos [[thread_position_in_grid]],\n"
    "                 ushort2 local [[thread_position_in_threadgroup]]) {\n"
    "  float acc = 0.0f;\n"
    "#pragma clang loop unroll(full)\n"
    "  for (uint k = 0; k < 4; k++) acc += table.w[k] * weights[k];\n"
    "#define MIN_OF(x, y) ((x) < (y) ? (x) : (y))\n"
    "#define NSG 2\n"
    "#pragma unroll (MIN_OF(4, 2 * NSG))\n" /* ggml: the argument names macros */
    "  for (uint k = 0; k < 4; k++) acc += 0.0f;\n"
    "#pragma clang loop unroll_count(NSG)\n"
    "  for (uint k = 0; k < 4; k++) acc += 0.0f;\n"
    "  out[pos.x] = metal::max(acc, 0.0f) + float(twice(local.x)) + 0.0h + (W{2} * W{0}) +\n"
    "               W{0}(1.0f);\n"
    "}\n"
    "#endif\n";

Test(front, pragmas_constant_tables_constexpr_and_vector_builtins_pass_through) {
  id lib = compile_ok(PASSTHROUGH);
  id fn = function(lib, "pass"), p = pipeline_of(fn);
  id out = buffer(64 * 4);
  id bufs[] = {out};
  run(p, bufs, 1, 64, 16);
  for (unsigned i = 0; i < 64; i++)
    cr_assert_eq(((float *)contents(out))[i], 300.0f + 2.0f * (float)(i % 16), "[%u]", i);
  sm_release(out);
  sm_release(p);
  sm_release(fn);
  sm_release(lib);
}

/* ------------------------------------------------------------- function constants */
static const char CONSTANTS[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "constant uint scale [[function_constant(0)]];\n"
    "constant bool has_bias [[function_constant(1)]];\n"
    "#define FC_BASE 1\n"
    "constant int32_t offset [[function_constant(FC_BASE + 1)]];\n"
    "constant int offset_or_7 = is_function_constant_defined(offset) ? offset : 7;\n"
    "uint apply(uint x) { return x * scale + uint(offset_or_7); }\n"
    "kernel void fc(device uint *out [[buffer(0)]],\n"
    "               device const uint *bias [[buffer(1), function_constant(has_bias)]],\n"
    "               uint i [[thread_position_in_grid]]) {\n"
    "  uint b = bias[i]; /* read even when absent (mlx does), used only when present */\n"
    "  out[i] = apply(i) + (has_bias ? b : 0u);\n"
    "}\n"
    "kernel void plain(device uint *out [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
    "  out[i] = i;\n"
    "}\n";

static id values(void) {
  id v = SEND0(id, sm_class_named("MTLFunctionConstantValues"), "alloc");
  return SEND0(id, v, "init");
}
static void set_index(id v, const void *p, NSUInteger type, NSUInteger index) {
  SEND(void, (id, SEL, const void *, NSUInteger, NSUInteger), v,
       "setConstantValue:type:atIndex:", p, type, index);
}
static void set_name(id v, const void *p, NSUInteger type, const char *name) {
  SEND(void, (id, SEL, const void *, NSUInteger, id), v, "setConstantValue:type:withName:", p, type,
       sm_str(name));
}
static id specialize(id lib, const char *name, id v, id *error) {
  return SEND(id, (id, SEL, id, id, id *), lib,
              "newFunctionWithName:constantValues:error:", sm_str(name), v, error);
}
/* Specializing `name` with v, which lacks the value of a constant the
 * kernel uses: an error naming it under MTL_DEBUG_LAYER=1 (want: its
 * "'name' (index n)"), else the function, the constant reading as 0
 * (test_validation.c checks both). */
static void expect_missing(id lib, const char *name, id v, const char *want) {
  const char *d = getenv("MTL_DEBUG_LAYER");
  id error = 0;
  struct softmetal_stats s0, s1;
  softmetal_stats(&s0);
  id fn = specialize(lib, name, v, &error);
  softmetal_stats(&s1);
  if (d && strcmp(d, "1") == 0) {
    cr_assert_null(fn);
    cr_assert(strstr(sm_error_text(error), want) && strstr(sm_error_text(error), "is required"),
              "%s", sm_error_text(error));
  } else {
    cr_assert_not_null(fn, "%s", sm_error_text(error));
    cr_assert_geq(s1.lenient_api_uses - s0.lenient_api_uses, 1, "%s: counted", want);
    sm_release(fn);
  }
}

/* A range that runs past NSUIntegerMax would wrap its second value to
 * index 0 and specialize the wrong constant: it is refused (an abort, as
 * Metal's exceptions are here). */
Test(front, function_constant_ranges_that_wrap_abort, .signal = SIGABRT) {
  id v = values();
  const int two[2] = {1, 2};
  SEND(void, (id, SEL, const void *, NSUInteger, NSRange), v,
       "setConstantValues:type:withRange:", two, (NSUInteger)DataTypeInt,
       ((NSRange){(NSUInteger)-1, 2}));
}

Test(front, function_constant_values_reach_the_kernel) {
  id lib = compile_ok(CONSTANTS);
  enum { N = 64 };
  id out = buffer(N * 4), bias = buffer(N * 4);
  for (int i = 0; i < N; i++) ((unsigned *)contents(bias))[i] = 100u * (unsigned)i;
  for (int variant = 0; variant < 2; variant++) {
    id v = values();
    unsigned scale = variant ? 3u : 5u;
    bool has_bias = variant == 1;
    int offset = 11;
    set_index(v, &scale, DataTypeUInt, 0);
    set_name(v, &has_bias, DataTypeBool, "has_bias");
    if (variant == 1) set_index(v, &offset, DataTypeInt, 2);
    id error = 0;
    id fn = specialize(lib, "fc", v, &error);
    cr_assert_not_null(fn, "%s", sm_error_text(error));
    id p = pipeline_of(fn);
    unsigned buffers = 0, written = 0, tg = 0;
    softmetal_pipeline_bindings(p, &buffers, &written, &tg);
    cr_assert_eq(buffers, variant ? 3u : 1u, "bias is absent when has_bias is false");
    id bufs[] = {out, bias};
    /* the bias buffer is absent when has_bias is false: nothing bound to 1 */
    run(p, bufs, variant ? 2 : 1, N, 32);
    for (unsigned i = 0; i < N; i++) {
      unsigned want = variant ? i * 3u + 11u + 100u * i : i * 5u + 7u;
      cr_assert_eq(((unsigned *)contents(out))[i], want, "variant %d [%u]", variant, i);
    }
    sm_release(p);
    sm_release(fn);
    sm_release(v);
  }
  sm_release(out);
  sm_release(bias);
  sm_release(lib);
}

Test(front, function_constants_missing_or_mistyped_are_errors) {
  id lib = compile_ok(CONSTANTS);
  /* no value for the required 'scale' */
  id v = values();
  bool b = false;
  set_index(v, &b, DataTypeBool, 1);
  expect_missing(lib, "fc", v, "'scale' (index 0)");
  id error = 0;
  /* a float given for a uint */
  float f = 2.0f;
  set_index(v, &f, DataTypeFloat, 0);
  error = 0;
  cr_assert_null(specialize(lib, "fc", v, &error));
  cr_assert(strstr(sm_error_text(error), "'scale'") && strstr(sm_error_text(error), "MTLDataType"),
            "%s", sm_error_text(error));
  sm_release(v);
  /* an unspecialized function with constants makes no pipeline */
  id fn = function(lib, "fc");
  error = 0;
  cr_assert_null(
      SEND(id, (id, SEL, id, id *), dev, "newComputePipelineStateWithFunction:error:", fn, &error));
  cr_assert(strstr(sm_error_text(error), "not specialized"), "%s", sm_error_text(error));
  sm_release(fn);
  /* a kernel that uses none needs no values */
  fn = function(lib, "plain");
  id p = pipeline_of(fn);
  sm_release(p);
  sm_release(fn);
  sm_release(lib);
}

/* A constant read only under `if (other constant)` is needed only when
 * the given values keep that branch: Metal specializes by folding the
 * constants, and a dead use needs no value (a binary-op kernel with
 * row- and column-broadcast flags, specialized without the column flag when
 * the row flag is false, as ggml's do). Where the branch stays, or the use
 * is outside any such branch, a missing value is still an error. */
static const char GUARDED[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "#define FC_OPS 300\n"
    "constant short op_kind [[function_constant(FC_OPS + 0)]];\n"
    "constant bool  row_bc  [[function_constant(FC_OPS + 1)]];\n"
    "constant bool  col_bc  [[function_constant(FC_OPS + 2)]];\n"
    "constant int   nb_cols [[function_constant(FC_OPS + 3)]];\n"
    "constant int   unused_bias [[function_constant(FC_OPS + 4)]];\n"
    "static uint col_of(uint i, uint n) { return col_bc ? i % n : i; }\n"
    "kernel void bin(device const float *a [[buffer(0)]], device const float *b [[buffer(1)]],\n"
    "                device float *y [[buffer(2)]], uint i [[thread_position_in_grid]]) {\n"
    "  uint j = i;\n"
    "  if (row_bc) {\n"
    "    j = col_of(i, 4);\n"
    "  } else if (op_kind == 1) {\n"
    "    j = i % uint(nb_cols);\n"
    "  }\n"
    "  if (op_kind == 0) y[i] = a[i] + b[j];\n"
    "  if (op_kind == 2) y[i] = a[i] * b[j];\n"
    "  if (false) y[i] += float(unused_bias);\n"
    "}\n"
    "kernel void nested(device float *y [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
    "  if (row_bc) { if (op_kind == 3) y[i] = float(nb_cols); }\n"
    "  if (row_bc) y[i] += float(nb_cols);\n"
    "}\n";

Test(front, function_constants_under_folded_branches_need_no_value) {
  id lib = compile_ok(GUARDED);
  enum { N = 16 };
  id a = buffer(N * 4), b = buffer(N * 4), y = buffer(N * 4);
  for (int i = 0; i < N; i++) {
    ((float *)contents(a))[i] = (float)i;
    ((float *)contents(b))[i] = 100.0f * (float)i;
  }
  /* op 2 (mul), no broadcast: col_bc and nb_cols are dead, unused_bias too */
  id v = values();
  short op = 2;
  bool f = false, t = true;
  SEND(void, (id, SEL, const void *, NSUInteger, NSUInteger), v,
       "setConstantValue:type:atIndex:", &op, (NSUInteger)37 /* short */, (NSUInteger)300);
  set_index(v, &f, DataTypeBool, 301);
  id error = 0;
  struct softmetal_stats s0, s1;
  softmetal_stats(&s0);
  id fn = specialize(lib, "bin", v, &error);
  softmetal_stats(&s1);
  cr_assert_not_null(fn, "%s", sm_error_text(error));
  cr_assert_eq(s1.lenient_api_uses, s0.lenient_api_uses, "no constant it uses lacks a value");
  id p = pipeline_of(fn);
  id bufs[] = {a, b, y};
  run(p, bufs, 3, N, 8);
  for (int i = 0; i < N; i++)
    cr_assert_eq(((float *)contents(y))[i], (float)i * 100.0f * (float)i, "[%d]", i);
  sm_release(p);
  sm_release(fn);
  /* row broadcast kept: the helper it calls reads col_bc, which has no value */
  set_index(v, &t, DataTypeBool, 301);
  expect_missing(lib, "bin", v, "'col_bc' (index 302)");
  /* op 1 without broadcast: the else-if branch reads nb_cols */
  op = 1;
  set_index(v, &f, DataTypeBool, 301);
  SEND(void, (id, SEL, const void *, NSUInteger, NSUInteger), v,
       "setConstantValue:type:atIndex:", &op, (NSUInteger)37, (NSUInteger)300);
  expect_missing(lib, "bin", v, "'nb_cols' (index 303)");
  /* a use under a narrower guard first, then under a broader one: the
   * broader one keeps nb_cols needed (op 1, row broadcast) */
  set_index(v, &t, DataTypeBool, 301);
  expect_missing(lib, "nested", v, "'nb_cols' (index 303)");
  /* without op_kind, which every path reads */
  sm_release(v);
  v = values();
  set_index(v, &f, DataTypeBool, 301);
  expect_missing(lib, "bin", v, "'op_kind' (index 300)");
  sm_release(v);
  sm_release(a);
  sm_release(b);
  sm_release(y);
  sm_release(lib);
}

/* C's spellings of the unsigned and signed types (`constant unsigned int n
 * [[function_constant(0)]]`, as Apple's ray-tracing sample writes) are the
 * MTLDataType of MSL's name: uint, ushort, uchar, char. */
static const char C_SPELLED_CONSTANTS[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "constant unsigned int stride_ [[function_constant(0)]];\n"
    "constant unsigned short bump [[function_constant(1)]];\n"
    "constant unsigned char low [[function_constant(2)]];\n"
    "constant signed char neg [[function_constant(3)]];\n"
    "constant unsigned big [[function_constant(4)]];\n"
    "kernel void cs(device uint *out [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
    "  out[i] = i * stride_ + bump + low + uint(int(neg) + 200) + big;\n"
    "}\n";

Test(front, function_constants_spelled_as_in_c) {
  id lib = compile_ok(C_SPELLED_CONSTANTS);
  enum { N = 40 };
  id out = buffer(N * 4);
  id v = values();
  unsigned stride = 7u, big = 1000000u;
  unsigned short bump = 300;
  unsigned char low = 250;
  signed char neg = -100;
  set_index(v, &stride, DataTypeUInt, 0);
  set_index(v, &bump, 41 /* UShort */, 1);
  set_index(v, &low, 49 /* UChar */, 2);
  set_index(v, &neg, 45 /* Char */, 3);
  set_index(v, &big, DataTypeUInt, 4);
  id error = 0;
  id fn = specialize(lib, "cs", v, &error);
  cr_assert_not_null(fn, "%s", sm_error_text(error));
  id p = pipeline_of(fn);
  id bufs[] = {out};
  run(p, bufs, 1, N, 8);
  for (unsigned i = 0; i < N; i++)
    cr_assert_eq(((unsigned *)contents(out))[i], i * 7u + 300u + 250u + 100u + 1000000u, "[%u]", i);
  /* an int for the unsigned int is a mismatch, as for uint */
  int wrong = 7;
  set_index(v, &wrong, DataTypeInt, 0);
  sm_release(fn);
  error = 0;
  cr_assert_null(specialize(lib, "cs", v, &error));
  cr_assert(strstr(sm_error_text(error), "'stride_'"), "%s", sm_error_text(error));
  sm_release(p);
  sm_release(v);
  sm_release(out);
  sm_release(lib);
}

/* A floating literal without a suffix is a float in MSL (there is no
 * double): `max(x, 0.5)` and `clamp(x, 0.0, 3.0)` take floats, and `x * 0.1`
 * is float * 0.1f, rounded once in float; in C++ it would be computed in
 * double and rounded to float (1.625 * 0.1 differs in the last bit). Hex
 * integers (`0x1E`) stay integers; `1e3`, `2.`, `0x1p-3` are floats. */
static const char FLOAT_LITERALS[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "static_assert(is_same_v<decltype(0.5), float> && is_same_v<decltype(1e3), float>, \"\");\n"
    "static_assert(is_same_v<decltype(2.), float> && is_same_v<decltype(0x1p-3), float>, \"\");\n"
    "static_assert(is_same_v<decltype(0x1E), int> && is_same_v<decltype(0.5f), float>, \"\");\n"
    "static_assert(is_same_v<decltype(1.5h), half>, \"\");\n"
    "kernel void lits(device float *o [[buffer(0)]], device const float *x [[buffer(1)]],\n"
    "                 uint i [[thread_position_in_grid]]) {\n"
    "  o[3 * i] = x[i] * 0.1;\n"
    "  o[3 * i + 1] = max(x[i], 2.5) + clamp(x[i], 0.0, 3.0);\n"
    "  o[3 * i + 2] = x[i] + 0x1p-3 + 1e1 + 2. + float(0x1E);\n"
    "}\n";

Test(front, floating_literals_without_a_suffix_are_float) {
  id lib = compile_ok(FLOAT_LITERALS);
  enum { N = 6 };
  const float x[N] = {1.625f, 3.875f, 8.375f, 0.5f, -2.0f, 13.625f};
  id out = buffer(3 * N * 4), in = buffer(sizeof x);
  memcpy(contents(in), x, sizeof x);
  id fn = function(lib, "lits"), p = pipeline_of(fn);
  id bufs[] = {out, in};
  run(p, bufs, 2, N, N);
  const float *o = contents(out);
  for (int i = 0; i < N; i++) {
    volatile float tenth = 0.1f; /* float * float, not the double product rounded */
    cr_expect_eq(o[3 * i], x[i] * tenth, "x * 0.1 at %g: %a, want %a", (double)x[i],
                 (double)o[3 * i], (double)(x[i] * tenth));
    float c = x[i] < 0.0f ? 0.0f : x[i] > 3.0f ? 3.0f : x[i];
    cr_expect_eq(o[3 * i + 1], (x[i] > 2.5f ? x[i] : 2.5f) + c, "[%d]", i);
    cr_expect_eq(o[3 * i + 2], x[i] + 0.125f + 10.0f + 2.0f + 30.0f, "[%d]", i);
  }
  cr_expect_neq(o[0], (float)(1.625 * 0.1), "the double product rounds differently here");
  sm_release(p);
  sm_release(fn);
  sm_release(out);
  sm_release(in);
  sm_release(lib);
}

/* ------------------------------------------------------------- cache safety */
Test(front, a_cache_directory_others_can_write_is_refused) {
  char dir[256];
  snprintf(dir, sizeof dir, "%s/unsafe-%d", getenv("SOFTMETAL_CACHE_DIR"), (int)getpid());
  mkdir(dir, 0700);
  cr_assert_eq(chmod(dir, 0777), 0);
  char *old = strdup(getenv("SOFTMETAL_CACHE_DIR"));
  setenv("SOFTMETAL_CACHE_DIR", dir, 1);
  const char *msg = compile_error(TEMPLATES);
  cr_assert(strstr(msg, "writable by group or others"), "%s", msg);
  cr_assert_eq(access(dir, F_OK), 0);
  chmod(dir, 0700);
  setenv("SOFTMETAL_CACHE_DIR", old, 1);
  free(old);
  rmdir(dir);
}

Test(front, a_new_cache_directory_is_private) {
  char dir[256];
  snprintf(dir, sizeof dir, "%s/fresh-%d/sub", getenv("SOFTMETAL_CACHE_DIR"), (int)getpid());
  char *old = strdup(getenv("SOFTMETAL_CACHE_DIR"));
  setenv("SOFTMETAL_CACHE_DIR", dir, 1);
  /* no compiler: the directory is made and checked before it is looked for */
  setenv("SOFTMETAL_CXX", "/nonexistent/clang++", 1);
  const char *msg = compile_error("kernel void k(device float *a [[buffer(0)]]) { a[0] = 1; }\n");
  cr_assert(strstr(msg, "cannot find the C++ compiler"), "%s", msg);
  unsetenv("SOFTMETAL_CXX");
  setenv("SOFTMETAL_CACHE_DIR", old, 1);
  free(old);
  struct stat st;
  cr_assert_eq(stat(dir, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0700);
  *strrchr(dir, '/') = 0;
  cr_assert_eq(stat(dir, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0700);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_assert_eq(system(cmd), 0);
}

/* A barrier reached only through a static member function of a class
 * template (mlx sort.metal's block_merge_sort_t::sort): the kernel needs the
 * threadgroup's threads to meet there. */
static const char SORTER[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "template <typename T> struct Sorter {\n"
    "  static void run(threadgroup T *tmp, uint lid) {\n"
    "    tmp[lid] = T(lid);\n"
    "    threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  }\n"
    "};\n"
    "template <typename T>\n"
    "[[kernel]] void k(device T *o [[buffer(0)]], uint lid [[thread_position_in_threadgroup]]) {\n"
    "  threadgroup T tmp[64];\n"
    "  Sorter<T>::run(tmp, lid);\n"
    "  o[lid] = tmp[63 - lid];\n"
    "}\n"
    "template [[host_name(\"k_f\")]] [[kernel]] decltype(k<float>) k<float>;\n";

Test(front, a_barrier_in_a_static_member_of_a_class_template_is_found) {
  id lib = compile_ok(SORTER);
  id fn = function(lib, "k_f"), p = pipeline_of(fn);
  id o = buffer(64 * 4);
  run(p, &o, 1, 64, 64);
  for (int i = 0; i < 64; i++) cr_assert_eq(((float *)contents(o))[i], (float)(63 - i), "[%d]", i);
  sm_release(o);
  sm_release(p);
  sm_release(fn);
  sm_release(lib);
}

/* Runs SWAP_BODY's kernel k over one threadgroup of 64; returns the status. */
static NSUInteger run_swap(const char *src, float *o_out, char *err, size_t errlen) {
  id lib = compile_ok(src);
  id fn = function(lib, "k"), p = pipeline_of(fn);
  id o = buffer(64 * 4);
  id cb = SEND0(id, queue, "commandBuffer");
  id enc = SEND0(id, cb, "computeCommandEncoder");
  SEND(void, (id, SEL, id), enc, "setComputePipelineState:", p);
  SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", o, 0ul, 0ul);
  SEND(void, (id, SEL, MTLSize, MTLSize), enc,
       "dispatchThreads:threadsPerThreadgroup:", (MTLSize){64, 1, 1}, (MTLSize){64, 1, 1});
  SEND0(void, enc, "endEncoding");
  SEND0(void, cb, "commit");
  SEND0(void, cb, "waitUntilCompleted");
  NSUInteger st = sm_u(cb, "status");
  snprintf(err, errlen, "%s", st == Completed ? "" : sm_error_text(SEND0(id, cb, "error")));
  memcpy(o_out, contents(o), 64 * 4);
  sm_release(o);
  sm_release(p);
  sm_release(fn);
  sm_release(lib);
  return st;
}

#define SWAP_KERNEL                                                                                \
  "kernel void k(device float *o [[buffer(0)]], uint lid [[thread_position_in_threadgroup]]) {\n"  \
  "  threadgroup float tmp[64];\n"                                                                 \
  "  tmp[lid] = float(lid);\n"                                                                     \
  "  V r = V{0} + V{0};\n"                                                                         \
  "  o[lid] = tmp[63 - lid] + r.x;\n"                                                              \
  "}\n"

/* Operators (and constructors, destructors) are called without their name. */
Test(front, a_barrier_in_an_operator_is_found) {
  float o[64];
  char err[512];
  NSUInteger st = run_swap("#include <metal_stdlib>\nusing namespace metal;\n"
                           "struct V { float x; };\n"
                           "V operator+(V a, V b) {\n"
                           "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
                           "  return V{a.x + b.x};\n"
                           "}\n" SWAP_KERNEL,
                           o, err, sizeof err);
  cr_assert_eq(st, Completed, "%s", err);
  for (int i = 0; i < 64; i++) cr_assert_eq(o[i], (float)(63 - i), "[%d]", i);
}

/* Code from a header the front end does not see runs on fibers; a barrier the
 * analysis cannot see at all (a system header) fails the command buffer
 * instead of aborting softmetal. */
Test(front, a_barrier_the_analysis_cannot_see_fails_the_command_buffer) {
  char dir[] = "/tmp/sm-front-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char path[64], src[1024];
  for (int sys = 0; sys < 2; sys++) {
    /* one path each: the kernel cache is keyed on the source, not on the headers */
    snprintf(path, sizeof path, "%s/v%d.h", dir, sys);
    FILE *h = fopen(path, "w");
    cr_assert_not_null(h);
    fprintf(h,
            "%sstruct V { float x; };\n"
            "inline V operator+(V a, V b) {\n"
            "  metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);\n"
            "  return V{a.x + b.x};\n"
            "}\n",
            sys ? "#pragma clang system_header\n" : "");
    fclose(h);
    snprintf(src, sizeof src,
             "#include <metal_stdlib>\nusing namespace metal;\n#include \"%s\"\n" SWAP_KERNEL,
             path);
    float o[64];
    char err[512];
    NSUInteger st = run_swap(src, o, err, sizeof err);
    if (!sys) {
      cr_assert_eq(st, Completed, "%s", err);
      for (int i = 0; i < 64; i++) cr_assert_eq(o[i], (float)(63 - i), "[%d]", i);
    } else {
      cr_assert_eq(st, Error);
      cr_assert(strstr(err, "kernel k") && strstr(err, "did not find"), "%s", err);
    }
    unlink(path);
  }
  rmdir(dir);
}

/* Overloads on the address space of `this` or of a reference, and partial
 * specializations on that of a pointer (mlx complex.h, steel type_traits.h):
 * one function on a CPU, kept once. */
static const char ADDRESS_SPACE_OVERLOADS[] =
    "#pragma METAL internals : enable\n"
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "struct C {\n"
    "  float r;\n"
    "  constexpr C() thread : r(0) {}\n"
    "  constexpr C() threadgroup : r(0) {}\n"
    "  constexpr C(float x) device : r(x) {}\n"
    "  constexpr C(float x) constant : r(x) {}\n"
    "  constexpr C(float x) thread : r(x) {}\n"
    "  constexpr operator float() const thread { return r; }\n"
    "  constexpr operator float() const device { return r; }\n"
    "  void twice() threadgroup { r *= 2; }\n"
    "  void twice() thread { r *= 2; }\n"
    "};\n"
    "template <typename T> constexpr thread C &operator+=(thread C &a, T b) { a.r += b; return a; "
    "}\n"
    "template <typename T> constexpr threadgroup C &operator+=(threadgroup C &a, T b) {\n"
    "  a.r += b; return a;\n"
    "}\n"
    "template <typename T> struct pointer_element {};\n"
    "template <typename T> struct pointer_element<thread T *> { using type = T; };\n"
    "template <typename T> struct pointer_element<device T *> { using type = T; };\n"
    "template <typename T> struct pointer_element<threadgroup T *> { using type = T; };\n"
    "template <typename P> using elem_t = typename pointer_element<P>::type;\n"
    "kernel void k(device float *o [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
    "  C c(static_cast<float>(i));\n"
    "  c += 1;\n"
    "  c.twice();\n"
    "  elem_t<device float *> v = c;\n"
    "  o[i] = v;\n"
    "}\n";

Test(front, overloads_on_address_spaces_are_kept_once) {
  id lib = compile_ok(ADDRESS_SPACE_OVERLOADS);
  id fn = function(lib, "k"), p = pipeline_of(fn);
  id o = buffer(64 * 4);
  run(p, &o, 1, 64, 32);
  for (int i = 0; i < 64; i++)
    cr_assert_eq(((float *)contents(o))[i], 2.0f * (float)(i + 1), "[%d]", i);
  sm_release(o);
  sm_release(p);
  sm_release(fn);
  sm_release(lib);
}

/* Threadgroup variables of bodies count toward the 32 KiB of threadgroup
 * memory with setThreadgroupMemoryLength:atIndex:, and are
 * staticThreadgroupMemoryLength: the declarations the kernel can reach, at
 * its own instantiation (here 4096 floats or halves through a template, and
 * 1000 bytes rounded to 1008), not those it cannot reach (unused()). */
static const char TG_BYTES[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "template <typename T> void fill(threadgroup T *s, uint i) { threadgroup T big[4096]; big[i] = "
    "s[0]; }\n"
    "void unused() { threadgroup float never[100]; never[0] = 1; }\n"
    "template <typename T>\n"
    "[[kernel]] void k(device T *o [[buffer(0)]], threadgroup T *s [[threadgroup(0)]],\n"
    "                  uint i [[thread_position_in_grid]]) {\n"
    "  threadgroup uchar small[1000];\n"
    "  small[0] = 1;\n"
    "  fill(s, i);\n"
    "  o[i] = T(small[0]);\n"
    "}\n"
    "template [[host_name(\"k_f\")]] [[kernel]] decltype(k<float>) k<float>;\n"
    "template [[host_name(\"k_h\")]] [[kernel]] decltype(k<half>) k<half>;\n";

static NSUInteger dispatch_tg(id p, NSUInteger tg_len, char *err, size_t errlen) {
  id o = buffer(64 * 4);
  id cb = SEND0(id, queue, "commandBuffer");
  id enc = SEND0(id, cb, "computeCommandEncoder");
  SEND(void, (id, SEL, id), enc, "setComputePipelineState:", p);
  SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", o, 0ul, 0ul);
  SEND(void, (id, SEL, NSUInteger, NSUInteger), enc, "setThreadgroupMemoryLength:atIndex:", tg_len,
       0ul);
  SEND(void, (id, SEL, MTLSize, MTLSize), enc,
       "dispatchThreads:threadsPerThreadgroup:", (MTLSize){64, 1, 1}, (MTLSize){64, 1, 1});
  SEND0(void, enc, "endEncoding");
  SEND0(void, cb, "commit");
  SEND0(void, cb, "waitUntilCompleted");
  NSUInteger st = sm_u(cb, "status");
  snprintf(err, errlen, "%s", st == Completed ? "" : sm_error_text(SEND0(id, cb, "error")));
  sm_release(o);
  return st;
}

Test(front, threadgroup_variables_count_toward_threadgroup_memory) {
  id lib = compile_ok(TG_BYTES);
  id fn = function(lib, "k_f"), p = pipeline_of(fn);
  cr_assert_eq(sm_u(p, "staticThreadgroupMemoryLength"), 4096 * 4 + 1008);
  id fh = function(lib, "k_h"), ph = pipeline_of(fh);
  /* each pipeline's code is its function's own, as Metal's: the half
   * instantiation of fill() declares 4096 halves */
  cr_assert_eq(sm_u(ph, "staticThreadgroupMemoryLength"), 4096 * 2 + 1008);
  char err[600];
  /* 17392 + 15376 = 32768 fits; 17392 + 15392 does not */
  cr_assert_eq(dispatch_tg(p, 15376, err, sizeof err), Completed, "%s", err);
  cr_assert_eq(dispatch_tg(p, 15392, err, sizeof err), Error);
  cr_assert(strstr(err, "15392 bytes") && strstr(err, "17392 bytes") && strstr(err, "k_f"), "%s",
            err);
  sm_release(ph);
  sm_release(fh);
  sm_release(p);
  sm_release(fn);
  sm_release(lib);
}

/* Kernels in an anonymous namespace are exported; overloaded kernel names are
 * refused with the line of the second. */
Test(front, kernels_in_an_anonymous_namespace_and_overloaded_names) {
  id lib = compile_ok("#include <metal_stdlib>\nusing namespace metal;\nnamespace {\n"
                      "kernel void anon_k(device float *o [[buffer(0)]], uint i "
                      "[[thread_position_in_grid]]) { o[i] = 2; }\n"
                      "template <typename T> [[kernel]] void anon_t(device T *o [[buffer(0)]], "
                      "uint i [[thread_position_in_grid]]) { o[i] = 3; }\n"
                      "template [[host_name(\"anon_t_f\")]] [[kernel]] decltype(anon_t<float>) "
                      "anon_t<float>;\n}\n");
  id o = buffer(64 * 4);
  const char *names[] = {"anon_k", "anon_t_f"};
  for (int n = 0; n < 2; n++) {
    id fn = function(lib, names[n]), p = pipeline_of(fn);
    run(p, &o, 1, 64, 32);
    for (int i = 0; i < 64; i++) cr_assert_eq(((float *)contents(o))[i], (float)(2 + n), "[%d]", i);
    sm_release(p);
    sm_release(fn);
  }
  sm_release(o);
  sm_release(lib);
  const char *msg = compile_error("#include <metal_stdlib>\nusing namespace metal;\n"
                                  "kernel void over(device float *o [[buffer(0)]]) { o[0] = 1; }\n"
                                  "kernel void over(device int *o [[buffer(0)]]) { o[0] = 1; }\n");
  cr_assert(strstr(msg, "program_source:4:") && strstr(msg, "over"), "%s", msg);
}

/* constant memory is read-only, as in MSL: a constexpr constant table is a
 * `constant float *` argument (ggml's kvalues tables); writing through a
 * constant pointer does not compile; overloads on device and constant
 * pointers stay two functions. */
Test(front, constant_is_read_only) {
  id lib = compile_ok("#include <metal_stdlib>\nusing namespace metal;\n"
                      "constexpr constant static float table[4] = {1.0f, 2.0f, 4.0f, 8.0f};\n"
                      "static inline float pick(constant float *t, int i) { return t[i]; }\n"
                      "static inline float twice(device float *p) { return p[0] * 2; }\n"
                      "static inline float twice(constant float *p) { return p[0] * 2; }\n"
                      "kernel void k(device float *o [[buffer(0)]], uint i "
                      "[[thread_position_in_grid]]) {\n"
                      "  o[i] = pick(table, i & 3) + twice(table + 3);\n}\n");
  id fn = function(lib, "k"), p = pipeline_of(fn);
  id o = buffer(64 * 4);
  run(p, &o, 1, 64, 32);
  for (int i = 0; i < 64; i++)
    cr_assert_eq(((float *)contents(o))[i], (float)(1 << (i & 3)) + 16.0f, "[%d]", i);
  sm_release(o);
  sm_release(p);
  sm_release(fn);
  sm_release(lib);
  const char *msg = compile_error("#include <metal_stdlib>\nusing namespace metal;\n"
                                  "kernel void w(constant float *c [[buffer(0)]]) {\n"
                                  "  c[0] = 1;\n}\n");
  cr_assert(strstr(msg, "program_source:4:"), "%s", msg);
}

/* Declaration forms of real code: function constants with their qualifiers in
 * any order, explicit instantiations whose template arguments are deduced
 * from the parameter types, constructors and member functions qualified with
 * an address space (one per space, differing only there), references
 * qualified `const constant T &` and `thread T &`, `constant const T *`. */
static const char DECL_FORMS[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "static constant constexpr const bool use_bias [[function_constant(0)]];\n"
    "constant constexpr static const int scale [[function_constant(1)]];\n"
    "struct Pair {\n"
    "  float a, b;\n"
    "  Pair() thread = default;\n"
    "  Pair() constant = default;\n"
    "  constexpr Pair(float x, float y) thread : a(x), b(y) {}\n"
    "  constexpr Pair(float x, float y) constant : a(x), b(y) {}\n"
    "  float sum() const constant { return a + b; }\n"
    "  float sum() const thread { return a + b; }\n"
    "};\n"
    "constant Pair table[2] = {Pair(1.f, 2.f), Pair(3.f, 4.f)};\n"
    "float pick(const constant Pair &p, thread float &acc) { acc += p.sum(); return acc; }\n"
    "template <typename T>\n"
    "kernel void scale_add(device T *out [[buffer(0)]], constant const T *bias [[buffer(1)]],\n"
    "                      uint i [[thread_position_in_grid]]) {\n"
    "  float acc = 0;\n"
    "  pick(table[i % 2], acc);\n"
    "  out[i] = T(float(out[i]) * float(scale) + (use_bias ? float(bias[i]) : 0.f) + acc);\n"
    "}\n"
    "template [[host_name(\"scale_add_f\")]] kernel void scale_add(device float *,\n"
    "                                                            constant const float *, uint);\n"
    "template [[host_name(\"scale_add_i\")]] [[kernel]] void scale_add(device int *,\n"
    "                                                                constant const int *, "
    "uint);\n";

Test(front, declaration_forms_of_real_code) {
  id lib = compile_ok(DECL_FORMS);
  enum { N = 32 };
  for (int variant = 0; variant < 2; variant++) {
    const char *name = variant ? "scale_add_i" : "scale_add_f";
    id v = values();
    bool bias_on = variant == 0;
    int scale = variant ? 3 : 5;
    set_index(v, &bias_on, DataTypeBool, 0);
    set_index(v, &scale, DataTypeInt, 1);
    id error = 0;
    id fn = specialize(lib, name, v, &error);
    cr_assert_not_null(fn, "%s: %s", name, sm_error_text(error));
    id p = pipeline_of(fn);
    id out = buffer(N * 4), bias = buffer(N * 4);
    for (int i = 0; i < N; i++) {
      if (variant) {
        ((int *)contents(out))[i] = i;
        ((int *)contents(bias))[i] = 7;
      } else {
        ((float *)contents(out))[i] = (float)i;
        ((float *)contents(bias))[i] = 0.5f * (float)i;
      }
    }
    id bufs[] = {out, bias};
    run(p, bufs, 2, N, 32);
    for (int i = 0; i < N; i++) {
      float acc = i % 2 ? 7.f : 3.f;
      if (variant)
        cr_assert_eq(((int *)contents(out))[i], i * 3 + (int)acc, "%s[%d]", name, i);
      else
        cr_assert_eq(((float *)contents(out))[i], (float)i * 5.f + 0.5f * (float)i + acc, "%s[%d]",
                     name, i);
    }
    sm_release(out);
    sm_release(bias);
    sm_release(p);
    sm_release(fn);
    sm_release(v);
  }
  sm_release(lib);
}

/* A compile error quotes the user's line with the caret under the column,
 * not softmetal's rewrite of it. */
Test(front, diagnostics_quote_the_users_line) {
  const char *e = compile_error("#include <metal_stdlib>\n"
                                "using namespace metal;\n"
                                "kernel void bad(device float *y [[buffer(0)]]) { y[0] = "
                                "undeclared_x + 1.f; }\n");
  const char *want = "program_source:3:57: error: use of undeclared identifier 'undeclared_x'\n"
                     "kernel void bad(device float *y [[buffer(0)]]) { y[0] = undeclared_x + "
                     "1.f; }\n"
                     "                                                        ^\n";
  cr_assert(strstr(e, want), "%s", e);
  cr_assert(!strstr(e, "sm_tramp"), "%s", e);
}

/* mlx's layer_norm.metal declares `threadgroup float local_buffer[32] = {0};`:
 * one array shared by the threadgroup (it was a private array per thread,
 * every sum wrong, the command buffer successful). */
Test(front, an_initialised_threadgroup_array_is_shared) {
  id lib = compile_ok("#include <metal_stdlib>\n"
                      "using namespace metal;\n"
                      "kernel void sum(device const float *x [[buffer(0)]],\n"
                      "                device float *out [[buffer(1)]],\n"
                      "                uint lid [[thread_position_in_threadgroup]],\n"
                      "                uint gid [[thread_position_in_grid]]) {\n"
                      "  threadgroup float part[64] = {0};\n"
                      "  part[lid] = x[gid];\n"
                      "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
                      "  float s = 0;\n"
                      "  for (uint k = 0; k < 64; k++) s += part[k];\n"
                      "  out[gid] = s;\n"
                      "}\n");
  id fn = function(lib, "sum"), p = pipeline_of(fn);
  id x = buffer(128 * 4), out = buffer(128 * 4);
  float *xv = contents(x);
  for (int k = 0; k < 128; k++) xv[k] = (float)(k % 7);
  id bufs[] = {x, out};
  run(p, bufs, 2, 128, 64);
  for (int g = 0; g < 2; g++) {
    float want = 0;
    for (int k = 0; k < 64; k++) want += xv[64 * g + k];
    for (int k = 0; k < 64; k++)
      cr_assert_eq(((float *)contents(out))[64 * g + k], want, "thread %d", 64 * g + k);
  }
  sm_release(x);
  sm_release(out);
  sm_release(p);
  sm_release(fn);
  sm_release(lib);
}

/* SPIR-V translators' storage matrices: `operator=` with a body (an `=` that
 * starts no initialiser) followed by constructors overloaded only on address
 * spaces, one of them a `const constant T &` (each pair one function on a
 * CPU), used for a threadgroup variable assigned with braces. */
Test(front, operator_assign_and_address_space_constructors_of_storage_matrices) {
  id lib =
      compile_ok("#include <metal_stdlib>\n"
                 "using namespace metal;\n"
                 "struct M2 {\n"
                 "  float2 c[2];\n"
                 "  M2() thread = default;\n"
                 "  M2() threadgroup = default;\n"
                 "  thread M2 &operator=(initializer_list<vec<float, 2>> cols) thread {\n"
                 "    int k = 0;\n"
                 "    for (auto v : cols) c[k++] = v;\n"
                 "    return *this;\n"
                 "  }\n"
                 "  M2(const thread float2x2 &m) thread { c[0] = m[0]; c[1] = m[1]; }\n"
                 "  M2(const constant float2x2 &m) thread { c[0] = m[0]; c[1] = m[1]; }\n"
                 "  threadgroup M2 &operator=(initializer_list<vec<float, 2>> cols) threadgroup {\n"
                 "    int k = 0;\n"
                 "    for (auto v : cols) c[k++] = v;\n"
                 "    return *this;\n"
                 "  }\n"
                 "};\n"
                 "kernel void stm(device float *o [[buffer(0)]], uint lid "
                 "[[thread_position_in_threadgroup]]) {\n"
                 "  threadgroup M2 shared_m;\n"
                 "  if (lid == 0) shared_m = {float2(1.f, 2.f), float2(3.f, 4.f)};\n"
                 "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
                 "  float2x2 f = float2x2(float2(5.f, 6.f), float2(7.f, 8.f));\n"
                 "  M2 local(f);\n"
                 "  o[lid] = shared_m.c[lid % 2].y + local.c[1].x;\n"
                 "}\n");
  id fn = function(lib, "stm"), p = pipeline_of(fn);
  id out = buffer(32 * 4);
  id bufs[] = {out};
  run(p, bufs, 1, 32, 32);
  for (int k = 0; k < 32; k++)
    cr_assert_eq(((float *)contents(out))[k], k % 2 ? 11.f : 9.f, "o[%d]", k);
  sm_release(out);
  sm_release(p);
  sm_release(fn);
  sm_release(lib);
}

/* A threadgroup variable at program scope: Metal refuses it; as a CPU global
 * it would be one array for every threadgroup. */
Test(front, a_program_scope_threadgroup_variable_is_refused) {
  const char *e = compile_error("#include <metal_stdlib>\n"
                                "using namespace metal;\n"
                                "threadgroup float shared_buf[64];\n"
                                "kernel void k(device float *o [[buffer(0)]], uint i "
                                "[[thread_position_in_grid]]) { o[i] = shared_buf[i % 64]; }\n");
  cr_assert(strstr(e, "program_source:3:1: error: a variable at program scope must be in the "
                      "constant address space"),
            "%s", e);
}

/* ggml's form: a function type typedef whose parameters are in the constant
 * address space names the type of instantiated kernels. */
Test(front, a_function_typedef_with_constant_parameters_types_instantiations) {
  id lib = compile_ok("#include <metal_stdlib>\n"
                      "using namespace metal;\n"
                      "struct Args { float scale; };\n"
                      "typedef void (scale_t)(\n"
                      "    constant Args & args,\n"
                      "    device float * o,\n"
                      "    uint i [[thread_position_in_grid]]);\n"
                      "template <typename T>\n"
                      "kernel void scale_k(constant Args & args, device float * o,\n"
                      "                    uint i [[thread_position_in_grid]]) {\n"
                      "  o[i] = float(T(i)) * args.scale;\n"
                      "}\n"
                      "template [[host_name(\"scale_f\")]] kernel scale_t scale_k<float>;\n");
  id fn = function(lib, "scale_f"), p = pipeline_of(fn);
  id a = buffer(4), out = buffer(16 * 4);
  *(float *)contents(a) = 1.5f;
  id bufs[] = {a, out};
  run(p, bufs, 2, 16, 16);
  for (int k = 0; k < 16; k++) cr_assert_eq(((float *)contents(out))[k], 1.5f * (float)k);
  sm_release(a);
  sm_release(out);
  sm_release(p);
  sm_release(fn);
  sm_release(lib);
}
