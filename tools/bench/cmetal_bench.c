/* SPDX-License-Identifier: MIT */
/* cmetal-bench: op throughput on the CPU device, each figure as a ratio to
 * memcpy measured in the same run.
 *
 *   cmetal-bench [--json] [--mib N] [--reps N] [--threads N[,N...]] [--device cpu|metal]
 *
 * --threads N (N >= 2) measures every op on a CPU device opened with N
 * threads (cm_device_desc.cpu_threads) and on the shared 1-thread device:
 * the ratios are those at N threads (memcpy stays one thread), and a
 * column gives the speed-up against 1 thread. A list (1,2,4,8,16) measures
 * every count in turn and ends with the scaling curve.
 *
 * The ceiling: beside each op and memcpy, the machine's own bandwidth at
 * the same thread count is measured (plain threads, no cmetal): reads
 * (vector loads summed, each thread a slab) for ops that only read
 * (reductions), memset of the same bytes for fills, and memcpy for ops
 * that read and write (each thread a slab). "ceil" is the op's bandwidth
 * over that, so 1.0 means "as fast as this machine reads (sets, copies)
 * those bytes with that many threads". On a shared host the machine's
 * bandwidth drifts between runs, and the best op and the best ceiling may
 * come from different moments; "ceil med" is the median over the rounds of
 * the ratio of the op to the ceiling run just before it (a disturbed round
 * moves it less than it moves a best time, given many --reps).
 *
 * --device metal measures the Metal device instead (bench_metal.c):
 * dispatch overhead, allocation and private-storage transfers.
 *
 * Bandwidth counts the bytes an op reads plus the bytes it writes; memcpy
 * of S bytes moves 2S. A ratio is op bandwidth / memcpy bandwidth, so 1.0
 * means "as fast as memcpy moving as many bytes". memcpy runs between two
 * buffers of the CPU device (the same allocator as the ops), alternating
 * with the op being measured, so that both see the same machine load; each
 * time is the best of --reps runs after one warm-up run. The DLPack round
 * trip (export + import + release in C, as cmetal-dlpack-bench measures
 * it) is printed beside the ratios, in nanoseconds. Never used as a test:
 * no timing is asserted anywhere. */
#include <cmetal/cmetal.h>

#include "bench_metal.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Internal (runtime/cpu/cpu_ops.h): the float16 conversion instructions in
 * use, and the transpose's store hook (0 by size, 1 streaming, -1 not). */
const char *cm__cpu_cast_f16_hardware(void);
void cm__cpu_copy_force_streaming(int mode);

static double now_s(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, cm_status s) {
    fprintf(stderr, "cmetal-bench: %s: %s (%s)\n", what, cm_status_name(s), cm_last_error());
    exit(1);
}
#define TRY(expr)                                                                                  \
    do {                                                                                           \
        cm_status s_ = (expr);                                                                     \
        if (s_ != CM_OK)                                                                           \
            die(#expr, s_);                                                                        \
    } while (0)

typedef struct bench_case {
    const char *name;
    const char *note;
    double goal;      /* 0: no goal */
    double bytes;     /* read + written */
    double seconds;   /* best */
    double memcpy_bw; /* bytes moved per second by memcpy, same run */
    double ratio;
    double ceiling_bw;  /* the machine's reads, memset or copies, same threads, same run */
    double ceiling;     /* op bandwidth / ceiling_bw */
    double ceiling_med; /* median over rounds of op bandwidth / the ceiling's in that round */
    const char *ceiling_kind;
} bench_case;

typedef enum which {
    B_COPY,
    B_TRANSPOSE,
    B_TRANSPOSE_PLAIN,
    B_TRANSPOSE_STREAM,
    B_CAST_F32_F16,
    B_CAST_F16_F32,
    B_CAST_F32_BF16,
    B_CAST_BF16_F32,
    B_FILL,
    B_FILL_STRIDED,
    B_ADD_F32,
    B_SUM_F32,
    B_SUM_AXIS0_F32,
    B_SUM_AXIS1_F32,
    B_MEAN_F32,
    B_MAX_F32,
    B_MIN_AXIS0_F32,
    B_SUM_F16,
    B_SUM_AXIS0_F16,
    B_SUM_BF16,
    B_SUM_F64,
    B_SUM_I32,
    B_SUM_I8,
    B_MAX_I8,
    B_MAX_I32_AXIS0,
    B_COUNT
} which;

/* Plain threads for the ceilings: a job runs on `n` threads (the caller's
 * included), each over its slab; started by a generation count, joined by
 * a count of the threads done (no pthread barriers: macOS has none). */
typedef enum ceil_kind { C_READ, C_MEMSET, C_COPY } ceil_kind;

typedef struct ceil_pool {
    int n;
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    uint64_t generation;
    int finished;
    pthread_t threads[CM_CPU_MAX_THREADS];
    ceil_kind kind;
    size_t bytes;
    char *src, *dst;
    bool quit;
    uint64_t sink[CM_CPU_MAX_THREADS * 8];
} ceil_pool;

typedef struct bench_env {
    cm_device *dev;
    size_t bytes; /* the working size, MiB-aligned */
    int reps;
    void *m_src, *m_dst;
    const char *f16_note;
    ceil_pool *ceil;
} bench_env;

typedef uint64_t ceil_v4 __attribute__((vector_size(32)));

/* The read ceiling's loop: 32-byte loads added into eight integer vectors
 * (no arithmetic in the way), each line asked for 2 KiB ahead into L1 and
 * 16 KiB ahead into L2, the fastest one-core reads tools/bench/read_roofline.c
 * found on a Xeon host; AVX2 where the CPU has it. */
/* __builtin_cpu_supports needs compiler-rt's CPU model, which not every
 * macOS link has (zig's does not): Linux only. */
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) &&     \
    defined(__linux__)
