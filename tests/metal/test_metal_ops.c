/* SPDX-License-Identifier: MIT */
/* Ops on the Metal device (softmetal running the msl/ kernels), beyond the
 * op matrix of tests/ops/test_ops_matrix.c: float64 refusal, batching into one
 * command buffer, host access waiting for ops, private storage, failed
 * command buffers, compile errors, threadgroup shapes, concurrency and
 * leaks. */
#include "ops/ops_util.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>

#include "softmetal_hooks.h"

#include <cmetal/dlpack.h>
#include <cmetal/metal.h>

#include "objc/bridge.h" /* to make foreign MTLBuffers */

/* Internal test hooks of runtime/metal/metal_ops.c. */
cm_status cm__metal_compile_source(cm_device *device, const char *source);
void cm__metal_set_threadgroup_override(unsigned long threads);

static cm_device *metal(void) {
    cm_device *d = NULL;
    cr_assert_eq(cm_device_open(CM_DEVICE_METAL, 0, &d), CM_OK, "%s", cm_last_error());
    return d;
}

/* For the tests that make a command buffer fail by encoding a threadgroup
 * over the device's limit: softmetal only. On a Mac that is undefined
 * without Metal's validation and an abort at encode with it
 * (MTL_DEBUG_LAYER=1); softmetal, without the debug layer, fails the
 * command buffer naming threadsPerThreadgroup. Their counterpart on every
 * Metal is cmetal's own check of threadgroups (test_kernel.c). Call first:
 * the variable is read when the framework loads. */
static void require_softmetal_without_debug_layer(void) {
    skip_under_debug_layer(); /* runs in test_metal_ops_without_debug_layer */
    if (!sm_present())
        cr_skip_test("fails a command buffer the way softmetal does: this test needs softmetal");
}

/* The Metal devices of this system; at least one. */
static uint32_t metal_count(void) {
    uint32_t n = 0;
    CHECK(cm_device_count(CM_DEVICE_METAL, &n));
    cr_assert_geq(n, 1);
    return n;
}

static uint64_t submissions(cm_device *d) {
    cm_stream *s = NULL;
    CHECK(cm_device_get_stream(d, &s));
    uint64_t n = 0;
    CHECK(cm_stream_get_submissions(s, &n));
    return n;
}

static cm_tensor *tensor_1d(cm_device *d, cm_dtype dt, int64_t n, cm_storage_mode storage) {
    const int64_t shape[1] = {n};
    cm_tensor_desc desc = {.dtype = dt, .ndim = 1, .shape = shape, .storage = storage};
    cm_tensor *t = NULL;
    CHECK(cm_tensor_create(d, &desc, &t));
    return t;
}

Test(metal_ops, float64_is_refused_naming_the_argument) {
    cm_device *d = metal();
    cm_tensor *f64 = tensor_1d(d, CM_FLOAT64, 4, CM_STORAGE_DEFAULT);
    cm_tensor *f32 = tensor_1d(d, CM_FLOAT32, 4, CM_STORAGE_DEFAULT);
    cm_tensor *s64 = NULL, *s32 = NULL;
    CHECK(cm_tensor_create(d, &(cm_tensor_desc){.dtype = CM_FLOAT64}, &s64));
    CHECK(cm_tensor_create(d, &(cm_tensor_desc){.dtype = CM_FLOAT32}, &s32));
    const double one = 1.0;
    EXPECT_FAIL(cm_fill(f64, CM_FLOAT64, &one, NULL), CM_ERR_UNSUPPORTED,
                "cm_fill: tensor dtype float64: Metal has no float64");
    EXPECT_FAIL(cm_cast(f32, f64, NULL), CM_ERR_UNSUPPORTED, "cm_cast: dst dtype float64");
    EXPECT_FAIL(cm_cast(f64, f32, NULL), CM_ERR_UNSUPPORTED, "cm_cast: src dtype float64");
    EXPECT_FAIL(cm_copy(f64, f64, NULL), CM_ERR_UNSUPPORTED, "Metal has no float64");
    EXPECT_FAIL(cm_unary(CM_UNARY_EXP, f64, f64, NULL), CM_ERR_UNSUPPORTED, "cm_unary: out dtype");
    EXPECT_FAIL(cm_binary(CM_BINARY_ADD, f64, f64, f64, NULL), CM_ERR_UNSUPPORTED,
                "cm_binary: out dtype float64");
    EXPECT_FAIL(cm_reduce(CM_REDUCE_SUM, f32, CM_AXIS_ALL, s64, NULL), CM_ERR_UNSUPPORTED,
                "cm_reduce: out dtype float64");
    EXPECT_FAIL(cm_reduce(CM_REDUCE_MAX, f64, 0, s32, NULL), CM_ERR_UNSUPPORTED,
                "cm_reduce: x dtype float64");
    cr_assert_eq(submissions(d), 0, "nothing was encoded");
    cm_tensor_release(f64);
    cm_tensor_release(f32);
    cm_tensor_release(s64);
    cm_tensor_release(s32);
    cm_device_release(d);
}

Test(metal_ops, ops_between_two_syncs_commit_one_command_buffer) {
    cm_device *d = metal();
    cm_tensor *a = tensor_1d(d, CM_FLOAT32, 1000, CM_STORAGE_DEFAULT);
    cm_tensor *b = tensor_1d(d, CM_FLOAT32, 1000, CM_STORAGE_DEFAULT);
    cm_tensor *s = NULL;
    CHECK(cm_tensor_create(d, &(cm_tensor_desc){.dtype = CM_FLOAT32}, &s));
    const double one = 1.0;
    CHECK(cm_fill(a, CM_FLOAT64, &one, NULL));
    CHECK(cm_device_synchronize(d));
    const uint64_t before = submissions(d);
    for (int i = 0; i < 64; ++i) /* b = a + a, then a = b: doubles a each time */
        CHECK(i % 2 == 0 ? cm_binary(CM_BINARY_ADD, a, a, b, NULL) : cm_copy(b, a, NULL));
    CHECK(cm_reduce(CM_REDUCE_SUM, a, CM_AXIS_ALL, s, NULL));
    cr_assert_eq(submissions(d), before, "ops do not commit by themselves");
    CHECK(cm_device_synchronize(d));
    cr_assert_eq(submissions(d), before + 1, "65 ops, one command buffer");
    float sum = 0;
    CHECK(cm_tensor_get_element(s, NULL, CM_FLOAT32, &sum));
    cr_assert_eq(sum, 1000.0f * 4294967296.0f);
    cm_tensor_release(a);
    cm_tensor_release(b);
    cm_tensor_release(s);
    cm_device_release(d);
}

