/* SPDX-License-Identifier: MIT */
/* MSL specification chapter 6, the standard library: math functions
 * against the precision tables of chapter 8 (exact where the table says
 * correctly rounded or 0 ulp, else within its ulp bound of a libm reference),
 * integer, relational, geometric, pack and unpack functions. Safe math, as
 * the NaN cases need; precise:: and fast:: where named. */
#include "conformance.h"

static void setup(void) { sm_run_open(); }
static void teardown(void) { sm_run_close(); }
TestSuite(conformance_stdlib, .init = setup, .fini = teardown, .timeout = 240);

static const char MATH_EXTRA[] =
    "static float frexp_case(float x) { int e; float m = frexp(x, e); return m * 1000 + e; }\n"
    "static float modf_case(float x) { float ip; float fr = modf(x, ip); return ip * 10 + fr; }\n"
    "static float sincos_case(float x) { float c; float s = sincos(x, c); return s - c; }\n";

Test(conformance_stdlib, math_functions) {
  const float pi = 3.14159265358979f;
  const struct conf_case c[] = {
      /* 0 ulp / correctly rounded in the precision tables */
      CF("6.5 floor", "floor(f[9])", -2.0f),
      CF("6.5 ceil", "ceil(f[9])", -1.0f),
      CF("6.5 round: half way away from zero", "round(f[8])", 3.0f),
      CF("6.5 round: half way away from zero", "round(f[10])", -3.0f),
      CF("6.5 rint: to nearest even", "rint(f[8])", 2.0f),
      CF("6.5 rint: to nearest even", "rint(f[7])", 2.0f),
      CF("6.5 trunc", "trunc(f[9])", -1.0f),
      CF("6.5 fract", "fract(f[9])", 0.5f),
      CF("6.5 fract", "fract(f[23])", 0.25f),
      CF("6.5 fract: fmin(x - floor(x), 0x1.fffffep-1f)", "fract(-f[16])", 0x1.fffffep-1f),
      CF("6.5 fmod", "fmod(f[20], f[11])", 1.5f),
      CF("6.5 fmod", "fmod(f[21], f[11])", -1.5f),
      CF("6.5 copysign", "copysign(f[11], f[5])", -2.0f),
      CF("6.5 fabs", "fabs(f[5])", 0.0f),
      CF("6.5 fmin: a NaN argument gives the other", "fmin(f[1], f[2])", 1.0f),
      CF("6.5 fmax: a NaN argument gives the other", "fmax(f[2], f[11])", 2.0f),
      CF("6.5 fdim", "fdim(f[12], f[20])", 0.0f),
      CF("6.5 fdim", "fdim(f[20], f[12])", 2.5f),
      CF("6.5 fma: one rounding", "fma(f[14], f[14], -(f[14] * f[14]))",
         fmaf(0.1f, 0.1f, -(0.1f * 0.1f))),
      CF("6.5 ldexp", "ldexp(f[7], int(u[3]))", 12.0f),
      CF("6.5 frexp", "frexp_case(f[19])", 0.78125f * 1000 + 7),
      CI("6.5 ilogb", "ilogb(f[19])", 6),
      CF("6.5 modf", "modf_case(f[9])", -10.5f),
      CF("6.5 sign of -0 is -0", "sign(f[5])", -0.0f),
      CF("6.5 sign of NaN is 0", "sign(f[2])", 0.0f),
      CF("6.5 sign", "sign(-f[19])", -1.0f),
      CF("6.2 (common functions) clamp", "clamp(f[20], f[0], f[13])", 4.0f),
      CF("6.2 (common functions) saturate", "saturate(f[8])", 1.0f),
      CF("6.2 (common functions) saturate", "saturate(-f[6])", 0.0f),
      CF("6.2 (common functions) mix", "mix(f[0], f[19], f[22])", 25.0f),
      CF("6.2 (common functions) step: x < edge gives 0", "step(f[11], f[7])", 0.0f),
      CF("6.2 (common functions) step: x == edge gives 1", "step(f[7], f[7])", 1.0f),
      CF("6.2 (common functions) smoothstep", "smoothstep(f[0], f[11], f[1])", 0.5f),
      CF("6.2 (common functions) max", "max(f[9], f[10])", -1.5f),
      CF("6.5 precise::divide: correctly rounded", "precise::divide(f[1], f[12])", 1.0f / 3.0f),
      CF("6.5 fmin3", "fmin3(f[12], f[1], f[11])", 1.0f),
      CF("6.5 fmedian3", "fmedian3(f[12], f[1], f[11])", 2.0f),
      /* ulp bounds of the precision table for precise math */
      CF("6.5 ceil keeps the sign of -0.5", "ceil(-f[6])", -0.0f),
      CF("6.5 round keeps the sign of -0.25", "round(-f[22])", -0.0f),
      CF("6.5 trunc keeps the sign", "trunc(-f[6])", -0.0f),
      CF("6.5 rint keeps the sign", "rint(-f[6])", -0.0f),
      CF("6.5 floor(-0)", "floor(f[5])", -0.0f),
      CI("6.5 sqrt(-1) is NaN", "isnan(sqrt(f[15]))", 1),
      CF("6.5 log(0)", "log(f[0])", -INFINITY),
      CF("6.5 log2(0)", "log2(f[0])", -INFINITY),
      CF("6.5 exp(-inf)", "exp(f[4])", 0.0f),
      CF("6.5 exp(inf)", "exp(f[3])", INFINITY),
      CF("6.5 rsqrt(+0)", "rsqrt(f[0])", INFINITY),
      CFU("6.5 atan2(+0, -1) is pi", "atan2(f[0], f[15])", 3.14159265358979f, 6),
      CFU("6.5 atan2(-0, -1) is -pi", "atan2(f[5], f[15])", -3.14159265358979f, 6),
      CFU("6.5 pow of a negative base, odd integer exponent", "pow(f[15], f[12])", -1.0f, 16),
      CI("6.5 fmod(x, 0) is NaN", "isnan(fmod(f[1], f[0]))", 1),
      CI("6.5 copysign of NaN", "signbit(copysign(f[2], f[15]))", 1),
      CF("6.5 nextafter", "nextafter(f[1], f[11])", 1.00000011920928955078125f),
      CF("6.5 frexp(0)", "frexp_case(f[0])", 0.0f),
      CFU("6.5 half sqrt (1 half ulp)", "float(sqrt(half(f[13])))", 2.0f, 8192),
      CFU("6.5 half exp2 (half)", "float(exp2(half(f[12])))", 8.0f, 8192),
      CF("6.2 (common functions) mix(x, y, a) = x + (y - x) * a", "mix(f[1], f[12], f[6])", 2.0f),
      CFU("6.5 sqrt", "sqrt(f[31])", 4.0f, 1),
      CFU("6.5 rsqrt", "rsqrt(f[13])", 0.5f, 2),
      CFU("6.5 exp (4 ulp)", "exp(f[1])", expf(1.0f), 4),
      CFU("6.5 exp2 (4 ulp)", "exp2(f[12])", 8.0f, 4),
      CFU("6.5 exp10 (4 ulp)", "exp10(f[11])", 100.0f, 4),
      CFU("6.5 log (4 ulp)", "log(f[19])", logf(100.0f), 4),
      CFU("6.5 log2 (4 ulp)", "log2(f[30])", 3.0f, 4),
      CFU("6.5 log10 (4 ulp)", "log10(f[19])", 2.0f, 4),
      CFU("6.5 pow (16 ulp)", "pow(f[11], f[27])", 1024.0f, 16),
      CFU("6.5 powr (16 ulp)", "powr(f[11], f[27])", 1024.0f, 16),
      CFU("6.5 sin (4 ulp)", "sin(f[1])", sinf(1.0f), 4),
      CFU("6.5 cos (4 ulp)", "cos(f[1])", cosf(1.0f), 4),
      CFU("6.5 tan (6 ulp)", "tan(f[1])", tanf(1.0f), 6),
      CFU("6.5 sincos (4 ulp each)", "sincos_case(f[1])", sinf(1.0f) - cosf(1.0f), 16),
      CFU("6.5 asin (4 ulp)", "asin(f[6])", pi / 6, 4),
      CFU("6.5 acos (4 ulp)", "acos(f[6])", pi / 3, 4),
      CFU("6.5 atan (5 ulp)", "atan(f[1])", pi / 4, 5),
      CFU("6.5 atan2 (6 ulp)", "atan2(f[1], f[15])", 3 * pi / 4, 6),
      CFU("6.5 sinh (4 ulp)", "sinh(f[1])", sinhf(1.0f), 4),
      CFU("6.5 cosh (4 ulp)", "cosh(f[1])", coshf(1.0f), 4),
      CFU("6.5 tanh (5 ulp)", "tanh(f[1])", tanhf(1.0f), 5),
      CFU("6.5 asinh (4 ulp)", "asinh(f[11])", asinhf(2.0f), 4),
      CFU("6.5 acosh (4 ulp)", "acosh(f[11])", acoshf(2.0f), 4),
      CFU("6.5 atanh (5 ulp)", "atanh(f[6])", atanhf(0.5f), 5),
      CFU("6.5 sinpi (4 ulp)", "sinpi(f[6])", 1.0f, 4),
      CFU("6.5 cospi (4 ulp)", "cospi(f[1])", -1.0f, 4),
      CFU("6.5 tanpi (6 ulp)", "tanpi(f[22])", 1.0f, 6),
      /* fast math bounds: exp within 3 + floor(|2x|) ulp */
      CFU("6.5 fast::exp", "fast::exp(f[1])", expf(1.0f), 5),
      CFU("6.5 fast::exp2", "fast::exp2(f[12])", 8.0f, 9),
      /* relational functions */
      CI("6.4 isnan", "isnan(f[2])", 1),
      CI("6.4 isinf", "isinf(f[4])", 1),
      CI("6.4 isfinite", "isfinite(f[3])", 0),
      CI("6.4 isnormal: subnormal", "isnormal(f[16])", 0),
      CI("6.4 isnormal", "isnormal(f[1])", 1),
      CI("6.4 isordered", "isordered(f[1], f[2])", 0),
      CI("6.4 isunordered", "isunordered(f[1], f[2])", 1),
      CI("6.4 signbit(-0)", "signbit(f[5])", 1),
      CI("6.4 signbit(+0)", "signbit(f[0])", 0),
      CI("6.4 all", "all(bool4(f[1], f[11], f[0], f[1]))", 0),
      CI("6.4 any", "any(bool4(f[0], f[0], f[1], f[0]))", 1),
      CF("6.4 select(a, b, c): c ? b : a", "select(f[1], f[11], bool(u[1]))", 2.0f),
      CF("6.4 select on vectors",
         "select(float4(f[1]), float4(f[11]), bool4(true, false, true, false)).y", 1.0f),
      CI("6.4 select on integers", "select(int(u[7]), int(u[9]), bool(u[0]))", 7),
      /* geometric functions */
      CF("6 (geometric functions) dot",
         "dot(float3(f[1], f[11], f[12]), float3(f[13], f[20] - f[6], f[29]))", 32.0f),
      CF("6 (geometric functions) cross",
         "cross(float3(f[1], f[0], f[0]), float3(f[0], f[1], f[0])).z", 1.0f),
      CFU("6 (geometric functions) length", "length(float2(f[12], f[13]))", 5.0f, 2),
      CFU("6 (geometric functions) distance", "distance(float2(f[0], f[0]), float2(f[12], f[13]))",
          5.0f, 2),
      CFU("6 (geometric functions) normalize", "normalize(float3(f[0], f[12], f[13])).y", 0.6f, 2),
      CF("6 (geometric functions) length_squared", "length_squared(float3(f[1], f[11], f[12]))",
         14.0f),
      CF("6 (geometric functions) reflect: i - 2 dot(n, i) n",
         "reflect(float2(f[1], f[15]), float2(f[0], f[1])).y", 1.0f),
      CF("6 (geometric functions) faceforward: dot(nref, i) < 0 gives n",
         "faceforward(float2(f[0], f[1]), float2(f[1], f[15]), float2(f[0], f[1])).y", 1.0f),
      CF("6 (geometric functions) faceforward: else -n",
         "faceforward(float2(f[0], f[1]), float2(f[1], f[15]), float2(f[0], f[15])).y", -1.0f),
      CF("6 (geometric functions) refract: eta 1 passes straight",
         "refract(float2(f[0], f[15]), float2(f[0], f[1]), f[1]).y", -1.0f),
      CF("6 (geometric functions) refract: total internal reflection gives 0",
         "refract(float2(f[1], f[15]) * f[6], float2(f[0], f[1]), f[11] * f[11]).x", 0.0f),
  };
  int bad = conf_run(MATH_EXTRA, c, CONF_N(c), 0);
  cr_log_info("chapter 6 math, relational, geometric: %d cases, %d differ", CONF_N(c), bad);
}

