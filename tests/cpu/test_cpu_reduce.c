/* SPDX-License-Identifier: MIT */
/* The CPU's float sums give the same bits with its vector kernels (AVX2,
 * F16C, chosen at run time) and with the portable loops forced
 * (cm__cpu_reduce_force_portable): runs (leaves, float16/bfloat16 fours in
 * float32), several runs per output, and the vector form (column sums,
 * float16/bfloat16 rows four at a time), on shapes with partial leaves,
 * groups, blocks and vectors. Include/cmetal/ops.h states that the order
 * never depends on the instructions in use. */
#include "check.h"
#include "cpu/cpu_ops.h"

#include <cmetal/cmetal.h>

#include <math.h>
#include <stdbool.h>
#include <string.h>

static cm_tensor *new_tensor(cm_device *dev, cm_dtype d, int32_t ndim, const int64_t *shape) {
    const cm_tensor_desc desc = {.dtype = d, .ndim = ndim, .shape = shape};
    cm_tensor *t = NULL;
    CHECK(cm_tensor_create(dev, &desc, &t));
    return t;
}

/* Every sum of x (all, axis 0, axis 1) into float64, appended to out. */
static size_t sums(cm_device *dev, cm_tensor *x, const int64_t *shape, double *out) {
    size_t k = 0;
    for (int32_t axis = -1; axis < 2; ++axis) {
        const int64_t n[1] = {axis < 0 ? 1 : shape[1 - axis]};
        cm_tensor *o = new_tensor(dev, CM_FLOAT64, axis < 0 ? 0 : 1, n);
        CHECK(cm_reduce(CM_REDUCE_SUM, x, axis < 0 ? CM_AXIS_ALL : axis, o, NULL));
        const double *p = NULL;
        CHECK(cm_tensor_host_read(o, CM_FLOAT64, (const void **)&p));
        memcpy(out + k, p, (size_t)n[0] * sizeof(double));
        k += (size_t)n[0];
        CHECK(cm_tensor_release(o));
    }
    return k;
}

Test(cpu_reduce, vector_kernels_and_portable_loops_give_the_same_bits) {
    cm_device *dev = NULL;
    CHECK(cm_device_open(CM_DEVICE_CPU, 0, &dev));
    static const int64_t shapes[][2] = {{131, 1045}, {77, 4099}, {2, 70001}, {1000, 19}};
    static const cm_dtype ds[] = {CM_FLOAT16, CM_BFLOAT16, CM_FLOAT32, CM_FLOAT64};
    static double a[2 * 70001 + 8], b[2 * 70001 + 8];
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; ++si)
        for (size_t di = 0; di < sizeof ds / sizeof ds[0]; ++di) {
            cm_tensor *f = new_tensor(dev, CM_FLOAT32, 2, shapes[si]);
            cm_tensor *x = new_tensor(dev, ds[di], 2, shapes[si]);
            float *p = NULL;
            CHECK(cm_tensor_host_write(f, CM_FLOAT32, (void **)&p));
            uint32_t h = 7;
            for (int64_t i = 0; i < shapes[si][0] * shapes[si][1]; ++i) {
                h = h * 1664525u + 1013904223u;
                /* signs and exponents spread over the dtype's range (float16's: an
                 * infinity would give every order the same sum), so that float64
                 * totals and float32 fours round and any other order changes bits */
                const float mant = (float)(h >> 8) / 16777216.0f - 0.5f;
                const int e = ds[di] == CM_FLOAT16 ? (int)(h % 40) - 24 : (int)(h % 61) - 30;
                p[i] = ldexpf(mant, e);
            }
            CHECK(cm_cast(f, x, NULL));
            cm__cpu_reduce_force_portable(false);
            const size_t na = sums(dev, x, shapes[si], a);
            cm__cpu_reduce_force_portable(true);
            const size_t nb = sums(dev, x, shapes[si], b);
            cm__cpu_reduce_force_portable(false);
            cr_assert_eq(na, nb);
            cm_dtype_info info;
            CHECK(cm_dtype_get_info(ds[di], &info));
            for (size_t k = 0; k < na; ++k)
                cr_assert(memcmp(&a[k], &b[k], sizeof a[k]) == 0,
                          "%s shape %lld x %lld, result %zu: vector %.17g, portable %.17g",
                          info.name, (long long)shapes[si][0], (long long)shapes[si][1], k, a[k],
                          b[k]);
            CHECK(cm_tensor_release(x));
            CHECK(cm_tensor_release(f));
        }
    CHECK(cm_device_release(dev));
}

/* Integer column sums (the vector form, four rows a pass and the rows left
 * over) and column max/min (four rows a pass, the last one repeated) are
 * exact: against sums and extremes computed here, for every row count
 * modulo 4. */