Test(metal_ops, host_access_after_ops_waits_for_them) {
    cm_device *d = metal();
    cm_tensor *a = tensor_1d(d, CM_INT32, 4096, CM_STORAGE_DEFAULT);
    cm_tensor *b = tensor_1d(d, CM_INT32, 4096, CM_STORAGE_MANAGED);
    const int64_t seven = 7, three = 3;
    CHECK(cm_fill(a, CM_INT64, &seven, NULL));
    CHECK(cm_fill(b, CM_INT64, &three, NULL));
    CHECK(cm_binary(CM_BINARY_MUL, a, b, b, NULL));
    /* No explicit sync: host reads wait for the writers. */
    const int64_t last = 4095;
    int32_t v = 0;
    CHECK(cm_tensor_get_element(b, &last, CM_INT32, &v));
    cr_assert_eq(v, 21);
    /* A host write to managed storage is seen by the next op. */
    int32_t *p = NULL;
    CHECK(cm_tensor_host_write(b, CM_INT32, (void **)&p));
    p[4095] = 100;
    CHECK(cm_binary(CM_BINARY_ADD, a, b, a, NULL));
    CHECK(cm_tensor_get_element(a, &last, CM_INT32, &v));
    cr_assert_eq(v, 107);
    cm_tensor_release(a);
    cm_tensor_release(b);
    cm_device_release(d);
}

Test(metal_ops, private_storage_output_reads_back_through_cm_buffer_read) {
    cm_device *d = metal();
    const int64_t n = 1000;
    cm_tensor *src = tensor_1d(d, CM_FLOAT32, n, CM_STORAGE_DEFAULT);
    cm_tensor *priv = tensor_1d(d, CM_FLOAT16, n, CM_STORAGE_PRIVATE);
    cm_tensor *back = tensor_1d(d, CM_FLOAT32, n, CM_STORAGE_PRIVATE);
    float *p = NULL;
    CHECK(cm_tensor_host_write(src, CM_FLOAT32, (void **)&p));
    for (int64_t i = 0; i < n; ++i)
        p[i] = (float)i * 0.25f - 100.0f;
    CHECK(cm_cast(src, priv, NULL));
    CHECK(cm_unary(CM_UNARY_NEG, priv, priv, NULL));
    CHECK(cm_cast(priv, back, NULL));
    cm_tensor_info info;
    CHECK(cm_tensor_get_info(back, &info));
    float out[1000];
    CHECK(cm_buffer_read(info.buffer, 0, out, sizeof out));
    for (int64_t i = 0; i < n; ++i)
        cr_assert_eq(out[i], -((float)i * 0.25f - 100.0f), "element %lld", (long long)i);
    cm_tensor_release(src);
    cm_tensor_release(priv);
    cm_tensor_release(back);
    cm_device_release(d);
}

Test(metal_ops, a_failed_command_buffer_surfaces_on_the_next_sync) {
    require_softmetal_without_debug_layer();
    cm_device *d = metal();
    cm_tensor *a = tensor_1d(d, CM_FLOAT32, 64, CM_STORAGE_DEFAULT);
    const double one = 1.0;
    cm__metal_set_threadgroup_override(2048);  /* over softmetal's limit of 1024 */
    CHECK(cm_fill(a, CM_FLOAT64, &one, NULL)); /* encoding itself succeeds */
    cm__metal_set_threadgroup_override(0);
    EXPECT_FAIL(cm_device_synchronize(d), CM_ERR_DEVICE, "threadsPerThreadgroup");
    cr_assert(strstr(cm_last_error(), "a command buffer of this stream failed") != NULL, "%s",
              cm_last_error());
    /* Reported once; later work runs normally. */
    CHECK(cm_device_synchronize(d));
    CHECK(cm_fill(a, CM_FLOAT64, &one, NULL));
    float v = 0;
    const int64_t i = 63;
    CHECK(cm_tensor_get_element(a, &i, CM_FLOAT32, &v));
    cr_assert_eq(v, 1.0f);
    cm_tensor_release(a);
    cm_device_release(d);
}

Test(metal_ops, kernel_compile_errors_are_cm_err_compile_with_the_compiler_text) {
    cm_device *d = metal();
    EXPECT_FAIL(cm__metal_compile_source(d, "#include <metal_stdlib>\n"
                                            "kernel void broken(device float *x [[buffer(0)]]) {\n"
                                            "    x[0] = undeclared_name;\n}\n"),
                CM_ERR_COMPILE, "undeclared_name");
    cr_assert(strstr(cm_last_error(), "did not compile") != NULL, "%s", cm_last_error());
    CHECK(cm__metal_compile_source(d, "#include <metal_stdlib>\n"
                                      "kernel void fine(device float *x [[buffer(0)]]) {\n"
                                      "    x[0] = 1.0f;\n}\n"));
    cm_device_release(d);
}

Test(metal_ops, the_library_compiles_once_per_device) {
    cm_device *d = metal();
    cm_tensor *a = tensor_1d(d, CM_UINT8, 10, CM_STORAGE_DEFAULT);
    const int64_t v = 5;
    CHECK(cm_fill(a, CM_INT64, &v, NULL)); /* compiles (or loads) the library */
    const bool sm = sm_present(); /* the counts are softmetal's; the values hold anywhere */
    struct softmetal_stats s0, s1;
    if (sm)
        sm_stats(&s0);
    for (int i = 0; i < 10; ++i)
        CHECK(cm_unary(CM_UNARY_SQUARE, a, a, NULL));
    CHECK(cm_device_synchronize(d));
    if (sm) {
        sm_stats(&s1);
        cr_assert_eq(s1.kernel_compiles + s1.kernel_cache_hits,
                     s0.kernel_compiles + s0.kernel_cache_hits, "pipelines are cached");
    }
    const int64_t last = 9;
    uint8_t got = 0;
    CHECK(cm_tensor_get_element(a, &last, CM_UINT8, &got));
    uint8_t want = 5;
    for (int i = 0; i < 10; ++i)
        want = (uint8_t)(want * want);
    cr_assert_eq(got, want);
    cm_tensor_release(a);
    cm_device_release(d);
}

/* The kernel library is built with fast math off (MTLCompileOptions with
 * mathMode = Safe, or fastMathEnabled = NO where mathMode is missing):
 * softmetal counts libraries made with fast or relaxed math, options nil
 * included, as Metal's default is fast math. */