/* Metal's default, fast math: the functions the fast table gives 0 ulp stay
 * exact on finite arguments; exp and exp2 within 3 + floor(|2x|) ulp,
 * precise:: functions within their precise bounds. */
Test(conformance_stdlib, math_functions_under_fast_math) {
  const struct conf_case c[] = {
      CF("6.5 floor (fast)", "floor(f[9])", -2.0f),
      CF("6.5 ceil (fast)", "ceil(f[9])", -1.0f),
      CF("6.5 round (fast): half way away from zero", "round(f[8])", 3.0f),
      CF("6.5 round (fast): half way away from zero", "round(f[10])", -3.0f),
      CF("6.5 rint (fast): to nearest even", "rint(f[8])", 2.0f),
      CF("6.5 trunc (fast)", "trunc(f[9])", -1.0f),
      CF("6.5 fract (fast)", "fract(f[9])", 0.5f),
      CF("6.5 fract (fast)", "fract(f[23])", 0.25f),
      CF("6.5 fmod (fast)", "fmod(f[21], f[11])", -1.5f),
      CF("6.5 copysign (fast)", "copysign(f[11], f[15])", -2.0f),
      CF("6.5 fabs (fast)", "fabs(f[10])", 2.5f),
      CF("6.5 fdim (fast)", "fdim(f[20], f[12])", 2.5f),
      CF("6.5 ldexp (fast)", "ldexp(f[7], int(u[3]))", 12.0f),
      CF("6.5 frexp (fast)", "frexp_case(f[19])", 0.78125f * 1000 + 7),
      CI("6.5 ilogb (fast)", "ilogb(f[19])", 6),
      CF("6.5 modf (fast)", "modf_case(f[9])", -10.5f),
      CF("6.5 clamp (fast)", "clamp(f[20], f[0], f[13])", 4.0f),
      CF("6.5 saturate (fast)", "saturate(f[8])", 1.0f),
      CF("6.5 step (fast)", "step(f[7], f[7])", 1.0f),
      CF("6.5 fmin (fast)", "fmin(f[9], f[10])", -2.5f),
      CF("6.5 fmax3 (fast)", "fmax3(f[9], f[10], f[0])", 0.0f),
      CF("6.5 sign (fast)", "sign(-f[19])", -1.0f),
      CFU("6.5 fast::exp (3 + floor(|2x|) ulp)", "exp(f[1])", expf(1.0f), 5),
      CFU("6.5 fast::exp2 (3 + floor(|2x|) ulp)", "exp2(f[12])", 8.0f, 9),
      CFU("6.5 precise::sin under fast math (4 ulp)", "precise::sin(f[1])", sinf(1.0f), 4),
      CFU("6.5 precise::exp under fast math (4 ulp)", "precise::exp(f[11])", expf(2.0f), 4),
      CF("6.5 precise::divide under fast math", "precise::divide(f[1], f[12])", 1.0f / 3.0f),
      CFU("6.5 precise::sqrt under fast math", "precise::sqrt(f[11])", sqrtf(2.0f), 1),
  };
  int bad = conf_run(MATH_EXTRA, c, CONF_N(c), -1);
  cr_log_info("chapter 6 math under fast math: %d cases, %d differ", CONF_N(c), bad);
}