Test(cpu_reduce, integer_columns_are_exact) {
    cm_device *dev = NULL;
    CHECK(cm_device_open(CM_DEVICE_CPU, 0, &dev));
    static const cm_dtype ds[] = {CM_INT8, CM_UINT16, CM_INT32, CM_UINT64};
    static int64_t want_sum[1000], want_max[1000], want_min[1000];
    for (int64_t rows = 37; rows <= 40; ++rows)
        for (size_t di = 0; di < sizeof ds / sizeof ds[0]; ++di) {
            const int64_t shape[2] = {rows, 1000}, cols[1] = {1000};
            cm_tensor *f = new_tensor(dev, CM_INT64, 2, shape);
            cm_tensor *x = new_tensor(dev, ds[di], 2, shape);
            int64_t *p = NULL;
            CHECK(cm_tensor_host_write(f, CM_INT64, (void **)&p));
            uint32_t h = 11;
            for (int64_t j = 0; j < 1000; ++j) {
                want_sum[j] = 0;
                want_max[j] = INT64_MIN;
                want_min[j] = INT64_MAX;
            }
            for (int64_t i = 0; i < rows; ++i)
                for (int64_t j = 0; j < 1000; ++j) {
                    h = h * 1664525u + 1013904223u;
                    const int64_t v = ds[di] == CM_INT8 ? (int8_t)(h >> 24) : (int64_t)(h >> 17);
                    p[i * 1000 + j] = v;
                    want_sum[j] += v;
                    want_max[j] = v > want_max[j] ? v : want_max[j];
                    want_min[j] = v < want_min[j] ? v : want_min[j];
                }
            CHECK(cm_cast(f, x, NULL));
            cm_tensor *o = new_tensor(dev, CM_INT64, 1, cols);
            const cm_reduce_op ops[3] = {CM_REDUCE_SUM, CM_REDUCE_MAX, CM_REDUCE_MIN};
            const int64_t *want[3] = {want_sum, want_max, want_min};
            for (int k = 0; k < 3; ++k) {
                CHECK(cm_reduce(ops[k], x, 0, o, NULL));
                const int64_t *q = NULL;
                CHECK(cm_tensor_host_read(o, CM_INT64, (const void **)&q));
                for (int64_t j = 0; j < 1000; ++j)
                    cr_assert_eq(q[j], want[k][j], "%s of %lld rows, column %lld",
                                 cm_reduce_op_name(ops[k]), (long long)rows, (long long)j);
            }
            CHECK(cm_tensor_release(o));
            CHECK(cm_tensor_release(x));
            CHECK(cm_tensor_release(f));
        }
    CHECK(cm_device_release(dev));
}

/* The pairwise tree of ops.h written out here: a leaf of at most 512
 * elements adds element i into lane i % 16 in order from 0.0, then the
 * lanes pairwise (lane j += lane j + w for w = 8, 4, 2, 1); a longer run
 * is cut after ceil(leaves / 2) leaves, its halves added. */
static double model_sum(const double *x, int64_t n) {
    if (n <= 512) {
        double l[16] = {0};
        for (int64_t i = 0; i < n; ++i)
            l[i % 16] += x[i];
        for (int w = 8; w >= 1; w /= 2)
            for (int j = 0; j < w; ++j)
                l[j] = l[j] + l[j + w];
        return l[0];
    }
    const int64_t h = ((n + 511) / 512 + 1) / 2 * 512;
    const double a = model_sum(x, h);
    return a + model_sum(x + h, n - h);
}

/* A float32 or float64 sum over all elements gives the model's bits, with
 * the vector kernels (four streams side by side from 256 KiB) and
 * with the portable loops, on lengths around a leaf, two and three leaves,
 * and the side-by-side threshold; the data spans exponents so that any
 * other order changes the bits. */
