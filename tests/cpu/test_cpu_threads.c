/* SPDX-License-Identifier: MIT */
/* CPU devices opened with threads (cm_device_open_desc's cpu_threads): every
 * op kind gives the same bytes with 1, 2, 3 and 4 threads on large,
 * strided, odd-sized inputs (float sums included, whose pairwise tree is
 * split across the threads), and bad thread counts are refused naming the
 * field and the value. Public API only. */
#include "ops/ops_util.h"

#define N1 600011 /* 1-d inputs: above the threads' 1 MiB threshold */
#define ROWS 1031
#define COLS 1034

static cm_device *open_threads(uint32_t threads) {
    cm_device_desc desc = {.type = CM_DEVICE_CPU, .cpu_threads = threads};
    cm_device *dev = NULL;
    CHECK(cm_device_open_desc(&desc, &dev));
    return dev;
}

/* Floats with full mantissas, so that a different summation order would
 * change the bits. */
static cm_tensor *floats(cm_device *dev, int32_t ndim, const int64_t *shape, unsigned seed) {
    cm_tensor *t = new_tensor(dev, CM_FLOAT32, ndim, shape);
    void *p = NULL;
    CHECK(cm_tensor_host_write(t, CM_FLOAT32, &p));
    const int64_t n = numel_of(ndim, shape);
    for (int64_t i = 0; i < n; ++i)
        ((float *)p)[i] =
            (float)((double)(mix((uint64_t)i * 7919u + seed) >> 11) * 0x1p-53 * 200.0 - 90.0);
    return t;
}

typedef struct sink {
    uint8_t *bytes;
    size_t size, cap;
} sink;

static void append(sink *s, cm_device *dev, cm_tensor *t) {
    cm_tensor_info info;
    CHECK(cm_tensor_get_info(t, &info));
    cm_tensor *c = new_tensor(dev, info.dtype, info.ndim, info.shape);
    CHECK(cm_copy(t, c, NULL));
    const void *p = NULL;
    CHECK(cm_tensor_host_read(c, info.dtype, &p));
    const size_t bytes = (size_t)info.numel * dsize(info.dtype);
    if (s->size + bytes > s->cap) {
        s->cap = (s->size + bytes) * 2;
        s->bytes = realloc(s->bytes, s->cap);
        cr_assert_not_null(s->bytes);
    }
    memcpy(s->bytes + s->size, p, bytes);
    s->size += bytes;
    cm_tensor_release(c);
}