/* Fast math (Metal's default): a quotient whose divisor overflowed to
 * infinity is 0, as on Apple GPUs, whose fast division multiplies by the
 * reciprocal (1/inf = 0). SiLU, sigmoid and quick GELU of a large negative
 * x, written x / (1 + exp(-x)), depend on it. An elementwise kernel (one
 * element a thread, threadgroups of 128), whose loop over the threads the
 * CPU compile vectorises; inputs from -150 to 150. */
Test(conformance_stdlib, fast_math_activations_of_large_inputs_are_finite) {
  static const char src[] =
      "#include <metal_stdlib>\n"
      "using namespace metal;\n"
      "kernel void act(device const float *x [[buffer(0)]], device float *y [[buffer(1)]],\n"
      "                constant uint &n [[buffer(2)]],\n"
      "                uint i [[thread_position_in_grid]]) {\n"
      "  const float v = x[i];\n"
      "  y[i] = v / (1 + exp(-v));\n"
      "  y[n + i] = 1 / (1 + exp(-v));\n"
      "  y[2 * n + i] = v * (1 / (1 + exp(-1.702f * v)));\n"
      "}\n";
  enum { N = 256 };
  id error = 0;
  id lib = sm_compile(src, &error);
  cr_assert_not_null(lib, "%s", sm_error_text(error));
  uint32_t n = N;
  id bufs[3] = {sm_buffer(NULL, N * sizeof(float)), sm_buffer(NULL, 3 * N * sizeof(float)),
                sm_buffer(&n, sizeof n)};
  float *x = sm_contents(bufs[0]);
  for (int i = 0; i < N; i++) x[i] = -150.0f + 300.0f * (float)i / (N - 1);
  sm_dispatch(lib, "act", bufs, 3, SM_SIZE(N, 1, 1), SM_SIZE(128, 1, 1), false, 0);
  const float *y = sm_contents(bufs[1]);
  for (int i = 0; i < N; i++) {
    double v = x[i], s = 1.0 / (1.0 + exp(-v)), q = 1.0 / (1.0 + exp(-1.702 * v));
    double want[3] = {v * s, s, v * q};
    for (int k = 0; k < 3; k++)
      cr_expect(fabs(y[k * N + i] - want[k]) <= 1e-5 * fmax(1.0, fabs(want[k])),
                "activation %d of x = %.9g: %.9g, expected %.9g (fast math keeps x / inf = 0)", k,
                v, (double)y[k * N + i], want[k]);
  }
  for (int i = 0; i < 3; i++) sm_release(bufs[i]);
  sm_release(lib);
}

