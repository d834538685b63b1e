/* SPDX-License-Identifier: MIT */
/* MSL specification chapter 2 (data types: scalars, vectors, packed vectors,
 * matrices, their sizes, alignments, components and constructors; type
 * conversions and as_type) and chapter 3 (operators). Cases cite the
 * section; values are the text's, or C references of it. Safe math: the
 * NaN, infinity and rounding cases need IEEE semantics. */
#include "conformance.h"

static void setup(void) { sm_run_open(); }
static void teardown(void) { sm_run_close(); }
TestSuite(conformance_types, .init = setup, .fini = teardown, .timeout = 240);

static const char TYPES_EXTRA[] =
    "struct S1 { float a; float3 b; };\n"
    "struct S2 { float a; packed_float3 b; };\n"
    "struct S3 { char c; half3 h; };\n"
    "struct S4 { short s; packed_half3 h; };\n"
    "#define OFFSET(S, m) ulong((thread char *)&s.m - (thread char *)&s)\n"
    "static ulong offset_s1_b() { S1 s; return OFFSET(S1, b); }\n"
    "static ulong offset_s2_b() { S2 s; return OFFSET(S2, b); }\n"
    "static ulong offset_s3_h() { S3 s; return OFFSET(S3, h); }\n"
    "static float4 v1234(device const float *f) { return float4(f[1], f[11], f[12], f[13]); }\n"
    "static float swizzle_write(device const float *f) {\n"
    "  float4 v = v1234(f);\n"
    "  v.xw = float2(f[27], f[19]);\n" /* 10, 2, 3, 100 */
    "  v.bg = v.gb;\n"                 /* 10, 3, 2, 100 */
    "  return dot(v, float4(1, 1000, 100000, 1e-2f));\n"
    "}\n"
    "static uint packed_roundtrip(device const float *f) {\n"
    "  packed_float3 p = float3(f[1], f[11], f[12]);\n"
    "  float3 q = p;\n"
    "  p[1] = f[13];\n"
    "  return uint(q.y) * 10 + uint(p.y);\n" /* 24 */
    "}\n"
    "static float2x2 m1234(device const float *f) {\n"
    "  return float2x2(float2(f[1], f[11]), float2(f[12], f[13]));\n"
    "}\n"
    "static float2x3 m23(device const float *f) {\n"
    "  return float2x3(float3(f[1], f[11], f[12]), float3(f[13], f[20] - f[6], f[29]));\n"
    "}\n"
    "static int vec_increment(device const uint *u) {\n"
    "  int4 v = int4(u[1], u[2], u[3], u[4]);\n"
    "  v++;\n"
    "  int4 w = ++v;\n"
    "  int r = w.x * 1000 + v.w * 100;\n"
    "  return r + (--v).y;\n" /* 3000 + 600 + 3 */
    "}\n";