#define CEIL_HAS_AVX2 1
#else
#define CEIL_HAS_AVX2 0
#endif
#define CEIL_READ_BODY                                                                             \
    ceil_v4 a[8] = {{0}};                                                                          \
    size_t k = 0;                                                                                  \
    for (; k + 256 <= len; k += 256) {                                                             \
        for (size_t l = 0; l < 256; l += 64) {                                                     \
            __builtin_prefetch(p + k + l + 2048, 0, 3);                                            \
            __builtin_prefetch(p + k + l + 16384, 0, 1);                                           \
        }                                                                                          \
        for (int j = 0; j < 8; ++j) {                                                              \
            ceil_v4 x;                                                                             \
            memcpy(&x, p + k + 32 * (size_t)j, sizeof x);                                          \
            a[j] += x;                                                                             \
        }                                                                                          \
    }                                                                                              \
    uint64_t s = 0;                                                                                \
    for (int j = 0; j < 8; ++j)                                                                    \
        s += a[j][0] + a[j][1] + a[j][2] + a[j][3];                                                \
    for (; k < len; ++k)                                                                           \
        s += (unsigned char)p[k];                                                                  \
    return s;
#if CEIL_HAS_AVX2
__attribute__((target("avx2"))) static uint64_t ceil_read_avx2(const char *p, size_t len) {
    CEIL_READ_BODY
}
#endif
static uint64_t ceil_read_plain(const char *p, size_t len) {
    CEIL_READ_BODY
}

static uint64_t ceil_read(const char *p, size_t len) {
#if CEIL_HAS_AVX2
    if (__builtin_cpu_supports("avx2"))
        return ceil_read_avx2(p, len);
#endif
    return ceil_read_plain(p, len);
}

/* Reads slab t of the job's bytes (ceil_read), sets it or copies it. */
static void ceil_slab(ceil_pool *c, int t) {
    const size_t per = (c->bytes / (size_t)c->n) & ~(size_t)4095;
    const size_t begin = per * (size_t)t;
    const size_t len = t == c->n - 1 ? c->bytes - begin : per;
    if (c->kind == C_MEMSET) {
        memset(c->dst + begin, 0x3f, len);
    } else if (c->kind == C_COPY) {
        memcpy(c->dst + begin, c->src + begin, len);
    } else {
        c->sink[t * 8] = ceil_read(c->src + begin, len);
    }
}

typedef struct ceil_arg {
    ceil_pool *c;
    int t;
} ceil_arg;

static void *ceil_main(void *p) {
    ceil_arg *a = p;
    ceil_pool *c = a->c;
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&c->lock);
        while (!c->quit && c->generation == seen)
            pthread_cond_wait(&c->wake, &c->lock);
        seen = c->generation;
        const bool quit = c->quit;
        pthread_mutex_unlock(&c->lock);
        if (quit)
            break;
        ceil_slab(c, a->t);
        pthread_mutex_lock(&c->lock);
        if (++c->finished == c->n - 1)
            pthread_cond_signal(&c->done);
        pthread_mutex_unlock(&c->lock);
    }
    free(a);
    return NULL;
}

static ceil_pool *ceil_open(int n, char *src, char *dst, size_t bytes) {
    ceil_pool *c = calloc(1, sizeof *c);
    if (c == NULL || n < 1 || n > CM_CPU_MAX_THREADS) {
        fprintf(stderr, "cmetal-bench: no memory for the ceiling threads\n");
        exit(1);
    }
    c->n = n;
    c->src = src;
    c->dst = dst;
    c->bytes = bytes;
    if (pthread_mutex_init(&c->lock, NULL) != 0 || pthread_cond_init(&c->wake, NULL) != 0 ||
        pthread_cond_init(&c->done, NULL) != 0) {
        fprintf(stderr, "cmetal-bench: could not make the ceiling threads' locks\n");
        exit(1);
    }
    for (int t = 1; t < n; ++t) {
        ceil_arg *a = malloc(sizeof *a);
        if (a == NULL ||
            (a->c = c, a->t = t, pthread_create(&c->threads[t], NULL, ceil_main, a)) != 0) {
            fprintf(stderr, "cmetal-bench: could not start the ceiling threads\n");
            exit(1);
        }
    }
    return c;
}