/* 6.5: T is a floating scalar or vector; Ti the int of as many elements */
Test(conformance_stdlib, vector_and_half_forms_of_math_functions) {
  const struct conf_case c[] = {
      CI("6.5 ilogb of a vector", "ilogb(float4(f[19], f[1], f[11], f[30])).x", 6),
      CI("6.5 ilogb of a vector", "ilogb(float4(f[19], f[1], f[11], f[30])).w", 3),
      CF("6.5 ldexp of a vector", "ldexp(float2(f[7], f[1]), int2(int(u[3]), int(u[1]))).y", 2.0f),
      CF("6.5 ldexp of a vector, scalar exponent", "ldexp(float2(f[7]), int(u[1])).x", 3.0f),
      CF("6.5 frexp of a vector", "frexp_vec(float2(f[1], f[19]))", 0.78125f * 1000 + 7),
      CF("6.5 smoothstep of vectors",
         "smoothstep(float2(f[0]), float2(f[11]), float2(f[1], f[11])).x", 0.5f),
      CF("6.5 smoothstep of vectors",
         "smoothstep(float2(f[0]), float2(f[11]), float2(f[1], f[11])).y", 1.0f),
      CI("6.4 signbit of a vector", "signbit(float4(f[5], f[0], f[15], f[1])).x", 1),
      CI("6.4 signbit of a vector", "signbit(float4(f[5], f[0], f[15], f[1])).y", 0),
      CI("6.4 isnormal of a vector", "isnormal(float2(f[16], f[1])).x", 0),
      CI("6.4 isnormal of a vector", "isnormal(float2(f[16], f[1])).y", 1),
      CI("6.4 isordered of vectors", "isordered(float2(f[1], f[2]), float2(f[1])).y", 0),
      CI("6.4 isunordered of vectors", "isunordered(float2(f[1], f[2]), float2(f[1])).y", 1),
      CI("6.4 isordered of half", "isordered(half(f[1]), half(f[2]))", 0),
      CF("6.5 fmin3 of vectors", "fmin3(float2(f[12]), float2(f[1]), float2(f[11])).x", 1.0f),
      CF("6.5 fmax3 of vectors", "fmax3(float2(f[12]), float2(f[1]), float2(f[11])).y", 3.0f),
      CF("6.5 fmedian3 of vectors", "fmedian3(float3(f[12]), float3(f[1]), float3(f[11])).z", 2.0f),
      CI("6.5 fmin3 of half is half", "sizeof(fmin3(half(f[12]), half(f[1]), half(f[11])))", 2),
      CF("6.5 fmin3 of half", "float(fmin3(half(f[12]), half(f[1]), half(f[11])))", 1.0f),
      CF("6.5 ldexp of half", "float(ldexp(half(f[7]), int(u[3])))", 12.0f),
      CI("6.5 ilogb of half", "ilogb(half(f[19]))", 6),
      CF("6.5 sincos of a vector", "sincos_vec(float2(f[0], f[0]))", 1.0f),
      CF("6.5 sincos of half", "sincos_half(half(f[0]))", 1.0f),
  };
  int bad = conf_run(
      "static float frexp_vec(float2 x) { int2 e; float2 m = frexp(x, e); return m.y * 1000 + e.y; "
      "}\n"
      "static float sincos_vec(float2 x) { float2 c; float2 s = sincos(x, c); return s.x + c.y; }\n"
      "static float sincos_half(half x) { half c; half s = sincos(x, c); return float(s) + "
      "float(c); }\n",
      c, CONF_N(c), 0);
  cr_log_info("chapter 6 vector and half forms: %d cases, %d differ", CONF_N(c), bad);
}