Test(conformance_types, chapter_2_data_types) {
  const struct conf_case c[] = {
      /* 2.1 Scalar data types: Table 2.2, size and alignment */
      CI("2.1 (scalar sizes)", "sizeof(bool)", 1),
      CI("2.1 (scalar sizes)", "sizeof(char)", 1),
      CI("2.1 (scalar sizes)", "sizeof(short)", 2),
      CI("2.1 (scalar sizes)", "sizeof(int)", 4),
      CI("2.1 (scalar sizes)", "sizeof(long)", 8),
      CI("2.1 (scalar sizes)", "sizeof(half)", 2),
      CI("2.1 (scalar sizes)", "sizeof(bfloat)", 2),
      CI("2.1 (scalar sizes)", "alignof(long)", 8),
      /* 2.2 Vector data types: Table 2.3 */
      CI("2.2 (vector sizes)", "sizeof(char3)", 4),
      CI("2.2 (vector sizes)", "alignof(char3)", 4),
      CI("2.2 (vector sizes)", "sizeof(short3)", 8),
      CI("2.2 (vector sizes)", "alignof(short3)", 8),
      CI("2.2 (vector sizes)", "sizeof(int3)", 16),
      CI("2.2 (vector sizes)", "sizeof(long3)", 32),
      CI("2.2 (vector sizes)", "alignof(long3)", 32),
      CI("2.2 (vector sizes)", "alignof(long4)", 32),
      CI("2.2 (vector sizes)", "sizeof(half3)", 8),
      CI("2.2 (vector sizes)", "alignof(float3)", 16),
      CI("2.2 (vector sizes)", "sizeof(bool3)", 4),
      CI("2.2 (vector sizes)", "sizeof(uchar2)", 2),
      CI("2.2 (vector sizes)", "sizeof(long2)", 16),
      /* 2.2.3 Packed vector types: Table 2.4 */
      CI("2.2.3 (packed sizes)", "sizeof(packed_char3)", 3),
      CI("2.2.3 (packed sizes)", "alignof(packed_char3)", 1),
      CI("2.2.3 (packed sizes)", "sizeof(packed_short3)", 6),
      CI("2.2.3 (packed sizes)", "alignof(packed_short3)", 2),
      CI("2.2.3 (packed sizes)", "sizeof(packed_int3)", 12),
      CI("2.2.3 (packed sizes)", "sizeof(packed_half3)", 6),
      CI("2.2.3 (packed sizes)", "sizeof(packed_float4)", 16),
      CI("2.2.3 (packed sizes)", "alignof(packed_float4)", 4),
      /* 2.3 Matrix data types: Table 2.5 */
      CI("2.3 (matrix sizes)", "sizeof(float2x2)", 16),
      CI("2.3 (matrix sizes)", "alignof(float2x2)", 8),
      CI("2.3 (matrix sizes)", "sizeof(float3x3)", 48),
      CI("2.3 (matrix sizes)", "alignof(float3x3)", 16),
      CI("2.3 (matrix sizes)", "sizeof(float4x3)", 64),
      CI("2.3 (matrix sizes)", "sizeof(float2x3)", 32),
      CI("2.3 (matrix sizes)", "sizeof(float3x2)", 24),
      CI("2.3 (matrix sizes)", "sizeof(half2x2)", 8),
      CI("2.3 (matrix sizes)", "alignof(half2x2)", 4),
      CI("2.3 (matrix sizes)", "sizeof(half3x3)", 24),
      CI("2.3 (matrix sizes)", "sizeof(half4x2)", 16),
      /* layout of structs holding them (alignment as the tables give) */
      CI("2.2 (float3 member)", "sizeof(S1)", 32),
      CI("2.2 (float3 member)", "offset_s1_b()", 16),
      CI("2.2.3 (packed member)", "sizeof(S2)", 16),
      CI("2.2.3 (packed member)", "offset_s2_b()", 4),
      CI("2.2 (half3 member)", "offset_s3_h()", 8),
      CI("2.2.3 (packed half3 member)", "sizeof(S4)", 8),
      /* 2.2.1 Accessing vector components */
      CF("2.2.1 (xyzw)", "v1234(f).w", 4.0f),
      CF("2.2.1 (rgba)", "v1234(f).a", 4.0f),
      CF("2.2.1 (swizzle)", "v1234(f).wzyx.y", 3.0f),
      CF("2.2.1 (swizzle, rgba)", "v1234(f).bgra.x", 3.0f),
      CF("2.2.1 (repeated components read)", "v1234(f).xxyy.z", 2.0f),
      CF("2.2.1 (index)", "v1234(f)[u[2]]", 3.0f),
      CF("2.2.1 (swizzle write)", "swizzle_write(f)", 10.0f + 3000.0f + 200000.0f + 1.0f),
      CI("2.2.3 (packed: element access, conversion)", "packed_roundtrip(f)", 24),
      /* 2.2.2 Vector constructors */
      CF("2.2.2 (float4(float2, float2))",
         "dot(float4(v1234(f).xy, v1234(f).zw), float4(1, 10, 100, 1000))", 4321.0f),
      CF("2.2.2 (float4(float, float3))",
         "dot(float4(f[29], v1234(f).yzw), float4(1, 10, 100, 1000))", 4326.0f),
      CF("2.2.2 (float3(float2, float))", "float3(v1234(f).zw, f[1]).z", 1.0f),
      CF("2.2.2 (broadcast)", "float4(f[12]).w", 3.0f),
      CI("2.2.2 (int4 from float4: toward zero)", "int4(float4(f[7], f[9], f[8], f[10])).w", -2),
      /* 2.3 Matrices: column-major, m[i] is column i */
      CF("2.3 (column access)", "m1234(f)[1][0]", 3.0f),
      CF("2.3 (column access)", "m1234(f)[0].y", 2.0f),
      CF("2.3 (matrix * vector)", "(m1234(f) * float2(f[1], f[1])).y", 6.0f),
      CF("2.3 (vector * matrix)", "(float2(f[1], f[1]) * m1234(f)).y", 7.0f),
      CF("2.3 (matrix * matrix)", "(m1234(f) * m1234(f))[1][0]", 15.0f),
      CF("2.3 (diagonal from a scalar)", "float3x3(f[11])[1][1]", 2.0f),
      CF("2.3 (diagonal from a scalar)", "float3x3(f[11])[0][1]", 0.0f),
      CF("2.3 (from scalars, column by column)", "float2x2(f[1], f[11], f[12], f[13])[1][0]", 3.0f),
      CF("2.3 (matrix * scalar)", "(m1234(f) * f[11])[1][1]", 8.0f),
      CF("2.3 (matrix + matrix)", "(m1234(f) + m1234(f))[0][1]", 4.0f),
      CF("2.3 (matrix - matrix)", "(m1234(f) - m1234(f))[1][1]", 0.0f),
      CF("2.3 (identity from a scalar)", "float4x4(f[1])[3][3]", 1.0f),
      CF("2.3 (identity from a scalar)", "float4x4(f[1])[3][2]", 0.0f),
      CF("2.3 (2 columns of 3 rows * float2)", "(m23(f) * float2(f[1], f[1])).z", 9.0f),
      CF("2.3 (transpose of a 2x3 is 3x2)", "transpose(m23(f))[2][1]", 6.0f),
      CF("2.3 (half matrix * vector)",
         "float((half2x2(half2(f[1], f[11]), half2(f[12], f[13])) * half2(f[1], f[1])).y)", 6.0f),
      CI("2.3 (matrix array stride)", "sizeof(float3x3[2])", 96),
      CI("2.2.3 (packed array stride)", "sizeof(packed_float3[4])", 48),
      CI("2.2 (float3 array stride)", "sizeof(float3[4])", 64),
      CI("2 (arrays: metal::array)", "sizeof(array<float, 3>)", 12),
      CI("2 (arrays: metal::array size())", "array<int, 4>{{1, 2, 3, 4}}.size()", 4),
      CF("6 (matrix functions) transpose", "transpose(m1234(f))[0][1]", 3.0f),
      CF("6 (matrix functions) determinant", "determinant(m1234(f))", -2.0f),
      CI("3 (vector ++ and --)", "vec_increment(u)", 3603),
  };
  int bad = conf_run(TYPES_EXTRA, c, CONF_N(c), 0);
  cr_log_info("chapter 2 data types: %d cases, %d differ", CONF_N(c), bad);
}