Test(cpu_reduce, float_sums_follow_the_pairwise_tree) {
    cm_device *dev = NULL;
    CHECK(cm_device_open(CM_DEVICE_CPU, 0, &dev));
    static const int64_t lens[] = {1,     15,    16,    17,    511,   512,   513,    1023,
                                   1024,  1025,  1535,  1536,  1537,  2048,  2049,   5000,
                                   32767, 32768, 65535, 65536, 65537, 70001, 131072, 300007};
    static double x[300007];
    for (int f64 = 0; f64 < 2; ++f64)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; ++li) {
            const int64_t n[1] = {lens[li]};
            const cm_dtype d = f64 ? CM_FLOAT64 : CM_FLOAT32;
            uint64_t h = 11 + li + 100 * (uint64_t)f64;
            for (int64_t i = 0; i < n[0]; ++i) {
                h = h * 6364136223846793005u + 1442695040888963407u;
                /* float32 mantissas, or float64 ones of 53 bits */
                const double mant = f64 ? (double)(h >> 11) / 9007199254740992.0 - 0.5
                                        : (double)(h >> 40) / 16777216.0 - 0.5;
                x[i] = ldexp(mant, (int)(h % 61) - 30);
            }
            cm_tensor *t = new_tensor(dev, d, 1, n);
            void *p = NULL;
            CHECK(cm_tensor_host_write(t, d, &p));
            for (int64_t i = 0; i < n[0]; ++i) {
                if (f64)
                    ((double *)p)[i] = x[i];
                else
                    ((float *)p)[i] = (float)x[i]; /* exact: 24-bit mantissas */
            }
            cm_tensor *o = new_tensor(dev, CM_FLOAT64, 0, NULL);
            const double want = model_sum(x, n[0]);
            for (int portable = 0; portable < 2; ++portable) {
                cm__cpu_reduce_force_portable(portable != 0);
                CHECK(cm_reduce(CM_REDUCE_SUM, t, CM_AXIS_ALL, o, NULL));
                cm__cpu_reduce_force_portable(false);
                const double *q = NULL;
                CHECK(cm_tensor_host_read(o, CM_FLOAT64, (const void **)&q));
                cr_assert(memcmp(q, &want, sizeof want) == 0,
                          "%s sum of %lld, portable %d: %a, the tree gives %a",
                          f64 ? "float64" : "float32", (long long)n[0], portable, *q, want);
            }
            CHECK(cm_tensor_release(o));
            CHECK(cm_tensor_release(t));
        }
    CHECK(cm_device_release(dev));
}

/* Byte sums (int8, uint8, bool; AVX2 adds each eight bytes at once, signed
 * bytes biased by 128) are exact with the vector kernels and with the
 * portable loops: against sums computed here, on lengths around the
 * 64-byte step and long enough to be read as quarters side by side, with
 * runs of the extreme values. */
Test(cpu_reduce, byte_sums_are_exact_with_either_kernel) {
    cm_device *dev = NULL;
    CHECK(cm_device_open(CM_DEVICE_CPU, 0, &dev));
    static const int64_t lens[] = {1, 63, 64, 65, 4097, 70001, 300007};
    static const cm_dtype ds[] = {CM_INT8, CM_UINT8, CM_BOOL};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; ++li)
        for (size_t di = 0; di < sizeof ds / sizeof ds[0]; ++di) {
            const int64_t n[1] = {lens[li]};
            cm_tensor *x = new_tensor(dev, ds[di], 1, n);
            uint8_t *p = NULL;
            CHECK(cm_tensor_host_write(x, ds[di], (void **)&p));
            uint32_t h = 5;
            int64_t want = 0;
            for (int64_t i = 0; i < n[0]; ++i) {
                h = h * 1664525u + 1013904223u;
                /* runs of the extremes (0x80: -128 or 128; 0xff: -1 or 255) */
                const int64_t run = i / 1000 % 3;
                uint8_t v = run == 1 ? 0x80 : run == 2 ? 0xff : (uint8_t)(h >> 24);
                if (ds[di] == CM_BOOL)
                    v = v & 1;
                p[i] = v;
                want += ds[di] == CM_INT8 ? (int64_t)(int8_t)v : (int64_t)v;
            }
            cm_tensor *o = new_tensor(dev, CM_INT64, 0, NULL);
            cm_dtype_info info;
            CHECK(cm_dtype_get_info(ds[di], &info));
            for (int portable = 0; portable < 2; ++portable) {
                cm__cpu_reduce_force_portable(portable != 0);
                CHECK(cm_reduce(CM_REDUCE_SUM, x, CM_AXIS_ALL, o, NULL));
                cm__cpu_reduce_force_portable(false);
                const int64_t *q = NULL;
                CHECK(cm_tensor_host_read(o, CM_INT64, (const void **)&q));
                cr_assert_eq(*q, want, "%s sum of %lld, portable %d: %lld", info.name,
                             (long long)n[0], portable, (long long)*q);
            }
            CHECK(cm_tensor_release(o));
            CHECK(cm_tensor_release(x));
        }
    CHECK(cm_device_release(dev));
}

/* Sums of 16- to 64-bit integers (AVX2 sums 32-bit ones as low and high
 * halves in 32-bit lanes) are exact modulo 2^64 with the vector kernels and
 * with the portable loops: against a sum here, on lengths around the
 * 16-element step, in one pass (under 64Ki elements) and walked as quarters
 * side by side, with runs of each extreme. */