Test(conformance_stdlib, integer_functions) {
  const struct conf_case c[] = {
      CI("6.3 clz", "clz(u[0])", 32),
      CI("6.3 clz", "clz(u[1])", 31),
      CI("6.3 clz", "clz(uchar(u[1]))", 7),
      CI("6.3 clz", "clz(ushort(u[0]))", 16),
      CI("6.3 clz", "clz(ulong(u[1]))", 63),
      CI("6.3 clz", "clz(int(u[128]))", 0),
      CI("6.3 ctz", "ctz(u[0])", 32),
      CI("6.3 ctz", "ctz(u[8])", 3),
      CI("6.3 ctz", "ctz(ushort(u[0]))", 16),
      CI("6.3 ctz", "ctz(char(u[0]))", 8),
      CI("6.3 ctz", "ctz(ulong(u[129]) << 32)", 63),
      CI("6.3 popcount", "popcount(u[131])", 24),
      CI("6.3 popcount", "popcount(char(u[128]))", 8),
      CI("6.3 popcount", "popcount(ulong(u[128]) | (ulong(u[128]) << 32))", 64),
      CI("6.3 popcount on vectors", "popcount(uchar4(uchar(u[255]))).w", 8),
      CI("6.3 clz on vectors", "clz(uint2(u[1], u[0])).y", 32),
      CU("6.3 rotate", "rotate(u[129] | u[1], u[1])", 3),
      CI("6.3 rotate", "rotate(uchar(u[128] & 0x81u), uchar(u[1]))", 3),
      CU("6.3 rotate", "rotate(u[130], u[4])", 0x23456781u),
      CU("6.3 rotate: bits wrap around", "rotate(u[130], u[36])", 0x23456781u),
      CI("6.3 rotate: int", "rotate(int(u[130]), int(u[28]))", (int32_t)0x81234567u),
      CU("6.3 extract_bits", "extract_bits(u[131], 4u, 8u)", 0xee),
      CI("6.3 extract_bits: signed sign-extends", "extract_bits(int(u[240]), 4u, 4u)", -1),
      CU("6.3 extract_bits: all 32 bits", "extract_bits(u[131], 0u, 32u)", 0xdeadbeefu),
      CI("6.3 extract_bits: uchar", "extract_bits(uchar(u[240]), 4u, 4u)", 0x0f),
      CI("6.3 extract_bits: char", "extract_bits(char(u[240]), 4u, 4u)", -1),
      CU("6.3 extract_bits: ulong", "extract_bits(ulong(u[131]) << 32, 36u, 8u)", 0xee),
      CU("6.3 insert_bits", "insert_bits(u[128], u[0], 8u, 8u)", 0xffff00ffu),
      CU("6.3 insert_bits: all 32 bits", "insert_bits(u[0], u[131], 0u, 32u)", 0xdeadbeefu),
      CI("6.3 insert_bits: int", "insert_bits(int(u[0]), int(u[128]), 28u, 4u)",
         (int32_t)0xf0000000u),
      CI("6.3 insert_bits: ushort", "insert_bits(ushort(u[0]), ushort(u[128]), 4u, 4u)", 0xf0),
      CU("6.3 reverse_bits", "reverse_bits(u[1])", 0x80000000u),
      CI("6.3 reverse_bits: uchar", "reverse_bits(uchar(u[1]))", 0x80),
      CI("6.3 reverse_bits: ushort", "reverse_bits(ushort(u[1]))", 0x8000),
      CU("6.3 reverse_bits: ulong", "reverse_bits(ulong(u[1]))", 1ull << 63),
      CU("6.3 mulhi", "mulhi(u[129], u[4])", 2),
      CI("6.3 mulhi: signed", "mulhi(int(u[128]), int(u[128]))", 0),
      CI("6.3 mulhi: signed", "mulhi(-int(u[2]), int(u[137]))", -1),
      CU("6.3 mulhi: ulong", "mulhi(ulong(u[129]) << 32, ulong(u[4]))", 2),
      CU("6.3 madhi", "madhi(u[129], u[4], u[5])", 7),
      CI("6.3 madsat", "madsat(int(u[137]), int(u[4]), int(u[0]))", INT32_MAX),
      CU("6.3 madsat: uint", "madsat(u[129], u[2], u[1])", 0xffffffffu),
      CI("6.3 madsat: negative", "madsat(-int(u[137]), int(u[4]), -int(u[1]))", INT32_MIN),
      CI("6.3 madsat: in range", "madsat(int(u[10]), int(u[10]), int(u[5]))", 105),
      CI("6.3 madsat: uchar", "madsat(uchar(u[16]), uchar(u[16]), uchar(u[0]))", 255),
      CI("6.3 addsat", "addsat(int(u[132]), int(u[1]))", INT32_MAX),
      CI("6.3 addsat: uchar", "addsat(uchar(u[135]), uchar(u[100]))", 255),
      CI("6.3 addsat: long", "addsat(long(u[132]) << 32, long(u[132]) << 32)", INT64_MAX),
      CI("6.3 subsat: uchar", "subsat(uchar(u[100]), uchar(u[135]))", 0),
      CI("6.3 subsat: int", "subsat(int(u[129]), int(u[1]))", INT32_MIN),
      CI("6.3 subsat: char", "subsat(char(-int(u[100])), char(u[100]))", -128),
      CU("6.3 absdiff", "absdiff(-int(u[5]), int(u[5]))", 10),
      CU("6.3 absdiff: full range", "absdiff(int(u[129]), int(u[132]))", 0xffffffffu),
      CU("6.3 absdiff: uchar", "absdiff(uchar(u[0]), uchar(u[255]))", 255),
      CI("6.3 hadd", "hadd(int(u[7]), int(u[8]))", 7),
      CU("6.3 hadd: no overflow", "hadd(u[128], u[1])", 0x80000000u),
      CI("6.3 hadd: negative", "hadd(-int(u[1]), -int(u[2]))", -2),
      CI("6.3 rhadd", "rhadd(int(u[7]), int(u[8]))", 8),
      CI("6.3 rhadd: negative", "rhadd(-int(u[1]), -int(u[2]))", -1),
      CU("6.3 rhadd: no overflow", "rhadd(u[128], u[128])", 0xffffffffu),
      CI("6.3 abs", "abs(-int(u[5]))", 5),
      CI("6.3 abs: char", "abs(char(-int(u[100])))", 100),
      CI("6.3 clamp", "clamp(int(u[5]), int(u[0]), int(u[3]))", 3),
      CI("6.3 min", "min(-int(u[1]), int(u[0]))", -1),
      CU("6.3 max: unsigned", "max(u[128], u[0])", 0xffffffffu),
      CI("6.3 min: uchar", "min(uchar(u[135]), uchar(u[100]))", 100),
      CI("6.3 rotate: ushort", "rotate(ushort(u[140]), ushort(u[1]))", 1),
      CU("6.3 absdiff: char", "absdiff(char(u[128] << 7), char(u[127]))", 255),
      CI("6.3 hadd: char", "hadd(char(u[128] << 7), char((u[128] << 7) + 1))", -128),
      CI("6.3 rhadd: uchar", "rhadd(uchar(u[255]), uchar(u[255]))", 255),
      CI("6.3 median3", "median3(int(u[3]), int(u[1]), int(u[2]))", 2),
      CI("6.3 max3", "max3(-int(u[3]), -int(u[1]), -int(u[2]))", -1),
      CI("6.3 min3", "min3(uint(u[3]), u[1], u[2])", 1),
      CU("6.3 extract_bits on vectors", "extract_bits(uint2(u[0], u[131]), 4u, 8u).y", 0xee),
      CU("6.3 insert_bits on vectors", "insert_bits(uint2(u[128]), uint2(u[0]), 8u, 8u).x",
         0xffff00ffu),
      CU("6.3 reverse_bits on vectors", "reverse_bits(uint4(u[1])).z", 0x80000000u),
      CI("6.3 ctz on vectors", "ctz(int4(int(u[8]))).w", 3),
      CI("6.3 abs on vectors", "abs(int4(-int(u[9]))).y", 9),
      CU("6.3 popcount: ulong2", "popcount(ulong2(ulong(u[131]))).x", 24),
      CI("6.3 insert_bits: long", "insert_bits(long(u[0]), long(u[128]), 60u, 4u)",
         (int64_t)0xf000000000000000ull),
      CI("6.3 madhi: short", "madhi(short(u[140] >> 1), short(u[4]), short(u[1]))", 2),
  };
  int bad = conf_run("", c, CONF_N(c), 0);
  cr_log_info("chapter 6 integer functions: %d cases, %d differ", CONF_N(c), bad);
}