static void expect_safe_math_library(void) {
    cm_device *d = metal();       /* loads the framework */
    const bool sm = sm_present(); /* the counts are softmetal's; NaN is checked anywhere */
    struct softmetal_stats s0, s1;
    if (sm)
        sm_stats(&s0);
    cm_tensor *a = tensor_1d(d, CM_FLOAT32, 4, CM_STORAGE_DEFAULT);
    const double nan = NAN;
    CHECK(cm_fill(a, CM_FLOAT64, &nan, NULL)); /* builds this device's library */
    CHECK(cm_binary(CM_BINARY_MAX, a, a, a, NULL));
    CHECK(cm_device_synchronize(d));
    const int64_t first = 0;
    float got = 0;
    CHECK(cm_tensor_get_element(a, &first, CM_FLOAT32, &got));
    cr_assert(isnan(got), "max(NaN, NaN) = %g", got);
    if (sm) {
        sm_stats(&s1);
        cr_assert_eq(s1.kernel_compiles + s1.kernel_cache_hits,
                     s0.kernel_compiles + s0.kernel_cache_hits + 1, "one library built");
        cr_assert_eq(s1.unsafe_math_libraries, s0.unsafe_math_libraries,
                     "the kernel library was built with fast math on");
        cr_assert_eq(sm_live("MTLCompileOptions"), 0, "the options were released");
    }
    cm_tensor_release(a);
    cm_device_release(d);
}

Test(metal_ops, kernels_are_compiled_with_fast_math_off) {
    expect_safe_math_library();
}

/* Before macOS 15 MTLCompileOptions has no setMathMode:; softmetal plays
 * that OS when SOFTMETAL_NO_MATH_MODE=1 is set before it loads. */
Test(metal_ops, kernels_are_compiled_with_fast_math_off_without_math_mode) {
    const char *path = getenv("CMETAL_METAL_FRAMEWORK");
    if (path == NULL || path[0] == '\0')
        cr_skip_test("SOFTMETAL_NO_MATH_MODE is softmetal's: this test needs softmetal");
#ifdef RTLD_NOLOAD /* not declared by Apple's <dlfcn.h> under _POSIX_C_SOURCE */
    void *loaded = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (loaded != NULL) {
        dlclose(loaded);
        cr_skip_test("softmetal was loaded before this test could set SOFTMETAL_NO_MATH_MODE");
    }
#endif
    setenv("SOFTMETAL_NO_MATH_MODE", "1", 1);
    expect_safe_math_library();
}

/* The SIMD width of a pipeline on this device: a trivial kernel's (32 on
 * Apple GPUs, 64 on some AMD ones). */
static uint32_t pipeline_simd_width(cm_device *d) {
    cm_library *lib = NULL;
    cm_kernel *k = NULL;
    CHECK(cm_library_create(d,
                            &(cm_library_desc){.source =
                                                   "kernel void nop(device uint *o [[buffer(0)]], "
                                                   "uint i [[thread_position_in_grid]]) {\n"
                                                   "    o[i] = i;\n}\n"},
                            &lib));
    CHECK(cm_kernel_create(lib, &(cm_kernel_desc){.name = "nop"}, &k));
    cm_kernel_info info;
    CHECK(cm_kernel_get_info(k, &info));
    cm_kernel_release(k);
    cm_library_release(lib);
    cr_assert_gt(info.thread_execution_width, 0);
    return info.thread_execution_width;
}

/* The threadgroup reduction gives the same results for any threadgroup
 * size that is a multiple of the SIMD width (sizes of another width are
 * left out: 32 and 96 where SIMD groups have 64 lanes). */
Test(metal_ops, reductions_agree_across_threadgroup_sizes) {
    cm_device *d = metal();
    const uint32_t width = pipeline_simd_width(d);
    const int64_t shape[2] = {5, 1000};
    cm_tensor *x = make_view(d, CM_INT32, 2, shape, L_TRANSPOSED, 3, false, NULL);
    cm_tensor *f = make_view(d, CM_FLOAT32, 2, shape, L_NEGATIVE, 4, true, NULL);
    const int64_t n5[1] = {5};
    const unsigned long sizes[] = {0, 32, 64, 96, 256};
    int64_t want_sum[5], want_max[5];
    float want_fsum[5];
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; ++k) {
        if (sizes[k] % width != 0) /* sizes[0] = 0, the default, always runs */
            continue;
        cm__metal_set_threadgroup_override(sizes[k]);
        cm_tensor *s = new_tensor(d, CM_INT64, 1, n5), *m = new_tensor(d, CM_INT64, 1, n5),
                  *fs = new_tensor(d, CM_FLOAT32, 1, n5);
        CHECK(cm_reduce(CM_REDUCE_SUM, x, 1, s, NULL));
        CHECK(cm_reduce(CM_REDUCE_MAX, x, 1, m, NULL));
        CHECK(cm_reduce(CM_REDUCE_SUM, f, 1, fs, NULL));
        for (int64_t i = 0; i < 5; ++i) {
            const int64_t gs = get_at(s, &i).i64, gm = get_at(m, &i).i64;
            const float gf = get_at(fs, &i).f32;
            if (k == 0) {
                int64_t sum = 0, best = INT64_MIN;
                float fsum = 0;
                for (int64_t j = 0; j < 1000; ++j) {
                    const int64_t idx[2] = {i, j};
                    const int64_t v = get_at(x, idx).i32;
                    sum += v;
                    best = v > best ? v : best;
                    fsum += get_at(f, idx).f32; /* exact: halves in [-8, 8] */
                }
                want_sum[i] = sum;
                want_max[i] = best;
                want_fsum[i] = fsum;
            }
            cr_assert_eq(gs, want_sum[i], "threads %lu row %lld", sizes[k], (long long)i);
            cr_assert_eq(gm, want_max[i], "threads %lu row %lld", sizes[k], (long long)i);
            cr_assert_eq(gf, want_fsum[i], "threads %lu row %lld", sizes[k], (long long)i);
        }
        cm_tensor_release(s);
        cm_tensor_release(m);
        cm_tensor_release(fs);
    }
    cm__metal_set_threadgroup_override(0);
    cm_tensor_release(x);
    cm_tensor_release(f);
    cm_device_release(d);
}