static void ceil_close(ceil_pool *c) {
    pthread_mutex_lock(&c->lock);
    c->quit = true;
    pthread_cond_broadcast(&c->wake);
    pthread_mutex_unlock(&c->lock);
    for (int t = 1; t < c->n; ++t)
        pthread_join(c->threads[t], NULL);
    pthread_cond_destroy(&c->done);
    pthread_cond_destroy(&c->wake);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static void run_ceiling(void *p) {
    ceil_pool *c = p;
    pthread_mutex_lock(&c->lock);
    c->finished = 0;
    c->generation++;
    pthread_cond_broadcast(&c->wake);
    pthread_mutex_unlock(&c->lock);
    ceil_slab(c, 0);
    pthread_mutex_lock(&c->lock);
    while (c->finished < c->n - 1)
        pthread_cond_wait(&c->done, &c->lock);
    pthread_mutex_unlock(&c->lock);
}

/* The ceiling for an op: reads for reductions, memset for fills, copies
 * for the rest. */
static ceil_kind ceiling_of(which w) {
    if (w == B_FILL || w == B_FILL_STRIDED)
        return C_MEMSET;
    return w >= B_SUM_F32 ? C_READ : C_COPY;
}

static cm_tensor *tensor(cm_device *dev, cm_dtype d, int32_t ndim, const int64_t *shape) {
    cm_tensor_desc desc = {.dtype = d, .ndim = ndim, .shape = shape};
    cm_tensor *t = NULL;
    TRY(cm_tensor_create(dev, &desc, &t));
    const double zero = 0.5;
    TRY(cm_fill(t, CM_FLOAT64, &zero, NULL)); /* fault the pages in */
    return t;
}

static int compare_doubles(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Best times of fn, ref and ceil, run in turn; *ceil_over_fn: the median
 * over the rounds of the ceiling's time over fn's. */
static void best_of_three(int reps, void (*fn)(void *), void *ctx, void (*ref)(void *),
                          void *ref_ctx, ceil_pool *ceil, double *best_fn, double *best_ref,
                          double *best_ceil, double *ceil_over_fn) {
    double *rounds = calloc((size_t)reps, sizeof *rounds);
    if (rounds == NULL) {
        fprintf(stderr, "cmetal-bench: no memory for %d rounds\n", reps);
        exit(1);
    }
    fn(ctx); /* warm-up */
    ref(ref_ctx);
    run_ceiling(ceil);
    *best_fn = *best_ref = *best_ceil = 1e30;
    for (int r = 0; r < reps; ++r) {
        double t0 = now_s();
        ref(ref_ctx);
        double t = now_s() - t0;
        if (t < *best_ref)
            *best_ref = t;
        t0 = now_s();
        run_ceiling(ceil);
        const double t_ceil = now_s() - t0;
        if (t_ceil < *best_ceil)
            *best_ceil = t_ceil;
        t0 = now_s();
        fn(ctx);
        t = now_s() - t0;
        if (t < *best_fn)
            *best_fn = t;
        rounds[r] = t_ceil / t;
    }
    qsort(rounds, (size_t)reps, sizeof *rounds, compare_doubles);
    *ceil_over_fn = reps % 2 ? rounds[reps / 2] : 0.5 * (rounds[reps / 2 - 1] + rounds[reps / 2]);
    free(rounds);
}

typedef struct op_ctx {
    which w;
    cm_tensor *a, *b, *out;
    bench_env *env;
} op_ctx;

static void run_memcpy(void *p) {
    bench_env *e = p;
    memcpy(e->m_dst, e->m_src, e->bytes);
}

static void run_op(void *p) {
    op_ctx *c = p;
    const double v = 1.25;
    switch (c->w) {
    case B_COPY:
    case B_TRANSPOSE: TRY(cm_copy(c->a, c->out, NULL)); break;
    case B_TRANSPOSE_PLAIN:
    case B_TRANSPOSE_STREAM:
        cm__cpu_copy_force_streaming(c->w == B_TRANSPOSE_STREAM ? 1 : -1);
        TRY(cm_copy(c->a, c->out, NULL));
        cm__cpu_copy_force_streaming(0);
        break;
    case B_CAST_F32_F16:
    case B_CAST_F16_F32:
    case B_CAST_F32_BF16:
    case B_CAST_BF16_F32: TRY(cm_cast(c->a, c->out, NULL)); break;
    case B_FILL:
    case B_FILL_STRIDED: TRY(cm_fill(c->out, CM_FLOAT64, &v, NULL)); break;
    case B_ADD_F32: TRY(cm_binary(CM_BINARY_ADD, c->a, c->b, c->out, NULL)); break;
    case B_SUM_F32:
    case B_SUM_F16:
    case B_SUM_BF16:
    case B_SUM_F64:
    case B_SUM_I32:
    case B_SUM_I8: TRY(cm_reduce(CM_REDUCE_SUM, c->a, CM_AXIS_ALL, c->out, NULL)); break;
    case B_MEAN_F32: TRY(cm_reduce(CM_REDUCE_MEAN, c->a, 1, c->out, NULL)); break;
    case B_MAX_F32:
    case B_MAX_I8: TRY(cm_reduce(CM_REDUCE_MAX, c->a, CM_AXIS_ALL, c->out, NULL)); break;
    case B_MIN_AXIS0_F32: TRY(cm_reduce(CM_REDUCE_MIN, c->a, 0, c->out, NULL)); break;
    case B_MAX_I32_AXIS0: TRY(cm_reduce(CM_REDUCE_MAX, c->a, 0, c->out, NULL)); break;
    case B_SUM_AXIS1_F32: TRY(cm_reduce(CM_REDUCE_SUM, c->a, 1, c->out, NULL)); break;
    case B_SUM_AXIS0_F32:
    case B_SUM_AXIS0_F16: TRY(cm_reduce(CM_REDUCE_SUM, c->a, 0, c->out, NULL)); break;
    default: break;
    }
}

static void measure(bench_env *env, which w, bench_case *out) {
    const int64_t n4 = (int64_t)(env->bytes / 4); /* float32 elements */
    int64_t side = 1;
    while ((side * 2) * (side * 2) <= n4)
        side *= 2;
    op_ctx c = {.w = w, .env = env};
    int64_t flat[1] = {n4}, sq[2] = {side, side};
    switch (w) {
    case B_COPY:
        c.a = tensor(env->dev, CM_FLOAT32, 1, flat);
        c.out = tensor(env->dev, CM_FLOAT32, 1, flat);
        *out = (bench_case){.name = "copy contiguous f32",
                            .note = "one memcpy after coalescing",
                            .goal = 0.9,
                            .bytes = 2.0 * (double)n4 * 4};
        break;
    case B_TRANSPOSE:
    case B_TRANSPOSE_PLAIN:
    case B_TRANSPOSE_STREAM: {
        cm_tensor *base = tensor(env->dev, CM_FLOAT32, 2, sq);
        TRY(cm_tensor_transpose(base, 0, 1, &c.a));
        cm_tensor_release(base);
        c.out = tensor(env->dev, CM_FLOAT32, 2, sq);
        const double bytes = 2.0 * (double)(side * side) * 4;
        if (w == B_TRANSPOSE)
            *out = (bench_case){.name = "make-contiguous 2-d transpose f32",
                                .note = "256-byte tiles; streaming stores above 4 L2s",
                                .goal = 0.5,
                                .bytes = bytes};
        else if (w == B_TRANSPOSE_PLAIN)
            *out = (bench_case){.name = "  same, ordinary stores (forced)",
                                .note = "dst lines read for ownership",
                                .goal = 0,
                                .bytes = bytes};
        else
            *out = (bench_case){.name = "  same, streaming stores (forced)",
                                .note = "non-temporal (x86-64)",
                                .goal = 0,
                                .bytes = bytes};
        break;
    }
    case B_CAST_F32_F16:
        c.a = tensor(env->dev, CM_FLOAT32, 1, flat);
        c.out = tensor(env->dev, CM_FLOAT16, 1, flat);
        *out = (bench_case){
            .name = "cast f32 -> f16", .note = env->f16_note, .goal = 0.5, .bytes = (double)n4 * 6};
        break;
    case B_CAST_F16_F32:
        c.a = tensor(env->dev, CM_FLOAT16, 1, flat);
        c.out = tensor(env->dev, CM_FLOAT32, 1, flat);
        *out = (bench_case){
            .name = "cast f16 -> f32", .note = env->f16_note, .goal = 0.5, .bytes = (double)n4 * 6};
        break;
    case B_CAST_F32_BF16:
        c.a = tensor(env->dev, CM_FLOAT32, 1, flat);
        c.out = tensor(env->dev, CM_BFLOAT16, 1, flat);
        *out = (bench_case){.name = "cast f32 -> bf16",
                            .note = "vector types, round to nearest even",
                            .goal = 0.5,
                            .bytes = (double)n4 * 6};
        break;
    case B_CAST_BF16_F32:
        c.a = tensor(env->dev, CM_BFLOAT16, 1, flat);
        c.out = tensor(env->dev, CM_FLOAT32, 1, flat);
        *out = (bench_case){.name = "cast bf16 -> f32",
                            .note = "vector types",
                            .goal = 0.5,
                            .bytes = (double)n4 * 6};
        break;
    case B_FILL:
        c.out = tensor(env->dev, CM_FLOAT32, 1, flat);
        *out = (bench_case){.name = "fill f32",
                            .note = "writes only; ceiling: memset",
                            .goal = 0,
                            .bytes = (double)n4 * 4};
        break;
    case B_FILL_STRIDED: {
        /* Every other element of a matrix twice the working size: half
         * its bytes written; the ceiling is memset of those bytes. */
        const int64_t r2[2] = {n4 / 1024, 2048};
        cm_tensor *base = tensor(env->dev, CM_FLOAT32, 2, r2);
        TRY(cm_tensor_slice(base, 1, 0, 2048, 2, &c.out));
        cm_tensor_release(base);
        *out = (bench_case){.name = "fill f32 (stride 2)",
                            .note = "every other element; ceiling: memset of those bytes",
                            .goal = 0,
                            .bytes = (double)n4 * 4};
        break;
    }
    case B_ADD_F32:
        c.a = tensor(env->dev, CM_FLOAT32, 1, flat);
        c.b = tensor(env->dev, CM_FLOAT32, 1, flat);
        c.out = tensor(env->dev, CM_FLOAT32, 1, flat);
        *out = (bench_case){.name = "add f32", .note = "", .goal = 0, .bytes = (double)n4 * 12};
        break;
    case B_SUM_F32:
    case B_SUM_F16:
    case B_SUM_BF16:
    case B_SUM_F64:
    case B_SUM_I32:
    case B_SUM_I8:
    case B_MAX_F32:
    case B_MAX_I8: {
        static const struct {
            which w;
            cm_dtype d;
            const char *name, *note;
        } all[] = {
            {B_SUM_F32, CM_FLOAT32, "sum f32 (all)",
             "pairwise, 16 float64 lanes, quarters side by side"},
            {B_SUM_F16, CM_FLOAT16, "sum f16 (all)",
             "pairwise, fours in float32, then float64 lanes"},
            {B_SUM_BF16, CM_BFLOAT16, "sum bf16 (all)",
             "pairwise, fours in float32, then float64 lanes"},
            {B_SUM_F64, CM_FLOAT64, "sum f64 (all)",
             "pairwise, 16 float64 lanes, quarters side by side"},
            {B_SUM_I32, CM_INT32, "sum i32 (all)", "exact, 64-bit lanes, quarters side by side"},
            {B_SUM_I8, CM_INT8, "sum i8 (all)",
             "exact, 64-bit lanes (vpsadbw, AVX2), quarters side by side"},
            {B_MAX_F32, CM_FLOAT32, "max f32 (all)",
             "NaN-propagating lanes, quarters side by side"},
            {B_MAX_I8, CM_INT8, "max i8 (all)", "quarters side by side"},
        };
        size_t k = 0;
        while (all[k].w != w)
            ++k;
        const int64_t isz = all[k].d == CM_FLOAT64                           ? 8
                            : all[k].d == CM_INT8                            ? 1
                            : all[k].d == CM_INT32 || all[k].d == CM_FLOAT32 ? 4
                                                                             : 2;
        const int64_t n[1] = {(int64_t)env->bytes / isz}; /* the working size in bytes */
        c.a = tensor(env->dev, all[k].d, 1, n);
        c.out = tensor(env->dev, CM_FLOAT64, 0, NULL);
        *out = (bench_case){
            .name = all[k].name, .note = all[k].note, .goal = 0.8, .bytes = (double)env->bytes};
        break;
    }
    case B_SUM_AXIS0_F32:
    case B_SUM_AXIS1_F32:
    case B_MEAN_F32:
    case B_MIN_AXIS0_F32:
    case B_SUM_AXIS0_F16:
    case B_MAX_I32_AXIS0: {
        const bool f16 = w == B_SUM_AXIS0_F16, i32 = w == B_MAX_I32_AXIS0;
        const bool axis1 = w == B_SUM_AXIS1_F32 || w == B_MEAN_F32;
        const int64_t r2[2] = {side, (int64_t)env->bytes / (f16 ? 2 : 4) / side};
        c.a = tensor(env->dev, f16 ? CM_FLOAT16 : i32 ? CM_INT32 : CM_FLOAT32, 2, r2);
        const int64_t o1[1] = {axis1 ? r2[0] : r2[1]};
        c.out = tensor(env->dev, i32 ? CM_INT32 : CM_FLOAT32, 1, o1);
        const char *name = w == B_SUM_AXIS0_F32   ? "sum f32 (axis 0)"
                           : w == B_SUM_AXIS1_F32 ? "sum f32 (axis 1)"
                           : w == B_MEAN_F32      ? "mean f32 (axis 1)"
                           : w == B_MIN_AXIS0_F32 ? "min f32 (axis 0)"
                           : f16                  ? "sum f16 (axis 0)"
                                                  : "max i32 (axis 0)";
        const char *note = axis1                  ? "pairwise per row, quarters side by side"
                           : w == B_SUM_AXIS0_F32 ? "32-row blocks, 8 rows a pass, pairwise"
                           : f16 ? "32-row blocks, 8 rows a pass in fours (float32), pairwise"
                                 : "four rows a pass, accumulators in cache";
        *out = (bench_case){.name = name, .note = note, .goal = 0.8, .bytes = (double)env->bytes};
        break;
    }
    default: break;
    }
    double t_memcpy, t_ceil, ceil_over_op;
    const ceil_kind ck = ceiling_of(w);
    env->ceil->kind = ck;
    env->ceil->bytes = w == B_FILL || w == B_FILL_STRIDED ? (size_t)n4 * 4 : env->bytes;
    best_of_three(env->reps, run_op, &c, run_memcpy, env, env->ceil, &out->seconds, &t_memcpy,
                  &t_ceil, &ceil_over_op);
    out->memcpy_bw = 2.0 * (double)env->bytes / t_memcpy;
    out->ratio = out->bytes / out->seconds / out->memcpy_bw;
    out->ceiling_bw = (double)env->ceil->bytes * (ck == C_COPY ? 2.0 : 1.0) / t_ceil;
    out->ceiling = out->bytes / out->seconds / out->ceiling_bw;
    out->ceiling_med =
        ceil_over_op * out->bytes / ((double)env->ceil->bytes * (ck == C_COPY ? 2.0 : 1.0));
    out->ceiling_kind = ck == C_READ ? "read" : ck == C_MEMSET ? "memset" : "copy";
    cm_tensor_release(c.a);
    cm_tensor_release(c.b);
    cm_tensor_release(c.out);
}

/* ------------------------------------------------------------ DLPack */

static void dlpack_round_trip(const cm_tensor *t, const cm_dlpack_export_desc *desc) {
    cm_dlpack_managed m;
    cm_tensor *back = NULL;
    TRY(cm_dlpack_export(t, desc, &m));
    if (m.versioned != NULL)
        TRY(cm_dlpack_import_versioned(m.versioned, NULL, &back));
    else
        TRY(cm_dlpack_import(m.legacy, NULL, &back));
    cm_tensor_release(back); /* runs the export's deleter */
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nanoseconds per round trip: the median of 5 batches of about 20 ms. */
static double dlpack_ns(const cm_tensor *t, bool versioned) {
    cm_dlpack_export_desc desc = {.max_version = {versioned ? 1 : 0, 0}};
    long iterations = 1000;
    for (;;) {
        double t0 = now_s();
        for (long i = 0; i < iterations; ++i)
            dlpack_round_trip(t, &desc);
        if (now_s() - t0 > 0.02 || iterations > (1L << 26))
            break;
        iterations *= 2;
    }
    double batch[5];
    for (int b = 0; b < 5; ++b) {
        double t0 = now_s();
        for (long i = 0; i < iterations; ++i)
            dlpack_round_trip(t, &desc);
        batch[b] = (now_s() - t0) / (double)iterations * 1e9;
    }
    qsort(batch, 5, sizeof batch[0], cmp_double);
    return batch[2];
}

typedef struct dlpack_case {
    double bytes;
    double ns_legacy, ns_versioned;
} dlpack_case;

static void measure_dlpack(bench_env *env, dlpack_case out[2]) {
    const int64_t sizes[2] = {256, (int64_t)(env->bytes / 4)}; /* 1 KiB and the working size */
    for (int k = 0; k < 2; ++k) {
        cm_tensor *t = tensor(env->dev, CM_FLOAT32, 1, &sizes[k]);
        out[k].bytes = (double)sizes[k] * 4;
        out[k].ns_legacy = dlpack_ns(t, false);
        out[k].ns_versioned = dlpack_ns(t, true);
        cm_tensor_release(t);
    }
}

static void cpu_model(char *buf, size_t cap) {
    snprintf(buf, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL)
        return;
    char line[512];
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "model name", 10) == 0) {
            const char *colon = strchr(line, ':');
            if (colon != NULL) {
                snprintf(buf, cap, "%s", colon + 2);
                buf[strcspn(buf, "\n")] = '\0';
            }
            break;
        }
    }
    fclose(f);
}

