/* SPDX-License-Identifier: MIT */
/* Every op x dtype x layout against references computed in the test, on
 * the device CMETAL_TEST_DEVICE names (metal: softmetal running the msl/
 * kernels; cpu: the C kernels), so both implementations pass the same
 * checks. Layouts: contiguous, transposed, sliced with a step, negative
 * strides, broadcast inputs; shapes from 0-d and empty to 4-d. float64 is
 * run on the CPU only (Metal refuses it; see tests/metal/test_metal_ops.c).
 *
 * Bit-exact: fill, copy, cast, integer ops, comparisons, min/max, neg, abs,
 * square, relu, sign, sqrt, floor, ceil, and add/sub/mul/div of every
 * float dtype (one rounding of the exact result: the references compute in
 * double, the devices in float32 or double, which round the narrow dtypes
 * alike). Within a tolerance: rsqrt, exp, log, sin, cos, tanh, sigmoid (a
 * few ulp plus one rounding to the dtype), float sums and means (count ulps
 * of the device's accumulator times the sum of magnitudes, plus one
 * rounding to the output dtype).
 *
 * The references compute in ref_t (ops_util.h): long double, or double
 * where long double is double. There the few checks whose reference needs
 * more than 53 bits skip themselves, and the tests that make them say how
 * many (test_ops_matrix_cpu_double_ref runs this suite so). */
#include "core/alloc_hook.h"
#include "ops/ops_util.h"

static bool on_cpu(void) {
    const char *want = getenv("CMETAL_TEST_DEVICE");
    return want != NULL && strcmp(want, "cpu") == 0;
}

static cm_device *dev_open(void) {
    cm_device *d = NULL;
    cr_assert_eq(cm_device_open(on_cpu() ? CM_DEVICE_CPU : CM_DEVICE_METAL, 0, &d), CM_OK, "%s",
                 cm_last_error());
    return d;
}

/* How many of all_dtypes the device computes: all on the CPU, all but the
 * last (float64) on Metal. */
static size_t device_dtype_count(void) {
    cr_assert_eq(all_dtypes[N_DTYPES - 1], CM_FLOAT64);
    return on_cpu() ? N_DTYPES : N_DTYPES - 1;
}

static void skip_unless_cpu(void) {
    if (!on_cpu())
        cr_skip_test("float64 runs on the CPU only");
}

/* Whether the matrix case numbered n runs. Every case runs, except where
 * CMETAL_TEST_SAMPLE=N asks for about 1/N of them (valgrind's stage, whose
 * instrumented kernels made this suite its longest): the cases are picked
 * by a hash of their number, so the ops, dtypes, shapes and layouts of each
 * loop all still come up. Counted cases (`cases`) stay the whole matrix. */
static bool case_runs(int n) {
    static int every;
    if (every == 0) {
        const char *v = getenv("CMETAL_TEST_SAMPLE");
        every = v != NULL && atoi(v) > 1 ? atoi(v) : 1;
    }
    uint32_t h = (uint32_t)n * 2654435761u; /* Knuth's multiplicative hash */
    h ^= h >> 15;
    return every == 1 || h % (uint32_t)every == 0;
}

/* Checks made and skipped (their reference needs more precision than
 * ref_t has) by the running test: each test runs in its own process. */
static struct {
    long run, skipped;
} tally;

/* Counts a check; false, counting it skipped, when its reference is not
 * exact. */
static bool check_counted(bool reference_exact) {
    if (reference_exact)
        tally.run++;
    else
        tally.skipped++;
    return reference_exact;
}

/* Says so once per test: skips on stderr (a Criterion warning would fail
 * the run), the rest with --verbose. */
static void report_tally(const char *test) {
    if (tally.skipped > 0)
        fprintf(stderr, "%s: %ld checks run, %ld skipped (reference needs more than %d bits)\n",
                test, tally.run, tally.skipped, REF_MANT_DIG);
    else
        cr_log_info("%s: %ld checks run, none skipped", test, tally.run);
}

/* Reads elements of a host-visible view straight from its memory: many
 * times faster than cm_tensor_get_element, which checks for pending device
 * work on every call. For inputs that no op writes. */
typedef struct view_reader {
    const char *base;
    int32_t ndim;
    int64_t strides[CM_MAX_NDIM];
    size_t size;
} view_reader;

static view_reader reader_of(const cm_tensor *t) {
    cm_tensor_info info;
    CHECK(cm_tensor_get_info(t, &info));
    view_reader r = {.ndim = info.ndim, .size = dsize(info.dtype)};
    memcpy(r.strides, info.strides, sizeof r.strides);
    const void *p = NULL;
    CHECK(cm_tensor_host_read(t, info.dtype, &p));
    r.base = p;
    return r;
}

static elem read_at(const view_reader *r, const int64_t *idx) {
    int64_t off = 0;
    for (int32_t k = 0; k < r->ndim; ++k)
        off += idx[k] * r->strides[k];
    elem e;
    memset(&e, 0, sizeof e);
    memcpy(e.b, r->base + off * (int64_t)r->size, r->size);
    return e;
}

static void expect_equal(cm_dtype d, elem got, elem want, const char *what) {
    if (elem_isnan(d, want)) {
        cr_assert(elem_isnan(d, got), "%s: want NaN, got %" REF_G, what, elem_value(d, got));
        return;
    }
    cr_assert(elem_bits_equal(d, got, want), "%s: got %.20" REF_G " want %.20" REF_G, what,
              elem_value(d, got), elem_value(d, want));
}

/* A conversion of x from `from` to `to` against ref_convert; skipped, and
 * counted, where the reference is not exact. */
static void expect_converted(cm_dtype to, cm_dtype from, elem x, elem got, const char *what) {
    if (check_counted(ref_convert_exact(to, from, x)))
        expect_equal(to, got, ref_convert(to, from, x), what);
}

/* Every element of `parent` outside `view` still holds what make_view
 * wrote there (seed, not tame): an op writes its output's elements only. */
static void check_gaps(const cm_tensor *parent, const cm_tensor *view, uint64_t seed) {
    cm_tensor_info pi, vi;
    CHECK(cm_tensor_get_info(parent, &pi));
    CHECK(cm_tensor_get_info(view, &vi));
    if (pi.numel == 0)
        return;
    const size_t sz = dsize(pi.dtype);
    const void *p = NULL;
    CHECK(cm_tensor_host_read(parent, pi.dtype, &p));
    bool *in_view = calloc((size_t)pi.numel, 1);
    cr_assert_not_null(in_view);
    int64_t idx[CM_MAX_NDIM] = {0};
    if (vi.numel > 0) {
        do {
            int64_t off = (int64_t)vi.byte_offset / (int64_t)sz;
            for (int32_t k = 0; k < vi.ndim; ++k)
                off += idx[k] * vi.strides[k];
            in_view[off] = true;
        } while (next_index(vi.ndim, vi.shape, idx));
    }
    for (int64_t i = 0; i < pi.numel; ++i) {
        if (in_view[i])
            continue;
        const elem want = gen_elem(pi.dtype, (uint64_t)i, seed, false);
        cr_assert(memcmp((const char *)p + (size_t)i * sz, want.b, sz) == 0,
                  "%s element %lld outside the view was written", dname(pi.dtype), (long long)i);
    }
    free(in_view);
}

/* ------------------------------------------------------------ copy, fill */

Test(ops_matrix, copy_every_dtype_layout_pair_and_shape_bit_for_bit) {
    cm_device *dev = dev_open();
    const size_t n_dt = device_dtype_count();
    int cases = 0;
    for (size_t di = 0; di < n_dt; ++di) {
        for (size_t s = 0; s < N_TEST_SHAPES; ++s) {
            const test_shape *ts = &test_shapes[s];
            for (int ls = 0; ls < L_COUNT; ++ls) {
                for (int ld = 0; ld < L_BROADCAST; ++ld) {
                    if (!case_runs(cases++))
                        continue;
                    const cm_dtype d = all_dtypes[di];
                    cm_tensor *src =
                        make_view(dev, d, ts->ndim, ts->shape, (enum layout)ls, 7, false, NULL);
                    cm_tensor *dparent = NULL;
                    cm_tensor *dst =
                        make_view(dev, d, ts->ndim, ts->shape, (enum layout)ld, 8, false, &dparent);
                    CHECK(cm_copy(src, dst, NULL));
                    int64_t idx[CM_MAX_NDIM] = {0};
                    if (numel_of(ts->ndim, ts->shape) > 0) {
                        do {
                            const elem want = get_at(src, idx), got = get_at(dst, idx);
                            cr_assert(elem_bits_equal(d, got, want), "copy %s %s -> %s shape #%zu",
                                      dname(d), layout_names[ls], layout_names[ld], s);
                        } while (next_index(ts->ndim, ts->shape, idx));
                    }
                    check_gaps(dparent, dst, 8);
                    cm_tensor_release(src);
                    cm_tensor_release(dst);
                    cm_tensor_release(dparent);
                }
            }
        }
    }
    cr_assert_eq(cases, (int)(n_dt * N_TEST_SHAPES * L_COUNT * L_BROADCAST));
    cm_device_release(dev);
}

/* Permuted views made contiguous and scattered back into permuted
 * destinations; big enough for tiled copies, with ragged tile edges. */