Test(cpu_reduce, wide_integer_sums_are_exact_with_either_kernel) {
    cm_device *dev = NULL;
    CHECK(cm_device_open(CM_DEVICE_CPU, 0, &dev));
    static const int64_t lens[] = {1, 15, 16, 17, 4097, 300007, 65535, (1 << 20) + 17};
    static const cm_dtype ds[] = {CM_INT16, CM_UINT16, CM_INT32, CM_UINT32, CM_INT64, CM_UINT64};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; ++li)
        for (size_t di = 0; di < sizeof ds / sizeof ds[0]; ++di) {
            const int64_t n[1] = {lens[li]};
            cm_dtype_info info;
            CHECK(cm_dtype_get_info(ds[di], &info));
            const bool is_signed = info.kind == CM_KIND_SIGNED;
            const int bits = 8 * (int)info.size;
            const uint64_t ones = UINT64_MAX >> (64 - bits);
            cm_tensor *x = new_tensor(dev, ds[di], 1, n);
            uint8_t *p = NULL;
            CHECK(cm_tensor_host_write(x, ds[di], (void **)&p));
            uint64_t h = 13 + li * 7 + di, want = 0;
            for (int64_t i = 0; i < n[0]; ++i) {
                h = h * 6364136223846793005u + 1442695040888963407u;
                /* runs of 2^16: the minimum, the maximum, -1 (all ones), then random */
                const int64_t run = i >> 16 & 3;
                uint64_t v = run == 0   ? (is_signed ? (uint64_t)1 << (bits - 1) : 0)
                             : run == 1 ? (is_signed ? ones >> 1 : ones)
                             : run == 2 ? ones
                                        : h >> 11;
                if (lens[li] < 1 << 16) /* short runs: mixed */
                    v = (h >> 60) == 0   ? (uint64_t)1 << (bits - 1)
                        : (h >> 60) == 1 ? ones >> 1
                                         : h >> 7;
                v &= ones;
                memcpy(p + i * (int64_t)info.size, &v, info.size); /* little-endian */
                want += is_signed && bits < 64 && (v >> (bits - 1) & 1) ? v | ~ones : v;
            }
            const cm_dtype od = is_signed ? CM_INT64 : CM_UINT64;
            cm_tensor *o = new_tensor(dev, od, 0, NULL);
            for (int portable = 0; portable < 2; ++portable) {
                cm__cpu_reduce_force_portable(portable != 0);
                CHECK(cm_reduce(CM_REDUCE_SUM, x, CM_AXIS_ALL, o, NULL));
                cm__cpu_reduce_force_portable(false);
                const uint64_t *q = NULL;
                CHECK(cm_tensor_host_read(o, od, (const void **)&q));
                cr_assert_eq(*q, want, "%s sum of %lld, portable %d: %llx, want %llx", info.name,
                             (long long)n[0], portable, (unsigned long long)*q,
                             (unsigned long long)want);
            }
            CHECK(cm_tensor_release(o));
            CHECK(cm_tensor_release(x));
        }
    CHECK(cm_device_release(dev));
}

/* Integer max and min (AVX2's own instructions for 8- to 32-bit elements,
 * compare and blend otherwise) are exact with the vector kernels and with
 * the portable loops: against a scan here, for every integer dtype, on
 * lengths around the 4-vector step and long enough to be read as quarters
 * side by side, with the extremes planted in the body, in the tail and not
 * at all. */