/* What the text calls compile errors: vector conversions are explicit,
 * swizzles do not mix xyzw with rgba, a swizzle assigned to has no repeated
 * component, as_type needs types of one size. */
Test(conformance_types, chapter_2_compile_errors) {
  static const char *const bad[][2] = {
      {"2.2 (no implicit vector conversion)", "int4 i = int4(u[0]); float4 v = i; o[0] = v.x;"},
      {"2.2 (no implicit conversion between vector sizes)", "float4 v = float2(f[0]); o[0] = v.x;"},
      {"2.2.1 (xyzw and rgba do not mix)", "float4 v = float4(f[0]); o[0] = v.xg.x;"},
      {"2.2.1 (no repeated component in an assigned swizzle)",
       "float4 v = float4(f[0]); v.xx = float2(1.0f); o[0] = v.x;"},
      {"2 (as_type: operand and result of different sizes)",
       "half4 h = half4(f[0]); float4 g = as_type<float4>(h); o[0] = g.x;"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char src[1024];
    snprintf(
        src, sizeof src,
        "#include <metal_stdlib>\nusing namespace metal;\n"
        "kernel void k(device const uint *u [[buffer(0)]], device const float *f [[buffer(1)]],\n"
        "              device float *o [[buffer(2)]]) {\n  %s\n}\n",
        bad[i][1]);
    id error = 0;
    id lib = sm_compile(src, &error);
    cr_expect_null(lib, "MSL %s: compiled, but the text makes it an error: %s", bad[i][0],
                   bad[i][1]);
    if (lib) sm_release(lib);
  }
}

Test(conformance_types, chapter_2_type_conversions) {
  const struct conf_case c[] = {
      /* Type conversions and reinterpreting data: to integer toward zero,
       * to floating point to nearest even; bool false 0, true 1 */
      CI("2 (conversions: float to int, toward zero)", "int(f[7])", 1),
      CI("2 (conversions: float to int, toward zero)", "int(f[9])", -1),
      CI("2 (conversions: float to int, toward zero)", "int(f[10])", -2),
      CI("2 (conversions: float to uint)", "uint(f[8])", 2),
      CI("2 (conversions: float to short)", "short(f[21])", -5),
      CI("2 (conversions: float to uchar)", "uchar(f[19])", 100),
      CI("2 (conversions: float to long)", "long(-f[19])", -100),
      CI("2 (conversions: half to int)", "int(half(f[10]))", -2),
      CF("2 (conversions: int to float, nearest even)", "float(u[133])", 16777216.0f),
      CF("2 (conversions: int to float, nearest even)", "float(u[134])", 16777220.0f),
      CF("2 (conversions: uint to float)", "float(u[128])", 4294967296.0f),
      CF("2 (conversions: int to float)", "float(int(u[129]))", -2147483648.0f),
      CU("2 (conversions: int to half, tie to even)", "half(u[64] * 32 + 1)", 0x6800),
      CU("2 (conversions: int to half, tie to even)", "half(u[64] * 32 + 3)", 0x6802),
      CU("2 (conversions: float to half, tie to even)", "half(f[24])", 0x3c00),
      CU("2 (conversions: float to half, tie to even)", "half(f[25])", 0x3c02),
      CU("2 (conversions: float to half, largest)", "half(f[17])", 0x7bff),
      CU("2 (conversions: float to half, overflow to infinity)", "half(f[18])", 0x7c00),
      CU("2 (conversions: float to half, overflow to infinity)", "half(-f[18])", 0xfc00),
      CU("2 (conversions: float to half, subnormal)", "half(f[26])", 0x0001),
      CU("2 (conversions: float to half, underflow)", "half(f[16])", 0x0000),
      CU("2 (conversions: float to half, -0)", "half(f[5])", 0x8000),
      CI("2 (conversions: float to half, NaN)", "isnan(half(f[2]))", 1),
      CF("2 (conversions: half to float, exact)", "float(half(f[14]))", 0.0999755859375f),
      CI("2 (conversions: bool)", "int(bool(f[6]))", 1),
      CI("2 (conversions: bool)", "int(bool(f[5]))", 0),
      CF("2 (conversions: bool to float)", "float(bool(u[2]))", 1.0f),
      CI("2 (conversions: bool vector)", "int(bool4(int4(u[0], u[2], u[0], u[0])).y)", 1),
      CI("2 (conversions: integer narrowing)", "uchar(u[136])", 44),
      CI("2 (conversions: integer narrowing)", "char(u[135])", -56),
      CI("2 (conversions: integer narrowing)", "ushort(int(u[128]))", 0xffff),
      CU("2 (conversions: vector)", "static_cast<uint2>(int2(int(u[128]))).x", 0xffffffffu),
      CF("2 (conversions: vector)", "float4(int4(int(u[133]))).z", 16777216.0f),
      /* as_type: the bits, unchanged */
      CU("2 (as_type)", "as_type<uint>(f[1])", 0x3f800000u),
      CF("2 (as_type)", "as_type<float>(u[137])", 2.0f),
      CI("2 (as_type)", "as_type<int>(f[15])", (int32_t)0xbf800000u),
      CI("2 (as_type: int to short2)", "as_type<short2>(u[130]).x", 0x5678),
      CI("2 (as_type: int to short2)", "as_type<short2>(u[130]).y", 0x1234),
      CI("2 (as_type: uint to uchar4)", "as_type<uchar4>(u[131]).x", 0xef),
      CI("2 (as_type: uint to uchar4)", "as_type<uchar4>(u[131]).w", 0xde),
      CI("2 (as_type: float to char4)", "as_type<char4>(f[15]).w", -65),
      CU("2 (as_type: uint to half2)", "as_type<half2>(u[137]).y", 0x4000),
      CU("2 (as_type: half2 to uint)", "as_type<uint>(half2(f[1], f[11]))", 0x40003c00u),
      CU("2 (as_type: float2 to ulong)", "as_type<ulong>(float2(f[1], f[11]))",
         0x400000003f800000ull),
      CF("2 (conversions: bool vector to float)", "float4(bool4(u[1], u[0], u[2], u[0])).z", 1.0f),
      CF("2 (conversions: ulong to float, nearest even)", "float((ulong(u[128]) << 32) | u[128])",
         18446744073709551616.0f),
      CI("2 (conversions: half to uint)", "uint(half(f[17]))", 65504),
      CF("2 (conversions: float to bfloat, tie to even)", "float(bfloat(f[32]))", 1.0f),
      CF("2 (conversions: float to bfloat, tie to even)", "float(bfloat(f[33]))", 1.015625f),
      CF("2 (conversions: float to bfloat)", "float(bfloat(f[18]))", 70144.0f),
      CF("2 (conversions: half subnormal to float)", "float(as_type<half>(ushort(u[1])))",
         5.9604644775390625e-8f),
  };
  int bad = conf_run("", c, CONF_N(c), 0);
  cr_log_info("chapter 2 conversions: %d cases, %d differ", CONF_N(c), bad);
}

Test(conformance_types, chapter_3_operators) {
  const struct conf_case c[] = {
      /* 3.1: scalars take C++'s integer promotions; vector operations act on
       * the element type */
      CI("3.1 (integer promotion)", "uchar(u[135]) + uchar(u[100])", 300),
      CI("3.1 (integer promotion)", "~uchar(u[1])", -2),
      CI("3.1 (vectors: no promotion)", "(uchar4(uchar(u[135])) + uchar4(uchar(u[100]))).x", 44),
      CU("3.1 (unsigned negation)", "-u[1]", 0xffffffffu),
      CI("3.1 (division toward zero)", "(-int(u[7])) / int(u[2])", -3),
      CI("3.1 (remainder)", "(-int(u[7])) % int(u[2])", -1),
      CI("3.1 (remainder)", "int(u[7]) % (-int(u[2]))", 1),
      CU("3.1 (unsigned division)", "u[128] / u[16]", 0x0fffffffu),
      CI("3.1 (vector division)", "(int4(-int(u[7])) / int4(int(u[2]))).z", -3),
      CI("3.1 (vector remainder)", "(int4(-int(u[7])) % 2).w", -1),
      CI("3.1 (vector remainder)", "(uint4(u[7]) % uint4(u[4])).x", 3),
      CF("3.1 (float division by zero, IEEE)", "f[1] / f[0]", INFINITY),
      CF("3.1 (float division by zero, IEEE)", "-f[1] / f[0]", -INFINITY),
      CF("3.1 (float +, correctly rounded)", "f[14] + f[28]", 0.1f + 0.3f),
      CF("3.1 (float *, correctly rounded)", "f[14] * f[28]", 0.1f * 0.3f),
      CF("3.1 (float /, correctly rounded)", "f[1] / f[12]", 1.0f / 3.0f),
      /* 3.1: E1 << E2 shifts by the log2(N) low bits of E2 viewed as
       * unsigned; N is the width of E1 after integer promotion for a scalar,
       * of its element for a vector */
      CU("3.1 (shift: uint, count 33 -> 1)", "u[1] << u[33]", 2),
      CI("3.1 (shift: int, count 33 -> 1, arithmetic)", "(-int(u[8])) >> u[33]", -4),
      CU("3.1 (shift: uint, count 63 -> 31)", "u[129] >> u[63]", 1),
      CU("3.1 (shift: uint, count 32 -> 0)", "u[131] >> u[32]", 0xdeadbeefu),
      CU("3.1 (shift: count -1 viewed as unsigned -> 31)", "u[1] << int(u[128])", 0x80000000u),
      CU("3.1 (shift: ulong, count 65 -> 1)", "ulong(u[1]) << u[65]", 2),
      CI("3.1 (shift: long, count 66 -> 2)", "(-long(u[16])) >> u[66]", -4),
      CI("3.1 (shift: long, count 64 -> 0)", "long(u[1]) << u[64]", 1),
      CI("3.1 (shift: uchar promotes to int)", "uchar(u[1]) << u[9]", 512),
      CI("3.1 (shift: uchar promotes to int, count 33 -> 1)", "uchar(u[1]) << u[33]", 2),
      CI("3.1 (shift: ushort promotes to int)", "ushort(u[140]) >> u[17]", 0),
      CI("3.1 (shift: uchar4, count 9 -> 1)", "(uchar4(uchar(u[1])) << uchar4(uchar(u[9]))).x", 2),
      CI("3.1 (shift: ushort2, count 17 -> 1)",
         "(ushort2(ushort(u[1])) << ushort2(ushort(u[17]))).y", 2),
      CI("3.1 (shift: char2, count 9 -> 1, arithmetic)",
         "(char2(char(u[128] << 7)) >> char2(char(u[9]))).x", -64),
      CU("3.1 (shift: uint2, count 33 -> 1)", "(uint2(u[1]) << uint2(u[33])).x", 2),
      CI("3.1 (shift: int4, count 34 -> 2)", "(int4(-int(u[8])) >> int4(int(u[34]))).x", -2),
      CU("3.1 (shift: ulong2, count 65 -> 1)", "(ulong2(ulong(u[1])) << ulong2(ulong(u[65]))).y",
         2),
      CU("3.1 (shift: vector by scalar)", "(uint4(u[1]) << u[33]).w", 2),
      /* relational and equality operators: bool results, vectors of bool */
      CI("3.1 (usual conversions: int < uint)", "int(u[128]) < u[1]", 0),
      CI("3.1 (vector comparison gives boolN)",
         "all((v4(f) < f[8]) == bool4(true, true, false, false))", 1),
      CI("3.1 (boolN converts to 1, not -1)", "int4(v4(f) < f[8]).y", 1),
      CI("3.1 (boolN size)", "sizeof(v4(f) < f[8])", 4),
      CI("3.1 (NaN compares unequal)", "f[2] == f[2]", 0),
      CI("3.1 (NaN compares unequal)", "f[2] != f[2]", 1),
      CI("3.1 (NaN is unordered)", "f[2] < f[1] || f[2] >= f[1]", 0),
      CI("3.1 (logical not)", "!f[0]", 1),
      CI("3.1 (vectors: unary minus on the element type)", "(-uchar4(uchar(u[1]))).x", 255),
      CI("3.1 (vectors: complement on the element type)", "(~uchar4(uchar(u[0]))).y", 255),
      CI("3.1 (vectors: multiplication wraps in the element type)",
         "(ushort2(ushort(u[140])) * ushort2(ushort(u[2]))).x", 0),
      CI("3.1 (vectors: compound assignment)", "vec_compound(u)", 2 * 10 + 7),
  };
  int bad = conf_run(
      "static float4 v4(device const float *f) { return float4(f[1], f[11], f[12], f[13]); }\n"
      "static int vec_compound(device const uint *u) {\n"
      "  int4 v = int4(u[1], u[2], u[3], u[4]);\n"
      "  v.xy += int2(u[1]);\n" /* 2, 3, 3, 4 */
      "  v *= int(u[2]);\n"     /* 4, 6, 6, 8 */
      "  v.w -= 1;\n"           /* 4, 6, 6, 7 */
      "  return v.y / 3 * 10 + v.w;\n"
      "}\n",
      c, CONF_N(c), 0);
  cr_log_info("chapter 3 operators: %d cases, %d differ", CONF_N(c), bad);
}