static int bench_usage(void) {
    fprintf(stderr, "usage: cmetal-bench [--json] [--mib N] [--reps N] [--threads N[,N...]] "
                    "[--device cpu|metal]\n");
    return 2;
}

/* A whole number >= 1 for `option`, or -1 after saying what is wrong. */
static long positive(const char *option, const char *value) {
    char *end = NULL;
    errno = 0;
    const long v = strtol(value, &end, 10);
    if (end == value || *end != '\0' || errno != 0 || v < 1 || v > INT32_MAX) {
        fprintf(stderr, "cmetal-bench: %s '%s': expected a whole number from 1 to %d\n", option,
                value, INT32_MAX);
        return -1;
    }
    return v;
}

#define MAX_COUNTS 16

/* --threads: counts from 1 to CM_CPU_MAX_THREADS, comma-separated; the
 * number of them, or -1 after saying what is wrong. */
static int thread_counts(const char *value, long *counts) {
    char tok[32];
    int n = 0;
    for (const char *p = value; *p != '\0';) {
        const size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof tok) {
            fprintf(stderr, "cmetal-bench: --threads '%s': expected counts such as 1,2,4\n", value);
            return -1;
        }
        memcpy(tok, p, len);
        tok[len] = '\0';
        p += len + (p[len] == ',');
        const long v = positive("--threads", tok);
        if (v < 0)
            return -1;
        if (v > CM_CPU_MAX_THREADS || n == MAX_COUNTS) {
            fprintf(stderr, "cmetal-bench: --threads '%s': at most %d counts of 1 to %d\n", value,
                    MAX_COUNTS, CM_CPU_MAX_THREADS);
            return -1;
        }
        counts[n++] = v;
    }
    if (n == 0) {
        fprintf(stderr, "cmetal-bench: --threads '%s': expected thread counts\n", value);
        return -1;
    }
    return n;
}

