/* SPDX-License-Identifier: MIT */
/* Custom kernels (cmetal/kernel.h) on the Metal device (softmetal): full
 * MSL sources with threadgroup memory, barriers and SIMD-group functions,
 * macros, body-only kernels over strided and offset views, DLPack imports,
 * two streams ordered by a fence, the cache, every argument error,
 * concurrent creation and dispatch, and the pipeline cache on disk across
 * processes. */
#define _XOPEN_SOURCE 700 /* nftw, mkdtemp */
#if defined(__APPLE__)
#define _DARWIN_C_SOURCE 1 /* mkdtemp beside _XOPEN_SOURCE */
#endif
#define _DEFAULT_SOURCE
#include <cmetal/cmetal.h>

#include <criterion/criterion.h>
#include <errno.h>
#include <float.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "softmetal_hooks.h"

static cm_device *metal(void) {
    cm_device *d = NULL;
    cr_assert_eq(cm_device_open(CM_DEVICE_METAL, 0, &d), CM_OK, "%s", cm_last_error());
    return d;
}

/* Whether the device has SIMD-group reductions (simd_sum, simd_max...):
 * Apple7 and later, Mac2 (Metal's feature set tables). */
static bool has_simd_reductions(cm_device *d) {
    cm_device_info info;
    CHECK(cm_device_get_info(d, &info));
    return (info.gpu_families & (CM_GPU_FAMILY_APPLE7 | CM_GPU_FAMILY_MAC2)) != 0;
}

static uint64_t submissions(cm_device *d) {
    cm_stream *s = NULL;
    CHECK(cm_device_get_stream(d, &s));
    uint64_t n = 0;
    CHECK(cm_stream_get_submissions(s, &n));
    return n;
}

static cm_tensor *vec(cm_device *d, cm_dtype dt, int64_t n) {
    cm_tensor *t = NULL;
    CHECK(cm_tensor_create(d, &(cm_tensor_desc){.dtype = dt, .ndim = 1, .shape = &n}, &t));
    return t;
}

static cm_tensor *iota_f32(cm_device *d, int64_t n) {
    cm_tensor *t = vec(d, CM_FLOAT32, n);
    float *p = NULL;
    CHECK(cm_tensor_host_write(t, CM_FLOAT32, (void **)&p));
    for (int64_t i = 0; i < n; ++i)
        p[i] = (float)i;
    return t;
}

static cm_kernel *kernel_of(cm_device *d, const char *source, const char *name) {
    cm_library *lib = NULL;
    CHECK(cm_library_create(d, &(cm_library_desc){.source = source}, &lib));
    cm_kernel *k = NULL;
    CHECK(cm_kernel_create(lib, &(cm_kernel_desc){.name = name}, &k));
    cm_library_release(lib); /* the kernel keeps it */
    return k;
}

/* Per threadgroup: the sum of its elements, through simd_sum, a
 * [[threadgroup(0)]] buffer of per-simdgroup partials, a threadgroup
 * variable declared in the body, and barriers. */