Test(conformance_stdlib, pack_and_unpack) {
  const struct conf_case c[] = {
      CFU("6 (pack and unpack functions) unpack_unorm4x8_to_float",
          "unpack_unorm4x8_to_float(u[141]).x", 127.0f / 255.0f, 1),
      CFU("6 (pack and unpack functions) unpack_unorm4x8_to_float",
          "unpack_unorm4x8_to_float(u[141]).y", 128.0f / 255.0f, 1),
      CF("6 (pack and unpack functions) unpack_unorm4x8_to_float",
         "unpack_unorm4x8_to_float(u[141]).w", 1.0f),
      CF("6 (pack and unpack functions) unpack_snorm4x8_to_float: -128 clamps to -1",
         "unpack_snorm4x8_to_float(u[141]).y", -1.0f),
      CF("6 (pack and unpack functions) unpack_snorm4x8_to_float",
         "unpack_snorm4x8_to_float(u[141]).x", 1.0f),
      CFU("6 (pack and unpack functions) unpack_unorm2x16_to_float",
          "unpack_unorm2x16_to_float(u[130]).x", 22136.0f / 65535.0f, 1),
      CFU("6 (pack and unpack functions) unpack_snorm2x16_to_float",
          "unpack_snorm2x16_to_float(u[139]).x", -2.0f / 32767.0f, 1),
      CU("6 (pack and unpack functions) pack_float_to_unorm4x8: clamped, nearest even",
         "pack_float_to_unorm4x8(float4(f[0], f[6], f[1], f[11]))", 0xffff8000u),
      CU("6 (pack and unpack functions) pack_float_to_snorm4x8",
         "pack_float_to_snorm4x8(float4(-f[1], f[6], -f[11], f[0]))", 0x00814081u),
      CU("6 (pack and unpack functions) pack_float_to_unorm2x16",
         "pack_float_to_unorm2x16(float2(f[1], f[0]))", 0x0000ffffu),
      CU("6 (pack and unpack functions) pack_float_to_snorm2x16",
         "pack_float_to_snorm2x16(float2(-f[1], f[6]))", 0x40008001u),
  };
  int bad = conf_run("", c, CONF_N(c), 0);
  cr_log_info("chapter 6 pack and unpack: %d cases, %d differ", CONF_N(c), bad);
}