/* Runs every op kind on `dev` and appends all the outputs to s. */
static void run_all(cm_device *dev, sink *s) {
    const int64_t n1[1] = {N1}, n2[2] = {ROWS, COLS}, half[2] = {ROWS, COLS / 2};
    const int64_t few[2] = {3, N1 / 3}, rows1[1] = {ROWS}, cols1[1] = {COLS / 2};
    const int64_t one[1] = {1}, three[1] = {3};
    cm_tensor *x = floats(dev, 1, n1, 1), *y = floats(dev, 1, n1, 2);
    cm_tensor *m = floats(dev, 2, n2, 3), *m2 = floats(dev, 2, n2, 4);
    cm_tensor *o1 = new_tensor(dev, CM_FLOAT32, 1, n1);
    cm_tensor *oh = new_tensor(dev, CM_FLOAT32, 2, half);

    /* Strided views: every other column, and the same walked backwards. */
    cm_tensor *ms = NULL, *mr = NULL, *mt = NULL;
    CHECK(cm_tensor_slice(m, 1, 0, CM_SLICE_DEFAULT, 2, &ms));
    CHECK(cm_tensor_slice(m2, 1, CM_SLICE_DEFAULT, CM_SLICE_DEFAULT, -2, &mr));
    cm_tensor *big = floats(dev, 2, (const int64_t[]){COLS, COLS}, 5);
    CHECK(cm_tensor_transpose(big, 0, 1, &mt));
    cm_tensor *ot = new_tensor(dev, CM_FLOAT32, 2, (const int64_t[]){COLS, COLS});

    /* fill, copy (memcpy runs, strided, transposing) */
    const double v = 1.25;
    CHECK(cm_fill(oh, CM_FLOAT64, &v, NULL));
    append(s, dev, oh);
    CHECK(cm_copy(ms, oh, NULL));
    append(s, dev, oh);
    CHECK(cm_copy(mr, oh, NULL));
    append(s, dev, oh);
    CHECK(cm_copy(mt, ot, NULL));
    append(s, dev, ot);

    /* casts */
    cm_tensor *h1 = new_tensor(dev, CM_FLOAT16, 1, n1), *b1 = new_tensor(dev, CM_BFLOAT16, 1, n1);
    cm_tensor *i1 = new_tensor(dev, CM_INT32, 1, n1), *s1 = new_tensor(dev, CM_INT16, 1, n1);
    cm_tensor *hh = new_tensor(dev, CM_FLOAT16, 2, half);
    CHECK(cm_cast(x, h1, NULL));
    CHECK(cm_cast(x, b1, NULL));
    CHECK(cm_cast(x, i1, NULL));
    CHECK(cm_cast(y, s1, NULL));
    CHECK(cm_cast(mr, hh, NULL));
    append(s, dev, h1);
    append(s, dev, b1);
    append(s, dev, i1);
    append(s, dev, s1);
    append(s, dev, hh);

    /* elementwise */
    CHECK(cm_unary(CM_UNARY_EXP, x, o1, NULL));
    append(s, dev, o1);
    CHECK(cm_unary(CM_UNARY_SQRT, ms, oh, NULL));
    append(s, dev, oh);
    CHECK(cm_binary(CM_BINARY_ADD, x, y, o1, NULL));
    append(s, dev, o1);
    CHECK(cm_binary(CM_BINARY_MUL, ms, mr, oh, NULL));
    append(s, dev, oh);
    cm_tensor *row = NULL;
    CHECK(cm_tensor_select(mr, 0, 7, &row));
    CHECK(cm_binary(CM_BINARY_SUB, ms, row, oh, NULL)); /* broadcast */
    append(s, dev, oh);
    CHECK(cm_binary(CM_BINARY_ADD, x, y, x, NULL)); /* in place */
    append(s, dev, x);

    /* reductions: all, each axis, few outputs, every dtype family */
    cm_tensor *f0 = new_tensor(dev, CM_FLOAT32, 1, one), *d0 = new_tensor(dev, CM_FLOAT64, 1, one);
    cm_tensor *fr = new_tensor(dev, CM_FLOAT32, 1, rows1),
              *fc = new_tensor(dev, CM_FLOAT32, 1, cols1);
    cm_tensor *f3 = new_tensor(dev, CM_FLOAT64, 1, three), *l0 = new_tensor(dev, CM_INT64, 1, one);
    cm_tensor *x3 = NULL, *xr = NULL;
    cm_tensor *y3 = NULL;
    CHECK(cm_tensor_slice(y, 0, 0, 3 * (N1 / 3), 1, &y3));
    CHECK(cm_tensor_reshape(y3, 2, few, &x3));
    CHECK(cm_tensor_slice(y, 0, CM_SLICE_DEFAULT, CM_SLICE_DEFAULT, -1, &xr));
    for (cm_reduce_op op = CM_REDUCE_SUM; op < CM_REDUCE_COUNT; op = (cm_reduce_op)(op + 1)) {
        cm_tensor *all[] = {x, xr, h1, b1, i1, s1};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; ++k) {
            cm_tensor_info info;
            CHECK(cm_tensor_get_info(all[k], &info));
            cm_tensor *out = dfloat(info.dtype) ? d0 : (op == CM_REDUCE_MEAN ? d0 : l0);
            CHECK(cm_reduce(op, all[k], CM_AXIS_ALL, out, NULL));
            append(s, dev, out);
        }
        /* a reduction of two runs per output (strided), and each axis */
        cm_tensor *c2 = NULL;
        CHECK(cm_tensor_reshape(f0, 0, NULL, &c2));
        CHECK(cm_reduce(op, ms, CM_AXIS_ALL, c2, NULL));
        append(s, dev, c2);
        cm_tensor_release(c2);
        CHECK(cm_reduce(op, ms, 0, fc, NULL));
        append(s, dev, fc);
        CHECK(cm_reduce(op, mr, 1, fr, NULL));
        append(s, dev, fr);
        CHECK(cm_reduce(op, x3, 1, f3, NULL));
        append(s, dev, f3);
    }
    /* Down the rows of contiguous matrices (threads take slabs of rows for
     * the exact kinds): every op, float32/float64/float16 and integers. */
    const int64_t cols[1] = {COLS};
    cm_tensor *md = new_tensor(dev, CM_FLOAT64, 2, n2), *mh = new_tensor(dev, CM_FLOAT16, 2, n2);
    cm_tensor *mi = new_tensor(dev, CM_INT32, 2, n2), *mb = new_tensor(dev, CM_INT8, 2, n2);
    cm_tensor *mu = new_tensor(dev, CM_UINT16, 2, n2);
    CHECK(cm_cast(m, md, NULL));
    CHECK(cm_cast(m2, mh, NULL));
    CHECK(cm_cast(m, mi, NULL));
    CHECK(cm_cast(m2, mb, NULL));
    CHECK(cm_cast(m, mu, NULL));
    cm_tensor *fcol = new_tensor(dev, CM_FLOAT32, 1, cols),
              *dcol = new_tensor(dev, CM_FLOAT64, 1, cols);
    cm_tensor *lcol = new_tensor(dev, CM_INT64, 1, cols);
    for (cm_reduce_op op = CM_REDUCE_SUM; op < CM_REDUCE_COUNT; op = (cm_reduce_op)(op + 1)) {
        CHECK(cm_reduce(op, m, 0, fcol, NULL));
        append(s, dev, fcol);
        CHECK(cm_reduce(op, md, 0, dcol, NULL));
        append(s, dev, dcol);
        CHECK(cm_reduce(op, mh, 0, fcol, NULL));
        append(s, dev, fcol);
        cm_tensor *ints[] = {mi, mb, mu};
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; ++k) {
            CHECK(cm_reduce(op, ints[k], 0, lcol, NULL));
            append(s, dev, lcol);
        }
    }
    cm_tensor *rel[] = {x,  y,  m,  m2, o1, oh, ms, mr, mt, big, ot, h1, b1, i1, s1,   hh,   row,
                        f0, d0, fr, fc, f3, l0, x3, xr, y3, md,  mh, mi, mb, mu, fcol, dcol, lcol};
    for (size_t k = 0; k < sizeof rel / sizeof rel[0]; ++k)
        cm_tensor_release(rel[k]);
}