Test(ops_matrix, copy_of_large_permutes_makes_them_contiguous_and_back) {
    cm_device *dev = dev_open();
    const int64_t shapes[][3] = {{1, 70, 45}, {3, 40, 37}, {2, 9, 130}, {37, 64, 29}};
    const cm_dtype ds[] = {CM_UINT8, CM_FLOAT16, CM_FLOAT32, CM_INT64};
    const int32_t perms[][3] = {{0, 2, 1}, {2, 1, 0}, {1, 2, 0}, {2, 0, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
        for (size_t di = 0; di < sizeof ds / sizeof ds[0]; ++di) {
            for (size_t p = 0; p < sizeof perms / sizeof perms[0]; ++p) {
                cm_tensor *base = make_view(dev, ds[di], 3, shapes[s], L_CONTIG, 5, false, NULL);
                cm_tensor *v = NULL;
                CHECK(cm_tensor_permute(base, perms[p], &v));
                cm_tensor_info vi;
                CHECK(cm_tensor_get_info(v, &vi));
                cm_tensor *out = new_tensor(dev, ds[di], 3, vi.shape);
                CHECK(cm_copy(v, out, NULL));
                const view_reader rv = reader_of(v), ro = reader_of(out);
                int64_t idx[3] = {0};
                do {
                    cr_assert(elem_bits_equal(ds[di], read_at(&ro, idx), read_at(&rv, idx)),
                              "%s shape #%zu perm #%zu", dname(ds[di]), s, p);
                } while (next_index(3, vi.shape, idx));
                cm_tensor *back = new_tensor(dev, ds[di], 3, shapes[s]);
                cm_tensor *bv = NULL;
                CHECK(cm_tensor_permute(back, perms[p], &bv));
                CHECK(cm_copy(out, bv, NULL));
                const void *x = NULL, *y = NULL;
                CHECK(cm_tensor_host_read(base, ds[di], &x));
                CHECK(cm_tensor_host_read(back, ds[di], &y));
                cr_assert(memcmp(x, y, (size_t)numel_of(3, shapes[s]) * dsize(ds[di])) == 0,
                          "%s shape #%zu perm #%zu scattered back", dname(ds[di]), s, p);
                cm_tensor_release(bv);
                cm_tensor_release(back);
                cm_tensor_release(out);
                cm_tensor_release(v);
                cm_tensor_release(base);
            }
        }
    }
    cm_device_release(dev);
}

Test(ops_matrix, copy_onto_the_identical_view_changes_nothing) {
    cm_device *dev = dev_open();
    const int64_t shape[2] = {5, 6};
    cm_tensor *parent = NULL;
    cm_tensor *t = make_view(dev, CM_INT32, 2, shape, L_STEP, 3, false, &parent);
    cm_tensor *before = new_tensor(dev, CM_INT32, 2, shape);
    CHECK(cm_copy(t, before, NULL));
    CHECK(cm_copy(t, t, NULL));
    int64_t idx[2] = {0};
    do {
        cr_assert_eq(get_at(t, idx).i32, get_at(before, idx).i32);
    } while (next_index(2, shape, idx));
    check_gaps(parent, t, 3);
    cm_tensor_release(t);
    cm_tensor_release(parent);
    cm_tensor_release(before);
    cm_device_release(dev);
}

Test(ops_matrix, fill_every_dtype_layout_and_shape_with_converted_values) {
    REQUIRE_TRUSTWORTHY_REFERENCE();
    cm_device *dev = dev_open();
    const size_t n_dt = device_dtype_count();
    const double values[] = {0.0,    -0.0,  1.0,     -1.5, -2.5,     300.25,
                             300.75, -1e10, 65520.0, NAN,  INFINITY, 1e-30};
    int cases = 0;
    for (size_t di = 0; di < n_dt; ++di) {
        const cm_dtype d = all_dtypes[di];
        for (size_t s = 0; s < N_TEST_SHAPES; ++s) {
            const test_shape *ts = &test_shapes[s];
            for (int l = 0; l < L_BROADCAST; ++l) {
                for (size_t v = 0; v < sizeof values / sizeof values[0]; ++v) {
                    if (!case_runs(cases++))
                        continue;
                    cm_tensor *parent = NULL;
                    cm_tensor *t =
                        make_view(dev, d, ts->ndim, ts->shape, (enum layout)l, 9, false, &parent);
                    CHECK(cm_fill(t, CM_FLOAT64, &values[v], NULL));
                    elem in;
                    in.f64 = values[v];
                    int64_t idx[CM_MAX_NDIM] = {0};
                    if (numel_of(ts->ndim, ts->shape) > 0) {
                        do {
                            char what[96];
                            snprintf(what, sizeof what, "fill %s %s shape #%zu with %g", dname(d),
                                     layout_names[l], s, values[v]);
                            expect_converted(d, CM_FLOAT64, in, get_at(t, idx), what);
                        } while (next_index(ts->ndim, ts->shape, idx));
                    }
                    check_gaps(parent, t, 9);
                    cm_tensor_release(t);
                    cm_tensor_release(parent);
                }
            }
        }
    }
    report_tally("fill");
    cm_device_release(dev);
}

/* 64-bit integer values arrive exact; integers wrap and floats saturate
 * into narrower integers. */
Test(ops_matrix, fill_values_are_exact_wrap_or_saturate) {
    cm_device *dev = dev_open();
    const int64_t shape[1] = {37};
    int64_t last[1] = {36};
    cm_tensor *a = new_tensor(dev, CM_INT64, 1, shape), *b = new_tensor(dev, CM_UINT64, 1, shape);
    const int64_t big = INT64_MAX - 2; /* not representable as a double */
    const uint64_t ubig = UINT64_MAX - 6;
    CHECK(cm_fill(a, CM_INT64, &big, NULL));
    CHECK(cm_fill(b, CM_UINT64, &ubig, NULL));
    cr_assert_eq(get_at(a, last).i64, big);
    cr_assert_eq(get_at(b, last).u64, ubig);
    cm_tensor *s = new_tensor(dev, CM_INT64, 0, NULL), *u = new_tensor(dev, CM_UINT64, 0, NULL);
    const int64_t small = INT64_MIN + 3;
    const uint64_t usmall = UINT64_MAX - 1;
    CHECK(cm_fill(s, CM_INT64, &small, NULL));
    CHECK(cm_fill(u, CM_UINT64, &usmall, NULL));
    cr_assert_eq(get_at(s, NULL).i64, small);
    cr_assert_eq(get_at(u, NULL).u64, usmall);
    cm_tensor *c = new_tensor(dev, CM_INT8, 1, shape);
    const int64_t wrap = 300;
    CHECK(cm_fill(c, CM_INT64, &wrap, NULL));
    cr_assert_eq(get_at(c, last).i8, 44);
    const double sat = 300.0;
    CHECK(cm_fill(c, CM_FLOAT64, &sat, NULL));
    cr_assert_eq(get_at(c, last).i8, 127);
    cm_tensor_release(a);
    cm_tensor_release(b);
    cm_tensor_release(s);
    cm_tensor_release(u);
    cm_tensor_release(c);
    cm_device_release(dev);
}

/* ------------------------------------------------------------ cast */

static void check_cast(cm_device *dev, cm_dtype from, cm_dtype to, int32_t ndim,
                       const int64_t *shape, enum layout ls, enum layout ld) {
    cm_tensor *src = make_view(dev, from, ndim, shape, ls, 11 + (uint64_t)from, false, NULL);
    cm_tensor *dst = make_view(dev, to, ndim, shape, ld, 12, false, NULL);
    CHECK(cm_cast(src, dst, NULL));
    int64_t idx[CM_MAX_NDIM] = {0};
    if (numel_of(ndim, shape) > 0) {
        const view_reader rs = reader_of(src), rd = reader_of(dst);
        do {
            const elem x = read_at(&rs, idx);
            char what[128];
            snprintf(what, sizeof what, "cast %s -> %s (%s -> %s) of %.21" REF_G, dname(from),
                     dname(to), layout_names[ls], layout_names[ld], elem_value(from, x));
            expect_converted(to, from, x, read_at(&rd, idx), what);
        } while (next_index(ndim, shape, idx));
    }
    cm_tensor_release(src);
    cm_tensor_release(dst);
}

Test(ops_matrix, cast_every_dtype_pair_layout_and_shape_matches_reference_conversion) {
    REQUIRE_TRUSTWORTHY_REFERENCE();
    cm_device *dev = dev_open();
    const size_t n_dt = device_dtype_count();
    const int64_t long_row[1] = {512};
    int cases = 0;
    for (size_t i = 0; i < n_dt; ++i) {
        for (size_t j = 0; j < n_dt; ++j) {
            const cm_dtype from = all_dtypes[i], to = all_dtypes[j];
            if (case_runs(cases++))
                check_cast(dev, from, to, 1, long_row, L_CONTIG, L_CONTIG);
            for (size_t s = 0; s < N_TEST_SHAPES; ++s) {
                const test_shape *ts = &test_shapes[s];
                for (int l = 0; l < L_COUNT; ++l) {
                    /* Each source layout into the same one and into another. */
                    const enum layout same = l == L_BROADCAST ? L_TRANSPOSED : (enum layout)l;
                    const enum layout other = (enum layout)((l + 3) % L_BROADCAST);
                    if (case_runs(cases++))
                        check_cast(dev, from, to, ts->ndim, ts->shape, (enum layout)l, same);
                    if (case_runs(cases++))
                        check_cast(dev, from, to, ts->ndim, ts->shape, (enum layout)l, other);
                }
            }
        }
    }
    report_tally("cast");
    cm_device_release(dev);
}

/* Every float16 / bfloat16 pattern to float32 (exact value and sign, NaN
 * sign kept) and back, bit for bit (NaN payloads included). */
static void roundtrip_all(cm_dtype half) {
    const bool bf16 = half == CM_BFLOAT16;
    cm_device *dev = dev_open();
    const int64_t n[1] = {65536};
    cm_tensor *h = new_tensor(dev, half, 1, n), *f = new_tensor(dev, CM_FLOAT32, 1, n),
              *back = new_tensor(dev, half, 1, n);
    uint16_t *p = NULL;
    CHECK(cm_tensor_host_write(h, half, (void **)&p));
    for (uint32_t i = 0; i < 65536; ++i)
        p[i] = (uint16_t)i;
    CHECK(cm_cast(h, f, NULL));
    CHECK(cm_cast(f, back, NULL));
    const uint16_t *q = NULL;
    const float *fp = NULL;
    CHECK(cm_tensor_host_read(back, half, (const void **)&q));
    CHECK(cm_tensor_host_read(f, CM_FLOAT32, (const void **)&fp));
    for (uint32_t i = 0; i < 65536; ++i) {
        cr_assert_eq(q[i], i, "%s 0x%04x came back as 0x%04x", dname(half), i, q[i]);
        const ref_t want = ref_small_value((uint16_t)i, bf16);
        if (isnan(want)) {
            uint32_t bits;
            memcpy(&bits, &fp[i], 4);
            cr_assert(isnan(fp[i]), "%s 0x%04x -> %a", dname(half), i, (double)fp[i]);
            cr_assert_eq(bits >> 31, i >> 15, "NaN sign of 0x%04x", i);
        } else {
            cr_assert((ref_t)fp[i] == want && !signbit(fp[i]) == !signbit(want), "%s 0x%04x -> %a",
                      dname(half), i, (double)fp[i]);
        }
    }
    cm_tensor_release(h);
    cm_tensor_release(f);
    cm_tensor_release(back);
    cm_device_release(dev);
}

Test(ops_matrix, float16_all_65536_patterns_roundtrip_through_float32) {
    roundtrip_all(CM_FLOAT16);
}

Test(ops_matrix, bfloat16_all_65536_patterns_roundtrip_through_float32) {
    roundtrip_all(CM_BFLOAT16);
}

/* float32 to float16 and bfloat16: every pattern that is a tie or a
 * neighbour of one, random patterns, and named ones (overflow, subnormals,
 * NaNs), against the search-based reference. A NaN keeps its sign and the
 * top bits of its payload, quieted when those are all zero. */
Test(ops_matrix, float32_to_half_rounds_to_nearest_even_and_keeps_nan_payloads) {
    cm_device *dev = dev_open();
    enum { N = 65536 * 6 };
    const int64_t n[1] = {N};
    cm_tensor *f = new_tensor(dev, CM_FLOAT32, 1, n), *h = new_tensor(dev, CM_FLOAT16, 1, n),
              *b = new_tensor(dev, CM_BFLOAT16, 1, n);
    uint32_t *fp = NULL;
    CHECK(cm_tensor_host_write(f, CM_FLOAT32, (void **)&fp));
    for (uint32_t i = 0; i < 65536; ++i) {
        /* float16 ties: 13 dropped bits 0x1000; bfloat16 ties: 16 bits 0x8000. */
        fp[6 * i + 0] = (i << 13) | 0x1000u;
        fp[6 * i + 1] = ((i << 13) | 0x1000u) + 1u;
        fp[6 * i + 2] = ((i << 13) | 0x1000u) - 1u;
        fp[6 * i + 3] = (i << 16) | 0x8000u;
        fp[6 * i + 4] = ((i << 16) | 0x8000u) - 1u;
        fp[6 * i + 5] = (uint32_t)mix(i);
    }
    const float named[] = {65504.0f,     65519.99f,       65520.0f,     1e-8f,
                           2.98e-8f,     2.9802322e-8f,   5.96e-8f,     6.1e-5f,
                           6.097555e-5f, 1.0f + 0x1p-11f, 3.4028235e38f};
    const uint16_t named_float16[] = {0x7bff, 0x7bff, 0x7c00, 0x0000, 0x0000, 0x0000, 0x0001};
    const uint32_t named_bits[] = {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fa12345u, 0xff812345u,
                                   0x3f801000u, 0x3f803000u, 0x33000000u, 0x33000001u, 0x477ff000u,
                                   0x477fefffu, 0x38800000u, 0x387fe000u, 0x3f808000u, 0x3f818000u,
                                   0x00000001u, 0x80000000u, 0x7f7fffffu};
    const size_t n_named = sizeof named / sizeof named[0];
    memcpy(fp, named, sizeof named);
    memcpy(fp + n_named, named_bits, sizeof named_bits);
    CHECK(cm_cast(f, h, NULL));
    CHECK(cm_cast(f, b, NULL));
    const uint16_t *hp = NULL, *bp = NULL;
    CHECK(cm_tensor_host_read(h, CM_FLOAT16, (const void **)&hp));
    CHECK(cm_tensor_host_read(b, CM_BFLOAT16, (const void **)&bp));
    for (uint32_t i = 0; i < N; ++i) {
        const uint32_t u = fp[i];
        float v;
        memcpy(&v, &u, 4);
        if (isnan(v)) {
            const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
            const uint16_t ph = (uint16_t)((u >> 13) & 0x3ffu), pb = (uint16_t)((u >> 16) & 0x7fu);
            cr_assert_eq(hp[i], sign | 0x7c00u | (ph ? ph : 0x200u), "0x%08x -> float16 0x%04x", u,
                         hp[i]);
            cr_assert_eq(bp[i], sign | 0x7f80u | (pb ? pb : 0x40u), "0x%08x -> bfloat16 0x%04x", u,
                         bp[i]);
            continue;
        }
        cr_assert_eq(hp[i], ref_small_encode(v, false), "%a -> float16 0x%04x", (double)v, hp[i]);
        cr_assert_eq(bp[i], ref_small_encode(v, true), "%a -> bfloat16 0x%04x", (double)v, bp[i]);
    }
    for (size_t i = 0; i < sizeof named_float16 / sizeof named_float16[0]; ++i)
        cr_assert_eq(hp[i], named_float16[i], "named %zu: 0x%04x", i, hp[i]);
    cm_tensor_release(f);
    cm_tensor_release(h);
    cm_tensor_release(b);
    cm_device_release(dev);
}

/* 64-bit integers round once to float32/float16/bfloat16 (no double
 * rounding through an intermediate), and floats saturate into integers. */
Test(ops_matrix, wide_integers_round_once_and_floats_saturate) {
    REQUIRE_TRUSTWORTHY_REFERENCE();
    cm_device *dev = dev_open();
    const int64_t iv[] = {INT64_MAX,
                          INT64_MIN,
                          (1ll << 53) + 1,
                          (1ll << 24) + 1,
                          (1ll << 24) + 3,
                          65519,
                          65520,
                          -65536,
                          0x7fffff7fffffffffll,
                          0x0100000180000000ll,
                          0x0100000080000001ll,
                          -0x0100000080000000ll,
                          (1ll << 60) + (1ll << 52) + 1,
                          (1ll << 60) + (1ll << 52),
                          -((1ll << 60) + (1ll << 52) + 1)};
    const int64_t n[1] = {sizeof iv / sizeof iv[0]};
    const cm_dtype to[] = {CM_FLOAT32, CM_FLOAT16, CM_BFLOAT16};
    cm_tensor *x = new_tensor(dev, CM_INT64, 1, n);
    int64_t *p = NULL;
    CHECK(cm_tensor_host_write(x, CM_INT64, (void **)&p));
    memcpy(p, iv, sizeof iv);
    for (size_t k = 0; k < 3; ++k) {
        cm_tensor *y = new_tensor(dev, to[k], 1, n);
        CHECK(cm_cast(x, y, NULL));
        for (int64_t i = 0; i < n[0]; ++i) {
            elem e;
            e.i64 = iv[i];
            char what[96];
            snprintf(what, sizeof what, "int64 %lld -> %s", (long long)iv[i], dname(to[k]));
            expect_converted(to[k], CM_INT64, e, get_at(y, &i), what);
        }
        cm_tensor_release(y);
    }
    const float fv[] = {NAN,    INFINITY, -INFINITY, 3e9f,  -3e9f,  2147483520.0f, -2147483648.0f,
                        255.9f, -0.9f,    -1.0f,     1e20f, -1e20f, 9.2233720e18f, 1.8446743e19f};
    const int64_t m[1] = {sizeof fv / sizeof fv[0]};
    cm_tensor *f = new_tensor(dev, CM_FLOAT32, 1, m);
    float *fp = NULL;
    CHECK(cm_tensor_host_write(f, CM_FLOAT32, (void **)&fp));
    memcpy(fp, fv, sizeof fv);
    for (size_t k = 0; k < N_DTYPES; ++k) {
        if (dfloat(all_dtypes[k]))
            continue;
        cm_tensor *y = new_tensor(dev, all_dtypes[k], 1, m);
        CHECK(cm_cast(f, y, NULL));
        for (int64_t i = 0; i < m[0]; ++i) {
            elem e;
            e.f32 = fv[i];
            char what[96];
            snprintf(what, sizeof what, "float32 %g -> %s", (double)fv[i], dname(all_dtypes[k]));
            expect_converted(all_dtypes[k], CM_FLOAT32, e, get_at(y, &i), what);
        }
        cm_tensor_release(y);
    }
    report_tally("wide integers");
    cm_tensor_release(x);
    cm_tensor_release(f);
    cm_device_release(dev);
}

/* Casts four elements of `from` to the 16-bit float dtype `to` and
 * compares their bit patterns with want. */
static void expect_cast_to_half(cm_dtype from, const void *values, cm_dtype to,
                                const uint16_t want[4]) {
    cm_device *dev = dev_open();
    const int64_t n[1] = {4};
    cm_tensor *x = new_tensor(dev, from, 1, n), *y = new_tensor(dev, to, 1, n);
    void *xp = NULL;
    CHECK(cm_tensor_host_write(x, from, &xp));
    memcpy(xp, values, 4 * dsize(from));
    CHECK(cm_cast(x, y, NULL));
    const uint16_t *yp = NULL;
    CHECK(cm_tensor_host_read(y, to, (const void **)&yp));
    for (int k = 0; k < 4; ++k)
        cr_assert_eq(yp[k], want[k], "%s -> %s #%d: 0x%04x", dname(from), dname(to), k, yp[k]);
    cm_tensor_release(x);
    cm_tensor_release(y);
    cm_device_release(dev);
}

/* The same rules as literal bit patterns (a check on the reference too). */
Test(ops_matrix, int64_just_above_a_bfloat16_tie_rounds_up) {
    /* 2^60 + 2^52 + 1 lies just above a bfloat16 tie; through a double it
     * would become the tie and round down. */
    const int64_t v[4] = {(1ll << 60) + (1ll << 52) + 1, (1ll << 60) + (1ll << 52),
                          -((1ll << 60) + (1ll << 52) + 1), INT64_MIN};
    const uint16_t want[4] = {0x5d81, 0x5d80, 0xdd81, 0xdf00};
    expect_cast_to_half(CM_INT64, v, CM_BFLOAT16, want);
}

Test(ops_matrix, float64_just_above_a_float16_tie_rounds_up) {
    skip_unless_cpu();
    const double v[4] = {1.0 + 0x1p-11 + 0x1p-40, 1.0 + 0x1p-11,
                         0x1p-25 + 0x1p-60 /* just above half the smallest subnormal */,
                         65520.0 - 0x1p-30};
    const uint16_t want[4] = {0x3c01, 0x3c00, 0x0001, 0x7bff};
    expect_cast_to_half(CM_FLOAT64, v, CM_FLOAT16, want);
}

Test(ops_matrix, float_to_int_saturates_and_maps_nan_to_zero) {
    cm_device *dev = dev_open();
    const int64_t n[1] = {6};
    cm_tensor *f = new_tensor(dev, CM_FLOAT32, 1, n), *o = new_tensor(dev, CM_INT16, 1, n);
    cm_tensor *u = new_tensor(dev, CM_UINT8, 1, n), *bl = new_tensor(dev, CM_BOOL, 1, n);
    float *fp = NULL;
    CHECK(cm_tensor_host_write(f, CM_FLOAT32, (void **)&fp));
    const float vals[6] = {NAN, INFINITY, -INFINITY, 1e9f, -2.9f, 0.5f};
    memcpy(fp, vals, sizeof vals);
    CHECK(cm_cast(f, o, NULL));
    CHECK(cm_cast(f, u, NULL));
    CHECK(cm_cast(f, bl, NULL));
    const int16_t *op = NULL;
    const uint8_t *up = NULL, *bp = NULL;
    CHECK(cm_tensor_host_read(o, CM_INT16, (const void **)&op));
    CHECK(cm_tensor_host_read(u, CM_UINT8, (const void **)&up));
    CHECK(cm_tensor_host_read(bl, CM_BOOL, (const void **)&bp));
    const int16_t wo[6] = {0, 32767, -32768, 32767, -2, 0};
    const uint8_t wu[6] = {0, 255, 0, 255, 0, 0};
    const uint8_t wb[6] = {1, 1, 1, 1, 1, 1};
    for (int k = 0; k < 6; ++k) {
        cr_assert_eq(op[k], wo[k], "int16 %d: %d", k, op[k]);
        cr_assert_eq(up[k], wu[k], "uint8 %d: %d", k, up[k]);
        cr_assert_eq(bp[k], wb[k], "bool %d: %d", k, bp[k]);
    }
    cm_tensor_release(f);
    cm_tensor_release(o);
    cm_tensor_release(u);
    cm_tensor_release(bl);
    cm_device_release(dev);
}

/* ------------------------------------------------------------ unary */

static bool unary_exact(cm_unary_op op) {
    return op <= CM_UNARY_SQRT || op == CM_UNARY_FLOOR || op == CM_UNARY_CEIL;
}

/* Relative tolerance of transcendental ops: a few ulp of the computing
 * precision plus one rounding to the dtype. */
static ref_t unary_tolerance(cm_dtype d) {
    switch (d) {
    case CM_FLOAT16: return 2e-3;
    case CM_BFLOAT16: return 1.6e-2;
    case CM_FLOAT32: return 2e-6;
    default: return 1e-14;
    }
}

static elem ref_unary(cm_unary_op op, cm_dtype d, elem a) {
    if (!dfloat(d)) {
        const uint64_t x = bits64(d, a);
        const bool neg = dsigned(d) && (int64_t)x < 0;
        switch (op) {
        case CM_UNARY_NEG: return of_bits(d, 0 - x);
        case CM_UNARY_ABS: return of_bits(d, neg ? 0 - x : x);
        case CM_UNARY_SQUARE: return of_bits(d, x * x);
        case CM_UNARY_RELU: return of_bits(d, neg ? 0 : x);
        default: return of_bits(d, neg ? ~0ull : x != 0);
        }
    }
    if (unary_exact(op)) { /* in double, then one rounding to d */
        const double x = (double)elem_value(d, a);
        double r;
        switch (op) {
        case CM_UNARY_NEG: r = -x; break;
        case CM_UNARY_ABS: r = fabs(x); break;
        case CM_UNARY_SQUARE: r = x * x; break;
        case CM_UNARY_RELU: r = isnan(x) ? x : x > 0 ? x : 0.0; break;
        case CM_UNARY_SIGN: r = isnan(x) ? x : x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; break;
        case CM_UNARY_SQRT: r = sqrt(x); break;
        case CM_UNARY_FLOOR: r = floor(x); break;
        default: r = ceil(x); break;
        }
        return ref_from_value(d, r);
    }
    const ref_t x = elem_value(d, a);
    ref_t r;
    switch (op) {
    case CM_UNARY_RSQRT: r = 1.0 / REF_FN(sqrt)(x); break;
    case CM_UNARY_EXP: r = REF_FN(exp)(x); break;
    case CM_UNARY_LOG: r = REF_FN(log)(x); break;
    case CM_UNARY_SIN: r = REF_FN(sin)(x); break;
    case CM_UNARY_COS: r = REF_FN(cos)(x); break;
    case CM_UNARY_TANH: r = REF_FN(tanh)(x); break;
    default: r = 1.0 / (1.0 + REF_FN(exp)(-x)); break;
    }
    return ref_from_value(d, r);
}

static void expect_close(cm_dtype d, elem got, elem want, const char *what) {
    if (elem_isnan(d, want)) {
        cr_assert(elem_isnan(d, got), "%s: want NaN, got %" REF_G, what, elem_value(d, got));
        return;
    }
    const ref_t g = elem_value(d, got), w = elem_value(d, want);
    if (isinf(w) || w == 0) {
        const ref_t tiny = d == CM_FLOAT64 ? 1e-300 : d == CM_FLOAT32 ? 1e-37 : 1e-6;
        cr_assert(g == w || (!isinf(w) && REF_FN(fabs)(g) <= tiny),
                  "%s: got %" REF_G " want %" REF_G, what, g, w);
        return;
    }
    const ref_t tol = unary_tolerance(d) * (REF_FN(fabs)(w) > 1 ? REF_FN(fabs)(w) : 1);
    cr_assert(REF_FN(fabs)(g - w) <= tol, "%s: got %.20" REF_G " want %.20" REF_G, what, g, w);
}

static void check_unary(cm_device *dev, cm_unary_op op, cm_dtype d, const test_shape *ts,
                        enum layout l, enum layout lo, bool in_place) {
    /* Transcendental ops get finite inputs in [-8, 8], but for log and
     * rsqrt, which meet zeros, negatives, infinities and NaNs. */
    const bool tame = !unary_exact(op) && op != CM_UNARY_LOG && op != CM_UNARY_RSQRT;
    cm_tensor *x =
        make_view(dev, d, ts->ndim, ts->shape, l, 21 + (uint64_t)op * 8 + (uint64_t)l, tame, NULL);
    cm_tensor *ref_in = new_tensor(dev, d, ts->ndim, ts->shape);
    CHECK(cm_copy(x, ref_in, NULL));
    cm_tensor *out = in_place ? x : make_view(dev, d, ts->ndim, ts->shape, lo, 22, false, NULL);
    if (in_place)
        CHECK(cm_tensor_retain(x));
    CHECK(cm_unary(op, x, out, NULL));
    int64_t idx[CM_MAX_NDIM] = {0};
    if (numel_of(ts->ndim, ts->shape) > 0) {
        const view_reader rin = reader_of(ref_in), rout = reader_of(out);
        do {
            const elem a = read_at(&rin, idx);
            char what[128];
            snprintf(what, sizeof what, "%s %s (%s -> %s%s) of %.17" REF_G, cm_unary_op_name(op),
                     dname(d), layout_names[l], layout_names[lo], in_place ? ", in place" : "",
                     elem_value(d, a));
            const elem want = ref_unary(op, d, a), got = read_at(&rout, idx);
            /* Exact in double too: integers as bits, floats from exact
             * inputs with one rounding, or within a tolerance. */
            check_counted(true);
            if (unary_exact(op) || !dfloat(d))
                expect_equal(d, got, want, what);
            else
                expect_close(d, got, want, what);
        } while (next_index(ts->ndim, ts->shape, idx));
    }
    cm_tensor_release(x);
    cm_tensor_release(ref_in);
    cm_tensor_release(out);
}

Test(ops_matrix, unary_every_op_dtype_layout_and_shape_matches_reference) {
    REQUIRE_TRUSTWORTHY_REFERENCE();
    cm_device *dev = dev_open();
    const size_t n_dt = device_dtype_count();
    int cases = 0;
    for (int op = 1; op < CM_UNARY_COUNT; ++op) {
        for (size_t di = 0; di < n_dt; ++di) {
            const cm_dtype d = all_dtypes[di];
            if (d == CM_BOOL || (op >= CM_UNARY_SQRT && !dfloat(d)))
                continue; /* bool has no unary ops, integers no float ones */
            for (size_t s = 0; s < N_TEST_SHAPES; ++s) {
                for (int l = 0; l < L_COUNT; ++l) {
                    const enum layout lo =
                        l == L_BROADCAST ? L_NEGATIVE : (enum layout)((l + 1) % L_BROADCAST);
                    if (case_runs(cases++))
                        check_unary(dev, (cm_unary_op)op, d, &test_shapes[s], (enum layout)l, lo,
                                    false);
                }
            }
            if (case_runs(cases++))
                check_unary(dev, (cm_unary_op)op, d, &test_shapes[5], L_NEGATIVE, L_NEGATIVE, true);
        }
    }
    cr_assert_gt(cases, 2000);
    report_tally("unary");
    cm_device_release(dev);
}

/* ------------------------------------------------------------ binary */

static elem ref_binary(cm_binary_op op, cm_dtype d, elem a, elem b) {
    if (op >= CM_BINARY_EQ) {
        ref_t x = elem_value(d, a), y = elem_value(d, b);
        if (!dfloat(d)) { /* integers exactly, beyond 2^53 too */
            x = elem_order(d, a, b);
            y = 0;
        }
        uint64_t r;
        switch (op) {
        case CM_BINARY_EQ: r = x == y; break;
        case CM_BINARY_NE: r = x != y; break;
        case CM_BINARY_LT: r = x < y; break;
        case CM_BINARY_LE: r = x <= y; break;
        case CM_BINARY_GT: r = x > y; break;
        default: r = x >= y; break;
        }
        return of_bits(CM_BOOL, r);
    }
    if (op == CM_BINARY_MIN || op == CM_BINARY_MAX) {
        if (elem_isnan(d, a))
            return a;
        if (elem_isnan(d, b))
            return b;
        const int order = elem_order(d, a, b);
        return (op == CM_BINARY_MIN ? order < 0 : order > 0) ? a : b;
    }
    if (!dfloat(d)) { /* wrapping; x / 0 is 0, MIN / -1 wraps */
        const uint64_t x = bits64(d, a), y = bits64(d, b);
        switch (op) {
        case CM_BINARY_ADD: return of_bits(d, x + y);
        case CM_BINARY_SUB: return of_bits(d, x - y);
        case CM_BINARY_MUL: return of_bits(d, x * y);
        default: break;
        }
        if (y == 0)
            return of_bits(d, 0);
        if (dsigned(d))
            return of_bits(d, (int64_t)y == -1 ? 0 - x : (uint64_t)((int64_t)x / (int64_t)y));
        return of_bits(d, x / y);
    }
    /* In double, then one rounding to d. */
    const double x = (double)elem_value(d, a), y = (double)elem_value(d, b);
    const double r = op == CM_BINARY_ADD   ? x + y
                     : op == CM_BINARY_SUB ? x - y
                     : op == CM_BINARY_MUL ? x * y
                                           : x / y;
    return ref_from_value(d, r);
}

static void check_binary(cm_device *dev, cm_binary_op op, cm_dtype d, int32_t ndim,
                         const int64_t *shape, int32_t nda, const int64_t *sha, int32_t ndb,
                         const int64_t *shb, enum layout la, enum layout lb, enum layout lo) {
    cm_tensor *a = make_view(dev, d, nda, sha, la, 31 + (uint64_t)op, false, NULL);
    cm_tensor *b = make_view(dev, d, ndb, shb, lb, 32 + (uint64_t)op, false, NULL);
    const cm_dtype od = op >= CM_BINARY_EQ ? CM_BOOL : d;
    cm_tensor *out = make_view(dev, od, ndim, shape, lo, 33, false, NULL);
    CHECK(cm_binary(op, a, b, out, NULL));
    int64_t idx[CM_MAX_NDIM] = {0}, ia[CM_MAX_NDIM], ib[CM_MAX_NDIM];
    if (numel_of(ndim, shape) > 0) {
        const view_reader ra = reader_of(a), rb = reader_of(b), ro = reader_of(out);
        do {
            bcast_index(ndim, idx, nda, sha, ia);
            bcast_index(ndim, idx, ndb, shb, ib);
            const elem x = read_at(&ra, ia), y = read_at(&rb, ib);
            const elem want = ref_binary(op, d, x, y), got = read_at(&ro, idx);
            char what[160];
            snprintf(what, sizeof what, "%s %s (%s, %s -> %s) of %.17" REF_G ", %.17" REF_G,
                     cm_binary_op_name(op), dname(d), layout_names[la], layout_names[lb],
                     layout_names[lo], elem_value(d, x), elem_value(d, y));
            if ((op == CM_BINARY_MIN || op == CM_BINARY_MAX) && dfloat(d) &&
                elem_value(d, want) == 0 && elem_value(d, got) == 0)
                continue; /* either zero of two equal zeros */
            expect_equal(od, got, want, what);
        } while (next_index(ndim, shape, idx));
    }
    cm_tensor_release(a);
    cm_tensor_release(b);
    cm_tensor_release(out);
}

Test(ops_matrix, binary_every_op_dtype_layout_and_shape_matches_reference) {
    cm_device *dev = dev_open();
    const size_t n_dt = device_dtype_count();
    int cases = 0;
    for (int op = 1; op < CM_BINARY_COUNT; ++op) {
        for (size_t di = 0; di < n_dt; ++di) {
            const cm_dtype d = all_dtypes[di];
            if (d == CM_BOOL && op < CM_BINARY_MIN)
                continue; /* no arithmetic on bool */
            for (size_t s = 0; s < N_TEST_SHAPES; ++s) {
                const test_shape *ts = &test_shapes[s];
                for (int l = 0; l < L_COUNT; ++l) {
                    const enum layout lb = (enum layout)((l + 2) % L_COUNT);
                    const enum layout lo = (enum layout)(l % L_BROADCAST);
                    if (case_runs(cases++))
                        check_binary(dev, (cm_binary_op)op, d, ts->ndim, ts->shape, ts->ndim,
                                     ts->shape, ts->ndim, ts->shape, (enum layout)l, lb, lo);
                }
            }
        }
    }
    cr_assert_gt(cases, 5000);
    cm_device_release(dev);
}

Test(ops_matrix, binary_broadcasts_both_inputs_numpy_style) {
    cm_device *dev = dev_open();
    const int64_t out[3] = {3, 4, 5}, a1[3] = {3, 1, 5}, b1[2] = {4, 1}, c1[1] = {5},
                  d1[3] = {1, 4, 1};
    const cm_dtype dts[] = {CM_INT32,    CM_FLOAT32, CM_FLOAT16, CM_UINT8,
                            CM_BFLOAT16, CM_INT64,   CM_FLOAT64};
    const size_t n_dts = sizeof dts / sizeof dts[0] - (on_cpu() ? 0 : 1);
    for (size_t k = 0; k < n_dts; ++k) {
        for (int op = 1; op < CM_BINARY_COUNT; ++op) {
            check_binary(dev, (cm_binary_op)op, dts[k], 3, out, 3, a1, 2, b1, L_CONTIG,
                         L_TRANSPOSED, L_CONTIG);
            check_binary(dev, (cm_binary_op)op, dts[k], 3, out, 0, NULL, 1, c1, L_CONTIG,
                         L_NEGATIVE, L_STEP);
            check_binary(dev, (cm_binary_op)op, dts[k], 3, out, 1, c1, 3, d1, L_STEP, L_CONTIG,
                         L_TRANSPOSED);
        }
    }
    cm_device_release(dev);
}

Test(ops_matrix, output_may_be_an_input_itself) {
    cm_device *dev = dev_open();
    const int64_t shape[2] = {6, 5};
    cm_tensor *a = make_view(dev, CM_FLOAT32, 2, shape, L_NEGATIVE, 1, true, NULL);
    cm_tensor *b = make_view(dev, CM_FLOAT32, 2, shape, L_TRANSPOSED, 2, true, NULL);
    cm_tensor *a0 = new_tensor(dev, CM_FLOAT32, 2, shape);
    cm_tensor *b0 = new_tensor(dev, CM_FLOAT32, 2, shape);
    CHECK(cm_copy(a, a0, NULL));
    CHECK(cm_copy(b, b0, NULL));
    CHECK(cm_binary(CM_BINARY_MUL, a, b, a, NULL));
    CHECK(cm_unary(CM_UNARY_NEG, b, b, NULL));
    int64_t idx[2] = {0};
    do {
        const float x = get_at(a0, idx).f32, y = get_at(b0, idx).f32;
        cr_assert_eq(get_at(a, idx).f32, x * y);
        cr_assert_eq(get_at(b, idx).f32, -y);
    } while (next_index(2, shape, idx));
    /* Both inputs and the output one strided view. */
    cm_tensor *h = make_view(dev, CM_BFLOAT16, 2, shape, L_STEP, 3, true, NULL);
    cm_tensor *h0 = new_tensor(dev, CM_BFLOAT16, 2, shape);
    CHECK(cm_copy(h, h0, NULL));
    CHECK(cm_binary(CM_BINARY_ADD, h, h, h, NULL));
    memset(idx, 0, sizeof idx);
    do {
        const ref_t w = 2 * elem_value(CM_BFLOAT16, get_at(h0, idx));
        cr_assert_eq(elem_value(CM_BFLOAT16, get_at(h, idx)), w);
    } while (next_index(2, shape, idx));
    cm_tensor_release(a);
    cm_tensor_release(b);
    cm_tensor_release(a0);
    cm_tensor_release(b0);
    cm_tensor_release(h);
    cm_tensor_release(h0);
    cm_device_release(dev);
}

/* ------------------------------------------------------------ reduce */

/* One rounding to the output dtype, relative. */
static ref_t round_tol(cm_dtype d) {
    switch (d) {
    case CM_FLOAT16: return 0x1p-10;
    case CM_BFLOAT16: return 0x1p-7;
    case CM_FLOAT32: return 0x1p-23;
    default: return 0x1p-52;
    }
}

/* The unit of the float accumulator: the CPU sums in double, Metal in
 * float32. A sum of count terms is off by at most count units times the
 * sum of magnitudes. */
static ref_t accumulator_ulp(void) {
    return on_cpu() ? 0x1p-52 : 0x1p-23;
}

/* The bound on a float sum's error relative to the sum of magnitudes.
 * The CPU's pairwise sum: gamma_k with k = 40 + 2 ceil(log2 n), u = 2^-53;
 * for float16 and bfloat16 inputs g + gamma_k (1 + g), g = gamma'_2 with
 * u' = 2^-24, for their fours added in float32 first
 * (include/cmetal/ops.h); plus the reference's own rounding where ref_t
 * is double. Metal: count units of float32. */
static ref_t sum_error_bound(cm_dtype d, int64_t count) {
    if (!on_cpu())
        return (ref_t)count * accumulator_ulp();
    int k = 40;
    for (int64_t m = 1; m < count; m *= 2)
        k += 2;
    const ref_t u = 0x1p-53, u32 = 0x1p-24;
    ref_t bound = (ref_t)k * u / (1 - (ref_t)k * u);
    if (d == CM_FLOAT16 || d == CM_BFLOAT16) {
        const ref_t g = 2 * u32 / (1 - 2 * u32);
        bound = g + bound * (1 + g);
    }
    return bound + (REF_LONG_DOUBLE ? (ref_t)count * 0x1p-63 : (ref_t)count * 0x1p-53);
}

/* Reduces x (ndim, shape; layout lx) over `axis` (-1: all) into a fresh
 * output of dtype od (kept axes when keep), checking every element. */
static void check_reduce(cm_device *dev, cm_reduce_op op, cm_dtype d, cm_dtype od, int32_t ndim,
                         const int64_t *shape, int32_t axis, bool keep, enum layout lx) {
    const bool sum = op == CM_REDUCE_SUM || op == CM_REDUCE_MEAN;
    cm_tensor *x = make_view(dev, d, ndim, shape, lx, 50 + (uint64_t)op, sum && dfloat(d), NULL);
    int64_t oshape[CM_MAX_NDIM];
    int32_t ond = 0;
    int64_t count = 1;
    for (int32_t k = 0; k < ndim; ++k) {
        const bool reduced = axis < 0 || k == axis;
        count *= reduced ? shape[k] : 1;
        if (!reduced)
            oshape[ond++] = shape[k];
        else if (keep)
            oshape[ond++] = 1;
    }
    cm_tensor *out = make_view(dev, od, ond, oshape, L_STEP, 51, false, NULL);
    const cm_status st = cm_reduce(op, x, axis < 0 ? CM_AXIS_ALL : axis - ndim, out, NULL);
    if (count == 0 && numel_of(ond, oshape) > 0 && !sum) {
        cr_assert_eq(st, CM_ERR_INVALID_ARGUMENT, "%s", cm_last_error());
        cr_assert(strstr(cm_last_error(), "no identity") != NULL, "%s", cm_last_error());
        goto done;
    }
    cr_assert_eq(st, CM_OK, "%s", cm_last_error());
    if (numel_of(ond, oshape) == 0)
        goto done;
    const view_reader rx = reader_of(x);
    int64_t oi[CM_MAX_NDIM] = {0};
    do {
        /* The x indices that map onto oi. */
        int64_t base[CM_MAX_NDIM], rshape[CM_MAX_NDIM], ri[CM_MAX_NDIM] = {0};
        for (int32_t k = 0, j = 0; k < ndim; ++k) {
            const bool reduced = axis < 0 || k == axis;
            base[k] = reduced ? 0 : oi[j];
            rshape[k] = reduced ? shape[k] : 1;
            if (!reduced || keep)
                ++j;
        }
        ref_t fsum = 0, fabs_sum = 0;
        uint64_t isum = 0;
        bool nan = false, first = true;
        elem best_e;
        memset(&best_e, 0, sizeof best_e);
        if (count > 0) {
            do {
                int64_t xi[CM_MAX_NDIM] = {0}; /* all set below; GCC -O3 cannot tell */
                for (int32_t k = 0; k < ndim; ++k)
                    xi[k] = base[k] + ri[k];
                const elem e = read_at(&rx, xi);
                const ref_t v = elem_value(d, e);
                nan = nan || elem_isnan(d, e);
                fsum += v;
                fabs_sum += REF_FN(fabs)(v);
                isum += bits64(d, e);
                const int order = elem_order(d, e, best_e);
                if (first || (op == CM_REDUCE_MAX ? order > 0 : order < 0))
                    best_e = e;
                first = false;
            } while (next_index(ndim, rshape, ri));
        }
        const elem got = get_at(out, oi);
        char what[160];
        snprintf(what, sizeof what, "%s %s -> %s axis %d keep %d %s count %lld",
                 cm_reduce_op_name(op), dname(d), dname(od), axis, keep, layout_names[lx],
                 (long long)count);
        /* Integer sums wrap in 64 bits, then convert. Only a conversion to
         * od can need more than ref_t holds; the rest is exact or within a
         * tolerance that covers double's rounding. */
        const bool signed_sum = dsigned(d) || d == CM_BOOL;
        const cm_dtype isum_dtype = signed_sum ? CM_INT64 : CM_UINT64;
        const bool int_sum = op == CM_REDUCE_SUM && !dfloat(d);
        const bool exact = !sum      ? nan || ref_convert_exact(od, d, best_e)
                           : int_sum ? ref_convert_exact(od, isum_dtype, of_bits(CM_UINT64, isum))
                                     : true;
        if (!check_counted(exact))
            continue;
        if (!sum) { /* max, min: the element itself, NaN wins */
            if (nan) {
                cr_assert(elem_isnan(od, got), "%s: want NaN", what);
                continue;
            }
            const elem want = ref_convert(od, d, best_e);
            if (dfloat(od) && elem_value(od, want) == 0)
                cr_assert(elem_value(od, got) == 0, "%s", what);
            else
                cr_assert(elem_bits_equal(od, got, want), "%s: got %" REF_G " want %" REF_G, what,
                          elem_value(od, got), elem_value(od, want));
            continue;
        }
        if (!dfloat(d)) {
            if (op == CM_REDUCE_MEAN && !dfloat(od) && od != CM_BOOL && count > 0) {
                /* Exact on every device: the wrapped 64-bit sum divided by
                 * the count, truncated toward zero (include/cmetal/ops.h). */
                const uint64_t q =
                    signed_sum ? (uint64_t)((int64_t)isum / count) : isum / (uint64_t)count;
                const elem want = ref_convert(od, isum_dtype, of_bits(CM_UINT64, q));
                cr_assert(elem_bits_equal(od, got, want), "%s: got %" REF_G " want %" REF_G, what,
                          elem_value(od, got), elem_value(od, want));
                continue;
            }
            if (int_sum) {
                const elem want = ref_convert(od, isum_dtype, of_bits(CM_UINT64, isum));
                cr_assert(elem_bits_equal(od, got, want), "%s: got %" REF_G " want %" REF_G, what,
                          elem_value(od, got), elem_value(od, want));
                continue;
            }
            fsum = signed_sum ? (ref_t)(int64_t)isum : (ref_t)isum;
            fabs_sum = REF_FN(fabs)(fsum);
        }
        ref_t w = fsum;
        if (op == CM_REDUCE_MEAN) {
            w = count ? fsum / (ref_t)count : (ref_t)NAN;
            fabs_sum = count ? fabs_sum / (ref_t)count : 0;
        }
        if (isnan(w) && dfloat(od)) {
            cr_assert(elem_isnan(od, got), "%s: want NaN", what);
            continue;
        }
        if (!dfloat(od)) { /* means of integers truncate exactly */
            /* The CPU divides a float64 sum: allow its rounding. */
            const elem want = ref_from_value(od, w);
            const ref_t slack = REF_FN(fabs)(w) * 0x1p-50 > 1 ? REF_FN(fabs)(w) * 0x1p-50 : 1;
            cr_assert(elem_bits_equal(od, got, want) ||
                          REF_FN(fabs)(elem_value(od, got) - elem_value(od, want)) <= slack,
                      "%s: got %" REF_G " want %" REF_G, what, elem_value(od, got),
                      elem_value(od, want));
            continue;
        }
        const ref_t g = elem_value(od, got);
        if (isinf(elem_value(od, ref_from_value(od, w)))) { /* overflows the dtype */
            cr_assert(g == elem_value(od, ref_from_value(od, w)), "%s: got %" REF_G " want %" REF_G,
                      what, g, w);
            continue;
        }
        const ref_t tol = round_tol(od) * REF_FN(fabs)(w) + sum_error_bound(d, count) * fabs_sum;
        cr_assert(REF_FN(fabs)(g - w) <= tol, "%s: got %.20" REF_G " want %.20" REF_G, what, g, w);
    } while (next_index(ond, oshape, oi));
done:
    cm_tensor_release(x);
    cm_tensor_release(out);
}

Test(ops_matrix, reduce_every_op_dtype_axis_layout_and_shape_matches_reference) {
    cm_device *dev = dev_open();
    const size_t n_dt = device_dtype_count();
    int cases = 0;
    for (int op = 1; op < CM_REDUCE_COUNT; ++op) {
        for (size_t di = 0; di < n_dt; ++di) {
            for (size_t s = 0; s < N_TEST_SHAPES; ++s) {
                const test_shape *ts = &test_shapes[s];
                for (int32_t axis = -1; axis < ts->ndim; ++axis) {
                    for (int l = 0; l < L_COUNT; ++l) {
                        if (case_runs(cases++))
                            check_reduce(dev, (cm_reduce_op)op, all_dtypes[di], all_dtypes[di],
                                         ts->ndim, ts->shape, axis, (l + axis) % 2 == 0,
                                         (enum layout)l);
                    }
                }
            }
        }
    }
    cr_assert_gt(cases, 5000);
    cm_device_release(dev);
}

/* Every op over long rows (axis 1), long columns (axis 0) and all of a
 * tensor, for the dtypes ds (float64, last, on the CPU only); the layout
 * turns with the op and dtype. */
static void check_long_reductions(const cm_dtype ds[7], const int64_t rows[2],
                                  const int64_t cols[2], int32_t all_ndim, const int64_t *all,
                                  bool keep_rows) {
    cm_device *dev = dev_open();
    const size_t n = on_cpu() ? 7 : 6;
    cr_assert_eq(ds[6], CM_FLOAT64);
    int cases = 0;
    for (size_t k = 0; k < n; ++k) {
        for (int op = 1; op < CM_REDUCE_COUNT; ++op) {
            const enum layout l = (enum layout)(((size_t)op + k) % L_COUNT);
            if (case_runs(cases++))
                check_reduce(dev, (cm_reduce_op)op, ds[k], ds[k], 2, rows, 1, keep_rows, l);
            if (case_runs(cases++))
                check_reduce(dev, (cm_reduce_op)op, ds[k], ds[k], 2, cols, 0, !keep_rows, l);
            if (case_runs(cases++))
                check_reduce(dev, (cm_reduce_op)op, ds[k], ds[k], all_ndim, all, -1, false, l);
        }
    }
    cm_device_release(dev);
}

/* Long reductions (a threadgroup per output on Metal), every layout. */
Test(ops_matrix, reduce_long_rows_and_everything) {
    const int64_t rows[2] = {3, 700}, cols[2] = {600, 5};
    const cm_dtype ds[7] = {CM_FLOAT32, CM_INT32,    CM_UINT8,  CM_FLOAT16,
                            CM_INT64,   CM_BFLOAT16, CM_FLOAT64};
    check_long_reductions(ds, rows, cols, 2, rows, false);
}

/* Long reductions of few outputs (split into chunks, then combined, on
 * Metal). */
Test(ops_matrix, reduce_few_very_long_rows) {
    REQUIRE_TRUSTWORTHY_REFERENCE();
    const int64_t rows[2] = {2, 9000}, cols[2] = {9000, 3}, all[3] = {3, 50, 100};
    const cm_dtype ds[7] = {CM_FLOAT32, CM_INT64, CM_UINT16, CM_FLOAT16,
                            CM_BOOL,    CM_INT8,  CM_FLOAT64};
    check_long_reductions(ds, rows, cols, 3, all, true);
    report_tally("reduce few long rows");
}

Test(ops_matrix, reduce_results_convert_to_other_output_dtypes) {
    REQUIRE_TRUSTWORTHY_REFERENCE();
    cm_device *dev = dev_open();
    const int64_t shape[2] = {17, 33};
    /* The last two pairs (float64 outputs) on the CPU only. */
    const struct {
        cm_dtype in, out;
    } pairs[] = {
        {CM_INT8, CM_INT64},      {CM_UINT16, CM_UINT64},    {CM_BOOL, CM_INT32},
        {CM_FLOAT16, CM_FLOAT32}, {CM_BFLOAT16, CM_FLOAT32}, {CM_FLOAT32, CM_INT16},
        {CM_INT32, CM_FLOAT16},   {CM_BFLOAT16, CM_FLOAT64}, {CM_FLOAT32, CM_FLOAT64},
    };
    const size_t n = sizeof pairs / sizeof pairs[0] - (on_cpu() ? 0 : 2);
    for (size_t k = 0; k < n; ++k)
        for (int op = 1; op < CM_REDUCE_COUNT; ++op)
            for (int32_t axis = -1; axis < 2; ++axis)
                check_reduce(dev, (cm_reduce_op)op, pairs[k].in, pairs[k].out, 2, shape, axis,
                             false, axis == 0 ? L_TRANSPOSED : L_CONTIG);
    report_tally("reduce conversions");
    cm_device_release(dev);
}

/* One large term per lane and many below its half ulp: a running sum
 * (in any few chains) drops every small term, the pairwise sum keeps them
 * but the first few. Checked against the exact sum with the bound that
 * include/cmetal/ops.h states. */
Test(ops_matrix, float_sums_stay_within_the_pairwise_error_bound) {
    REQUIRE_TRUSTWORTHY_REFERENCE();
    if (!on_cpu())
        cr_skip_test("the bound is the CPU's");
    cm_device *dev = dev_open();
    const int64_t n = 1 << 16;
    const cm_dtype ds[2] = {CM_FLOAT64, CM_FLOAT32};
    for (int k = 0; k < 2; ++k) {
        const int64_t shape[1] = {n};
        cm_tensor *x = new_tensor(dev, ds[k], 1, shape);
        void *p = NULL;
        CHECK(cm_tensor_host_write(x, ds[k], &p));
        const double tiny = 0x1p-53;
        ref_t exact = 0, mag = 0;
        for (int64_t i = 0; i < n; ++i) {
            const double v = i < 16 ? 1.0 : tiny;
            if (ds[k] == CM_FLOAT64)
                ((double *)p)[i] = v;
            else
                ((float *)p)[i] = (float)v;
            exact += (ref_t)v;
            mag += (ref_t)v;
        }
        cm_tensor *out = new_tensor(dev, CM_FLOAT64, 0, NULL);
        CHECK(cm_reduce(CM_REDUCE_SUM, x, CM_AXIS_ALL, out, NULL));
        const double got = get_at(out, NULL).f64;
        const ref_t err = REF_FN(fabs)((ref_t)got - exact);
        cr_assert(err <= sum_error_bound(ds[k], n) * mag,
                  "%s: error %" REF_G " above the bound %" REF_G, dname(ds[k]), err,
                  sum_error_bound(ds[k], n) * mag);
        /* The same bits again. */
        CHECK(cm_reduce(CM_REDUCE_SUM, x, CM_AXIS_ALL, out, NULL));
        cr_assert(get_at(out, NULL).f64 == got);
        cm_tensor_release(out);
        cm_tensor_release(x);
    }
    cm_device_release(dev);
}

/* float16 and bfloat16 sums add fours in float32 before float64: one 1.0
 * per lane and many terms far below its half ulp in float32, so a float32
 * running sum (or float32 sums of long runs) breaks the stated bound; the
 * bound holds, and the same values at a stride (converted first, then the
 * portable loop) give the same bits as contiguous ones (the vector loop). */
Test(ops_matrix, half_sums_stay_within_their_bound_at_any_stride) {
    REQUIRE_TRUSTWORTHY_REFERENCE();
    if (!on_cpu())
        cr_skip_test("the bound is the CPU's");
    cm_device *dev = dev_open();
    const int64_t n = (1 << 16) + 37; /* a partial group and a partial leaf */
    const cm_dtype ds[2] = {CM_FLOAT16, CM_BFLOAT16};
    for (int k = 0; k < 2; ++k) {
        const bool bf16 = ds[k] == CM_BFLOAT16;
        const int64_t shape[1] = {n}, wide[1] = {2 * n};
        cm_tensor *x = new_tensor(dev, ds[k], 1, shape);
        cm_tensor *w = new_tensor(dev, ds[k], 1, wide);
        uint16_t *p = NULL, *q = NULL;
        CHECK(cm_tensor_host_write(x, ds[k], (void **)&p));
        CHECK(cm_tensor_host_write(w, ds[k], (void **)&q));
        const ref_t tiny = bf16 ? 0x1p-30 : 0x1p-24; /* exact in the dtype */
        ref_t exact = 0;
        for (int64_t i = 0; i < n; ++i) {
            const ref_t v = i < 16 ? 1 : (i % 3 == 0 ? 3 : 1) * tiny;
            p[i] = ref_small_encode(v, bf16);
            q[2 * i] = p[i];
            q[2 * i + 1] = ref_small_encode(1000, bf16); /* skipped by the stride */
            exact += v;
        }
        cm_tensor *strided = NULL;
        CHECK(cm_tensor_slice(w, 0, 0, CM_SLICE_DEFAULT, 2, &strided));
        cm_tensor *out = new_tensor(dev, CM_FLOAT64, 0, NULL);
        CHECK(cm_reduce(CM_REDUCE_SUM, x, CM_AXIS_ALL, out, NULL));
        const double got = get_at(out, NULL).f64;
        const ref_t err = REF_FN(fabs)((ref_t)got - exact);
        cr_assert(err <= sum_error_bound(ds[k], n) * exact,
                  "%s: error %" REF_G " above the bound %" REF_G, dname(ds[k]), err,
                  sum_error_bound(ds[k], n) * exact);
        CHECK(cm_reduce(CM_REDUCE_SUM, strided, CM_AXIS_ALL, out, NULL));
        cr_assert(get_at(out, NULL).f64 == got, "%s: strided %.17g, contiguous %.17g", dname(ds[k]),
                  get_at(out, NULL).f64, got);
        cm_tensor_release(out);
        cm_tensor_release(strided);
        cm_tensor_release(w);
        cm_tensor_release(x);
    }
    cm_device_release(dev);
}

/* Long contiguous runs are read as four quarters side by side: integer
 * sums, max and min and float32 max and min stay exact, wherever the
 * extreme (or a NaN) lies: in a partial last quarter, at a quarter's
 * start, in a partial chunk. */
Test(ops_matrix, long_runs_reduce_exactly_in_quarters) {
    if (!on_cpu())
        cr_skip_test("the quarters are the CPU's");
    cm_device *dev = dev_open();
    const int64_t n = 300000 + 13, shape[1] = {n}; /* above CM__SIDE_MIN_BYTES */
    const int64_t quarter = (n + 3) / 4;
    const int64_t places[4] = {n - 1, quarter, 3 * quarter + 5, 0};
    cm_tensor *xi = new_tensor(dev, CM_INT32, 1, shape), *xb = new_tensor(dev, CM_INT8, 1, shape);
    cm_tensor *xf = new_tensor(dev, CM_FLOAT32, 1, shape);
    cm_tensor *oi = new_tensor(dev, CM_INT64, 0, NULL), *of = new_tensor(dev, CM_FLOAT64, 0, NULL);
    for (int k = 0; k < 4; ++k) {
        int32_t *pi = NULL;
        int8_t *pb = NULL;
        float *pf = NULL;
        CHECK(cm_tensor_host_write(xi, CM_INT32, (void **)&pi));
        CHECK(cm_tensor_host_write(xb, CM_INT8, (void **)&pb));
        CHECK(cm_tensor_host_write(xf, CM_FLOAT32, (void **)&pf));
        int64_t si = 0, sb = 0;
        uint32_t h = 12345;
        for (int64_t i = 0; i < n; ++i) {
            h = h * 1664525u + 1013904223u;
            pi[i] = (int32_t)(h >> 1) - (1 << 30);
            pb[i] = (int8_t)(h >> 24);
            pf[i] = (float)(h >> 8) * 0x1p-24f;
        }
        pi[places[k]] = INT32_MAX;
        pi[places[(k + 1) % 4]] = INT32_MIN;
        pf[places[k]] = 2.0f;
        for (int64_t i = 0; i < n; ++i) {
            si += pi[i];
            sb += pb[i];
        }
        const cm_reduce_op ops[3] = {CM_REDUCE_SUM, CM_REDUCE_MAX, CM_REDUCE_MIN};
        const int64_t want[3] = {si, INT32_MAX, INT32_MIN};
        for (int o = 0; o < 3; ++o) {
            CHECK(cm_reduce(ops[o], xi, CM_AXIS_ALL, oi, NULL));
            cr_assert_eq(get_at(oi, NULL).i64, want[o], "int32 %s, extremes at %lld",
                         cm_reduce_op_name(ops[o]), (long long)places[k]);
        }
        CHECK(cm_reduce(CM_REDUCE_SUM, xb, CM_AXIS_ALL, oi, NULL));
        cr_assert_eq(get_at(oi, NULL).i64, sb, "int8 sum");
        CHECK(cm_reduce(CM_REDUCE_MAX, xf, CM_AXIS_ALL, of, NULL));
        cr_assert_eq(get_at(of, NULL).f64, 2.0, "float32 max at %lld", (long long)places[k]);
        CHECK(cm_tensor_host_write(xf, CM_FLOAT32, (void **)&pf));
        pf[places[(k + 2) % 4]] = NAN;
        CHECK(cm_reduce(CM_REDUCE_MIN, xf, CM_AXIS_ALL, of, NULL));
        cr_assert(isnan(get_at(of, NULL).f64), "float32 min, NaN at %lld",
                  (long long)places[(k + 2) % 4]);
    }
    cm_tensor_release(xi);
    cm_tensor_release(xb);
    cm_tensor_release(xf);
    cm_tensor_release(oi);
    cm_tensor_release(of);
    cm_device_release(dev);
}

/* Column sums (a strided reduced axis, a contiguous kept one) use a work
 * buffer; without memory they run in narrow chunks on the stack, with the
 * same bits. */
Test(ops_matrix, column_sums_give_the_same_bits_without_memory) {
    if (!on_cpu())
        cr_skip_test("the CPU's work buffer");
    cm_device *dev = dev_open();
    const int64_t shape[2] = {300, 40};
    cm_tensor *x = new_tensor(dev, CM_FLOAT32, 2, shape);
    float *p = NULL;
    CHECK(cm_tensor_host_write(x, CM_FLOAT32, (void **)&p));
    for (int64_t i = 0; i < 300 * 40; ++i)
        p[i] = (float)((i * 7919) % 1000) * 0.001f + (i % 3 == 0 ? 1e6f : 0.0f);
    const int64_t oshape[1] = {40};
    cm_tensor *a = new_tensor(dev, CM_FLOAT64, 1, oshape);
    cm_tensor *b = new_tensor(dev, CM_FLOAT64, 1, oshape);
    CHECK(cm_reduce(CM_REDUCE_SUM, x, 0, a, NULL));
    alloc_hook_install(1); /* the work buffer is refused */
    const cm_status st = cm_reduce(CM_REDUCE_SUM, x, 0, b, NULL);
    const long calls = alloc_hook_calls();
    alloc_hook_remove();
    cr_assert_eq(st, CM_OK, "%s", cm_last_error());
    cr_assert_geq(calls, 1, "the work buffer was asked for");
    for (int64_t j = 0; j < 40; ++j) {
        const int64_t at[1] = {j};
        cr_assert(get_at(a, at).f64 == get_at(b, at).f64, "column %lld", (long long)j);
    }
    cm_tensor_release(x);
    cm_tensor_release(a);
    cm_tensor_release(b);
    cm_device_release(dev);
}

Test(ops_matrix, integer_sums_wrap_in_64_bits_and_are_exact) {
    cm_device *dev = dev_open();
    const int64_t n[1] = {300};
    cm_tensor *x = new_tensor(dev, CM_INT64, 1, n);
    int64_t *p = NULL;
    CHECK(cm_tensor_host_write(x, CM_INT64, (void **)&p));
    for (int i = 0; i < 300; ++i)
        p[i] = i % 3 == 0 ? INT64_MAX : i % 3 == 1 ? 2 : -(INT64_MAX - 5);
    cm_tensor *s = new_tensor(dev, CM_INT64, 0, NULL);
    CHECK(cm_reduce(CM_REDUCE_SUM, x, CM_AXIS_ALL, s, NULL));
    cr_assert_eq(get_at(s, NULL).i64, 700);
    cm_tensor *u = new_tensor(dev, CM_UINT8, 0, NULL);
    CHECK(cm_reduce(CM_REDUCE_SUM, x, 0, u, NULL));
    cr_assert_eq(get_at(u, NULL).u8, 700 % 256);
    cm_tensor_release(x);
    cm_tensor_release(s);
    cm_tensor_release(u);
    cm_device_release(dev);
}

/* A size-1 axis is never stepped, so a view may hold any stride there
 * (INT64_MIN and INT64_MAX included, as DLPack producers may): every op
 * takes such views without scaling those strides (UBSan checks), and a
 * valid empty shape whose sizes multiply past INT64_MAX before its 0 is
 * an empty op. */
Test(ops_matrix, size_one_axes_take_any_stride_and_huge_empty_shapes_are_empty) {
    cm_device *dev = dev_open();
    cm_buffer *bx = NULL, *by = NULL, *bs = NULL;
    CHECK(cm_buffer_create(dev, &(cm_buffer_desc){.size = 16}, &bx));
    CHECK(cm_buffer_create(dev, &(cm_buffer_desc){.size = 16}, &by));
    CHECK(cm_buffer_create(dev, &(cm_buffer_desc){.size = 4}, &bs));
    const int64_t shape[2] = {1, 4};
    cm_tensor *x = NULL, *y = NULL, *s = NULL, *s1 = NULL;
    CHECK(cm_tensor_from_buffer(
        bx,
        &(cm_tensor_desc){
            .dtype = CM_FLOAT32, .ndim = 2, .shape = shape, .strides = (int64_t[]){INT64_MAX, 1}},
        &x));
    CHECK(cm_tensor_from_buffer(
        by,
        &(cm_tensor_desc){
            .dtype = CM_FLOAT32, .ndim = 2, .shape = shape, .strides = (int64_t[]){INT64_MIN, 1}},
        &y));
    CHECK(cm_tensor_from_buffer(bs,
                                &(cm_tensor_desc){.dtype = CM_FLOAT32,
                                                  .ndim = 1,
                                                  .shape = (int64_t[]){1},
                                                  .strides = (int64_t[]){INT64_MAX}},
                                &s));
    CHECK(cm_tensor_from_buffer(bs,
                                &(cm_tensor_desc){.dtype = CM_FLOAT32,
                                                  .ndim = 2,
                                                  .shape = (int64_t[]){1, 1},
                                                  .strides = (int64_t[]){INT64_MIN, INT64_MAX}},
                                &s1));
    const double three = 3.0;
    CHECK(cm_fill(x, CM_FLOAT64, &three, NULL));
    CHECK(cm_unary(CM_UNARY_NEG, x, y, NULL));      /* y = -3 */
    CHECK(cm_binary(CM_BINARY_ADD, x, y, y, NULL)); /* y = 0 */
    CHECK(cm_binary(CM_BINARY_ADD, x, s, y, NULL)); /* s broadcasts: y = 3 + s */
    CHECK(cm_copy(x, y, NULL));                     /* y = 3 */
    const float *p = NULL;
    CHECK(cm_tensor_host_read(y, CM_FLOAT32, (const void **)&p));
    for (int i = 0; i < 4; ++i)
        cr_assert_eq(p[i], 3.0f, "y[0][%d] = %g", i, (double)p[i]);
    CHECK(cm_reduce(CM_REDUCE_SUM, y, 1, s, NULL)); /* 12, dropping axis 1 */
    CHECK(cm_tensor_host_read(s, CM_FLOAT32, (const void **)&p));
    cr_assert_eq(p[0], 12.0f, "sum over axis 1 = %g", (double)p[0]);
    CHECK(cm_fill(s, CM_FLOAT64, &three, NULL));
    CHECK(cm_reduce(CM_REDUCE_SUM, x, CM_AXIS_ALL, s1, NULL)); /* keeping both axes */
    CHECK(cm_tensor_host_read(s1, CM_FLOAT32, (const void **)&p));
    cr_assert_eq(p[0], 12.0f, "sum of all = %g", (double)p[0]);
    CHECK(cm_fill(s, CM_FLOAT64, &three, NULL));
    CHECK(cm_reduce(CM_REDUCE_SUM, x, 1, s1, NULL)); /* keeping axis 1 */
    CHECK(cm_tensor_host_read(s1, CM_FLOAT32, (const void **)&p));
    cr_assert_eq(p[0], 12.0f, "sum over axis 1 kept = %g", (double)p[0]);

    const int64_t huge[3] = {INT64_C(1) << 40, INT64_C(1) << 40, 0};
    cm_tensor *e = new_tensor(dev, CM_FLOAT32, 3, huge), *f = new_tensor(dev, CM_FLOAT32, 3, huge);
    CHECK(cm_fill(e, CM_FLOAT64, &three, NULL));
    CHECK(cm_copy(e, f, NULL));
    CHECK(cm_unary(CM_UNARY_NEG, e, f, NULL));
    CHECK(cm_binary(CM_BINARY_ADD, e, f, f, NULL));
    CHECK(cm_device_synchronize(dev));
    cm_tensor_release(e);
    cm_tensor_release(f);
    cm_tensor_release(x);
    cm_tensor_release(y);
    cm_tensor_release(s);
    cm_tensor_release(s1);
    cm_buffer_release(bx);
    cm_buffer_release(by);
    cm_buffer_release(bs);
    cm_device_release(dev);
}
