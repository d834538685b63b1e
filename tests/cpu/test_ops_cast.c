/* cm_cast on the CPU device: every dtype pair and layout against the
 * reference conversions of ops_util.h, and float16/bfloat16 bit-exactly
 * over all 65536 patterns. */
#include "ops/ops_util.h"

static void check_cast(cm_device *dev, cm_dtype from, cm_dtype to, int32_t ndim,
                       const int64_t *shape, enum layout ls, enum layout ld) {
    cm_tensor *src = make_view(dev, from, ndim, shape, ls, 31, false, NULL);
    cm_tensor *dst = make_view(dev, to, ndim, shape, ld, 32, false, NULL);
    CHECK(cm_cast(src, dst));
    int64_t idx[CM_MAX_NDIM] = {0};
    if (numel_of(ndim, shape) == 0)
        goto done;
    do {
        const elem a = get_at(src, idx), b = get_at(dst, idx);
        const elem want = ref_convert(to, from, a);
        if (elem_isnan(from, a) && dfloat(to)) {
            cr_assert(elem_isnan(to, b), "%s -> %s: NaN lost", dname(from), dname(to));
            continue;
        }
        cr_assert(elem_bits_equal(to, b, want),
                  "%s -> %s (%s -> %s): %.21Lg gave %#llx, want %#llx", dname(from), dname(to),
                  layout_names[ls], layout_names[ld], elem_value(from, a),
                  (unsigned long long)b.u64, (unsigned long long)want.u64);
    } while (next_index(ndim, shape, idx));
done:
    cm_tensor_release(src);
    cm_tensor_release(dst);
}

Test(ops_cast, every_dtype_pair_matches_reference_conversion) {
    REQUIRE_EXACT_REFERENCE();
    cm_device *dev = cpu();
    const int64_t big[1] = {512};
    for (int i = 0; i < N_DTYPES; ++i)
        for (int j = 0; j < N_DTYPES; ++j)
            check_cast(dev, all_dtypes[i], all_dtypes[j], 1, big, L_CONTIG, L_CONTIG);
    cm_device_release(dev);
}

Test(ops_cast, every_dtype_pair_and_layout_over_the_test_shapes) {
    REQUIRE_EXACT_REFERENCE();
    cm_device *dev = cpu();
    for (size_t s = 0; s < N_TEST_SHAPES; ++s)
        for (int i = 0; i < N_DTYPES; ++i)
            for (int j = 0; j < N_DTYPES; ++j)
                for (int l = 0; l < L_COUNT; ++l)
                    check_cast(dev, all_dtypes[i], all_dtypes[j], test_shapes[s].ndim,
                               test_shapes[s].shape, (enum layout)l,
                               l == L_BROADCAST ? L_TRANSPOSED : (enum layout)l);
    cm_device_release(dev);
}

/* Casts n 16-bit patterns to float32 and back. */
static void roundtrip_all(cm_dtype half, bool bf16) {
    cm_device *dev = cpu();
    const int64_t n[1] = {65536};
    cm_tensor *h = new_tensor(dev, half, 1, n), *f = new_tensor(dev, CM_FLOAT32, 1, n);
    cm_tensor *back = new_tensor(dev, half, 1, n);
    uint16_t *hp = NULL;
    CHECK(cm_tensor_host_write(h, half, (void **)&hp));
    for (uint32_t i = 0; i < 65536; ++i)
        hp[i] = (uint16_t)i;
    CHECK(cm_cast(h, f));
    CHECK(cm_cast(f, back));
    const float *fp = NULL;
    const uint16_t *bp = NULL;
    CHECK(cm_tensor_host_read(f, CM_FLOAT32, (const void **)&fp));
    CHECK(cm_tensor_host_read(back, half, (const void **)&bp));
    for (uint32_t i = 0; i < 65536; ++i) {
        cr_assert_eq(bp[i], i, "%s %#x -> float32 -> %#x", dname(half), i, bp[i]);
        const long double want = ref_small_value((uint16_t)i, bf16);
        if (isnan(want)) {
            uint32_t bits;
            memcpy(&bits, &fp[i], 4);
            cr_assert(isnan(fp[i]));
            cr_assert_eq(bits >> 31, i >> 15, "NaN sign of %#x", i);
        } else {
            cr_assert((long double)fp[i] == want && !signbit(fp[i]) == !signbit(want),
                      "%s %#x -> %a", dname(half), i, (double)fp[i]);
        }
    }
    cm_tensor_release(h);
    cm_tensor_release(f);
    cm_tensor_release(back);
    cm_device_release(dev);
}

Test(ops_cast, float16_all_65536_patterns_roundtrip_through_float32) {
    roundtrip_all(CM_FLOAT16, false);
}

Test(ops_cast, bfloat16_all_65536_patterns_roundtrip_through_float32) {
    roundtrip_all(CM_BFLOAT16, true);
}

/* float32 bit patterns to float16 and bfloat16: every pattern that is a
 * tie, a neighbour of a tie, near overflow or subnormal, compared with the
 * search-based reference. */