Test(cpu_reduce, integer_max_min_are_exact_with_either_kernel) {
    cm_device *dev = NULL;
    CHECK(cm_device_open(CM_DEVICE_CPU, 0, &dev));
    static const int64_t lens[] = {1, 31, 32, 33, 127, 128, 129, 4097, 70001, 300007};
    static const cm_dtype ds[] = {CM_BOOL,  CM_INT8,   CM_UINT8, CM_INT16, CM_UINT16,
                                  CM_INT32, CM_UINT32, CM_INT64, CM_UINT64};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; ++li)
        for (size_t di = 0; di < sizeof ds / sizeof ds[0]; ++di)
            for (int plant = 0; plant < 3; ++plant) { /* none; in the body; last element */
                const int64_t n[1] = {lens[li]};
                cm_dtype_info info;
                CHECK(cm_dtype_get_info(ds[di], &info));
                const bool is_signed = info.kind == CM_KIND_SIGNED;
                const int bits = 8 * (int)info.size;
                cm_tensor *x = new_tensor(dev, ds[di], 1, n);
                uint8_t *p = NULL;
                CHECK(cm_tensor_host_write(x, ds[di], (void **)&p));
                uint64_t h = 7 + li * 31 + di * 5 + (uint64_t)plant;
                const int64_t at = plant == 1 ? n[0] / 3 : n[0] - 1;
                for (int64_t i = 0; i < n[0]; ++i) {
                    h = h * 6364136223846793005u + 1442695040888963407u;
                    /* values away from the extremes, which the plant sets */
                    uint64_t v = (h >> 33) % ((uint64_t)1 << (bits - 2 < 31 ? bits - 2 : 31));
                    v += ds[di] == CM_BOOL ? 0 : (uint64_t)1 << (bits - 3);
                    if (ds[di] == CM_BOOL)
                        v &= 1;
                    if (plant > 0 && (i == at || i == n[0] - 1 - at / 2))
                        v = i == at ? (is_signed ? (uint64_t)1 << (bits - 1) : 0) /* the minimum */
                                    : (ds[di] == CM_BOOL ? 1
                                       : is_signed       ? ((uint64_t)1 << (bits - 1)) - 1
                                                         : UINT64_MAX >> (64 - bits));
                    memcpy(p + i * (int64_t)info.size, &v, info.size); /* little-endian */
                }
                /* the scan: sign-extend signed elements */
                int64_t smax = INT64_MIN, smin = INT64_MAX;
                uint64_t umax = 0, umin = UINT64_MAX;
                for (int64_t i = 0; i < n[0]; ++i) {
                    uint64_t v = 0;
                    memcpy(&v, p + i * (int64_t)info.size, info.size);
                    const int64_t sv = bits < 64 && (v >> (bits - 1) & 1)
                                           ? (int64_t)(v | ~(UINT64_MAX >> (64 - bits)))
                                           : (int64_t)v;
                    smax = sv > smax ? sv : smax;
                    smin = sv < smin ? sv : smin;
                    umax = v > umax ? v : umax;
                    umin = v < umin ? v : umin;
                }
                const cm_dtype od = is_signed || ds[di] == CM_BOOL ? CM_INT64 : CM_UINT64;
                cm_tensor *o = new_tensor(dev, od, 0, NULL);
                for (int k = 0; k < 4; ++k) {
                    cm__cpu_reduce_force_portable(k >= 2);
                    CHECK(
                        cm_reduce(k & 1 ? CM_REDUCE_MAX : CM_REDUCE_MIN, x, CM_AXIS_ALL, o, NULL));
                    cm__cpu_reduce_force_portable(false);
                    const uint64_t *q = NULL;
                    CHECK(cm_tensor_host_read(o, od, (const void **)&q));
                    const uint64_t want =
                        is_signed ? (uint64_t)(k & 1 ? smax : smin) : (k & 1 ? umax : umin);
                    cr_assert_eq(*q, want, "%s %s of %lld (plant %d, portable %d): %llx, want %llx",
                                 info.name, k & 1 ? "max" : "min", (long long)n[0], plant, k >= 2,
                                 (unsigned long long)*q, (unsigned long long)want);
                }
                CHECK(cm_tensor_release(o));
                CHECK(cm_tensor_release(x));
            }
    CHECK(cm_device_release(dev));
}

/* The float max/min of one contiguous float32 run of up to 2^18 elements
 * (one block) as its 16 lanes give it: element i into lane i % 16, a lane
 * keeps its first NaN, else its first largest (smallest) element; the
 * lanes are then taken in order the same way. */
static uint32_t lane_model(const float *x, int64_t n, bool max) {
    float l[16];
    for (int j = 0; j < 16; ++j)
        l[j] = max ? -INFINITY : INFINITY;
    for (int64_t i = 0; i < n; ++i) {
        float *a = &l[i % 16];
        if (*a == *a && (x[i] != x[i] || (max ? x[i] > *a : x[i] < *a)))
            *a = x[i];
    }
    float m = l[0];
    for (int j = 1; j < 16; ++j)
        if (m == m && (l[j] != l[j] || (max ? l[j] > m : l[j] < m)))
            m = l[j];
    uint32_t b;
    memcpy(&b, &m, sizeof b);
    return b;
}

/* Which of +0 and -0, or which NaN (payloads differ), a float32 max/min
 * returns is fixed by the lanes and their order: the vector loop (two
 * steps of 16 picked between themselves first) gives the model's bits,
 * with AVX2's max/min (runs without NaN) and with the portable loop. */