static const char group_sum_source[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "kernel void group_sum(const device float *x [[buffer(0)]],\n"
    "                      device float *out [[buffer(1)]],\n"
    "                      constant uint &n [[buffer(2)]],\n"
    "                      threadgroup float *partial [[threadgroup(0)]],\n"
    "                      uint gid [[thread_position_in_grid]],\n"
    "                      uint lid [[thread_index_in_threadgroup]],\n"
    "                      uint group [[threadgroup_position_in_grid]],\n"
    "                      uint lane [[thread_index_in_simdgroup]],\n"
    "                      uint sg [[simdgroup_index_in_threadgroup]],\n"
    "                      uint nsg [[simdgroups_per_threadgroup]]) {\n"
    "    threadgroup float total;\n"
    "    float v = gid < n ? x[gid] : 0.0f;\n"
    "    float s = simd_sum(v);\n"
    "    if (lane == 0) partial[sg] = s;\n"
    "    threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "    if (lid == 0) {\n"
    "        float t = 0.0f;\n"
    "        for (uint i = 0; i < nsg; ++i) t += partial[i];\n"
    "        total = t;\n"
    "    }\n"
    "    threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "    if (lid == 0) out[group] = total;\n"
    "}\n";

Test(kernel, threadgroup_memory_barriers_and_simd_functions) {
    cm_device *d = metal();
    if (!has_simd_reductions(d)) /* simd_sum: Apple7+ or Mac2 (the paravirtual GPU has neither) */
        cr_skip_test("the device has no SIMD-group reductions (not Apple7+ or Mac2)");
    cm_kernel *k = kernel_of(d, group_sum_source, "group_sum");
    cm_kernel_info info;
    CHECK(cm_kernel_get_info(k, &info));
    /* Apple GPUs run 32 lanes, AMD's 32 or 64, Intel's 8 to 32: a power of
     * two the threadgroup of 64 holds whole (partial has room for 8). */
    const uint32_t w = info.thread_execution_width;
    cr_assert(w >= 8 && w <= 64 && (w & (w - 1)) == 0, "thread_execution_width = %u", w);
    cr_assert_geq(info.max_threads_per_threadgroup, 64);

    const uint32_t n = 1000, groups = (n + 63) / 64;
    cm_tensor *x = iota_f32(d, n), *out = vec(d, CM_FLOAT32, groups);
    const cm_kernel_arg args[] = {
        {.type = CM_ARG_INPUT, .index = 0, .tensor = x},
        {.type = CM_ARG_OUTPUT, .index = 1, .tensor = out},
        {.type = CM_ARG_BYTES, .index = 2, .data = &n, .size = sizeof n},
        {.type = CM_ARG_THREADGROUP,
         .index = 0,
         .size = 2 * sizeof(float) * 4 /* 2 simdgroups, rounded */},
    };
    CHECK(cm_kernel_dispatch(k, NULL,
                             &(cm_dispatch_desc){.args = args,
                                                 .arg_count = 4,
                                                 .grid_unit = CM_GRID_THREADGROUPS,
                                                 .grid = {groups},
                                                 .threadgroup = {64}}));
    const float *p = NULL;
    CHECK(cm_tensor_host_read(out, CM_FLOAT32, (const void **)&p)); /* waits for the kernel */
    for (uint32_t g = 0; g < groups; ++g) {
        double want = 0;
        for (uint32_t i = g * 64; i < n && i < g * 64 + 64; ++i)
            want += i;
        cr_assert_eq(p[g], (float)want, "group %u: %g, want %g", g, p[g], want);
    }
    cm_tensor_release(x);
    cm_tensor_release(out);
    cm_kernel_release(k);
    cm_device_release(d);
}

Test(kernel, dispatch_threads_covers_a_partial_last_group_and_binds_the_view_offset) {
    cm_device *d = metal();
    cm_kernel *k = kernel_of(d,
                             "kernel void twice(device const float *x [[buffer(0)]],\n"
                             "                  device float *y [[buffer(1)]],\n"
                             "                  uint i [[thread_position_in_grid]]) {\n"
                             "    y[i] = 2.0f * x[i];\n"
                             "}\n",
                             "twice");
    cm_tensor *x = iota_f32(d, 100), *y = vec(d, CM_FLOAT32, 100);
    cm_tensor *xs = NULL, *ys = NULL; /* x[10:], y[5:]: element 0 at an offset */
    CHECK(cm_tensor_slice(x, 0, 10, CM_SLICE_DEFAULT, 1, &xs));
    CHECK(cm_tensor_slice(y, 0, 5, CM_SLICE_DEFAULT, 1, &ys));
    const double minus = -1;
    CHECK(cm_fill(y, CM_FLOAT64, &minus, NULL));
    const cm_kernel_arg args[] = {{.type = CM_ARG_INPUT, .index = 0, .tensor = xs},
                                  {.type = CM_ARG_OUTPUT, .index = 1, .tensor = ys}};
    CHECK(cm_kernel_dispatch(
        k, NULL,
        &(cm_dispatch_desc){.args = args, .arg_count = 2, .grid = {90}, .threadgroup = {32}}));
    const float *p = NULL;
    CHECK(cm_tensor_host_read(y, CM_FLOAT32, (const void **)&p));
    for (int i = 0; i < 100; ++i) {
        const float want = i < 5 || i >= 95 ? -1.0f : 2.0f * (float)(i - 5 + 10);
        cr_assert_eq(p[i], want, "y[%d] = %g, want %g", i, p[i], want);
    }
    cm_tensor_release(xs);
    cm_tensor_release(ys);
    cm_tensor_release(x);
    cm_tensor_release(y);
    cm_kernel_release(k);
    cm_device_release(d);
}

/* The argument helpers fill the fields a hand-written cm_kernel_arg would. */
Test(kernel, argument_helpers_fill_the_fields_and_count) {
    cm_tensor *t = (cm_tensor *)(uintptr_t)0x1000; /* never dereferenced */
    const double v = 2;
    const cm_kernel_arg args[] = {CM_ARG_IN(0, t), CM_ARG_OUT(3, t), CM_ARG_BYTES_OF(2, v),
                                  CM_ARG_TG(1, 64)};
    cr_assert_eq(CM_ARG_COUNT(CM_ARG_IN(0, t), CM_ARG_OUT(3, t), CM_ARG_BYTES_OF(2, v)), 3u);
    cr_assert(args[0].type == CM_ARG_INPUT && args[0].index == 0 && args[0].tensor == t);
    cr_assert(args[1].type == CM_ARG_OUTPUT && args[1].index == 3 && args[1].tensor == t);
    cr_assert(args[2].type == CM_ARG_BYTES && args[2].index == 2 && args[2].data == &v &&
              args[2].size == sizeof v);
    cr_assert(args[3].type == CM_ARG_THREADGROUP && args[3].index == 1 && args[3].size == 64 &&
              args[3].tensor == NULL);
    const cm_dispatch_desc d = {CM_ARGS(CM_ARG_IN(0, t), CM_ARG_TG(0, 16)), .grid = {1}};
    cr_assert_eq(d.arg_count, 2u);
    cr_assert(d.args[1].type == CM_ARG_THREADGROUP && d.grid[0] == 1);
}

/* float64 on Metal is storage only (cmetal/dtype.h): created, written and
 * read by the host; no kernel takes it. */
Test(kernel, float64_tensors_are_storage_only_and_no_kernel_takes_them) {
    cm_device *d = metal();
    cm_tensor *f64 = vec(d, CM_FLOAT64, 4), *y = vec(d, CM_FLOAT32, 4);
    double *p = NULL;
    CHECK(cm_tensor_host_write(f64, CM_FLOAT64, (void **)&p));
    for (int i = 0; i < 4; ++i)
        p[i] = 0.1 * i;
    double back = 0;
    CHECK(cm_tensor_get_element(f64, (int64_t[]){3}, CM_FLOAT64, &back));
    cr_assert_eq(back, 0.1 * 3, "the host reads float64 storage back unchanged");
    cm_kernel *k =
        kernel_of(d,
                  "kernel void cp(device const float *x [[buffer(0)]],\n"
                  "               device float *y [[buffer(1)]],\n"
                  "               uint i [[thread_position_in_grid]]) { y[i] = x[i]; }\n",
                  "cp");
    EXPECT_FAIL(cm_kernel_dispatch(
                    k, NULL,
                    &(cm_dispatch_desc){
                        .args = (cm_kernel_arg[]){{.type = CM_ARG_INPUT, .index = 0, .tensor = f64},
                                                  {.type = CM_ARG_OUTPUT, .index = 1, .tensor = y}},
                        .arg_count = 2,
                        .grid = {4}}),
                CM_ERR_UNSUPPORTED,
                "args[0].tensor has dtype float64, which Metal kernels do not have");
    cm_kernel_release(k);
    cm_tensor_release(f64);
    cm_tensor_release(y);
    cm_device_release(d);
}

/* threadgroup[0] = 0: the most threads the kernel allows, rounded down to
 * a multiple of its execution width, then no more than a threads grid's
 * width: a 1000-wide grid runs as one threadgroup of 1000. */
Test(kernel, the_default_threadgroup_is_the_widest_allowed_and_at_most_the_grid) {
    cm_device *d = metal();
    cm_kernel *k = kernel_of(d,
                             "kernel void tg(device uint *o [[buffer(0)]],\n"
                             "               uint3 n [[threads_per_threadgroup]]) {\n"
                             "    o[0] = n.x;\n"
                             "}\n",
                             "tg");
    cm_kernel_info info;
    CHECK(cm_kernel_get_info(k, &info));
    const uint32_t w = info.thread_execution_width, max = info.max_threads_per_threadgroup;
    const uint32_t widest = max > w ? max - max % w : max;
    cm_tensor *o = vec(d, CM_UINT32, 1);
    const struct {
        uint64_t grid;
        uint32_t y;
        cm_grid_unit unit;
        uint32_t want;
    } cases[] = {{1000, 1, CM_GRID_THREADS, 1000 < widest ? 1000 : widest},
                 {5 * (uint64_t)max, 1, CM_GRID_THREADS, widest},
                 {7, 1, CM_GRID_THREADS, 7},
                 {3, 1, CM_GRID_THREADGROUPS, widest},
                 /* a multiple of the expected width: partial groups report their own size */
                 {10 * (uint64_t)((max / 3) > w ? (max / 3) - (max / 3) % w : max / 3), 3,
                  CM_GRID_THREADS, (max / 3) > w ? (max / 3) - (max / 3) % w : max / 3}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        CHECK(cm_kernel_dispatch(
            k, NULL,
            &(cm_dispatch_desc){
                .args = &(cm_kernel_arg){.type = CM_ARG_OUTPUT, .index = 0, .tensor = o},
                .arg_count = 1,
                .grid_unit = cases[i].unit,
                .grid = {cases[i].grid, cases[i].y},
                .threadgroup = {0, cases[i].y}}));
        uint32_t got = 0;
        CHECK(cm_tensor_get_element(o, (int64_t[]){0}, CM_UINT32, &got));
        cr_assert_eq(got, cases[i].want, "case %zu: threadgroup width %u, want %u", i, got,
                     cases[i].want);
    }
    cm_tensor_release(o);
    cm_kernel_release(k);
    cm_device_release(d);
}

Test(kernel, macros_are_defined_and_errors_name_lines_of_the_users_source) {
    cm_device *d = metal();
    const cm_macro macros[] = {{"SCALE", "3.0f"}, {"USE_OFFSET", NULL}};
    cm_library *lib = NULL;
    CHECK(cm_library_create(
        d,
        &(cm_library_desc){.source = "kernel void scale(device float *y [[buffer(0)]], uint i "
                                     "[[thread_position_in_grid]]) {\n"
                                     "#ifdef USE_OFFSET\n"
                                     "    y[i] = y[i] * SCALE + USE_OFFSET;\n"
                                     "#endif\n"
                                     "}\n",
                           .macros = macros,
                           .macro_count = 2},
        &lib));
    cm_kernel *k = NULL;
    CHECK(cm_kernel_create(lib, &(cm_kernel_desc){.name = "scale"}, &k));
    cm_tensor *y = iota_f32(d, 8);
    CHECK(cm_kernel_dispatch(
        k, NULL,
        &(cm_dispatch_desc){.args = &(cm_kernel_arg){.type = CM_ARG_OUTPUT, .tensor = y},
                            .arg_count = 1,
                            .grid = {8}}));
    const float *p = NULL;
    CHECK(cm_tensor_host_read(y, CM_FLOAT32, (const void **)&p));
    for (int i = 0; i < 8; ++i)
        cr_assert_eq(p[i], 3.0f * (float)i + 1.0f);

    /* An error on line 3 of the source is reported on line 3, macros or not. */
    cm_library *bad = NULL;
    EXPECT_FAIL(cm_library_create(
                    d,
                    &(cm_library_desc){.source = "kernel void f(device float *y [[buffer(0)]]) {\n"
                                                 "    y[0] = 1.0f;\n"
                                                 "    y[1] = undefined_name;\n"
                                                 "}\n",
                                       .macros = macros,
                                       .macro_count = 2},
                    &bad),
                CM_ERR_COMPILE, "program_source:3:");
    cr_assert_null(bad);
    cr_assert(strstr(cm_last_error(), "undefined_name") != NULL, "%s", cm_last_error());
    EXPECT_FAIL(cm_library_create(d,
                                  &(cm_library_desc){.source = "kernel void f() {}",
                                                     .macros = &(cm_macro){"2BAD", "1"},
                                                     .macro_count = 1},
                                  &bad),
                CM_ERR_INVALID_ARGUMENT, "desc->macros[0].name = \"2BAD\" is not an identifier");
    EXPECT_FAIL(cm_library_create(d,
                                  &(cm_library_desc){.source = "kernel void f() {}",
                                                     .macros = &(cm_macro){"A", "1\n#define B"},
                                                     .macro_count = 1},
                                  &bad),
                CM_ERR_INVALID_ARGUMENT, "desc->macros[0].value of A has a line break");
    cm_tensor_release(y);
    cm_kernel_release(k);
    cm_library_release(lib);
    cm_device_release(d);
}

/* isnan() survives only under safe math: fast math may fold it away. */
static const char nan_source[] =
    "#include <metal_stdlib>\nusing namespace metal;\n"
    "kernel void is_nan(device const float *x [[buffer(0)]], device int *y [[buffer(1)]],\n"
    "                   uint i [[thread_position_in_grid]]) { y[i] = isnan(x[i]) ? 1 : 0; }\n";

Test(kernel, libraries_use_safe_math_by_default_and_are_cached) {
    cm_device *d = metal();
    struct softmetal_stats before, after;
    sm_stats(&before);
    cm_library *a = NULL, *b = NULL, *fast = NULL;
    CHECK(cm_library_create(d, &(cm_library_desc){.source = nan_source}, &a));
    CHECK(cm_library_create(
        d, &(cm_library_desc){.source = nan_source, .math_mode = CM_MATH_MODE_SAFE}, &b));
    sm_stats(&after);
    cr_assert_eq(after.unsafe_math_libraries, before.unsafe_math_libraries, "safe math");
    cr_assert_eq(after.allocs - before.allocs, after.allocs - before.allocs);
    CHECK(cm_library_create(
        d, &(cm_library_desc){.source = nan_source, .math_mode = CM_MATH_MODE_FAST}, &fast));
    struct softmetal_stats later;
    sm_stats(&later);
    cr_assert_eq(later.unsafe_math_libraries, after.unsafe_math_libraries + 1,
                 "fast math is a new library, made with fast math");
    /* The same source and options again: the same MTLLibrary, no new one. */
    const long libraries = sm_live("SMLibrary");
    cm_library *c = NULL;
    CHECK(cm_library_create(d, &(cm_library_desc){.source = nan_source}, &c));
    cr_assert_eq(sm_live("SMLibrary"), libraries, "the cached library is reused");
    cm_kernel *k1 = NULL, *k2 = NULL;
    CHECK(cm_kernel_create(a, &(cm_kernel_desc){.name = "is_nan"}, &k1));
    const long pipelines = sm_live("SMComputePipelineState");
    CHECK(cm_kernel_create(c, &(cm_kernel_desc){.name = "is_nan"}, &k2));
    cr_assert_eq(sm_live("SMComputePipelineState"), pipelines, "the cached pipeline is reused");

    cm_tensor *x = vec(d, CM_FLOAT32, 2), *y = vec(d, CM_INT32, 2);
    float *px = NULL;
    CHECK(cm_tensor_host_write(x, CM_FLOAT32, (void **)&px));
    px[0] = NAN;
    px[1] = 1.0f;
    const cm_kernel_arg args[] = {{.type = CM_ARG_INPUT, .index = 0, .tensor = x},
                                  {.type = CM_ARG_OUTPUT, .index = 1, .tensor = y}};
    CHECK(cm_kernel_dispatch(k2, NULL,
                             &(cm_dispatch_desc){.args = args, .arg_count = 2, .grid = {2}}));
    const int32_t *py = NULL;
    CHECK(cm_tensor_host_read(y, CM_INT32, (const void **)&py));
    cr_assert_eq(py[0], 1, "NaN is seen under safe math");
    cr_assert_eq(py[1], 0);
    cm_tensor_release(x);
    cm_tensor_release(y);
    cm_kernel_release(k1);
    cm_kernel_release(k2);
    cm_library_release(a);
    cm_library_release(b);
    cm_library_release(c);
    cm_library_release(fast);
    cm_device_release(d);
}

/* Safe math is precise math: on macOS 15 mathMode Safe alone leaves
 * mathFloatingPointFunctions at Fast (softmetal does as Metal), so cmetal
 * asks for Precise too; unqualified exp and log then give libm's results.
 * Fast math keeps the fast functions. */
Test(kernel, safe_math_gets_the_precise_math_functions) {
    cm_device *d = metal();
    static const char source[] =
        "#include <metal_stdlib>\nusing namespace metal;\n"
        "kernel void el(device const float *x [[buffer(0)]], device float *y [[buffer(1)]],\n"
        "               uint i [[thread_position_in_grid]]) {\n"
        "  y[2 * i] = exp(x[i]);\n  y[2 * i + 1] = log(x[i]);\n}\n";
    const float in[4] = {80.5f, 60.25f, 30.125f, 85.0f};
    float got[2][8];
    for (int mode = 0; mode < 2; ++mode) {
        cm_library *lib = NULL;
        CHECK(cm_library_create(
            d,
            &(cm_library_desc){.source = source,
                               .math_mode = mode == 0 ? CM_MATH_MODE_DEFAULT : CM_MATH_MODE_FAST},
            &lib));
        cm_kernel *k = NULL;
        CHECK(cm_kernel_create(lib, &(cm_kernel_desc){.name = "el"}, &k));
        cm_tensor *x = vec(d, CM_FLOAT32, 4), *y = vec(d, CM_FLOAT32, 8);
        float *px = NULL;
        CHECK(cm_tensor_host_write(x, CM_FLOAT32, (void **)&px));
        memcpy(px, in, sizeof in);
        CHECK(cm_kernel_dispatch(
            k, NULL,
            &(cm_dispatch_desc){
                .args = (cm_kernel_arg[]){{.type = CM_ARG_INPUT, .index = 0, .tensor = x},
                                          {.type = CM_ARG_OUTPUT, .index = 1, .tensor = y}},
                .arg_count = 2,
                .grid = {4}}));
        const float *py = NULL;
        CHECK(cm_tensor_host_read(y, CM_FLOAT32, (const void **)&py));
        memcpy(got[mode], py, sizeof got[mode]);
        cm_tensor_release(x);
        cm_tensor_release(y);
        cm_kernel_release(k);
        cm_library_release(lib);
    }
    bool differ = false;
    /* softmetal's precise functions are the host's libm; a GPU's are within
     * a few ulp of it (MSL's precise accuracy). */
    const float ulps = sm_present() ? 0.0f : 4.0f;
    for (int i = 0; i < 4; ++i) {
        cr_assert_leq(fabsf(got[0][2 * i] - expf(in[i])), ulps * FLT_EPSILON * expf(in[i]),
                      "safe exp(%g) = %a, precise %a", in[i], got[0][2 * i], expf(in[i]));
        cr_assert_leq(fabsf(got[0][2 * i + 1] - logf(in[i])), ulps * FLT_EPSILON * logf(in[i]),
                      "safe log(%g)", in[i]);
        differ = differ || got[1][2 * i] != expf(in[i]);
    }
    if (sm_present()) /* softmetal: its fast exp differs visibly */
        cr_assert(differ, "fast math keeps the fast functions");
    cm_device_release(d);
}

/* ------------------------------------------------------------ errors */

static const char three_args_source[] =
    "kernel void k3(device const float *x [[buffer(0)]], // [[buffer(9)]] in a comment\n"
    "               device float *y [[buffer(1)]],\n"
    "               constant float &a [[buffer(2)]],\n"
    "               threadgroup float *t [[ threadgroup( 0 ) ]],\n"
    "               uint i [[thread_position_in_grid]]) { t[0] = 0; y[i] = a * x[i]; }\n";

Test(kernel, bad_arguments_fail_before_anything_is_encoded_naming_the_argument) {
    cm_device *d = metal();
    cm_device *cpu = NULL;
    CHECK(cm_device_open(CM_DEVICE_CPU, 0, &cpu));
    cm_kernel *k = kernel_of(d, three_args_source, "k3");
    cm_tensor *x = iota_f32(d, 64), *y = vec(d, CM_FLOAT32, 64);
    cm_tensor *on_cpu = NULL, *ro = NULL;
    CHECK(cm_tensor_create(
        cpu, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = (int64_t[]){64}}, &on_cpu));
    CHECK(cm_tensor_read_only(y, &ro));
    CHECK(cm_device_synchronize(d));
    const uint64_t before = submissions(d);
    const float a = 2;
    unsigned char big[CM_KERNEL_MAX_BYTES + 1] = {0};
    cm_kernel_arg args[4] = {
        {.type = CM_ARG_INPUT, .index = 0, .tensor = x},
        {.type = CM_ARG_OUTPUT, .index = 1, .tensor = y},
        {.type = CM_ARG_BYTES, .index = 2, .data = &a, .size = sizeof a},
        {.type = CM_ARG_THREADGROUP, .index = 0, .size = 16},
    };
    cm_dispatch_desc desc = {.args = args, .arg_count = 4, .grid = {64}};

    desc.arg_count = 3; /* no threadgroup(0) */
    EXPECT_FAIL(cm_kernel_dispatch(k, NULL, &desc), CM_ERR_INVALID_ARGUMENT,
                "kernel \"k3\" uses [[threadgroup(0)]]");
    cr_assert(strstr(cm_last_error(), "but no CM_ARG_THREADGROUP argument binds index 0") != NULL,
              "%s", cm_last_error());
    desc.arg_count = 4;
    args[2].type = CM_ARG_NONE; /* no buffer(2) */
    EXPECT_FAIL(cm_kernel_dispatch(k, NULL, &desc), CM_ERR_INVALID_ARGUMENT,
                "kernel \"k3\" uses [[buffer(2)]]");
    cr_assert(strstr(cm_last_error(), "but no argument binds index 2") != NULL, "%s",
              cm_last_error());
    args[2].type = CM_ARG_BYTES;
    args[1].tensor = on_cpu;
    EXPECT_FAIL(cm_kernel_dispatch(k, NULL, &desc), CM_ERR_INVALID_ARGUMENT,
                "args[1].tensor is on a cpu device, not the kernel's (metal) device");
    args[1].tensor = ro;
    EXPECT_FAIL(cm_kernel_dispatch(k, NULL, &desc), CM_ERR_READ_ONLY,
                "args[1].tensor is read-only and cannot be bound as CM_ARG_OUTPUT");
    args[1].tensor = y;
    args[2].data = big;
    args[2].size = sizeof big;
    EXPECT_FAIL(cm_kernel_dispatch(k, NULL, &desc), CM_ERR_INVALID_ARGUMENT,
                "args[2].size = 4097 bytes is over setBytes' limit of 4096");
    args[2].data = &a;
    args[2].size = sizeof a;
    args[2].index = 1;
    EXPECT_FAIL(cm_kernel_dispatch(k, NULL, &desc), CM_ERR_INVALID_ARGUMENT,
                "args[2].index = 1: buffer index is bound twice");
    args[2].index = 31;
    EXPECT_FAIL(cm_kernel_dispatch(k, NULL, &desc), CM_ERR_INVALID_ARGUMENT,
                "args[2].index = 31: buffer index must be < 31");
    args[2].index = 2;
    args[3].size = 20;
    EXPECT_FAIL(cm_kernel_dispatch(k, NULL, &desc), CM_ERR_INVALID_ARGUMENT,
                "args[3].size = 20: threadgroup memory is a nonzero multiple of 16 bytes");
    args[3].size = 32768 + 16;
    EXPECT_FAIL(cm_kernel_dispatch(k, NULL, &desc), CM_ERR_INVALID_ARGUMENT,
                "args[3].size = 32784: threadgroup memory is over the limit of 32768 bytes");
    args[3].size = (size_t)1 << 63; /* would wrap a running total */
    EXPECT_FAIL(cm_kernel_dispatch(k, NULL, &desc), CM_ERR_INVALID_ARGUMENT,
                "args[3].size = 9223372036854775808: threadgroup memory is over the limit");
    args[3].size = 16;
    /* One thread over the pipeline's own limit (1024 on Apple silicon; less
     * on other GPUs and for kernels that use many registers) is refused by
     * cmetal before anything is encoded, wherever it runs. */
    cm_kernel_info kinfo;
    CHECK(cm_kernel_get_info(k, &kinfo));
    const uint32_t over = kinfo.max_threads_per_threadgroup + 1;
    char want[160];
    desc.threadgroup[0] = over;
    snprintf(want, sizeof want,
             "desc->threadgroup = {%u, 1, 1} is %u threads, over the kernel's "
             "max_threads_per_threadgroup = %u",
             over, over, kinfo.max_threads_per_threadgroup);
    EXPECT_FAIL(cm_kernel_dispatch(k, NULL, &desc), CM_ERR_INVALID_ARGUMENT, want);
    desc.threadgroup[0] = 64;
    desc.threadgroup[1] = kinfo.max_threads_per_threadgroup / 64 + 1;
    snprintf(want, sizeof want, "is %u threads", 64 * desc.threadgroup[1]);
    EXPECT_FAIL(cm_kernel_dispatch(k, NULL, &desc), CM_ERR_INVALID_ARGUMENT, want);
    /* 2^22 * 2^21 * 2^21 is 2^64: a product that wrapped to 0 would pass. */
    desc.threadgroup[0] = 1u << 22;
    desc.threadgroup[1] = desc.threadgroup[2] = 1u << 21;
    EXPECT_FAIL(cm_kernel_dispatch(k, NULL, &desc), CM_ERR_INVALID_ARGUMENT,
                "desc->threadgroup = {4194304, 2097152, 2097152} is over 2^64 threads");
    desc.threadgroup[0] = 64;
    desc.threadgroup[2] = 0;
    desc.threadgroup[1] = 0;
    desc.grid[1] = 1ull << 32;
    EXPECT_FAIL(cm_kernel_dispatch(k, NULL, &desc), CM_ERR_INVALID_ARGUMENT,
                "desc->grid[1] = 4294967296 is over 2^32 - 1");
    desc.grid[1] = 0;
    cm_stream *cpu_stream = NULL;
    CHECK(cm_device_get_stream(cpu, &cpu_stream));
    EXPECT_FAIL(cm_kernel_dispatch(k, cpu_stream, &desc), CM_ERR_INVALID_ARGUMENT,
                "belongs to another device than the kernel");
    cr_assert_eq(submissions(d), before);
    CHECK(cm_device_synchronize(d));
    cr_assert_eq(submissions(d), before, "nothing was encoded by the failed calls");

    /* And the good call works. */
    CHECK(cm_kernel_dispatch(k, NULL, &desc));
    const float *p = NULL;
    CHECK(cm_tensor_host_read(y, CM_FLOAT32, (const void **)&p));
    cr_assert_eq(p[63], 126.0f);

    /* Kernels and libraries. */
    cm_library *lib = NULL;
    cm_kernel *none = NULL;
    CHECK(cm_library_create(d, &(cm_library_desc){.source = three_args_source}, &lib));
    EXPECT_FAIL(cm_kernel_create(lib, &(cm_kernel_desc){.name = "k4"}, &none),
                CM_ERR_INVALID_ARGUMENT,
                "desc->name = \"k4\": the library has no function of that name");
    cr_assert_null(none);
    EXPECT_FAIL(
        cm_kernel_create(
            lib,
            &(cm_kernel_desc){
                .name = "k3",
                .constant_count = 1,
                .constants = &(cm_function_constant){.index = 0, .dtype = CM_FLOAT64, .value = &a}},
            &none),
        CM_ERR_INVALID_ARGUMENT, "desc->constants[0].dtype = 13");
    cm_library_release(lib);
    EXPECT_FAIL(cm_library_create(d, &(cm_library_desc){.source = NULL}, &lib),
                CM_ERR_INVALID_ARGUMENT, "desc->source = NULL");
    EXPECT_FAIL(cm_library_create(d, &(cm_library_desc){.source = "", .math_mode = 9}, &lib),
                CM_ERR_INVALID_ARGUMENT, "math_mode = 9 is not a cm_math_mode");
    EXPECT_FAIL(
        cm_library_create(
            d, &(cm_library_desc){.source = "", .language_version = CM_MSL_VERSION(0, 5)}, &lib),
        CM_ERR_UNSUPPORTED, "language_version = 0.5 (0x5) is not an MTLLanguageVersion");
    cm_library *cpu_lib = NULL;
    EXPECT_FAIL(cm_library_create(cpu, &(cm_library_desc){.source = three_args_source}, &cpu_lib),
                CM_ERR_UNSUPPORTED, "the cpu device runs no custom kernels: open a Metal device");
    cm_body_kernel *cpu_body = NULL;
    EXPECT_FAIL(cm_body_kernel_create(cpu,
                                      &(cm_body_kernel_desc){.name = "f",
                                                             .body = "",
                                                             .output_names = (const char *[]){"y"},
                                                             .output_count = 1},
                                      &cpu_body),
                CM_ERR_UNSUPPORTED, "open a Metal device");
    cr_assert_null(cpu_body);

    cm_tensor_release(x);
    cm_tensor_release(y);
    cm_tensor_release(ro);
    cm_tensor_release(on_cpu);
    cm_kernel_release(k);
    cm_device_release(cpu);
    cm_device_release(d);
}

/* The language version reaches the compiler (__METAL_VERSION__), and one
 * that Metal does not have fails to compile, naming it. */
Test(kernel, the_language_version_reaches_the_compiler) {
    cm_device *d = metal();
    static const char source[] = "kernel void v(device int *o [[buffer(0)]]) {\n"
                                 "  o[0] = __METAL_VERSION__;\n"
                                 "}\n";
    const struct {
        uint32_t version;
        int want;
    } cases[] = {{CM_MSL_VERSION(1, 1), 110},
                 {CM_MSL_VERSION(2, 4), 240},
                 {CM_MSL_VERSION(3, 1), 310},
                 {CM_MSL_VERSION(3, 2), 320},
                 {CM_MSL_VERSION(4, 0), 400}};
    /* 4.0 needs macOS 26: on Apple's Metal only softmetal's cases up to 3.1 run */
    const size_t ncases = sm_present() ? sizeof cases / sizeof cases[0] : 3;
    cm_tensor *o = vec(d, CM_INT32, 1);
    for (size_t i = 0; i < ncases; ++i) {
        cm_library *lib = NULL;
        CHECK(cm_library_create(
            d, &(cm_library_desc){.source = source, .language_version = cases[i].version}, &lib));
        cm_kernel *k = NULL;
        CHECK(cm_kernel_create(lib, &(cm_kernel_desc){.name = "v"}, &k));
        CHECK(cm_kernel_dispatch(
            k, NULL,
            &(cm_dispatch_desc){
                .args = &(cm_kernel_arg){.type = CM_ARG_OUTPUT, .index = 0, .tensor = o},
                .arg_count = 1,
                .grid = {1}}));
        int32_t got = 0;
        CHECK(cm_tensor_get_element(o, (int64_t[]){0}, CM_INT32, &got));
        cr_assert_eq(got, cases[i].want, "version %#x: __METAL_VERSION__ = %d", cases[i].version,
                     got);
        cm_kernel_release(k);
        cm_library_release(lib);
    }
    /* Exactly Apple's MTLLanguageVersion values: 1.0 is not on macOS; the
     * others are refused before the compiler, named as major.minor. */
    const struct {
        uint32_t version;
        const char *text;
    } refused[] = {
        {CM_MSL_VERSION(3, 9), "language_version = 3.9 (0x30009) is not an MTLLanguageVersion"},
        {CM_MSL_VERSION(1, 0), "language_version = 1.0 (0x10000) is not an MTLLanguageVersion"},
        {CM_MSL_VERSION(2, 5), "language_version = 2.5 (0x20005)"},
        {CM_MSL_VERSION(99, 0), "language_version = 99.0 (0x630000)"},
        {CM_MSL_VERSION(4, 1), "language_version = 4.1"},
        {0x00030002u, "language_version = 3.2 (0x30002)"}};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; ++i) {
        cm_library *lib = NULL;
        const uint32_t v = i == 5 ? 0x00030002u + 0x1000000u : refused[i].version;
        EXPECT_FAIL(
            cm_library_create(d, &(cm_library_desc){.source = source, .language_version = v}, &lib),
            CM_ERR_UNSUPPORTED, i == 5 ? "language_version = 259.2" : refused[i].text);
        cr_assert_null(lib);
    }
    cm_tensor_release(o);
    cm_device_release(d);
}