Test(conformance_stdlib, pack_10a2) {
  const struct conf_case c[] = {
      CFU("6 (pack and unpack functions) unpack_unorm10a2_to_float",
          "unpack_unorm10a2_to_float(u[130]).x", 632.0f / 1023.0f, 1),
      CFU("6 (pack and unpack functions) unpack_unorm10a2_to_float",
          "unpack_unorm10a2_to_float(u[130]).y", 277.0f / 1023.0f, 1),
      CF("6 (pack and unpack functions) unpack_unorm10a2_to_float",
         "unpack_unorm10a2_to_float(u[128]).w", 1.0f),
      CF("6 (pack and unpack functions) unpack_unorm10a2_to_float",
         "unpack_unorm10a2_to_float(u[130]).w", 0.0f),
      CU("6 (pack and unpack functions) pack_float_to_unorm10a2",
         "pack_float_to_unorm10a2(float4(f[1], f[0], f[6], f[1]))", 0xe00003ffu),
  };
  int bad = conf_run("", c, CONF_N(c), 0);
  cr_log_info("chapter 6 pack 10a2: %d cases, %d differ", CONF_N(c), bad);
}

/* sRGB forms: the colour components through the sRGB curves of the
 * conversion rules, alpha linear; float to sRGB unorm8 within 0.6 of
 * the exact value. */