Test(cpu_reduce, float_max_min_pick_as_the_lanes_do) {
    cm_device *dev = NULL;
    CHECK(cm_device_open(CM_DEVICE_CPU, 0, &dev));
    static const int64_t lens[] = {17, 31, 32, 33, 48, 1000, 4099, 20000, 65536, 70001, 262144};
    static float x[262144];
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; ++li)
        for (int mode = 0; mode < 3; ++mode) { /* zeros; ones and NaNs; zeros, NaNs late */
            const int64_t n[1] = {lens[li]};
            uint32_t h = 3 + (uint32_t)mode + 10 * (uint32_t)li; /* each case its own data */
            for (int64_t i = 0; i < n[0]; ++i) {
                h = h * 1664525u + 1013904223u;
                uint32_t r = h ^ (h >> 15); /* a mixer: the LCG's bits are too regular */
                r *= 0x2c1b3c6du;
                r = (r ^ (r >> 12)) >> 24;
                float v = (r & 1) ? 0.0f : -0.0f;
                if (mode == 1 && r % 7 == 0)
                    v = (r & 2) ? 1.0f : -1.0f;
                if (mode > 0 && r % 13 == 0 && (mode == 1 || i > n[0] - 40)) {
                    const uint32_t nan = 0x7fc00000u | (h >> 10 & 0x3fffffu);
                    memcpy(&v, &nan, sizeof v);
                }
                x[i] = v;
            }
            cm_tensor *t = new_tensor(dev, CM_FLOAT32, 1, n);
            float *p = NULL;
            CHECK(cm_tensor_host_write(t, CM_FLOAT32, (void **)&p));
            memcpy(p, x, (size_t)n[0] * sizeof(float));
            cm_tensor *o = new_tensor(dev, CM_FLOAT32, 0, NULL);
            for (int mx = 0; mx < 4; ++mx) {
                cm__cpu_reduce_force_portable(mx >= 2);
                CHECK(cm_reduce(mx & 1 ? CM_REDUCE_MAX : CM_REDUCE_MIN, t, CM_AXIS_ALL, o, NULL));
                cm__cpu_reduce_force_portable(false);
                const float *q = NULL;
                CHECK(cm_tensor_host_read(o, CM_FLOAT32, (const void **)&q));
                uint32_t got;
                memcpy(&got, q, sizeof got);
                const uint32_t want = lane_model(x, n[0], (mx & 1) != 0);
                cr_assert_eq(got, want,
                             "%s of %lld (mode %d, portable %d): bits %08x, lanes give %08x",
                             mx & 1 ? "max" : "min", (long long)n[0], mode, mx >= 2, got, want);
            }
            CHECK(cm_tensor_release(o));
            CHECK(cm_tensor_release(t));
        }
    CHECK(cm_device_release(dev));
}

/* Every reduction of x (sum, max, min; over all, and axis 0 and axis 1
 * where 2-d) as 8-byte results (float64 or int64), appended to out. */
static size_t every_reduction(cm_device *dev, cm_tensor *x, int32_t ndim, const int64_t *shape,
                              bool is_float, uint64_t *out) {
    static const cm_reduce_op ops[3] = {CM_REDUCE_SUM, CM_REDUCE_MAX, CM_REDUCE_MIN};
    const cm_dtype od = is_float ? CM_FLOAT64 : CM_INT64;
    size_t k = 0;
    for (int op = 0; op < 3; ++op)
        for (int32_t axis = -1; axis < (ndim == 2 ? 2 : 0); ++axis) {
            const int64_t n[1] = {axis < 0 ? 1 : shape[1 - axis]};
            cm_tensor *o = new_tensor(dev, od, axis < 0 ? 0 : 1, n);
            CHECK(cm_reduce(ops[op], x, axis < 0 ? CM_AXIS_ALL : axis, o, NULL));
            const void *p = NULL;
            CHECK(cm_tensor_host_read(o, od, &p));
            memcpy(out + k, p, (size_t)n[0] * sizeof(uint64_t));
            k += (size_t)n[0];
            CHECK(cm_tensor_release(o));
        }
    return k;
}

/* One NaN at each position in turn, among zeros of both signs and ones:
 * every vector step of the AVX2 loop must notice it (a missed one gives a
 * number where the lanes give the NaN). */