/* ------------------------------------------------------------ body only */

Test(kernel, body_kernels_over_strided_and_offset_views) {
    cm_device *d = metal();
    /* a: 4x6 iota; x = a[1:, ::2].T, a 3x3 view with strides {2, 6} at offset 6. */
    cm_tensor *a = NULL, *rows = NULL, *cols = NULL, *xt = NULL;
    CHECK(cm_tensor_create(
        d, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 2, .shape = (int64_t[]){4, 6}}, &a));
    float *pa = NULL;
    CHECK(cm_tensor_host_write(a, CM_FLOAT32, (void **)&pa));
    for (int i = 0; i < 24; ++i)
        pa[i] = (float)i;
    CHECK(cm_tensor_slice(a, 0, 1, CM_SLICE_DEFAULT, 1, &rows));
    CHECK(cm_tensor_slice(rows, 1, CM_SLICE_DEFAULT, CM_SLICE_DEFAULT, 2, &cols));
    CHECK(cm_tensor_transpose(cols, 0, 1, &xt));
    cm_tensor *out = NULL;
    CHECK(cm_tensor_create(
        d, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 2, .shape = (int64_t[]){3, 3}}, &out));

    cm_body_kernel *k = NULL;
    CHECK(cm_body_kernel_create(
        d,
        &(cm_body_kernel_desc){.name = "strided_scale",
                               .input_names = (const char *[]){"x"},
                               .input_count = 1,
                               .output_names = (const char *[]){"y"},
                               .output_count = 1,
                               .body = "uint i = thread_position_in_grid.x;\n"
                                       "if (i >= uint(x_shape[0] * x_shape[1])) return;\n"
                                       "long r = i / x_shape[1], c = i % x_shape[1];\n"
                                       "y[i] += T(x[r * x_strides[0] + c * x_strides[1]]) * K;\n"},
        &k));
    const float k3 = 3;
    const cm_template_arg targs[] = {{.name = "T", .dtype = CM_FLOAT32},
                                     {.name = "K", .dtype = CM_FLOAT32, .value = &k3}};
    const double init = 0.5;
    cm_body_dispatch_desc bd = {.inputs = (const cm_tensor *[]){xt},
                                .outputs = (cm_tensor *[]){out},
                                .template_args = targs,
                                .template_arg_count = 2,
                                .init_value = &init,
                                .grid = {9}};
    CHECK(cm_body_kernel_dispatch(k, NULL, &bd));
    const float *p = NULL;
    CHECK(cm_tensor_host_read(out, CM_FLOAT32, (const void **)&p));
    for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 3; ++c) {
            const float want = 0.5f + 3.0f * pa[(1 + c) * 6 + 2 * r];
            cr_assert_eq(p[r * 3 + c], want, "y[%d][%d] = %g, want %g", r, c, p[r * 3 + c], want);
        }

    /* The generated signature: typed pointers, only the layouts used. */
    char src[4096];
    size_t len = 0;
    CHECK(cm_body_kernel_get_source(k, &bd, src, sizeof src, &len));
    cr_assert_lt(len, sizeof src);
    cr_assert(strstr(src, "const device float *x [[buffer(0)]]") != NULL, "%s", src);
    cr_assert(strstr(src, "device float *y [[buffer(1)]]") != NULL, "%s", src);
    cr_assert(strstr(src, "constant long *x_shape [[buffer(2)]]") != NULL, "%s", src);
    cr_assert(strstr(src, "constant long *x_strides [[buffer(3)]]") != NULL, "%s", src);
    cr_assert(strstr(src, "y_shape") == NULL && strstr(src, "x_ndim") == NULL, "%s", src);
    cr_assert(strstr(src, "typedef float T;") != NULL, "%s", src);
    cr_assert(strstr(src, "uint3 thread_position_in_grid [[thread_position_in_grid]]") != NULL);

    /* Another dtype is another kernel from the same body. */
    cm_tensor *h = NULL, *ho = NULL;
    CHECK(cm_tensor_create(
        d, &(cm_tensor_desc){.dtype = CM_FLOAT16, .ndim = 2, .shape = (int64_t[]){3, 3}}, &h));
    CHECK(cm_tensor_create(
        d, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 2, .shape = (int64_t[]){3, 3}}, &ho));
    const double two = 2;
    CHECK(cm_fill(h, CM_FLOAT64, &two, NULL));
    bd.inputs = (const cm_tensor *[]){h};
    bd.outputs = (cm_tensor *[]){ho};
    CHECK(cm_body_kernel_dispatch(k, NULL, &bd));
    CHECK(cm_tensor_host_read(ho, CM_FLOAT32, (const void **)&p));
    cr_assert_eq(p[8], 6.5f);
    /* A bad threadgroup fails before the initial fill is encoded. */
    const double nine = 9;
    bd.init_value = &nine;
    cm_device_info dinfo; /* the device's limit is at least any pipeline's */
    CHECK(cm_device_get_info(d, &dinfo));
    bd.threadgroup[0] = (uint32_t)dinfo.max_threads_per_threadgroup[0] + 1;
    char want_tg[96];
    snprintf(want_tg, sizeof want_tg, "cm_body_kernel_dispatch: desc->threadgroup = {%u, 1, 1}",
             bd.threadgroup[0]);
    EXPECT_FAIL(cm_body_kernel_dispatch(k, NULL, &bd), CM_ERR_INVALID_ARGUMENT, want_tg);
    CHECK(cm_tensor_host_read(ho, CM_FLOAT32, (const void **)&p));
    cr_assert_eq(p[8], 6.5f, "outputs are untouched: %g", p[8]);
    bd.threadgroup[0] = 0;
    bd.init_value = &init;

    /* Errors name the tensor. */
    cm_tensor *ro = NULL;
    CHECK(cm_tensor_read_only(ho, &ro));
    bd.outputs = (cm_tensor *[]){ro};
    EXPECT_FAIL(cm_body_kernel_dispatch(k, NULL, &bd), CM_ERR_READ_ONLY,
                "desc->outputs[0] (y) is read-only");
    bd.outputs = (cm_tensor *[]){NULL};
    EXPECT_FAIL(cm_body_kernel_dispatch(k, NULL, &bd), CM_ERR_INVALID_ARGUMENT,
                "desc->outputs[0] = NULL (y)");
    cm_body_kernel *bad = NULL;
    EXPECT_FAIL(cm_body_kernel_create(d,
                                      &(cm_body_kernel_desc){.name = "f",
                                                             .body = "",
                                                             .input_names = (const char *[]){"x"},
                                                             .input_count = 1,
                                                             .output_names = (const char *[]){"x"},
                                                             .output_count = 1},
                                      &bad),
                CM_ERR_INVALID_ARGUMENT, "the name \"x\" is used twice");
    /* A body that does not compile: diagnostics count lines of the body. */
    CHECK(cm_body_kernel_create(d,
                                &(cm_body_kernel_desc){.name = "broken",
                                                       .output_names = (const char *[]){"y"},
                                                       .output_count = 1,
                                                       .body = "y[0] = 1;\ny[1] = nope;\n"},
                                &bad));
    EXPECT_FAIL(
        cm_body_kernel_dispatch(
            bad, NULL, &(cm_body_dispatch_desc){.outputs = (cm_tensor *[]){out}, .grid = {1}}),
        CM_ERR_COMPILE, "program_source:2:");
    cr_assert(strstr(cm_last_error(), "cm_body_kernel_dispatch:") == cm_last_error(), "%s",
              cm_last_error());
    cm_body_kernel_release(bad);

    cm_tensor_release(ro);
    cm_tensor_release(h);
    cm_tensor_release(ho);
    cm_body_kernel_release(k);
    cm_tensor_release(out);
    cm_tensor_release(xt);
    cm_tensor_release(cols);
    cm_tensor_release(rows);
    cm_tensor_release(a);
    cm_device_release(d);
}