/* Every op at `threads` threads (1: the shared CPU device). */
static void measure_all(bench_env *env, long threads, bench_case *cases) {
    bench_env e = *env;
    if (threads > 1) {
        cm_device_desc desc = {.type = CM_DEVICE_CPU, .cpu_threads = (uint32_t)threads};
        TRY(cm_device_open_desc(&desc, &e.dev));
    }
    e.ceil = ceil_open((int)threads, e.m_src, e.m_dst, e.bytes);
    for (int w = 0; w < B_COUNT; ++w)
        measure(&e, (which)w, &cases[w]);
    ceil_close(e.ceil);
    if (e.dev != env->dev)
        cm_device_release(e.dev);
}

static void print_json_cases(const bench_case *cases, const bench_case *one) {
    for (int w = 0; w < B_COUNT; ++w)
        printf("  {\"name\": \"%s\", \"bytes\": %.0f, \"seconds\": %.6g, \"gb_per_s\": %.4g, "
               "\"memcpy_gb_per_s\": %.4g, \"ratio_to_memcpy\": %.4g, \"goal\": %.3g, "
               "\"ceiling\": \"%s\", \"ceiling_gb_per_s\": %.4g, \"ratio_to_ceiling\": %.4g, "
               "\"ratio_to_ceiling_median\": %.4g, "
               "\"speedup_vs_1_thread\": %.4g}%s\n",
               cases[w].name, cases[w].bytes, cases[w].seconds,
               cases[w].bytes / cases[w].seconds * 1e-9, cases[w].memcpy_bw * 1e-9, cases[w].ratio,
               cases[w].goal, cases[w].ceiling_kind, cases[w].ceiling_bw * 1e-9, cases[w].ceiling,
               cases[w].ceiling_med, one[w].seconds / cases[w].seconds, w + 1 < B_COUNT ? "," : "");
}