Test(cpu_threads, same_bits_for_every_thread_count) {
    sink ref = {0};
    cm_device *dev = open_threads(0);
    cm_device_info info;
    CHECK(cm_device_get_info(dev, &info));
    cr_assert_eq(info.cpu_threads, 1);
    run_all(dev, &ref);
    cm_device_release(dev);
    for (uint32_t threads = 1; threads <= 4; ++threads) {
        dev = open_threads(threads);
        CHECK(cm_device_get_info(dev, &info));
        cr_assert_eq(info.cpu_threads, threads);
        sink got = {0};
        run_all(dev, &got);
        cr_assert_eq(got.size, ref.size);
        size_t first = 0;
        while (first < ref.size && got.bytes[first] == ref.bytes[first])
            ++first;
        cr_assert_eq(first, ref.size, "%u threads: byte %zu of %zu differs", threads, first,
                     ref.size);
        free(got.bytes);
        cm_device_release(dev);
    }
    free(ref.bytes);
}

Test(cpu_threads, default_is_the_shared_device) {
    cm_device *a = NULL, *b = open_threads(1), *c = open_threads(2), *d = open_threads(2);
    CHECK(cm_device_open(CM_DEVICE_CPU, 0, &a));
    cr_assert_eq(a, b);
    cr_assert_neq(c, a);
    cr_assert_neq(c, d);
    cm_device_release(a);
    cm_device_release(b);
    cm_device_release(c);
    cm_device_release(d);
}