/* ------------------------------------------------------------ DLPack, streams */

/* atomic_outputs: a histogram without casts, as MLX's atomic_outputs. */
Test(kernel, body_kernels_with_atomic_outputs_build_a_histogram) {
    cm_device *d = metal();
    cm_body_kernel *k = NULL;
    CHECK(cm_body_kernel_create(
        d,
        &(cm_body_kernel_desc){
            .name = "hist",
            .input_names = (const char *[]){"x"},
            .input_count = 1,
            .output_names = (const char *[]){"h"},
            .output_count = 1,
            .atomic_outputs = true,
            .body = "atomic_fetch_add_explicit(&h[x[thread_position_in_grid.x] % 8], 1u,\n"
                    "                          memory_order_relaxed);\n"},
        &k));
    enum { N = 1000 };
    cm_tensor *x = vec(d, CM_UINT32, N), *h = vec(d, CM_UINT32, 8), *f16 = vec(d, CM_FLOAT16, 8);
    uint32_t *px = NULL;
    CHECK(cm_tensor_host_write(x, CM_UINT32, (void **)&px));
    uint32_t want[8] = {0};
    for (uint32_t i = 0; i < N; ++i) {
        px[i] = i * 7u + i / 3u;
        want[px[i] % 8]++;
    }
    const double zero = 0;
    cm_body_dispatch_desc desc = {.inputs = (const cm_tensor *[]){x},
                                  .outputs = (cm_tensor *[]){h},
                                  .init_value = &zero,
                                  .grid = {N}};
    char source[2048];
    size_t len = 0;
    CHECK(cm_body_kernel_get_source(k, &desc, source, sizeof source, &len));
    cr_assert(strstr(source, "device atomic_uint *h [[buffer(1)]]") != NULL, "%s", source);
    CHECK(cm_body_kernel_dispatch(k, NULL, &desc));
    const uint32_t *ph = NULL;
    CHECK(cm_tensor_host_read(h, CM_UINT32, (const void **)&ph));
    for (int b = 0; b < 8; ++b)
        cr_assert_eq(ph[b], want[b], "h[%d] = %u, want %u", b, ph[b], want[b]);
    desc.outputs = (cm_tensor *[]){f16};
    EXPECT_FAIL(cm_body_kernel_dispatch(k, NULL, &desc), CM_ERR_UNSUPPORTED,
                "desc->outputs[0] (h) has dtype float16: atomic outputs are int32, uint32 or "
                "float32");
    cm_tensor_release(x);
    cm_tensor_release(h);
    cm_tensor_release(f16);
    cm_body_kernel_release(k);
    cm_device_release(d);
}