static void print_table(const bench_case *cases, const bench_case *one, long threads) {
    printf("\n-- %ld thread%s: ratio to one thread's memcpy; ceil: to this machine's reads, "
           "memset or copies at %ld thread%s (best over best; med: median of the rounds)\n",
           threads, threads > 1 ? "s" : "", threads, threads > 1 ? "s" : "");
    printf("%-36s %9s %8s %11s %7s %6s %7s %8s %7s %7s  %s\n", "op", "ms", "GB/s", "memcpy GB/s",
           "ratio", "goal", "ceil", "ceil med", "of", "vs 1thr", "note");
    for (int w = 0; w < B_COUNT; ++w) {
        char goal[16] = "-";
        if (cases[w].goal > 0)
            snprintf(goal, sizeof goal, ">=%.1f", cases[w].goal);
        printf("%-36s %9.2f %8.2f %11.2f %7.2f %6s %7.2f %8.2f %7s %7.2f  %s\n", cases[w].name,
               cases[w].seconds * 1e3, cases[w].bytes / cases[w].seconds * 1e-9,
               cases[w].memcpy_bw * 1e-9, cases[w].ratio, goal, cases[w].ceiling,
               cases[w].ceiling_med, cases[w].ceiling_kind, one[w].seconds / cases[w].seconds,
               cases[w].note);
    }
}