Test(conformance_stdlib, pack_srgb) {
  const double c128 = 128.0 / 255.0;
  const float lin128 = (float)pow((c128 + 0.055) / 1.055, 2.4);
  const struct conf_case c[] = {
      CF("6 (pack and unpack functions) unpack_unorm4x8_srgb_to_float: alpha is linear",
         "unpack_unorm4x8_srgb_to_float(u[141]).w", 1.0f),
      CF("6 (pack and unpack functions) unpack_unorm4x8_srgb_to_float: 0",
         "unpack_unorm4x8_srgb_to_float(u[141]).z", 0.0f),
      CFU("6 (pack and unpack functions) unpack_unorm4x8_srgb_to_float",
          "unpack_unorm4x8_srgb_to_float(u[141]).y", lin128, 64),
      CFU("6 (pack and unpack functions) unpack_unorm4x8_srgb_to_float: the linear segment",
          "unpack_unorm4x8_srgb_to_float(u[10]).x", (float)(10.0 / 255.0 / 12.92), 4),
      CU("6 (pack and unpack functions) pack_float_to_srgb_unorm4x8: 0, 1, clamped, alpha linear",
         "pack_float_to_srgb_unorm4x8(float4(f[0], f[1], f[11], f[6])) & 0xffffff00u", 0x80ffff00u),
      CU("6 (pack and unpack functions) pack_float_to_srgb_unorm4x8: the linear segment",
         "pack_float_to_srgb_unorm4x8(float4(f[14] * f[14] * f[14])) & 0xffu", 3),
      CI("6 (pack and unpack functions) pack_float_to_srgb_unorm4x8: 0.5 gives 188 (187.52 within "
         "0.6)",
         "(pack_float_to_srgb_unorm4x8(float4(f[6])) & 0xffu) - 187u <= 1u", 1),
      CU("6 (pack and unpack functions) pack_half_to_srgb_unorm4x8",
         "pack_half_to_srgb_unorm4x8(half4(f[1])) & 0xffffffu", 0xffffffu),
  };
  int bad = conf_run("", c, CONF_N(c), 0);
  cr_log_info("chapter 6 pack sRGB: %d cases, %d differ", CONF_N(c), bad);
}