Test(kernel, dlpack_imported_tensors_are_arguments_and_keep_read_only) {
    cm_device *d = metal();
    cm_kernel *k =
        kernel_of(d,
                  "kernel void inc(device float *y [[buffer(0)]],\n"
                  "                uint i [[thread_position_in_grid]]) { y[i] += 1.0f; }\n",
                  "inc");
    cm_tensor *t = iota_f32(d, 16);
    cm_dlpack_managed m;
    CHECK(cm_dlpack_export(t, &(cm_dlpack_export_desc){.max_version = {1, 3}}, &m));
    cr_assert_eq(m.versioned->dl_tensor.device.device_type, kDLMetal);
    cm_tensor *imported = NULL;
    /* wraps the MTLBuffer, on our device */
    CHECK(
        cm_dlpack_import_versioned(m.versioned, &(cm_dlpack_import_desc){.device = d}, &imported));
    cm_tensor *tail = NULL; /* imported[4:] */
    CHECK(cm_tensor_slice(imported, 0, 4, CM_SLICE_DEFAULT, 1, &tail));
    CHECK(cm_kernel_dispatch(
        k, NULL,
        &(cm_dispatch_desc){.args = &(cm_kernel_arg){.type = CM_ARG_OUTPUT, .tensor = tail},
                            .arg_count = 1,
                            .grid = {12}}));
    const float *p = NULL;
    /* Host access through the import waits for the kernel (the wrap is its
     * own cm_buffer: reads through `t` would need a device synchronize). */
    CHECK(cm_tensor_host_read(imported, CM_FLOAT32, (const void **)&p));
    for (int i = 0; i < 16; ++i)
        cr_assert_eq(p[i], (float)i + (i >= 4 ? 1.0f : 0.0f), "t[%d] = %g", i, p[i]);

    /* A read-only import (the producer's flag) cannot be an output. */
    cm_dlpack_managed ro;
    CHECK(cm_dlpack_export(t, &(cm_dlpack_export_desc){.max_version = {1, 3}, .read_only = true},
                           &ro));
    cm_tensor *rot = NULL;
    CHECK(cm_dlpack_import_versioned(ro.versioned, &(cm_dlpack_import_desc){.device = d}, &rot));
    EXPECT_FAIL(
        cm_kernel_dispatch(
            k, NULL,
            &(cm_dispatch_desc){.args = &(cm_kernel_arg){.type = CM_ARG_OUTPUT, .tensor = rot},
                                .arg_count = 1,
                                .grid = {16}}),
        CM_ERR_READ_ONLY, "args[0].tensor is read-only");
    cm_tensor_release(rot);
    cm_tensor_release(tail);
    cm_tensor_release(imported);
    cm_tensor_release(t);
    cm_kernel_release(k);
    cm_device_release(d);
}

/* A slow producer (many passes) on one stream, a consumer on another,
 * ordered by a fence. */
static const char slow_fill_source[] =
    "#include <metal_stdlib>\nusing namespace metal;\n"
    "kernel void slow_fill(device float *y [[buffer(0)]], constant float &v [[buffer(1)]],\n"
    "                      uint i [[thread_position_in_grid]]) {\n"
    "    float acc = 0.0f;\n"
    "    for (int r = 0; r < 2000; ++r) acc += v / 2000.0f;\n"
    "    y[i] = round(acc);\n"
    "}\n"
    "kernel void copy_plus(device const float *x [[buffer(0)]], device float *y [[buffer(1)]],\n"
    "                      uint i [[thread_position_in_grid]]) { y[i] = x[i] + 1.0f; }\n";

Test(kernel, two_streams_are_ordered_by_a_fence) {
    cm_device *d = metal();
    cm_library *lib = NULL;
    CHECK(cm_library_create(d, &(cm_library_desc){.source = slow_fill_source}, &lib));
    cm_kernel *fill = NULL, *copy = NULL;
    CHECK(cm_kernel_create(lib, &(cm_kernel_desc){.name = "slow_fill"}, &fill));
    CHECK(cm_kernel_create(lib, &(cm_kernel_desc){.name = "copy_plus"}, &copy));
    cm_stream *s1 = NULL, *s2 = NULL;
    CHECK(cm_stream_create(d, &s1));
    CHECK(cm_stream_create(d, &s2));
    const int64_t n = 4096;
    cm_tensor *x = vec(d, CM_FLOAT32, n), *y = vec(d, CM_FLOAT32, n);
    const float v = 7;
    for (int round = 0; round < 3; ++round) {
        CHECK(cm_kernel_dispatch(
            fill, s1,
            &(cm_dispatch_desc){
                .args =
                    (cm_kernel_arg[]){{.type = CM_ARG_OUTPUT, .index = 0, .tensor = x},
                                      {.type = CM_ARG_BYTES, .index = 1, .data = &v, .size = 4}},
                .arg_count = 2,
                .grid = {(uint64_t)n}}));
        cm_fence *f = NULL;
        CHECK(cm_stream_signal(s1, &f));
        CHECK(cm_stream_wait(s2, f));
        CHECK(cm_kernel_dispatch(
            copy, s2,
            &(cm_dispatch_desc){
                .args = (cm_kernel_arg[]){{.type = CM_ARG_INPUT, .index = 0, .tensor = x},
                                          {.type = CM_ARG_OUTPUT, .index = 1, .tensor = y}},
                .arg_count = 2,
                .grid = {(uint64_t)n}}));
        const float *p = NULL;
        CHECK(cm_tensor_host_read(y, CM_FLOAT32, (const void **)&p)); /* waits for s2's write */
        for (int64_t i = 0; i < n; ++i)
            cr_assert_eq(p[i], 8.0f, "round %d: y[%ld] = %g", round, (long)i, p[i]);
        CHECK(cm_fence_release(f));
        const double zero = 0;
        CHECK(cm_fill(x, CM_FLOAT64, &zero, s1));
        CHECK(cm_fill(y, CM_FLOAT64, &zero, s2));
        CHECK(cm_device_synchronize(d));
    }
    cm_tensor_release(x);
    cm_tensor_release(y);
    cm_stream_release(s1);
    cm_stream_release(s2);
    cm_kernel_release(fill);
    cm_kernel_release(copy);
    cm_library_release(lib);
    cm_device_release(d);
}

/* ------------------------------------------------------------ threads */

typedef struct worker {
    cm_device *device;
    int id;
    int failures;
} worker;