Test(cpu_threads, bad_counts_are_refused) {
    cm_device *dev = (cm_device *)(uintptr_t)1;
    cm_device_desc desc = {.type = CM_DEVICE_CPU, .cpu_threads = CM_CPU_MAX_THREADS + 1};
    EXPECT_FAIL(cm_device_open_desc(&desc, &dev), CM_ERR_INVALID_ARGUMENT,
                "desc->cpu_threads = 257");
    cr_assert_null(dev);
    desc.cpu_threads = UINT32_MAX;
    EXPECT_FAIL(cm_device_open_desc(&desc, &dev), CM_ERR_INVALID_ARGUMENT,
                "desc->cpu_threads = 4294967295");
    desc = (cm_device_desc){.type = CM_DEVICE_METAL, .cpu_threads = 2};
    EXPECT_FAIL(cm_device_open_desc(&desc, &dev), CM_ERR_INVALID_ARGUMENT, "desc->cpu_threads = 2");
    desc = (cm_device_desc){.type = (cm_device_type)7};
    EXPECT_FAIL(cm_device_open_desc(&desc, &dev), CM_ERR_INVALID_ARGUMENT, "desc->type = 7");
    desc = (cm_device_desc){.type = CM_DEVICE_CPU, .index = 1, .cpu_threads = 2};
    EXPECT_FAIL(cm_device_open_desc(&desc, &dev), CM_ERR_NO_DEVICE, "desc->index = 1");
    EXPECT_FAIL(cm_device_open_desc(NULL, &dev), CM_ERR_INVALID_ARGUMENT, "desc = NULL");
    desc.index = 0;
    EXPECT_FAIL(cm_device_open_desc(&desc, NULL), CM_ERR_INVALID_ARGUMENT, "out = NULL");
}

Test(cpu_threads, tensors_of_cpu_devices_mix) {
    cm_device *shared = open_threads(1), *four = open_threads(4);
    const int64_t n[1] = {N1};
    cm_tensor *x = floats(shared, 1, n, 9), *y = floats(four, 1, n, 10);
    cm_tensor *a = new_tensor(four, CM_FLOAT32, 1, n), *b = new_tensor(shared, CM_FLOAT32, 1, n);
    CHECK(cm_binary(CM_BINARY_ADD, x, y, a, NULL)); /* runs on four */
    CHECK(cm_binary(CM_BINARY_ADD, x, y, b, NULL)); /* runs on the shared device */
    const void *p = NULL, *q = NULL;
    CHECK(cm_tensor_host_read(a, CM_FLOAT32, &p));
    CHECK(cm_tensor_host_read(b, CM_FLOAT32, &q));
    cr_assert_eq(memcmp(p, q, (size_t)N1 * sizeof(float)), 0);
    cm_tensor_release(x);
    cm_tensor_release(y);
    cm_tensor_release(a);
    cm_tensor_release(b);
    cm_device_release(four);
    cm_device_release(shared);
}

/* Float max and min of one long run: threads read ranges of its blocks of
 * 2^18 elements (ops.h). Which zero and which NaN the result is depends on
 * the blocks alone, so every thread count gives the same bits: block 0 holds
 * only -0.0 and negatives, block 1 +0.0 (max: -0.0, the first block's
 * result, which +0.0 does not exceed), and for NaNs block 1 holds payload 1,
 * block 2 payload 2 (the first block's NaN wins). */
