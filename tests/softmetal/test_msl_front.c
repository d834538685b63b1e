/* softmetal's MSL front end: the MSL people write (templates, host_name,
 * [[kernel]], macros, implicit indices), threadgroup variables, function
 * constants, diagnostics, and the safety of the kernel cache. */
#include <criterion/criterion.h>
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
  cr_assert_eq(sm_live(), 0, "every object released");
}
TestSuite(front, .init = setup, .fini = teardown, .timeout = 120);

static id compile(const char *src, id *error) {
  return SEND(id, (id, SEL, id, id, id *), dev, "newLibraryWithSource:options:error:",
              sm_str(src), (id)0, error);
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
  id p = SEND(id, (id, SEL, id, id *), dev, "newComputePipelineStateWithFunction:error:", fn,
              &error);
  cr_assert_not_null(p, "%s", sm_error_text(error));
  return p;
}
static id buffer(NSUInteger len) {
  return SEND(id, (id, SEL, NSUInteger, NSUInteger), dev, "newBufferWithLength:options:", len,
              0ul);
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
  SEND(void, (id, SEL, MTLSize, MTLSize), enc, "dispatchThreads:threadsPerThreadgroup:",
       (MTLSize){n, 1, 1}, (MTLSize){tg, 1, 1});
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
      cr_assert_eq(o[4 * g + 0], 0xFFFFFFFFu, "thread %u reads poison first, not %#x", g,
                   o[4 * g]);
      cr_assert_eq(o[4 * g + 1], 63u - tid + 1000u * group, "thread %u", g);
      cr_assert_eq(o[4 * g + 2], mode == 0 ? 64u : 2u * (63u - tid), "mode %u thread %u", mode,
                   g);
      cr_assert_eq(o[4 * g + 3], tid + 1000u * group, "thread %u: its own pointer", g);
    }
  }
  sm_release(lib);
}

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
  SEND(void, (id, SEL, const void *, NSUInteger, id), v, "setConstantValue:type:withName:", p,
       type, sm_str(name));
}
static id specialize(id lib, const char *name, id v, id *error) {
  return SEND(id, (id, SEL, id, id, id *), lib, "newFunctionWithName:constantValues:error:",
              sm_str(name), v, error);
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
  id error = 0;
  cr_assert_null(specialize(lib, "fc", v, &error));
  cr_assert(strstr(sm_error_text(error), "'scale' (index 0) is required"), "%s",
            sm_error_text(error));
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
  cr_assert_null(SEND(id, (id, SEL, id, id *), dev, "newComputePipelineStateWithFunction:error:",
                      fn, &error));
  cr_assert(strstr(sm_error_text(error), "not specialized"), "%s", sm_error_text(error));
  sm_release(fn);
  /* a kernel that uses none needs no values */
  fn = function(lib, "plain");
  id p = pipeline_of(fn);
  sm_release(p);
  sm_release(fn);
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
  SEND(void, (id, SEL, MTLSize, MTLSize), enc, "dispatchThreads:threadsPerThreadgroup:",
       (MTLSize){64, 1, 1}, (MTLSize){64, 1, 1});
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

#define SWAP_KERNEL                                                                        \
  "kernel void k(device float *o [[buffer(0)]], uint lid [[thread_position_in_threadgroup]]) {\n" \
  "  threadgroup float tmp[64];\n"                                                         \
  "  tmp[lid] = float(lid);\n"                                                             \
  "  V r = V{0} + V{0};\n"                                                                 \
  "  o[lid] = tmp[63 - lid] + r.x;\n"                                                      \
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
                           "}\n" SWAP_KERNEL, o, err, sizeof err);
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
    fprintf(h, "%sstruct V { float x; };\n"
               "inline V operator+(V a, V b) {\n"
               "  metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);\n"
               "  return V{a.x + b.x};\n"
               "}\n", sys ? "#pragma clang system_header\n" : "");
    fclose(h);
    snprintf(src, sizeof src, "#include <metal_stdlib>\nusing namespace metal;\n#include \"%s\"\n"
             SWAP_KERNEL, path);
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
    "template <typename T> constexpr thread C &operator+=(thread C &a, T b) { a.r += b; return a; }\n"
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
  for (int i = 0; i < 64; i++) cr_assert_eq(((float *)contents(o))[i], 2.0f * (float)(i + 1), "[%d]", i);
  sm_release(o);
  sm_release(p);
  sm_release(fn);
  sm_release(lib);
}

/* Threadgroup variables of bodies count toward the 32 KiB of threadgroup
 * memory with setThreadgroupMemoryLength:atIndex:, and are
 * staticThreadgroupMemoryLength: the largest instantiation of each
 * declaration the kernel can reach (here 4096 floats through a template, and
 * 1000 bytes rounded to 1008), not those it cannot reach (unused()). */
static const char TG_BYTES[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "template <typename T> void fill(threadgroup T *s, uint i) { threadgroup T big[4096]; big[i] = s[0]; }\n"
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
  SEND(void, (id, SEL, NSUInteger, NSUInteger), enc, "setThreadgroupMemoryLength:atIndex:",
       tg_len, 0ul);
  SEND(void, (id, SEL, MTLSize, MTLSize), enc, "dispatchThreads:threadsPerThreadgroup:",
       (MTLSize){64, 1, 1}, (MTLSize){64, 1, 1});
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
  /* one size per declaration, the largest of its instantiations: conservative */
  cr_assert_eq(sm_u(ph, "staticThreadgroupMemoryLength"), 4096 * 4 + 1008);
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