int main(int argc, char **argv) {
    bool json = false, metal = false;
    long mib = 64;
    int reps = 5;
    long counts[MAX_COUNTS + 1] = {1};
    int ncounts = 1;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        const bool takes_value = strcmp(a, "--mib") == 0 || strcmp(a, "--reps") == 0 ||
                                 strcmp(a, "--device") == 0 || strcmp(a, "--threads") == 0;
        if (takes_value && i + 1 >= argc) {
            fprintf(stderr, "cmetal-bench: %s needs a value\n", a);
            return bench_usage();
        }
        if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strcmp(a, "--mib") == 0) {
            if ((mib = positive(a, argv[++i])) < 0)
                return bench_usage();
        } else if (strcmp(a, "--reps") == 0) {
            const long r = positive(a, argv[++i]);
            if (r < 0)
                return bench_usage();
            reps = (int)r;
        } else if (strcmp(a, "--threads") == 0) {
            if ((ncounts = thread_counts(argv[++i], counts)) < 0)
                return bench_usage();
        } else if (strcmp(a, "--device") == 0) {
            const char *v = argv[++i];
            if (strcmp(v, "metal") != 0 && strcmp(v, "cpu") != 0) {
                fprintf(stderr, "cmetal-bench: --device '%s': expected cpu or metal\n", v);
                return bench_usage();
            }
            metal = strcmp(v, "metal") == 0;
        } else {
            fprintf(stderr, "cmetal-bench: unknown argument '%s'\n", a);
            return bench_usage();
        }
    }
    if (metal)
        return bench_metal(json, mib, reps);
    /* One count N > 1: 1 thread as well, first (the speed-up column). */
    if (ncounts == 1 && counts[0] > 1) {
        counts[1] = counts[0];
        counts[0] = 1;
        ncounts = 2;
    }
    bench_env env = {.bytes = (size_t)mib << 20, .reps = reps};
    TRY(cm_device_open(CM_DEVICE_CPU, 0, &env.dev));
    cm_device_info info;
    TRY(cm_device_get_info(env.dev, &info));
    const int64_t nbytes[1] = {(int64_t)env.bytes};
    cm_tensor *m_src = tensor(env.dev, CM_UINT8, 1, nbytes);
    cm_tensor *m_dst = tensor(env.dev, CM_UINT8, 1, nbytes);
    TRY(cm_tensor_host_write(m_src, CM_UINT8, &env.m_src));
    TRY(cm_tensor_host_write(m_dst, CM_UINT8, &env.m_dst));

    const char *f16_hw = cm__cpu_cast_f16_hardware();
    env.f16_note = f16_hw != NULL ? f16_hw : "scalar, round to nearest even";
    static bench_case cases[MAX_COUNTS + 1][B_COUNT];
    int base = -1; /* the 1-thread run, for the speed-up column */
    for (int k = 0; k < ncounts; ++k) {
        measure_all(&env, counts[k], cases[k]);
        if (counts[k] == 1 && base < 0)
            base = k;
    }
    if (base < 0) { /* no 1-thread run asked for: measure one */
        measure_all(&env, 1, cases[ncounts]);
        base = ncounts;
    }
    dlpack_case dl[2];
    measure_dlpack(&env, dl);
    double memcpy_bw = 0; /* the median-free summary: the best seen */
    for (int k = 0; k < ncounts; ++k)
        for (int w = 0; w < B_COUNT; ++w)
            if (cases[k][w].memcpy_bw > memcpy_bw)
                memcpy_bw = cases[k][w].memcpy_bw;

    char model[256];
    cpu_model(model, sizeof model);
    const int last = ncounts - 1; /* the top-level figures: the last count */
    if (json) {
        printf("{\"device\": {\"type\": \"%s\", \"name\": \"%s\", \"cpu\": \"%s\"},\n",
               cm_device_type_name(info.type), info.name, model);
        printf(" \"mib\": %ld, \"reps\": %d, \"threads\": %ld,\n", mib, reps, counts[last]);
        printf(" \"memcpy_best_gb_per_s\": %.4g,\n", memcpy_bw * 1e-9);
        printf(" \"cases\": [\n");
        print_json_cases(cases[last], cases[base]);
        printf(" ],\n \"runs\": [\n");
        for (int k = 0; k < ncounts; ++k) {
            printf("  {\"threads\": %ld, \"cases\": [\n", counts[k]);
            print_json_cases(cases[k], cases[base]);
            printf("  ]}%s\n", k + 1 < ncounts ? "," : "");
        }
        printf(" ],\n \"dlpack_round_trip\": [\n");
        for (int k = 0; k < 2; ++k)
            printf("  {\"bytes\": %.0f, \"ns_legacy\": %.1f, \"ns_versioned\": %.1f}%s\n",
                   dl[k].bytes, dl[k].ns_legacy, dl[k].ns_versioned, k == 0 ? "," : "");
        printf(" ]}\n");
    } else {
        printf("cmetal-bench on the %s device (%s), %ld MiB, best of %d\n", info.name, model, mib,
               reps);
        printf("GB/s counts bytes read + written; memcpy (one thread) and the ceiling are "
               "re-measured beside each op (best memcpy %.2f GB/s)\n",
               memcpy_bw * 1e-9);
        for (int k = 0; k < ncounts; ++k)
            print_table(cases[k], cases[base], counts[k]);
        if (ncounts > 2 || (ncounts == 2 && counts[0] != 1)) {
            printf("\nScaling: GB/s, and in brackets the ratio to the ceiling at that count (best "
                   "over best, median of the rounds)\n");
            printf("%-36s", "op");
            for (int k = 0; k < ncounts; ++k)
                printf(" %14ld thr", counts[k]);
            printf("\n");
            for (int w = 0; w < B_COUNT; ++w) {
                printf("%-36s", cases[0][w].name);
                for (int k = 0; k < ncounts; ++k)
                    printf(" %6.1f (%4.2f %4.2f)", cases[k][w].bytes / cases[k][w].seconds * 1e-9,
                           cases[k][w].ceiling, cases[k][w].ceiling_med);
                printf("\n");
            }
            static const char *const kinds[3] = {"read", "memset", "copy"};
            for (int q = 0; q < 3; ++q) {
                printf("%-36s", q == 0   ? "ceiling: read (best seen)"
                                : q == 1 ? "ceiling: memset (best seen)"
                                         : "ceiling: copy (best seen)");
                for (int k = 0; k < ncounts; ++k) {
                    double best = 0;
                    for (int w = 0; w < B_COUNT; ++w)
                        if (strcmp(cases[k][w].ceiling_kind, kinds[q]) == 0 &&
                            cases[k][w].ceiling_bw > best)
                            best = cases[k][w].ceiling_bw;
                    printf(" %6.1f            ", best * 1e-9);
                }
                printf("\n");
            }
        }
        printf("\nDLPack round trip in C (export + import + release, CPU tensor; median of 5 "
               "batches; goal <= 50 ns)\n");
        for (int k = 0; k < 2; ++k)
            printf("  %10.0f bytes: legacy %6.1f ns, versioned %6.1f ns\n", dl[k].bytes,
                   dl[k].ns_legacy, dl[k].ns_versioned);
    }
    cm_tensor_release(m_src);
    cm_tensor_release(m_dst);
    cm_device_release(env.dev);
    return 0;
}