#define BLOCK ((int64_t)1 << 18)
static uint32_t reduce_bits(uint32_t threads, cm_reduce_op op, const float *data, int64_t n) {
    cm_device *dev = open_threads(threads);
    const int64_t shape[1] = {n}, one[1] = {1};
    cm_tensor *x = new_tensor(dev, CM_FLOAT32, 1, shape),
              *out = new_tensor(dev, CM_FLOAT32, 1, one);
    void *p = NULL;
    CHECK(cm_tensor_host_write(x, CM_FLOAT32, &p));
    memcpy(p, data, (size_t)n * sizeof(float));
    CHECK(cm_reduce(op, x, CM_AXIS_ALL, out, NULL));
    const void *q = NULL;
    CHECK(cm_tensor_host_read(out, CM_FLOAT32, &q));
    uint32_t bits;
    memcpy(&bits, q, sizeof bits);
    cm_tensor_release(x);
    cm_tensor_release(out);
    cm_device_release(dev);
    return bits;
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

Test(cpu_threads, float_max_min_pick_by_blocks_at_every_thread_count) {
    const int64_t n = 3 * BLOCK + 12345;
    float *z = malloc((size_t)n * sizeof(float)), *v = malloc((size_t)n * sizeof(float));
    cr_assert(z != NULL && v != NULL);
    for (int64_t i = 0; i < n; ++i) {
        const float neg = -(float)(1 + (mix((uint64_t)i) & 1023));
        z[i] = (i % 7 == 0) ? (i < BLOCK ? -0.0f : 0.0f) : neg; /* max: a zero */
        v[i] = -neg;                                            /* positives */
    }
    v[BLOCK + 5] = from_bits(0x7fc00001u);     /* NaN payload 1, block 1 */
    v[2 * BLOCK + 9] = from_bits(0x7fc00002u); /* payload 2, block 2 */
    v[3 * BLOCK + 1] = from_bits(0xffc00003u); /* payload 3, the last block */
    for (uint32_t threads = 1; threads <= 4; ++threads) {
        cr_assert_eq(reduce_bits(threads, CM_REDUCE_MAX, z, n), 0x80000000u,
                     "%u threads: max of zeros is the first block's -0.0", threads);
        cr_assert_eq(reduce_bits(threads, CM_REDUCE_MAX, v, n), 0x7fc00001u, "%u threads", threads);
        cr_assert_eq(reduce_bits(threads, CM_REDUCE_MIN, v, n), 0x7fc00001u, "%u threads", threads);
    }
    free(z);
    free(v);
}

/* Float max/min down the rows, which threads split into slabs of rows: the
 * first NaN of a column wins, and of equal zeros the first. Column 0: -0.0
 * in row 3, +0.0 in the last row, negatives elsewhere (max: -0.0). Column
 * 1: NaN payload 1 in row 2000, payload 2 in row 100 (the first: 2), payload
 * 3 in row 4000. Column 2: positives with +0.0 in row 1 and -0.0 in row
 * 3000 (min: +0.0). Every other column: values whose max and min lie in
 * the last and the first slab. */
#define CROWS 4099
#define CCOLS 128
static void column_bits(uint32_t threads, cm_reduce_op op, const float *data, uint32_t *bits) {
    cm_device *dev = open_threads(threads);
    const int64_t shape[2] = {CROWS, CCOLS}, cols[1] = {CCOLS};
    cm_tensor *x = new_tensor(dev, CM_FLOAT32, 2, shape),
              *out = new_tensor(dev, CM_FLOAT32, 1, cols);
    void *p = NULL;
    CHECK(cm_tensor_host_write(x, CM_FLOAT32, &p));
    memcpy(p, data, sizeof(float) * CROWS * CCOLS);
    CHECK(cm_reduce(op, x, 0, out, NULL));
    const void *q = NULL;
    CHECK(cm_tensor_host_read(out, CM_FLOAT32, &q));
    memcpy(bits, q, sizeof(uint32_t) * CCOLS);
    cm_tensor_release(x);
    cm_tensor_release(out);
    cm_device_release(dev);
}

Test(cpu_threads, float_column_max_min_pick_across_row_slabs) {
    float *v = malloc(sizeof(float) * CROWS * CCOLS);
    cr_assert_not_null(v);
    for (int64_t i = 0; i < CROWS; ++i)
        for (int64_t j = 0; j < CCOLS; ++j)
            v[i * CCOLS + j] = (float)((int64_t)(mix((uint64_t)(i * CCOLS + j)) % 2001) - 1000);
    for (int64_t i = 0; i < CROWS; ++i) {
        v[i * CCOLS] = -(float)(1 + i % 5);
        v[i * CCOLS + 2] = (float)(1 + i % 5);
    }
    v[3 * CCOLS] = -0.0f;
    v[(CROWS - 1) * CCOLS] = 0.0f;
    v[2000 * CCOLS + 1] = from_bits(0x7fc00001u);
    v[100 * CCOLS + 1] = from_bits(0xffc00002u);
    v[4000 * CCOLS + 1] = from_bits(0x7fc00003u);
    v[1 * CCOLS + 2] = 0.0f;
    v[3000 * CCOLS + 2] = -0.0f;
    for (int64_t j = 3; j < CCOLS; ++j) {
        v[(CROWS - 1 - j) * CCOLS + j] = 5000.0f + (float)j; /* the max, late */
        v[j * CCOLS + j] = -5000.0f - (float)j;              /* the min, early */
    }
    uint32_t mx[CCOLS], mn[CCOLS];
    for (uint32_t threads = 1; threads <= 4; ++threads) {
        column_bits(threads, CM_REDUCE_MAX, v, mx);
        column_bits(threads, CM_REDUCE_MIN, v, mn);
        cr_assert_eq(mx[0], 0x80000000u, "%u threads: max of column 0 is row 3's -0.0", threads);
        cr_assert_eq(mx[1], 0xffc00002u, "%u threads: the first NaN (row 100) wins", threads);
        cr_assert_eq(mn[1], 0xffc00002u, "%u threads: the first NaN (row 100) wins", threads);
        cr_assert_eq(mn[2], 0x00000000u, "%u threads: min of column 2 is row 1's +0.0", threads);
        for (int64_t j = 3; j < CCOLS; ++j) {
            cr_assert_eq(from_bits(mx[j]), 5000.0f + (float)j, "%u threads, column %ld", threads,
                         (long)j);
            cr_assert_eq(from_bits(mn[j]), -5000.0f - (float)j, "%u threads, column %ld", threads,
                         (long)j);
        }
    }
    free(v);
}

/* Float sums down the rows of contiguous matrices: float64 elements of
 * full mantissas and exponents 2^-20..2^19, so that any other order of
 * additions changes the bits (the float32 matrices above sum exactly in
 * float64, whatever the order). 1223 rows (38 blocks of 32 and 7 rows),
 * and 8200 columns (more than one chunk of columns), sum and mean, at 2,
 * 3 and 4 threads against 1. */
static void fsum_columns(uint32_t threads, cm_reduce_op op, int64_t rows, int64_t cols,
                         const double *data, double *out) {
    cm_device *dev = open_threads(threads);
    const int64_t shape[2] = {rows, cols}, kept[1] = {cols};
    cm_tensor *x = new_tensor(dev, CM_FLOAT64, 2, shape), *o = new_tensor(dev, CM_FLOAT64, 1, kept);
    void *p = NULL;
    CHECK(cm_tensor_host_write(x, CM_FLOAT64, &p));
    memcpy(p, data, sizeof(double) * (size_t)(rows * cols));
    CHECK(cm_reduce(op, x, 0, o, NULL));
    const void *q = NULL;
    CHECK(cm_tensor_host_read(o, CM_FLOAT64, &q));
    memcpy(out, q, sizeof(double) * (size_t)cols);
    cm_tensor_release(x);
    cm_tensor_release(o);
    cm_device_release(dev);
}

Test(cpu_threads, float_column_sums_keep_their_bits_at_every_thread_count) {
    const int64_t shapes[2][2] = {{1223, 1034}, {225, 8200}};
    const cm_reduce_op ops[2] = {CM_REDUCE_SUM, CM_REDUCE_MEAN};
    for (int k = 0; k < 2; ++k) {
        const int64_t rows = shapes[k][0], cols = shapes[k][1];
        double *data = malloc(sizeof(double) * (size_t)(rows * cols)),
               *ref = malloc(sizeof(double) * (size_t)cols),
               *got = malloc(sizeof(double) * (size_t)cols);
        cr_assert(data != NULL && ref != NULL && got != NULL);
        for (int64_t i = 0; i < rows * cols; ++i) {
            const uint64_t h = mix((uint64_t)i + 17u);
            const double v = ldexp((double)(h >> 11) * 0x1p-53, (int)(h % 40) - 20);
            data[i] = (h >> 10) & 1 ? -v : v;
        }
        for (int o = 0; o < 2; ++o) {
            fsum_columns(1, ops[o], rows, cols, data, ref);
            for (uint32_t threads = 2; threads <= 4; ++threads) {
                fsum_columns(threads, ops[o], rows, cols, data, got);
                for (int64_t j = 0; j < cols; ++j)
                    cr_assert(memcmp(&ref[j], &got[j], sizeof(double)) == 0,
                              "%ld x %ld, op %d, %u threads: column %ld is %a, one thread %a",
                              (long)rows, (long)cols, (int)ops[o], threads, (long)j, got[j],
                              ref[j]);
            }
        }
        free(data);
        free(ref);
        free(got);
    }
}

/* Integer reductions down the rows against a plain loop: int8 and uint16
 * matrices wider than one chunk of columns (32 KiB of a row for these
 * sizes) and taller than 4 rows a pass, at 1 and 3 threads. */
Test(cpu_threads, narrow_integer_columns_match_a_plain_loop) {
    const int64_t rows = 45, cols = 40003, shape[2] = {rows, cols}, ocols[1] = {cols};
    int8_t *b = malloc((size_t)(rows * cols));
    uint16_t *h = malloc((size_t)(rows * cols) * sizeof(uint16_t));
    int64_t *want = malloc((size_t)cols * sizeof(int64_t));
    cr_assert(b != NULL && h != NULL && want != NULL);
    for (int64_t i = 0; i < rows * cols; ++i) {
        b[i] = (int8_t)(mix((uint64_t)i) >> 56);
        h[i] = (uint16_t)(mix((uint64_t)i + 99) >> 48);
    }
    for (uint32_t threads = 1; threads <= 3; threads += 2) {
        cm_device *dev = open_threads(threads);
        for (int which = 0; which < 2; ++which) {
            const cm_dtype d = which == 0 ? CM_INT8 : CM_UINT16;
            cm_tensor *x = new_tensor(dev, d, 2, shape), *out = new_tensor(dev, CM_INT64, 1, ocols);
            void *p = NULL;
            CHECK(cm_tensor_host_write(x, d, &p));
            memcpy(p, which == 0 ? (void *)b : (void *)h, (size_t)(rows * cols) * dsize(d));
            for (cm_reduce_op op = CM_REDUCE_SUM; op < CM_REDUCE_COUNT;
                 op = (cm_reduce_op)(op + 1)) {
                if (op == CM_REDUCE_MEAN)
                    continue;
                for (int64_t j = 0; j < cols; ++j) {
                    int64_t a = op == CM_REDUCE_SUM   ? 0
                                : op == CM_REDUCE_MAX ? INT64_MIN
                                                      : INT64_MAX;
                    for (int64_t i = 0; i < rows; ++i) {
                        const int64_t x1 = which == 0 ? b[i * cols + j] : h[i * cols + j];
                        a = op == CM_REDUCE_SUM   ? a + x1
                            : op == CM_REDUCE_MAX ? (x1 > a ? x1 : a)
                                                  : (x1 < a ? x1 : a);
                    }
                    want[j] = a;
                }
                CHECK(cm_reduce(op, x, 0, out, NULL));
                const void *q = NULL;
                CHECK(cm_tensor_host_read(out, CM_INT64, &q));
                for (int64_t j = 0; j < cols; ++j)
                    cr_assert_eq(((const int64_t *)q)[j], want[j],
                                 "%u threads, %s, op %d, column %ld: %ld, not %ld", threads,
                                 dname(d), (int)op, (long)j, (long)((const int64_t *)q)[j],
                                 (long)want[j]);
            }
            cm_tensor_release(x);
            cm_tensor_release(out);
        }
        cm_device_release(dev);
    }
    free(b);
    free(h);
    free(want);
}