Test(cpu_reduce, float_max_min_see_one_nan_anywhere) {
    cm_device *dev = NULL;
    CHECK(cm_device_open(CM_DEVICE_CPU, 0, &dev));
    static const int64_t lens[] = {16, 31, 32, 48, 64, 65, 96};
    float x[96];
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; ++li) {
        const int64_t n[1] = {lens[li]};
        cm_tensor *t = new_tensor(dev, CM_FLOAT32, 1, n);
        cm_tensor *o = new_tensor(dev, CM_FLOAT32, 0, NULL);
        for (int64_t at = 0; at < n[0]; ++at) {
            for (int64_t i = 0; i < n[0]; ++i)
                x[i] = i % 3 == 0 ? 1.0f : (i & 1) ? -0.0f : 0.0f;
            const uint32_t nan = 0x7fc00000u | (uint32_t)at;
            memcpy(&x[at], &nan, sizeof nan);
            float *p = NULL;
            CHECK(cm_tensor_host_write(t, CM_FLOAT32, (void **)&p));
            memcpy(p, x, (size_t)n[0] * sizeof(float));
            for (int k = 0; k < 2; ++k) {
                CHECK(cm_reduce(k ? CM_REDUCE_MAX : CM_REDUCE_MIN, t, CM_AXIS_ALL, o, NULL));
                const float *q = NULL;
                CHECK(cm_tensor_host_read(o, CM_FLOAT32, (const void **)&q));
                uint32_t got;
                memcpy(&got, q, sizeof got);
                cr_assert_eq(got, nan, "%s of %lld, NaN at %lld: %08x", k ? "max" : "min",
                             (long long)n[0], (long long)at, got);
            }
        }
        CHECK(cm_tensor_release(o));
        CHECK(cm_tensor_release(t));
    }
    /* down the rows: one NaN at each (row, column) of small matrices */
    for (int64_t rows = 1; rows <= 9; ++rows)
        for (int64_t cols = 1; cols <= 17; ++cols) {
            const int64_t shape[2] = {rows, cols}, kept[1] = {cols};
            cm_tensor *t = new_tensor(dev, CM_FLOAT32, 2, shape);
            cm_tensor *o = new_tensor(dev, CM_FLOAT32, 1, kept);
            for (int64_t at = 0; at < rows * cols; ++at) {
                float *p = NULL;
                CHECK(cm_tensor_host_write(t, CM_FLOAT32, (void **)&p));
                for (int64_t i = 0; i < rows * cols; ++i)
                    p[i] = i % 3 == 0 ? 1.0f : (i & 1) ? -0.0f : 0.0f;
                const uint32_t nan = 0x7fc00000u | (uint32_t)at;
                memcpy(&p[at], &nan, sizeof nan);
                for (int k = 0; k < 2; ++k) {
                    CHECK(cm_reduce(k ? CM_REDUCE_MAX : CM_REDUCE_MIN, t, 0, o, NULL));
                    const float *q = NULL;
                    CHECK(cm_tensor_host_read(o, CM_FLOAT32, (const void **)&q));
                    uint32_t got;
                    memcpy(&got, &q[at % cols], sizeof got);
                    cr_assert_eq(got, nan, "%s of %lld x %lld, NaN at %lld: column %lld %08x",
                                 k ? "max" : "min", (long long)rows, (long long)cols, (long long)at,
                                 (long long)(at % cols), got);
                }
            }
            CHECK(cm_tensor_release(o));
            CHECK(cm_tensor_release(t));
        }
    CHECK(cm_device_release(dev));
}

/* Float32 max/min down the rows pick per column as a scan in row order
 * does (a column keeps its first NaN, else its first largest or smallest
 * element: of +0 and -0, the earlier), with AVX2's max/min (no NaN met)
 * and with the portable loop: columns of zeros of both signs and ones,
 * with NaNs or none, on row counts around the four-row pass and column
 * counts around the vector. */
Test(cpu_reduce, float_column_max_min_pick_as_a_scan_does) {
    cm_device *dev = NULL;
    CHECK(cm_device_open(CM_DEVICE_CPU, 0, &dev));
    static const int64_t rows[] = {1, 3, 4, 5, 17, 100}, cols[] = {8, 9, 33, 1000};
    static float x[100 * 1000];
    for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ++ri)
        for (size_t ci = 0; ci < sizeof cols / sizeof cols[0]; ++ci)
            for (int nans = 0; nans < 2; ++nans) {
                const int64_t shape[2] = {rows[ri], cols[ci]}, kept[1] = {cols[ci]};
                uint32_t h = 5 + (uint32_t)(ri * 16 + ci * 2) + (uint32_t)nans;
                for (int64_t i = 0; i < shape[0] * shape[1]; ++i) {
                    h = h * 1664525u + 1013904223u;
                    const uint32_t r = h >> 24;
                    x[i] = r % 5 == 0 ? 1.0f : r % 5 == 1 ? -1.0f : (r & 1) ? 0.0f : -0.0f;
                    if (nans && r % 37 == 0) {
                        const uint32_t nan = 0x7fc00000u | (h >> 8 & 0xffffu);
                        memcpy(&x[i], &nan, sizeof nan);
                    }
                }
                cm_tensor *t = new_tensor(dev, CM_FLOAT32, 2, shape);
                float *p = NULL;
                CHECK(cm_tensor_host_write(t, CM_FLOAT32, (void **)&p));
                memcpy(p, x, (size_t)(shape[0] * shape[1]) * sizeof(float));
                cm_tensor *o = new_tensor(dev, CM_FLOAT32, 1, kept);
                for (int k = 0; k < 4; ++k) {
                    const bool mx = k & 1;
                    cm__cpu_reduce_force_portable(k >= 2);
                    CHECK(cm_reduce(mx ? CM_REDUCE_MAX : CM_REDUCE_MIN, t, 0, o, NULL));
                    cm__cpu_reduce_force_portable(false);
                    const float *q = NULL;
                    CHECK(cm_tensor_host_read(o, CM_FLOAT32, (const void **)&q));
                    for (int64_t j = 0; j < shape[1]; ++j) {
                        float a = mx ? -INFINITY : INFINITY;
                        for (int64_t i = 0; i < shape[0]; ++i) {
                            const float v = x[i * shape[1] + j];
                            if (a == a && (v != v || (mx ? v > a : v < a)))
                                a = v;
                        }
                        uint32_t got, want;
                        memcpy(&got, &q[j], sizeof got);
                        memcpy(&want, &a, sizeof want);
                        cr_assert_eq(got, want,
                                     "%s of %lld x %lld (NaNs %d, portable %d), column %lld: "
                                     "%08x, the scan gives %08x",
                                     mx ? "max" : "min", (long long)shape[0], (long long)shape[1],
                                     nans, k >= 2, (long long)j, got, want);
                    }
                }
                CHECK(cm_tensor_release(o));
                CHECK(cm_tensor_release(t));
            }
    CHECK(cm_device_release(dev));
}