Test(ops_cast, float32_to_half_rounds_to_nearest_even_on_edge_values) {
    cm_device *dev = cpu();
    enum { N = 65536 * 6 };
    const int64_t n[1] = {N};
    cm_tensor *f = new_tensor(dev, CM_FLOAT32, 1, n);
    cm_tensor *h = new_tensor(dev, CM_FLOAT16, 1, n), *b = new_tensor(dev, CM_BFLOAT16, 1, n);
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
    /* A few named ones too. */
    const float named[] = {65504.0f, 65519.99f, 65520.0f, 1e-8f, 2.98e-8f, 2.9802322e-8f,
                           5.96e-8f, 6.1e-5f, 6.097555e-5f, 1.0f + 0x1p-11f, 3.4028235e38f};
    memcpy(fp, named, sizeof named);
    CHECK(cm_cast(f, h));
    CHECK(cm_cast(f, b));
    const uint16_t *hp = NULL, *bp = NULL;
    CHECK(cm_tensor_host_read(h, CM_FLOAT16, (const void **)&hp));
    CHECK(cm_tensor_host_read(b, CM_BFLOAT16, (const void **)&bp));
    for (uint32_t i = 0; i < N; ++i) {
        float v;
        memcpy(&v, &fp[i], 4);
        if (isnan(v)) {
            cr_assert(ref_small_isnan(hp[i], false) && ref_small_isnan(bp[i], true));
            cr_assert_eq(hp[i] >> 15, fp[i] >> 31);
            /* bfloat16 keeps the top 7 payload bits when they are not all 0 */
            if ((fp[i] >> 16) & 0x7f)
                cr_assert_eq(bp[i], fp[i] >> 16);
            continue;
        }
        cr_assert_eq(hp[i], ref_small_encode(v, false), "%a -> float16 %#x", (double)v, hp[i]);
        cr_assert_eq(bp[i], ref_small_encode(v, true), "%a -> bfloat16 %#x", (double)v, bp[i]);
    }
    const uint16_t want_named[] = {0x7bff, 0x7bff, 0x7c00, 0x0000, 0x0000, 0x0000, 0x0001};
    for (size_t i = 0; i < sizeof want_named / sizeof want_named[0]; ++i)
        cr_assert_eq(hp[i], want_named[i], "named %zu: %#x", i, hp[i]);
    cm_tensor_release(f);
    cm_tensor_release(h);
    cm_tensor_release(b);
    cm_device_release(dev);
}

Test(ops_cast, wide_sources_round_once_to_half) {
    cm_device *dev = cpu();
    const int64_t n[1] = {4};
    /* 2^60 + 2^52 + 1 lies just above a bfloat16 tie; through a double it
     * would become the tie and round down. */
    cm_tensor *i = new_tensor(dev, CM_INT64, 1, n), *b = new_tensor(dev, CM_BFLOAT16, 1, n);
    int64_t *ip = NULL;
    CHECK(cm_tensor_host_write(i, CM_INT64, (void **)&ip));
    ip[0] = (1ll << 60) + (1ll << 52) + 1;
    ip[1] = (1ll << 60) + (1ll << 52);
    ip[2] = -((1ll << 60) + (1ll << 52) + 1);
    ip[3] = INT64_MIN;
    CHECK(cm_cast(i, b));
    const uint16_t *bp = NULL;
    CHECK(cm_tensor_host_read(b, CM_BFLOAT16, (const void **)&bp));
    cr_assert_eq(bp[0], 0x5d81);
    cr_assert_eq(bp[1], 0x5d80);
    cr_assert_eq(bp[2], 0xdd81);
    cr_assert_eq(bp[3], 0xdf00);
    /* float64 just above a float16 tie: 1 + 2^-11 + 2^-40. */
    cm_tensor *d = new_tensor(dev, CM_FLOAT64, 1, n), *h = new_tensor(dev, CM_FLOAT16, 1, n);
    double *dp = NULL;
    CHECK(cm_tensor_host_write(d, CM_FLOAT64, (void **)&dp));
    dp[0] = 1.0 + 0x1p-11 + 0x1p-40;
    dp[1] = 1.0 + 0x1p-11;
    dp[2] = 0x1p-25 + 0x1p-60; /* just above half the smallest subnormal */
    dp[3] = 65520.0 - 0x1p-30;
    CHECK(cm_cast(d, h));
    const uint16_t *hp = NULL;
    CHECK(cm_tensor_host_read(h, CM_FLOAT16, (const void **)&hp));
    cr_assert_eq(hp[0], 0x3c01);
    cr_assert_eq(hp[1], 0x3c00);
    cr_assert_eq(hp[2], 0x0001);
    cr_assert_eq(hp[3], 0x7bff);
    cm_tensor_release(i);
    cm_tensor_release(b);
    cm_tensor_release(d);
    cm_tensor_release(h);
    cm_device_release(dev);
}

Test(ops_cast, float_to_int_saturates_and_maps_nan_to_zero) {
    cm_device *dev = cpu();
    const int64_t n[1] = {6};
    cm_tensor *f = new_tensor(dev, CM_FLOAT32, 1, n), *o = new_tensor(dev, CM_INT16, 1, n);
    cm_tensor *u = new_tensor(dev, CM_UINT8, 1, n), *bl = new_tensor(dev, CM_BOOL, 1, n);
    float *fp = NULL;
    CHECK(cm_tensor_host_write(f, CM_FLOAT32, (void **)&fp));
    const float vals[6] = {NAN, INFINITY, -INFINITY, 1e9f, -2.9f, 0.5f};
    memcpy(fp, vals, sizeof vals);
    CHECK(cm_cast(f, o));
    CHECK(cm_cast(f, u));
    CHECK(cm_cast(f, bl));
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