static void *create_and_dispatch(void *arg) {
    worker *w = arg;
    for (int r = 0; r < 8; ++r) {
        cm_library *lib = NULL;
        cm_kernel *k = NULL;
        cm_stream *s = NULL;
        cm_tensor *y = NULL;
        const int64_t n = 256;
        const float v = (float)(w->id * 100 + r);
        if (cm_library_create(
                w->device,
                &(cm_library_desc){.source = "kernel void put(device float *y [[buffer(0)]], "
                                             "constant float &v [[buffer(1)]],\n"
                                             "                uint i [[thread_position_in_grid]]) "
                                             "{ y[i] = v + float(i); }\n"},
                &lib) != CM_OK ||
            cm_kernel_create(lib, &(cm_kernel_desc){.name = "put"}, &k) != CM_OK ||
            cm_stream_create(w->device, &s) != CM_OK ||
            cm_tensor_create(w->device,
                             &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = &n},
                             &y) != CM_OK ||
            cm_kernel_dispatch(
                k, r % 2 ? s : NULL,
                &(cm_dispatch_desc){
                    .args =
                        (cm_kernel_arg[]){
                            {.type = CM_ARG_OUTPUT, .tensor = y},
                            {.type = CM_ARG_BYTES, .index = 1, .data = &v, .size = 4}},
                    .arg_count = 2,
                    .grid = {(uint64_t)n}}) != CM_OK) {
            w->failures++;
        } else {
            const float *p = NULL;
            if (cm_tensor_host_read(y, CM_FLOAT32, (const void **)&p) != CM_OK)
                w->failures++;
            else
                for (int64_t i = 0; i < n; ++i)
                    w->failures += p[i] != v + (float)i;
        }
        cm_tensor_release(y);
        cm_stream_release(s);
        cm_kernel_release(k);
        cm_library_release(lib);
    }
    return NULL;
}

Test(kernel, concurrent_creation_and_dispatch_share_one_pipeline) {
    cm_device *d = metal();
    worker w[4];
    pthread_t th[4];
    for (int i = 0; i < 4; ++i) {
        w[i] = (worker){.device = d, .id = i};
        cr_assert_eq(pthread_create(&th[i], NULL, create_and_dispatch, &w[i]), 0);
    }
    for (int i = 0; i < 4; ++i) {
        pthread_join(th[i], NULL);
        cr_assert_eq(w[i].failures, 0, "thread %d: %d failures", i, w[i].failures);
    }
    cr_assert_eq(sm_live("SMComputePipelineState"), 1, "one pipeline for every thread");
    cm_device_release(d);
}

/* ------------------------------------------------------------ precompiled */

/* axpb.metal through softmetal-metallib, embedded by cmetal_embed_library. */
#ifdef CM_TEST_NO_AXPB /* a Mac without the Metal toolchain: no metallib to load */
static const unsigned char cm_test_axpb[1];
static const size_t cm_test_axpb_size = 0;
#define CM_TEST_AXPB_PATH ""
#define REQUIRE_AXPB() cr_skip_test("no precompiled library: xcrun metal is not installed")
#else
extern const unsigned char cm_test_axpb[];
extern const size_t cm_test_axpb_size;
#define REQUIRE_AXPB() ((void)0)
#endif

static void run_axpb(cm_device *d, cm_library *lib) {
    cm_kernel *k = NULL;
    CHECK(cm_kernel_create(lib, &(cm_kernel_desc){.name = "axpb"}, &k));
    cm_tensor *x = iota_f32(d, 32), *y = vec(d, CM_FLOAT32, 32);
    const float a = 2;
    CHECK(cm_kernel_dispatch(
        k, NULL,
        &(cm_dispatch_desc){
            .args = (cm_kernel_arg[]){{.type = CM_ARG_INPUT, .index = 0, .tensor = x},
                                      {.type = CM_ARG_OUTPUT, .index = 1, .tensor = y},
                                      {.type = CM_ARG_BYTES, .index = 2, .data = &a, .size = 4}},
            .arg_count = 3,
            .grid = {32}}));
    const float *p = NULL;
    CHECK(cm_tensor_host_read(y, CM_FLOAT32, (const void **)&p));
    for (int i = 0; i < 32; ++i)
        cr_assert_eq(p[i], 2.0f * (float)i + 0.5f, "y[%d] = %g", i, p[i]);
    cm_tensor_release(x);
    cm_tensor_release(y);
    cm_kernel_release(k);
}

/* Every kernel, loaded or compiled, is checked against its pipeline's
 * reflection (MTLComputePipelineReflection, given by softmetal too): an
 * unbound buffer fails at dispatch naming the index and the kernel; a
 * buffer the kernel writes (device, not const) refuses a read-only tensor
 * and bytes, and a writable tensor bound there as an input is tracked as
 * written; a const buffer bound as an output is fine. */
Test(kernel, loaded_and_compiled_kernels_are_checked_against_their_reflection) {
    REQUIRE_AXPB();
    cm_device *d = metal();
    cm_library *lib = NULL;
    CHECK(cm_library_load(d, cm_test_axpb, cm_test_axpb_size, &lib));
    cm_kernel *k = NULL;
    CHECK(cm_kernel_create(lib, &(cm_kernel_desc){.name = "axpb"}, &k));
    cm_tensor *x = iota_f32(d, 32), *y = vec(d, CM_FLOAT32, 32), *ro = NULL;
    CHECK(cm_tensor_read_only(y, &ro));
    CHECK(cm_device_synchronize(d));
    const uint64_t before = submissions(d);
    const float a = 2;
    cm_kernel_arg args[3] = {{.type = CM_ARG_INPUT, .index = 0, .tensor = x},
                             {.type = CM_ARG_OUTPUT, .index = 1, .tensor = y},
                             {.type = CM_ARG_BYTES, .index = 2, .data = &a, .size = 4}};
    cm_dispatch_desc desc = {.args = args, .arg_count = 2, .grid = {32}};
    EXPECT_FAIL(cm_kernel_dispatch(k, NULL, &desc), CM_ERR_INVALID_ARGUMENT,
                "kernel \"axpb\" uses [[buffer(2)]]");
    cr_assert(strstr(cm_last_error(), "but no argument binds index 2") != NULL, "%s",
              cm_last_error());
    desc.arg_count = 3;
    args[1] = (cm_kernel_arg){.type = CM_ARG_INPUT, .index = 1, .tensor = ro};
    EXPECT_FAIL(cm_kernel_dispatch(k, NULL, &desc), CM_ERR_READ_ONLY,
                "args[1].tensor is read-only, but kernel \"axpb\" writes [[buffer(1)]]");
    args[1] = (cm_kernel_arg){.type = CM_ARG_BYTES, .index = 1, .data = &a, .size = 4};
    EXPECT_FAIL(cm_kernel_dispatch(k, NULL, &desc), CM_ERR_INVALID_ARGUMENT,
                "args[1] is CM_ARG_BYTES, but kernel \"axpb\" writes [[buffer(1)]]");
    args[1] = (cm_kernel_arg){.type = CM_ARG_THREADGROUP, .index = 1, .size = 16};
    EXPECT_FAIL(cm_kernel_dispatch(k, NULL, &desc), CM_ERR_INVALID_ARGUMENT,
                "a CM_ARG_THREADGROUP argument binds index 1, but kernel \"axpb\" has "
                "[[buffer(1)]] there");
    cr_assert_eq(submissions(d), before, "nothing was encoded or committed");
    /* y as an input: the kernel writes it all the same, so host access
     * waits for it. x (const device) as an output is allowed. */
    args[0].type = CM_ARG_OUTPUT;
    args[1] = (cm_kernel_arg){.type = CM_ARG_INPUT, .index = 1, .tensor = y};
    CHECK(cm_kernel_dispatch(k, NULL, &desc));
    const float *p = NULL;
    CHECK(cm_tensor_host_read(y, CM_FLOAT32, (const void **)&p));
    for (int i = 0; i < 32; ++i)
        cr_assert_eq(p[i], 2.0f * (float)i + 0.5f, "y[%d] = %g", i, p[i]);

    /* Function constants left out: named, with the field that takes them. */
    cm_kernel *fk = NULL;
    cm_library *fl = NULL;
    CHECK(cm_library_create(
        d,
        &(cm_library_desc){
            .source = "constant uint N [[function_constant(3)]];\n"
                      "constant bool B [[function_constant(5)]];\n"
                      "kernel void fc(device uint *o [[buffer(0)]]) { o[0] = B ? N : 1; }\n"},
        &fl));
    EXPECT_FAIL(cm_kernel_create(fl, &(cm_kernel_desc){.name = "fc"}, &fk), CM_ERR_COMPILE,
                "cm_kernel_create: desc->constants is empty, but the function has function "
                "constants: each one it requires needs a value in desc->constants");
    if (sm_present()) /* softmetal's Metal message names the missing constant */
        cr_assert(strstr(cm_last_error(), "'N' (index 3)") != NULL, "%s", cm_last_error());
    cr_assert_null(fk);
    cm_library_release(fl);
    cm_tensor_release(ro);
    cm_tensor_release(x);
    cm_tensor_release(y);
    cm_kernel_release(k);
    cm_library_release(lib);
    cm_device_release(d);
}

/* A compiler's diagnostics arrive whole in cm_last_error(), however long
 * (they were cut to a few hundred bytes). Twelve errors on long lines: the
 * last one is there, and so is the end of the message. */
Test(kernel, long_compile_diagnostics_arrive_whole) {
    cm_device *d = metal();
    char source[4096];
    size_t n = (size_t)snprintf(source, sizeof source,
                                "kernel void many(device float *x [[buffer(0)]]) {\n");
    for (int i = 0; i < 12; ++i)
        n += (size_t)snprintf(source + n, sizeof source - n,
                              "    x[%d] = undeclared_name_%02d_long_enough_to_fill_a_line;\n", i,
                              i);
    snprintf(source + n, sizeof source - n, "}\n");
    cm_library *lib = NULL;
    EXPECT_FAIL(cm_library_create(d, &(cm_library_desc){.source = source}, &lib), CM_ERR_COMPILE,
                "undeclared_name_00_long_enough_to_fill_a_line");
    const char *text = cm_last_error();
    cr_assert(strstr(text, "undeclared_name_11_long_enough_to_fill_a_line") != NULL,
              "the twelfth error is missing from %zu bytes: %s", strlen(text), text);
    const char *code = strstr(text, ", code ");
    cr_assert(code != NULL && code > strstr(text, "undeclared_name_11"),
              "the message ends with the NSError's domain and code: %s", text);
    cr_assert_gt(strlen(text), 1000);
    cr_assert_null(lib);
    cm_device_release(d);
}