/* Software prefetching (on x86-64 Intel only unless forced: the lines 4
 * and 16 KiB ahead in the contiguous kernels, each row's in the column
 * max/min, and the rows 8 below in float column sums whose threads take 4
 * KiB or less of each row: 600 x 1000 on two threads) changes no bit: every reduction with it forced on, at the usual
 * and at an odd distance, against it off, for float and integer dtypes, on
 * runs long enough to be read as quarters side by side and on matrices
 * whose columns take the vector form (float column max/min with NaN and
 * signed zeros). */
Test(cpu_reduce, prefetching_changes_no_bit) {
    cm_device *one = NULL, *two = NULL;
    CHECK(cm_device_open(CM_DEVICE_CPU, 0, &one));
    const cm_device_desc desc = {.type = CM_DEVICE_CPU, .cpu_threads = 2};
    CHECK(cm_device_open_desc(&desc, &two));
    static const struct {
        int32_t ndim;
        int64_t shape[2];
        int threads;
    } cases[] = {{1, {300007, 0}, 1},
                 {2, {131, 1045}, 1},
                 {2, {77, 4099}, 1},
                 {2, {5, 70001}, 1},
                 {2, {600, 1000}, 2}};
    static const cm_dtype ds[] = {CM_FLOAT16, CM_BFLOAT16, CM_FLOAT32, CM_FLOAT64,
                                  CM_INT8,    CM_UINT16,   CM_INT32,   CM_INT64};
    static uint64_t want[3 * (1 + 70001 + 5)], got[3 * (1 + 70001 + 5)];
    static const int dists[] = {4096, 64, 192};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ++ci)
        for (size_t di = 0; di < sizeof ds / sizeof ds[0]; ++di) {
            cm_device *dev = cases[ci].threads == 2 ? two : one;
            const int32_t nd = cases[ci].ndim;
            const int64_t *shape = cases[ci].shape;
            const int64_t count = nd == 1 ? shape[0] : shape[0] * shape[1];
            cm_dtype_info info;
            CHECK(cm_dtype_get_info(ds[di], &info));
            const bool is_float = info.kind == CM_KIND_FLOAT;
            cm_tensor *f = new_tensor(dev, CM_FLOAT64, nd, shape);
            cm_tensor *x = new_tensor(dev, ds[di], nd, shape);
            double *p = NULL;
            CHECK(cm_tensor_host_write(f, CM_FLOAT64, (void **)&p));
            uint32_t h = 3;
            for (int64_t i = 0; i < count; ++i) {
                h = h * 1664525u + 1013904223u;
                double v = (double)((int32_t)h >> 20);
                if (is_float && h % 97 == 0)
                    v = (h & 256) ? -0.0 : 0.0;
                if (is_float && h % 1009 == 0)
                    v = NAN;
                p[i] = v;
            }
            CHECK(cm_cast(f, x, NULL));
            cm__cpu_reduce_force_prefetch(0);
            const size_t nw = every_reduction(dev, x, nd, shape, is_float, want);
            for (size_t k = 0; k < sizeof dists / sizeof dists[0]; ++k) {
                cm__cpu_reduce_force_prefetch(dists[k]);
                const size_t ng = every_reduction(dev, x, nd, shape, is_float, got);
                cm__cpu_reduce_force_prefetch(-1);
                cr_assert_eq(ng, nw);
                for (size_t j = 0; j < nw; ++j)
                    cr_assert_eq(got[j], want[j],
                                 "%s %d-d %lld x %lld, prefetch %d, result %zu: %016llx, "
                                 "without %016llx",
                                 info.name, (int)nd, (long long)shape[0], (long long)shape[1],
                                 dists[k], j, (unsigned long long)got[j],
                                 (unsigned long long)want[j]);
            }
            CHECK(cm_tensor_release(x));
            CHECK(cm_tensor_release(f));
        }
    CHECK(cm_device_release(one));
    CHECK(cm_device_release(two));
}