typedef struct worker {
    cm_device *device;
    int seed;
    bool ok;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    const int64_t shape[1] = {777};
    cm_tensor_desc desc = {.dtype = CM_INT32, .ndim = 1, .shape = shape};
    cm_tensor *a = NULL, *s = NULL;
    w->ok = cm_tensor_create(w->device, &desc, &a) == CM_OK &&
            cm_tensor_create(w->device, &(cm_tensor_desc){.dtype = CM_INT64}, &s) == CM_OK;
    const int64_t v = w->seed;
    for (int i = 0; w->ok && i < 20; ++i)
        w->ok = cm_fill(a, CM_INT64, &v, NULL) == CM_OK &&
                cm_reduce(CM_REDUCE_SUM, a, CM_AXIS_ALL, s, NULL) == CM_OK;
    int64_t sum = 0;
    w->ok = w->ok && cm_tensor_get_element(s, NULL, CM_INT64, &sum) == CM_OK &&
            sum == 777 * (int64_t)w->seed;
    cm_tensor_release(a);
    cm_tensor_release(s);
    return NULL;
}

Test(metal_ops, ops_from_several_threads_share_one_device) {
    cm_device *d = metal(); /* kernels not made yet: the threads race to make them */
    pthread_t t[4];
    worker w[4];
    for (int i = 0; i < 4; ++i) {
        w[i] = (worker){d, i + 1, false};
        cr_assert_eq(pthread_create(&t[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < 4; ++i) {
        pthread_join(t[i], NULL);
        cr_assert(w[i].ok, "thread %d", i);
    }
    cm_device_release(d);
}

Test(metal_ops, a_session_of_ops_leaks_no_metal_object) {
    {
        cm_device *d = metal(); /* loads the framework */
        cm_device_release(d);
    }
    struct softmetal_stats before, after;
    sm_stats(&before);
    cm_device *d = metal();
    const int64_t shape[2] = {30, 300};
    cm_tensor *x = make_view(d, CM_FLOAT16, 2, shape, L_STEP, 1, true, NULL);
    cm_tensor *y = new_tensor(d, CM_FLOAT32, 2, shape);
    const int64_t n30[1] = {30};
    cm_tensor *r = new_tensor(d, CM_FLOAT32, 1, n30), *q = new_tensor(d, CM_FLOAT32, 0, NULL);
    CHECK(cm_cast(x, y, NULL));
    CHECK(cm_unary(CM_UNARY_TANH, y, y, NULL));
    CHECK(cm_binary(CM_BINARY_MAX, y, y, y, NULL));
    CHECK(cm_reduce(CM_REDUCE_MEAN, y, 1, r, NULL));
    CHECK(cm_reduce(CM_REDUCE_MIN, y, CM_AXIS_ALL, q, NULL));
    CHECK(cm_device_synchronize(d));
    cm_tensor_release(x);
    cm_tensor_release(y);
    cm_tensor_release(r);
    cm_tensor_release(q);
    cm_device_release(d);
    sm_stats(&after);
    cr_assert_eq(after.live_objects, before.live_objects, "%ld Metal objects outlived the session",
                 after.live_objects - before.live_objects);
    cr_assert_gt(after.allocs, before.allocs);
}

/* A foreign MTLBuffer with MTLResourceHazardTrackingModeUntracked (as MLX
 * makes them), wrapped: 64 float32s, shared storage. */
static cm_tensor *untracked_tensor(cm_device *d) {
    void *dev = NULL;
    CHECK(cm_device_get_metal_device(d, &dev));
    enum { UNTRACKED = 256 }; /* MTLResourceHazardTrackingModeUntracked */
    cm__id mtl = cm__msg_newBufferWithLength_options(dev, 64 * 4, UNTRACKED);
    cr_assert_not_null(mtl);
    cr_assert_eq(cm__msg_hazardTrackingMode(mtl), 1, "untracked");
    cm_buffer *b = NULL;
    CHECK(cm_buffer_wrap_metal(d, &(cm_metal_buffer_desc){.buffer = mtl}, &b));
    cm__objc_release(mtl);
    cm_tensor *t = NULL;
    CHECK(cm_tensor_from_buffer(
        b, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = (int64_t[]){64}}, &t));
    cm_buffer_release(b);
    return t;
}

/* Metal orders nothing between passes on untracked buffers: successive ops
 * that write and read one (strict softmetal fails the command buffer on
 * such a hazard) must be ordered by cmetal, on one stream and across
 * command buffers of it. */
Test(metal_ops, ops_on_untracked_foreign_buffers_are_ordered) {
    cm_device *d = metal();
    cm_tensor *u = untracked_tensor(d), *v = untracked_tensor(d);
    const double two = 2.0, three = 3.0;
    CHECK(cm_fill(u, CM_FLOAT64, &two, NULL));
    CHECK(cm_copy(u, v, NULL));                     /* reads what the fill wrote */
    CHECK(cm_binary(CM_BINARY_ADD, u, v, u, NULL)); /* writes what the copy read */
    cm_stream *s = NULL;
    CHECK(cm_device_get_stream(d, &s));
    cm_fence *f = NULL;
    CHECK(cm_stream_signal(s, &f));              /* commits without waiting */
    CHECK(cm_fill(v, CM_FLOAT64, &three, NULL)); /* next command buffer */
    CHECK(cm_binary(CM_BINARY_MUL, u, v, v, NULL));
    CHECK(cm_device_synchronize(d));
    cm_fence_release(f);
    float got = 0;
    CHECK(cm_tensor_get_element(v, (int64_t[]){63}, CM_FLOAT32, &got));
    cr_assert_eq(got, 12.0f);
    /* cmetal's own buffers stay tracked. */
    cm_tensor *own = tensor_1d(d, CM_FLOAT32, 4, CM_STORAGE_DEFAULT);
    cm_tensor_info info;
    CHECK(cm_tensor_get_info(own, &info));
    cm_buffer_info binfo;
    CHECK(cm_buffer_get_info(info.buffer, &binfo));
    cr_assert_eq(cm__msg_hazardTrackingMode(binfo.native), 2, "tracked");
    cm_tensor_release(own);
    cm_tensor_release(u);
    cm_tensor_release(v);
    cm_device_release(d);
}

/* Every entry point drains what it autoreleases in its own pool: a loop of
 * transfers on a thread whose only pool is one long-lived outer pool (as a
 * thread without a pool of its own on a Mac) keeps the number of live Metal
 * objects flat. */
static void *transfer_loop(void *arg) {
    cm_device *d = arg;
    void *(*push)(void) = NULL;
    void (*pop)(void *) = NULL;
    void *sym = softmetal_hook("objc_autoreleasePoolPush");
    memcpy(&push, &sym, sizeof push);
    sym = softmetal_hook("objc_autoreleasePoolPop");
    memcpy(&pop, &sym, sizeof pop);
    void *outer = push();
    cm_buffer *b = NULL;
    CHECK(cm_buffer_create(d, &(cm_buffer_desc){.size = 64, .storage = CM_STORAGE_PRIVATE}, &b));
    unsigned char in[64], out[64];
    memset(in, 7, sizeof in);
    CHECK(cm_buffer_write(b, 0, in, sizeof in)); /* first use: kernels compiled */
    CHECK(cm_buffer_write(b, 1, in, 5));
    CHECK(cm_buffer_read(b, 0, out, sizeof out)); /* the loop's state: as after a read */
    struct softmetal_stats before, after;
    sm_stats(&before);
    for (int i = 0; i < 5000; ++i) {
        in[0] = (unsigned char)i;
        CHECK(cm_buffer_write(b, (size_t)(i % 3), in, 33));
        CHECK(cm_buffer_read(b, 0, out, sizeof out));
        cr_assert_eq(out[i % 3], (unsigned char)i);
    }
    sm_stats(&after);
    cr_assert_eq(after.live_objects, before.live_objects,
                 "%ld Metal objects piled up in the outer pool over 10,000 transfers",
                 after.live_objects - before.live_objects);
    cr_assert_gt(after.autoreleases, before.autoreleases, "transfers autorelease objects");
    cm_buffer_release(b);
    pop(outer);
    return NULL;
}

Test(metal_ops, ten_thousand_transfers_leave_nothing_in_the_callers_pool) {
    cm_device *d = metal();
    pthread_t thread;
    cr_assert_eq(pthread_create(&thread, NULL, transfer_loop, d), 0);
    pthread_join(thread, NULL);
    cm_device_release(d);
}

/* Index 0 is the system default, then each other device once, by
 * registryID: on every Metal, whatever its number of GPUs (one on most
 * Macs). softmetal plays several GPUs (SOFTMETAL_DEVICE_COUNT,
 * SOFTMETAL_DEFAULT_DEVICE, read when it loads, so set before the first
 * device call); a Mac ignores the variables. */
Test(metal_ops, devices_are_numbered_default_first_then_each_other_once) {
    setenv("SOFTMETAL_DEVICE_COUNT", "3", 1);
    setenv("SOFTMETAL_DEFAULT_DEVICE", "1", 1);
    const uint32_t n = metal_count();
    cm_device *devs[8];
    uint64_t ids[8];
    const uint32_t m = n < 8 ? n : 8;
    for (uint32_t i = 0; i < m; ++i) {
        CHECK(cm_device_open(CM_DEVICE_METAL, i, &devs[i]));
        cm_device_info info;
        CHECK(cm_device_get_info(devs[i], &info));
        ids[i] = info.registry_id;
    }
    cm__id system_default = NULL;
    CHECK(cm__metal_default_device("test", &system_default));
    cr_assert_eq(ids[0], cm__msg_registryID(system_default), "index 0 is the default device");
    cm__objc_release(system_default);
    for (uint32_t i = 1; i < m; ++i) {
        for (uint32_t j = 0; j < i; ++j)
            cr_assert_neq(ids[i], ids[j], "devices %u and %u are the same GPU", j, i);
        if (i >= 2)
            cr_assert_lt(ids[i - 1], ids[i], "the others by registryID");
    }
    char want[64];
    snprintf(want, sizeof want, "there are %u Metal devices", n);
    EXPECT_FAIL(cm_device_open(CM_DEVICE_METAL, n, &(cm_device *){NULL}), CM_ERR_NO_DEVICE, want);
    for (uint32_t i = 0; i < m; ++i)
        cm_device_release(devs[i]);
}

/* softmetal's SOFTMETAL_DEVICE_COUNT is honoured, so that the tests above
 * and below see several devices on Linux (softmetal's count: needs it). */
Test(metal_ops, softmetal_plays_several_gpus) {
    setenv("SOFTMETAL_DEVICE_COUNT", "3", 1);
    if (!sm_present())
        cr_skip_test("SOFTMETAL_DEVICE_COUNT is softmetal's: this test needs softmetal");
    if (getenv("SOFTMETAL_PERSONA") != NULL && strcmp(getenv("SOFTMETAL_PERSONA"), "") != 0)
        cr_skip_test("a persona fixes its own devices");
    cr_assert_eq(metal_count(), 3, "three devices, each counted once");
}

/* An MTLBuffer of another device is refused, by cm_buffer_wrap_metal and
 * so by a kDLMetal import, naming both devices. */
Test(metal_ops, a_buffer_of_another_device_is_refused_naming_both) {
    setenv("SOFTMETAL_DEVICE_COUNT", "2", 1);
    const uint32_t n = metal_count();
    if (n < 2) /* the counterpart below runs on one */
        cr_skip_test("needs two Metal devices; this system has %u", n);
    cm_device *a = NULL, *b = NULL;
    CHECK(cm_device_open(CM_DEVICE_METAL, 0, &a));
    CHECK(cm_device_open(CM_DEVICE_METAL, 1, &b));
    cm_device_info ia, ib;
    CHECK(cm_device_get_info(a, &ia));
    CHECK(cm_device_get_info(b, &ib));
    cm_tensor *t = tensor_1d(b, CM_FLOAT32, 8, CM_STORAGE_DEFAULT);
    cm_tensor_info info;
    CHECK(cm_tensor_get_info(t, &info));
    cm_buffer_info binfo;
    CHECK(cm_buffer_get_info(info.buffer, &binfo));
    cm_buffer *w = NULL;
    EXPECT_FAIL(cm_buffer_wrap_metal(a, &(cm_metal_buffer_desc){.buffer = binfo.native}, &w),
                CM_ERR_INVALID_ARGUMENT, "belongs to the MTLDevice");
    cr_assert_null(w);
    char want[300];
    snprintf(want, sizeof want, "\"%s\" (registryID %" PRIu64 "), not to this device, \"%s\"",
             ib.name, ib.registry_id, ia.name);
    cr_assert(strstr(cm_last_error(), want) != NULL, "%s", cm_last_error());
    cm_dlpack_managed m;
    CHECK(cm_dlpack_export(t, NULL, &m));
    cm_tensor *imported = NULL;
    EXPECT_FAIL(cm_dlpack_import(m.legacy, &(cm_dlpack_import_desc){.device = a}, &imported),
                CM_ERR_INVALID_ARGUMENT, "belongs to the MTLDevice");
    cr_assert(strstr(cm_last_error(), want) != NULL, "%s", cm_last_error());
    /* The import's own words: its function and its argument. */
    cr_assert(strncmp(cm_last_error(), "cm_dlpack_import: dl_tensor.data belongs", 40) == 0, "%s",
              cm_last_error());
    m.legacy->deleter(m.legacy); /* a failed import leaves it to us */
    cm_tensor_release(t);
    cm_device_release(a);
    cm_device_release(b);
}

/* A kDLMetal export names its device by cmetal's index, and an import
 * with no device given opens that same device. */
Test(metal_ops, kdlmetal_exports_name_the_device_index) {
    setenv("SOFTMETAL_DEVICE_COUNT", "2", 1);
    const uint32_t n = metal_count();
    if (n < 2) /* the counterpart below runs on one */
        cr_skip_test("needs two Metal devices; this system has %u", n);
    cm_device *b = NULL;
    CHECK(cm_device_open(CM_DEVICE_METAL, 1, &b));
    cm_tensor *t = tensor_1d(b, CM_FLOAT32, 8, CM_STORAGE_DEFAULT);
    cm_dlpack_managed m;
    CHECK(cm_dlpack_export(t, NULL, &m));
    cr_assert_eq(m.legacy->dl_tensor.device.device_type, kDLMetal);
    cr_assert_eq(m.legacy->dl_tensor.device.device_id, 1, "device_id is cmetal's index");
    cm_tensor *back = NULL;
    CHECK(cm_dlpack_import(m.legacy, NULL, &back));
    cm_tensor_info ti;
    CHECK(cm_tensor_get_info(back, &ti));
    cm_device *on = NULL;
    CHECK(cm_buffer_get_device(ti.buffer, &on));
    cm_device_info want, got;
    CHECK(cm_device_get_info(b, &want));
    CHECK(cm_device_get_info(on, &got));
    cr_assert_eq(got.registry_id, want.registry_id, "the import opened device 1");
    cm_tensor_release(back);
    EXPECT_FAIL(
        cm_dlpack_export(t, &(cm_dlpack_export_desc){.device_type = kDLMetal, .device_id = 2}, &m),
        CM_ERR_INVALID_ARGUMENT, "desc->device_id = 2: the tensor is on kDLMetal device 1");
    cm_tensor_release(t);
    cm_device_release(b);
}

/* The one-device counterpart of the two above, on every Metal: a buffer of
 * the device itself is taken, an export names device 0, its import opens
 * device 0, and an export to a device the tensor is not on is refused. */
Test(metal_ops, buffers_and_exports_of_device_zero_stay_on_device_zero) {
    cm_device *a = metal();
    cm_tensor *t = tensor_1d(a, CM_FLOAT32, 8, CM_STORAGE_DEFAULT);
    cm_tensor_info info;
    CHECK(cm_tensor_get_info(t, &info));
    cm_buffer_info binfo;
    CHECK(cm_buffer_get_info(info.buffer, &binfo));
    cm_buffer *w = NULL;
    CHECK(cm_buffer_wrap_metal(a, &(cm_metal_buffer_desc){.buffer = binfo.native}, &w));
    cm_buffer_release(w);
    cm_dlpack_managed m;
    CHECK(cm_dlpack_export(t, NULL, &m));
    cr_assert_eq(m.legacy->dl_tensor.device.device_type, kDLMetal);
    cr_assert_eq(m.legacy->dl_tensor.device.device_id, 0);
    cm_tensor *back = NULL;
    CHECK(cm_dlpack_import(m.legacy, NULL, &back));
    cm_tensor_info ti;
    CHECK(cm_tensor_get_info(back, &ti));
    cm_device *on = NULL;
    CHECK(cm_buffer_get_device(ti.buffer, &on));
    cm_device_info want, got;
    CHECK(cm_device_get_info(a, &want));
    CHECK(cm_device_get_info(on, &got));
    cr_assert_eq(got.registry_id, want.registry_id, "the import opened device 0");
    cm_tensor_release(back);
    EXPECT_FAIL(
        cm_dlpack_export(t, &(cm_dlpack_export_desc){.device_type = kDLMetal, .device_id = 1}, &m),
        CM_ERR_INVALID_ARGUMENT, "desc->device_id = 1: the tensor is on kDLMetal device 0");
    cm_tensor_release(t);
    cm_device_release(a);
}

/* Completed handlers may run after waitUntilCompleted returns (softmetal
 * tosses a seeded coin per command buffer): a sync reads the failure from
 * the command buffer itself, so every sync reports the failure it waited
 * for, and a stream released before a late handler runs is never touched. */
Test(metal_ops, each_sync_reports_the_failure_it_waited_for) {
    require_softmetal_without_debug_layer();
    setenv("SOFTMETAL_SEED", "20261123", 1); /* read as each queue is made */
    cm_device *d = metal();
    cm_tensor *a = tensor_1d(d, CM_FLOAT32, 64, CM_STORAGE_DEFAULT);
    const double one = 1.0;
    for (int i = 0; i < 16; ++i) {
        cm_stream *s = NULL;
        CHECK(cm_stream_create(d, &s));
        cm__metal_set_threadgroup_override(2048); /* over softmetal's limit of 1024 */
        CHECK(cm_fill(a, CM_FLOAT64, &one, s));
        cm__metal_set_threadgroup_override(0);
        EXPECT_FAIL(cm_stream_synchronize(s), CM_ERR_DEVICE, "threadsPerThreadgroup");
        CHECK(cm_stream_synchronize(s)); /* reported once */
        CHECK(cm_stream_release(s));     /* a late handler must not touch it */
    }
    sm_quiesce(); /* every late handler has run (ASan and valgrind watch) */
    cm_tensor_release(a);
    cm_device_release(d);
}

/* "Big temporary in, small result out": each input is released right after
 * the op that reads it, while the small outputs, written by the same
 * command buffers, live on. A command buffer retains everything it uses, so
 * cmetal must keep none past its completion: once synchronized, the inputs'
 * MTLBuffers and bytes are all given back. */
static void big_in_small_out(bool reduce) {
    enum { ROUNDS = 6, N = 1 << 16 }; /* 256 KiB float32 inputs */
    cm_device *d = metal();
    cm_tensor *out[ROUNDS + 1];
    const float one = 1;
    long buffers0 = 0, bytes0 = 0, out_bytes = 0;
    const bool sm = sm_present(); /* the counts are softmetal's; the values hold anywhere */
    for (int i = 0; i <= ROUNDS; ++i) {
        cm_tensor *big = tensor_1d(d, CM_FLOAT32, N, CM_STORAGE_SHARED);
        CHECK(cm_fill(big, CM_FLOAT32, &one, NULL));
        if (reduce) {
            out[i] = new_tensor(d, CM_FLOAT32, 0, NULL);
            CHECK(cm_reduce(CM_REDUCE_SUM, big, CM_AXIS_ALL, out[i], NULL));
        } else {
            out[i] = tensor_1d(d, CM_FLOAT32, 4, CM_STORAGE_SHARED);
            cm_tensor *head = NULL;
            CHECK(cm_tensor_slice(big, 0, 0, 4, 1, &head));
            CHECK(cm_copy(head, out[i], NULL));
            cm_tensor_release(head);
        }
        cm_tensor_release(big);
        if (i == 0 && sm) { /* the first round compiles the kernels: the baseline */
            CHECK(cm_device_synchronize(d));
            struct softmetal_stats s;
            sm_stats(&s);
            buffers0 = sm_live("SMBuffer");
            bytes0 = s.live_buffer_bytes;
            /* What one output holds (softmetal rounds allocations up; 0
             * when it comes from a heap already made: small buffers share
             * heaps, counted once). */
            cm_tensor *probe = reduce ? new_tensor(d, CM_FLOAT32, 0, NULL)
                                      : tensor_1d(d, CM_FLOAT32, 4, CM_STORAGE_SHARED);
            sm_stats(&s);
            out_bytes = s.live_buffer_bytes - bytes0;
            cm_tensor_release(probe);
        }
    }
    CHECK(cm_device_synchronize(d));
    if (sm) {
        struct softmetal_stats s;
        sm_stats(&s);
        cr_assert_eq(sm_live("SMBuffer"), buffers0 + ROUNDS,
                     "%ld MTLBuffers beyond the %d outputs: released inputs are kept alive",
                     sm_live("SMBuffer") - buffers0 - ROUNDS, ROUNDS);
        cr_assert_eq(s.live_buffer_bytes, bytes0 + ROUNDS * out_bytes,
                     "%ld bytes beyond the outputs' %ld", s.live_buffer_bytes - bytes0,
                     ROUNDS * out_bytes);
    }
    for (int i = 0; i <= ROUNDS; ++i) {
        float x = 0;
        CHECK(cm_tensor_get_element(out[i], reduce ? NULL : (int64_t[]){3}, CM_FLOAT32, &x));
        cr_assert_eq(x, reduce ? (float)N : 1.0f);
        cm_tensor_release(out[i]);
    }
    cm_device_release(d);
}

Test(metal_ops, released_inputs_of_live_outputs_are_given_back) {
    big_in_small_out(false);
}

Test(metal_ops, released_inputs_of_live_reductions_are_given_back) {
    big_in_small_out(true);
}

/* A zero-copy DLPack import of host memory: its deleter runs once the
 * device is done with it (release + synchronize), though an unrelated
 * tensor written by the same command buffer lives on. */
static atomic_int import_deleted;
static void import_deleter(DLManagedTensor *self) {
    atomic_fetch_add(&import_deleted, 1);
    free(self);
}

Test(metal_ops, a_released_import_is_given_back_while_its_command_buffer_outputs_live) {
    cm_device *d = metal();
    const int64_t n = CM_METAL_PAGE_SIZE / 4;
    float *page = aligned_alloc(CM_METAL_PAGE_SIZE, CM_METAL_PAGE_SIZE);
    for (int64_t i = 0; i < n; ++i)
        page[i] = 1.0f;
    int64_t shape[1] = {n};
    DLManagedTensor *m = calloc(1, sizeof *m);
    m->deleter = import_deleter;
    m->dl_tensor = (DLTensor){
        .data = page, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {2, 32, 1}, .shape = shape};
    atomic_store(&import_deleted, 0);
    cm_tensor *t = NULL;
    CHECK(cm_dlpack_import(m, &(cm_dlpack_import_desc){.device = d, .copy = CM_COPY_NEVER}, &t));
    cm_tensor *sum = new_tensor(d, CM_FLOAT32, 0, NULL);
    CHECK(cm_reduce(CM_REDUCE_SUM, t, CM_AXIS_ALL, sum, NULL));
    cm_tensor_release(t);
    CHECK(cm_device_synchronize(d));
    /* Metal may hold a completed command buffer (and so the buffer) a moment */
    cr_assert_eq(sm_await_count(&import_deleted, 1), 1,
                 "the deleter ran after release + synchronize, with the sum still alive");
    float x = 0;
    CHECK(cm_tensor_get_element(sum, NULL, CM_FLOAT32, &x));
    cr_assert_eq(x, (float)n);
    cm_tensor_release(sum);
    free(page);
    cm_device_release(d);
}

/* ------------------------------------------------------------ capabilities */

/* A device's family answer is changed through the Objective-C runtime's
 * public API (class_replaceMethod on the MTLDevice's class), and the
 * libraries the runtime asks the device to compile are recorded: this is
 * how a GPU without SIMD-group functions (Apple's paravirtual device) looks
 * to cmetal, on any Metal. */
typedef cm__fnptr (*replace_method_fn)(cm__class cls, cm__sel sel, cm__fnptr imp,
                                       const char *types);

static void *objc_fn(const char *name) {
#if defined(__APPLE__)
    void *lib = dlopen("/usr/lib/libobjc.A.dylib", RTLD_NOW | RTLD_LOCAL);
#else
    void *lib = dlopen("libobjc.so.4", RTLD_NOW | RTLD_LOCAL);
#endif
    cr_assert_not_null(lib, "the Objective-C runtime: %s", dlerror());
    void *sym = dlsym(lib, name); /* the library stays open: the runtime uses it */
    cr_assert_not_null(sym, "the Objective-C runtime exports %s", name);
    return sym;
}

static cm__objc_bool no_family(cm__id self, cm__sel sel, cm__int family) {
    (void)self, (void)sel, (void)family;
    return 0;
}

typedef cm__id (*new_library_fn)(cm__id self, cm__sel sel, cm__id source, cm__id options,
                                 cm__id *error);
static new_library_fn g_new_library;
static atomic_int g_sources, g_simd_sources;

/* newLibraryWithSource:options:error:, recording what is compiled. */
static cm__id recording_new_library(cm__id self, cm__sel sel, cm__id source, cm__id options,
                                    cm__id *error) {
    const char *text = source != NULL ? cm__msg_UTF8String(source) : NULL;
    atomic_fetch_add(&g_sources, 1);
    if (text != NULL && strstr(text, "simd_") != NULL)
        atomic_fetch_add(&g_simd_sources, 1);
    return g_new_library(self, sel, source, options, error);
}

/* Replaces the methods on the class of the first device's MTLDevice. */
static void watch_devices(bool deny_families) {
    cm_device *d = metal();
    void *native = NULL;
    CHECK(cm_device_get_metal_device(d, &native));
    replace_method_fn replace = NULL;
    void *sym = objc_fn("class_replaceMethod");
    memcpy(&replace, &sym, sizeof replace);
    /* -[NSObject class] (GNU's object_getClass is inline, not exported) */
    const cm__sel class_sel = cm__objc_rt.sel_register_name("class");
    cm__class (*send_class)(cm__id, cm__sel) = NULL;
    const cm__fnptr class_imp = CM__OBJC_IMP((cm__id)native, class_sel);
    memcpy(&send_class, &class_imp, sizeof send_class);
    cm__class cls = send_class((cm__id)native, class_sel);
    cr_assert_not_null(cls);
    cm__fnptr imp;
    memcpy(&imp, &(new_library_fn){recording_new_library}, sizeof imp);
    cm__fnptr old = replace(cls, CM__SEL(newLibraryWithSource_options_error), imp, "@@:@@^@");
    cr_assert_not_null(old, "the device class had newLibraryWithSource:options:error:");
    memcpy(&g_new_library, &old, sizeof old);
    if (deny_families) {
        memcpy(&imp, &(cm__objc_bool(*)(cm__id, cm__sel, cm__int)){no_family}, sizeof imp);
        cr_assert_not_null(replace(cls, CM__SEL(supportsFamily), imp, "c@:q"));
    }
    cm_device_release(d);
}

/* Sums, maxima and a split sum of int32 and float32 rows, against the host. */
static void check_reductions(cm_device *d) {
    const int64_t rows = 3, cols = 20000; /* 20000 >= 8192: split into chunks */
    const int64_t shape[2] = {rows, cols}, n3[1] = {rows};
    cm_tensor *xi = new_tensor(d, CM_INT32, 2, shape), *xf = new_tensor(d, CM_FLOAT32, 2, shape);
    int32_t *pi = NULL;
    float *pf = NULL;
    CHECK(cm_tensor_host_write(xi, CM_INT32, (void **)&pi));
    CHECK(cm_tensor_host_write(xf, CM_FLOAT32, (void **)&pf));
    int64_t want_sum[3] = {0}, want_max[3] = {INT64_MIN, INT64_MIN, INT64_MIN};
    float want_fmax[3] = {-INFINITY, -INFINITY, -INFINITY};
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            const int32_t v = (int32_t)((r * 7919 + c * 104729) % 2001) - 1000;
            pi[r * cols + c] = v;
            pf[r * cols + c] = (float)v * 0.25f;
            want_sum[r] += v;
            want_max[r] = v > want_max[r] ? v : want_max[r];
            want_fmax[r] = pf[r * cols + c] > want_fmax[r] ? pf[r * cols + c] : want_fmax[r];
        }
    cm_tensor *s = new_tensor(d, CM_INT64, 1, n3), *m = new_tensor(d, CM_INT64, 1, n3),
              *fm = new_tensor(d, CM_FLOAT32, 1, n3), *small = new_tensor(d, CM_INT64, 1, n3);
    cm_tensor *head = NULL; /* 3 x 300: one threadgroup per row, unsplit */
    CHECK(cm_tensor_slice(xi, 1, 0, 300, 1, &head));
    CHECK(cm_reduce(CM_REDUCE_SUM, xi, 1, s, NULL));
    CHECK(cm_reduce(CM_REDUCE_MAX, xi, 1, m, NULL));
    CHECK(cm_reduce(CM_REDUCE_MAX, xf, 1, fm, NULL));
    CHECK(cm_reduce(CM_REDUCE_SUM, head, 1, small, NULL));
    for (int64_t r = 0; r < rows; ++r) {
        int64_t want_small = 0;
        for (int64_t c = 0; c < 300; ++c)
            want_small += pi[r * cols + c];
        cr_assert_eq(get_at(s, &r).i64, want_sum[r], "row %lld sum", (long long)r);
        cr_assert_eq(get_at(m, &r).i64, want_max[r], "row %lld max", (long long)r);
        cr_assert_eq(get_at(fm, &r).f32, want_fmax[r], "row %lld float max", (long long)r);
        cr_assert_eq(get_at(small, &r).i64, want_small, "row %lld sum of 300", (long long)r);
    }
    cm_tensor_release(head);
    cm_tensor_release(small);
    cm_tensor_release(s);
    cm_tensor_release(m);
    cm_tensor_release(fm);
    cm_tensor_release(xi);
    cm_tensor_release(xf);
}

/* A device in neither Apple7+ nor Mac2 (supportsFamily: says no to all)
 * gets reductions that need no SIMD-group function: no source the runtime
 * compiles for it uses one, and the results are right (threadgroup memory
 * and barriers, also split into chunks). */
Test(metal_ops, reductions_without_simd_group_functions_use_threadgroup_memory) {
    watch_devices(true);
    cm_device *d = metal();
    cm_device_info info;
    CHECK(cm_device_get_info(d, &info));
    cr_assert_eq(info.gpu_families, 0, "supportsFamily: answers no: 0x%x", info.gpu_families);
    check_reductions(d);
    cr_assert_geq(atomic_load(&g_sources), 1, "the ops' library was compiled");
    cr_assert_eq(atomic_load(&g_simd_sources), 0,
                 "%d of %d sources compiled for a device without SIMD-group functions use them",
                 atomic_load(&g_simd_sources), atomic_load(&g_sources));
    cm_device_release(d);
}

/* The counterpart on the device as it is: where it has SIMD-group
 * functions (Apple7+ or Mac2) and 32 or 64 lanes the reductions use them
 * (the library of SIMD-group kernels is compiled); the results are right
 * either way. */
Test(metal_ops, reductions_use_simd_group_functions_where_the_device_has_them) {
    watch_devices(false);
    cm_device *d = metal();
    cm_device_info info;
    CHECK(cm_device_get_info(d, &info));
    check_reductions(d);
    const bool simd = (info.gpu_families & (CM_GPU_FAMILY_APPLE7 | CM_GPU_FAMILY_MAC2)) != 0;
    if (simd)
        cr_assert_geq(atomic_load(&g_simd_sources), 1, "families 0x%x: the SIMD kernels are used",
                      info.gpu_families);
    else
        cr_assert_eq(atomic_load(&g_simd_sources), 0, "families 0x%x", info.gpu_families);
    cm_device_release(d);
}