Test(kernel, precompiled_libraries_load_from_embedded_bytes_and_files) {
    REQUIRE_AXPB();
    cm_device *d = metal();
    cr_assert_gt(cm_test_axpb_size, 32);
    cm_library *lib = NULL, *again = NULL, *file = NULL;
    CHECK(cm_library_load(d, cm_test_axpb, cm_test_axpb_size, &lib));
    run_axpb(d, lib);
    /* The object counts are softmetal's; the rest runs on every Metal. */
    const bool sm = sm_present();
    const long libraries = sm ? sm_live("SMLibrary") : 0;
    CHECK(cm_library_load(d, cm_test_axpb, cm_test_axpb_size, &again));
    if (sm)
        cr_assert_eq(sm_live("SMLibrary"), libraries, "the same bytes give the cached library");
    CHECK(cm_library_load_file(d, CM_TEST_AXPB_PATH, &file));
    if (sm)
        cr_assert_eq(sm_live("SMLibrary"), libraries, "the file holds the same bytes");
    run_axpb(d, file);

    cm_library *bad = NULL;
    EXPECT_FAIL(cm_library_load(d, "not a library", 13, &bad), CM_ERR_INVALID_ARGUMENT,
                "cm_library_load: the data is not a Metal library");
    if (sm) /* softmetal's words after cmetal's */
        cr_assert(strstr(cm_last_error(), "no SMMTLLIB header") != NULL, "%s", cm_last_error());
    EXPECT_FAIL(cm_library_load(d, "MTLB\x01\x80\x02\x00", 8, &bad), CM_ERR_INVALID_ARGUMENT,
                "cm_library_load: the data is not a Metal library");
    if (sm)
        cr_assert(strstr(cm_last_error(), "Apple metallib") != NULL, "%s", cm_last_error());
    unsigned char cut[64];
    memcpy(cut, cm_test_axpb, sizeof cut);
    EXPECT_FAIL(cm_library_load(d, cut, sizeof cut, &bad), CM_ERR_INVALID_ARGUMENT,
                "cm_library_load: the data is not a Metal library");
    if (sm)
        cr_assert(strstr(cm_last_error(), "truncated") != NULL, "%s", cm_last_error());
    EXPECT_FAIL(cm_library_load(d, cut, 0, &bad), CM_ERR_INVALID_ARGUMENT, "size = 0");
    EXPECT_FAIL(cm_library_load_file(d, "/nonexistent/x.metallib", &bad), CM_ERR_INVALID_ARGUMENT,
                "cm_library_load_file: path = \"/nonexistent/x.metallib\" cannot be opened");
    cr_assert_null(bad);
    cm_library_release(lib);
    cm_library_release(again);
    cm_library_release(file);
    cm_device_release(d);
}

/* ------------------------------------------------------------ constants */

static const char constants_source[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "constant bool use_bias [[function_constant(0)]];\n"
    "constant float scale [[function_constant(1)]];\n"
    "constant half bias [[function_constant(2)]];\n"
    "constant int shift [[function_constant(3)]];\n"
    "kernel void affine(device const float *x [[buffer(0)]], device float *y [[buffer(1)]],\n"
    "                   uint i [[thread_position_in_grid]]) {\n"
    "    y[i] = x[i] * scale + (use_bias ? float(bias) : 0.0f) + float(shift);\n"
    "}\n";

/* A function that declares function constants becomes a pipeline only
 * through newFunctionWithName:constantValues:error: (Metal refuses one
 * fetched with newFunctionWithName:): a kernel made with no values, whose
 * constants are optional, runs the path they leave undefined. */
Test(kernel, a_function_with_optional_constants_runs_without_values) {
    cm_device *d = metal();
    cm_library *lib = NULL;
    CHECK(cm_library_create(
        d,
        &(cm_library_desc){.source =
                               "#include <metal_stdlib>\n"
                               "using namespace metal;\n"
                               "constant float scale [[function_constant(0)]];\n"
                               "constant bool has_scale = is_function_constant_defined(scale);\n"
                               "kernel void maybe_scaled(device float *y [[buffer(0)]],\n"
                               "                         uint i [[thread_position_in_grid]]) {\n"
                               "    y[i] = has_scale ? scale * float(i) : float(i) + 0.5f;\n"
                               "}\n"},
        &lib));
    cm_kernel *plain = NULL, *scaled = NULL;
    CHECK(cm_kernel_create(lib, &(cm_kernel_desc){.name = "maybe_scaled"}, &plain));
    const float three = 3;
    CHECK(cm_kernel_create(
        lib,
        &(cm_kernel_desc){.name = "maybe_scaled",
                          .constants = &(cm_function_constant){0, CM_FLOAT32, &three},
                          .constant_count = 1},
        &scaled));
    cm_tensor *y1 = vec(d, CM_FLOAT32, 8), *y2 = vec(d, CM_FLOAT32, 8);
    CHECK(cm_kernel_dispatch(plain, NULL,
                             &(cm_dispatch_desc){CM_ARGS(CM_ARG_OUT(0, y1)), .grid = {8}}));
    CHECK(cm_kernel_dispatch(scaled, NULL,
                             &(cm_dispatch_desc){CM_ARGS(CM_ARG_OUT(0, y2)), .grid = {8}}));
    const float *p = NULL;
    CHECK(cm_tensor_host_read(y1, CM_FLOAT32, (const void **)&p));
    for (int i = 0; i < 8; ++i)
        cr_assert_eq(p[i], (float)i + 0.5f, "without values y[%d] = %g", i, p[i]);
    CHECK(cm_tensor_host_read(y2, CM_FLOAT32, (const void **)&p));
    for (int i = 0; i < 8; ++i)
        cr_assert_eq(p[i], 3.0f * (float)i, "with scale = 3 y[%d] = %g", i, p[i]);
    cm_tensor_release(y1);
    cm_tensor_release(y2);
    cm_kernel_release(plain);
    cm_kernel_release(scaled);
    cm_library_release(lib);
    cm_device_release(d);
}

Test(kernel, function_constants_specialise_one_source) {
    cm_device *d = metal();
    cm_library *lib = NULL;
    CHECK(cm_library_create(d, &(cm_library_desc){.source = constants_source}, &lib));
    const bool yes = true, no = false;
    const float scale = 3;
    const uint16_t bias_half = 0x3c00; /* 1.0 as float16 */
    const int32_t shift = 10;
    cm_function_constant c[4] = {{0, CM_BOOL, &yes},
                                 {1, CM_FLOAT32, &scale},
                                 {2, CM_FLOAT16, &bias_half},
                                 {3, CM_INT32, &shift}};
    cm_kernel *with = NULL, *without = NULL, *dup = NULL;
    c[1].index = 0; /* checked before the framework is asked */
    EXPECT_FAIL(
        cm_kernel_create(
            lib, &(cm_kernel_desc){.name = "affine", .constants = c, .constant_count = 4}, &dup),
        CM_ERR_INVALID_ARGUMENT, "desc->constants[1].index = 0 repeats desc->constants[0]");
    c[1].index = 1;
    cm_status s = cm_kernel_create(
        lib, &(cm_kernel_desc){.name = "affine", .constants = c, .constant_count = 4}, &with);
    CHECK(s);
    c[0].value = &no;
    CHECK(cm_kernel_create(
        lib, &(cm_kernel_desc){.name = "affine", .constants = c, .constant_count = 4}, &without));
    cm_tensor *x = iota_f32(d, 8), *y1 = vec(d, CM_FLOAT32, 8), *y2 = vec(d, CM_FLOAT32, 8);
    cm_kernel *ks[2] = {with, without};
    cm_tensor *ys[2] = {y1, y2};
    for (int j = 0; j < 2; ++j)
        CHECK(cm_kernel_dispatch(
            ks[j], NULL,
            &(cm_dispatch_desc){
                .args = (cm_kernel_arg[]){{.type = CM_ARG_INPUT, .index = 0, .tensor = x},
                                          {.type = CM_ARG_OUTPUT, .index = 1, .tensor = ys[j]}},
                .arg_count = 2,
                .grid = {8}}));
    const float *p1 = NULL, *p2 = NULL;
    CHECK(cm_tensor_host_read(y1, CM_FLOAT32, (const void **)&p1));
    CHECK(cm_tensor_host_read(y2, CM_FLOAT32, (const void **)&p2));
    for (int i = 0; i < 8; ++i) {
        cr_assert_eq(p1[i], 3.0f * (float)i + 1.0f + 10.0f);
        cr_assert_eq(p2[i], 3.0f * (float)i + 10.0f);
    }
    cm_tensor_release(x);
    cm_tensor_release(y1);
    cm_tensor_release(y2);
    cm_kernel_release(with);
    cm_kernel_release(without);
    cm_library_release(lib);
    cm_device_release(d);
}

/* ------------------------------------------------------------ pipeline cache on disk */

/* What one start of a program saw (sent from its process through a pipe). */
typedef struct start_result {
    int failed_at;         /* 0, or the step that failed */
    cm_status set_status;  /* of cm_device_set_pipeline_cache */
    cm_status save_status; /* of cm_device_save_pipeline_cache */
    long compiles;         /* softmetal compiler runs during the start */
    long restores;         /* compiled kernels taken from the archive */
    bool not_softmetal;    /* the Metal in use has no softmetal counters */
    float y[64], z[64];
    char error[256];
} start_result;

static const char scale_source[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "kernel void scale(const device float *x [[buffer(0)]], device float *y [[buffer(1)]],\n"
    "                  uint i [[thread_position_in_grid]]) { y[i] = 2.0f * x[i] + 1.0f; }\n";

/* The program: open the device, opt into the pipeline cache at `archive`
 * (unless NULL), compile scale_source, make its kernel, run it and a body
 * kernel (a second library), save. */
static void one_start(const char *archive, start_result *r) {
    struct softmetal_stats before, after;
    cm_device *d = NULL;
    cm_library *lib = NULL;
    cm_kernel *k = NULL;
    cm_tensor *x = NULL, *y = NULL, *z = NULL;
    cm_body_kernel *bk = NULL;
    if (cm_device_open(CM_DEVICE_METAL, 0, &d) != CM_OK) {
        r->failed_at = 1;
        goto out;
    }
    if (archive != NULL && (r->set_status = cm_device_set_pipeline_cache(d, archive)) != CM_OK) {
        r->failed_at = 2;
        goto out;
    }
    /* The counters are softmetal's; the child never skips (a skip would end
     * it before it reports): the parent does. */
    if (!sm_present()) {
        r->not_softmetal = true;
        goto out;
    }
    sm_stats(&before);
    const int64_t n = 64;
    if (cm_library_create(d, &(cm_library_desc){.source = scale_source}, &lib) != CM_OK ||
        cm_kernel_create(lib, &(cm_kernel_desc){.name = "scale"}, &k) != CM_OK) {
        r->failed_at = 3;
        goto out;
    }
    float *px = NULL;
    const float *py = NULL;
    if (cm_tensor_create(d, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = &n}, &x) ||
        cm_tensor_create(d, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = &n}, &y) ||
        cm_tensor_create(d, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = &n}, &z) ||
        cm_tensor_host_write(x, CM_FLOAT32, (void **)&px)) {
        r->failed_at = 4;
        goto out;
    }
    for (int i = 0; i < n; ++i)
        px[i] = (float)i;
    const cm_kernel_arg args[] = {{.type = CM_ARG_INPUT, .index = 0, .tensor = x},
                                  {.type = CM_ARG_OUTPUT, .index = 1, .tensor = y}};
    if (cm_kernel_dispatch(
            k, NULL, &(cm_dispatch_desc){.args = args, .arg_count = 2, .grid = {(uint64_t)n}}) !=
            CM_OK ||
        cm_tensor_host_read(y, CM_FLOAT32, (const void **)&py) != CM_OK) {
        r->failed_at = 5;
        goto out;
    }
    memcpy(r->y, py, sizeof r->y);
    const float *pz = NULL;
    if (cm_body_kernel_create(
            d,
            &(cm_body_kernel_desc){.name = "add_xy",
                                   .input_names = (const char *[]){"x", "y"},
                                   .input_count = 2,
                                   .output_names = (const char *[]){"z"},
                                   .output_count = 1,
                                   .body =
                                       "uint i = thread_position_in_grid.x; z[i] = x[i] + y[i];"},
            &bk) != CM_OK ||
        cm_body_kernel_dispatch(bk, NULL,
                                &(cm_body_dispatch_desc){.inputs = (const cm_tensor *[]){x, y},
                                                         .outputs = (cm_tensor *[]){z},
                                                         .grid = {(uint64_t)n}}) != CM_OK ||
        cm_tensor_host_read(z, CM_FLOAT32, (const void **)&pz) != CM_OK) {
        r->failed_at = 6;
        goto out;
    }
    memcpy(r->z, pz, sizeof r->z);
    sm_stats(&after);
    r->compiles = after.kernel_compiles - before.kernel_compiles;
    r->restores = after.archive_restores - before.archive_restores;
    if (archive != NULL)
        r->save_status = cm_device_save_pipeline_cache(d);
out:
    if (r->failed_at != 0 || r->save_status != CM_OK)
        snprintf(r->error, sizeof r->error, "%s", cm_last_error());
    cm_tensor_release(x);
    cm_tensor_release(y);
    cm_tensor_release(z);
    cm_body_kernel_release(bk);
    cm_kernel_release(k);
    cm_library_release(lib);
    cm_device_release(d);
}

/* Runs one_start in a new process whose softmetal kernel cache is the new,
 * empty directory `kernel_cache`: nothing compiled before is on disk but
 * what the pipeline cache file holds. */
static start_result start_program(const char *archive, const char *kernel_cache) {
    /* tools/ci/qemu/run.sh sets CMETAL_QEMU: qemu-user's fork of a process
     * with threads aborts in qemu itself, so these run on x86-64 only. */
    if (getenv("CMETAL_QEMU") != NULL)
        cr_skip_test("qemu-user cannot fork a process that has threads");
    /* The child is forked before this process touches Metal or the
     * Objective-C runtime: on Apple's runtime a child forked after that
     * may be killed by its fork-safety check unless it execs. */
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    const pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        close(fds[0]);
        start_result r = {0};
        if (mkdir(kernel_cache, 0700) != 0 || setenv("SOFTMETAL_CACHE_DIR", kernel_cache, 1) != 0)
            r.failed_at = 9;
        else
            one_start(archive, &r);
        const ssize_t w = write(fds[1], &r, sizeof r);
        _exit(w == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fds[1]);
    start_result r;
    size_t got = 0;
    while (got < sizeof r) {
        const ssize_t n = read(fds[0], (char *)&r + got, sizeof r - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the program's process failed");
    cr_assert_eq(got, sizeof r);
    if (r.not_softmetal)
        cr_skip_test("counts compiles with softmetal's counters: this test needs softmetal");
    cr_assert_eq(r.failed_at, 0, "the program failed at step %d: %s", r.failed_at, r.error);
    for (int i = 0; i < 64; ++i)
        cr_assert(r.y[i] == 2.0f * (float)i + 1.0f && r.z[i] == 3.0f * (float)i + 1.0f,
                  "y[%d] = %g, z[%d] = %g", i, r.y[i], i, r.z[i]);
    return r;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

typedef struct scratch {
    char root[64], archive[128], cache[4][128];
} scratch;

static void scratch_make(scratch *s) {
    snprintf(s->root, sizeof s->root, "/tmp/cm-pipeline-cache-XXXXXX");
    cr_assert_not_null(mkdtemp(s->root));
    snprintf(s->archive, sizeof s->archive, "%s/pipelines.bin", s->root);
    for (int i = 0; i < 4; ++i)
        snprintf(s->cache[i], sizeof s->cache[i], "%s/kernels-%d", s->root, i);
}

static void scratch_remove(scratch *s) {
    nftw(s->root, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

Test(kernel, the_second_start_with_a_pipeline_cache_compiles_nothing) {
    scratch s;
    scratch_make(&s);
    /* Control: a fresh kernel cache and no pipeline cache compile. */
    start_result plain = start_program(NULL, s.cache[0]);
    cr_assert_geq(plain.compiles, 1, "a start with an empty kernel cache compiles");
    start_result cold = start_program(s.archive, s.cache[1]);
    cr_assert_eq(cold.set_status, CM_OK, "a missing file is an empty cache");
    cr_assert_eq(cold.compiles, 2, "the first start compiles two libraries");
    cr_assert_eq(cold.save_status, CM_OK, "%s", cold.error);
    cr_assert_eq(access(s.archive, R_OK), 0, "the save wrote %s", s.archive);
    start_result warm = start_program(s.archive, s.cache[2]);
    cr_assert_eq(warm.set_status, CM_OK);
    cr_assert_eq(warm.compiles, 0, "the second start ran the compiler %ld times", warm.compiles);
    cr_assert_eq(warm.restores, 2, "both libraries came from the pipeline cache");
    cr_assert_eq(warm.save_status, CM_OK, "%s", warm.error);
    scratch_remove(&s);
}

static void write_bytes(const char *path, const void *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(bytes, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

Test(kernel, a_corrupt_or_truncated_pipeline_cache_falls_back_to_compiling) {
    scratch s;
    scratch_make(&s);
    write_bytes(s.archive, "SMBINARC this is not an archive", 31);
    start_result r = start_program(s.archive, s.cache[0]);
    cr_assert_eq(r.set_status, CM_OK, "a corrupt file is ignored");
    cr_assert_geq(r.compiles, 1, "and everything compiles");
    cr_assert_eq(r.restores, 0);
    cr_assert_eq(r.save_status, CM_OK, "the save replaces the corrupt file: %s", r.error);
    /* The replaced file is good; the same file cut short is not. */
    FILE *f = fopen(s.archive, "rb");
    cr_assert_not_null(f);
    static unsigned char bytes[1 << 22];
    const size_t n = fread(bytes, 1, sizeof bytes, f);
    fclose(f);
    cr_assert(n > 100 && n < sizeof bytes, "archive of %zu bytes", n);
    write_bytes(s.archive, bytes, n - 1);
    r = start_program(s.archive, s.cache[1]);
    cr_assert_eq(r.set_status, CM_OK);
    cr_assert_geq(r.compiles, 1, "a truncated file compiles");
    cr_assert_eq(r.restores, 0);
    write_bytes(s.archive, bytes, n);
    bytes[n / 2] ^= 0x40; /* one bit of the code */
    write_bytes(s.archive, bytes, n);
    r = start_program(s.archive, s.cache[2]);
    cr_assert_geq(r.compiles, 1, "a file with a flipped bit compiles");
    cr_assert_eq(r.restores, 0);
    /* A good file that others may write holds code nobody vouches for. */
    bytes[n / 2] ^= 0x40;
    write_bytes(s.archive, bytes, n);
    cr_assert_eq(chmod(s.archive, 0666), 0);
    r = start_program(s.archive, s.cache[3]);
    cr_assert_geq(r.compiles, 1, "a file writable by others is not used");
    cr_assert_eq(r.restores, 0);
    scratch_remove(&s);
}

Test(kernel, pipeline_cache_errors_name_the_path_and_save_reports_io_errors) {
    scratch s;
    scratch_make(&s);
    cm_device *d = metal();
    char path[256];
    snprintf(path, sizeof path, "%s/no-such-dir/pipelines.bin", s.root);
    EXPECT_FAIL(cm_device_set_pipeline_cache(d, path), CM_ERR_INVALID_ARGUMENT, "no-such-dir");
    char missing[224];
    snprintf(missing, sizeof missing,
             "its directory \"%s/no-such-dir\" No such file or directory "
             "(create it first)",
             s.root);
    EXPECT_FAIL(cm_device_set_pipeline_cache(d, path), CM_ERR_INVALID_ARGUMENT, missing);
    EXPECT_FAIL(cm_device_set_pipeline_cache(d, s.root), CM_ERR_INVALID_ARGUMENT, "is a directory");
    EXPECT_FAIL(cm_device_set_pipeline_cache(d, NULL), CM_ERR_INVALID_ARGUMENT, "path = NULL");
    EXPECT_FAIL(cm_device_set_pipeline_cache(d, ""), CM_ERR_INVALID_ARGUMENT, "path = \"\"");
    EXPECT_FAIL(cm_device_save_pipeline_cache(d), CM_ERR_INVALID_ARGUMENT,
                "the device has no pipeline cache");
    EXPECT_FAIL(cm_device_save_pipeline_cache(NULL), CM_ERR_INVALID_ARGUMENT, "device = NULL");
    /* A directory removed after the cache was set: the save says why. */
    char dir[192];
    snprintf(dir, sizeof dir, "%s/gone", s.root);
    cr_assert_eq(mkdir(dir, 0700), 0);
    snprintf(path, sizeof path, "%s/pipelines.bin", dir);
    CHECK(cm_device_set_pipeline_cache(d, path));
    EXPECT_FAIL(cm_device_set_pipeline_cache(d, s.archive), CM_ERR_INVALID_ARGUMENT,
                "already has the pipeline cache");
    cr_assert_eq(rmdir(dir), 0);
    /* cmetal's own words; the reason after them is the framework's
     * NSError (Cocoa's text on a Mac). */
    EXPECT_FAIL(cm_device_save_pipeline_cache(d), CM_ERR_DEVICE,
                "cm_device_save_pipeline_cache: cannot write the pipeline cache: ");
    cr_assert_neq(access(path, F_OK), 0);
    cm_device_release(d);
    scratch_remove(&s);
}
