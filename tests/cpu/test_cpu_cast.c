/* SPDX-License-Identifier: MIT */
/* The CPU device's float16 and bfloat16 casts against references written
 * here from the ops.h rules (integer arithmetic only): every float16 and
 * bfloat16 value to float32, and to float16/bfloat16 a directed set (every
 * value, every rounding tie and its neighbours, overflow, subnormals, NaN
 * payloads) plus random bit patterns. Each runs twice: with the CPU's
 * conversion instructions where it has them (F16C, arm64 fcvtn/fcvtl), and
 * with the scalar path forced (cm__cpu_cast_force_scalar). The arrays are
 * cast from an odd offset with an odd length, so vector blocks and scalar
 * tails both run, and NaNs fall inside vector blocks; once more with the
 * output stored by streaming stores (cm__cpu_copy_force_streaming). */
#include "check.h"
#include "cpu/cpu_ops.h"

#include <cmetal/cmetal.h>

#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------ references */

static uint32_t ref_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 31)
        return sign | 0x7f800000u | (m << 13); /* infinity, or NaN with its payload */
    if (e == 0) {
        if (m == 0)
            return sign;
        uint32_t shift = 0; /* subnormal: normalise */
        while ((m & 0x400u) == 0) {
            m <<= 1;
            ++shift;
        }
        return sign | ((127u - 14u - shift) << 23) | ((m & 0x3ffu) << 13);
    }
    return sign | ((e - 15u + 127u) << 23) | (m << 13);
}

/* Round to nearest even; NaN keeps its top payload bits, quieted only if
 * none is left. */
static uint16_t ref_f32_to_f16(uint32_t x) {
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t e = (x >> 23) & 0xffu, m = x & 0x7fffffu;
    if (e == 255) {
        if (m == 0)
            return sign | 0x7c00u;
        const uint32_t payload = m >> 13;
        return (uint16_t)(sign | 0x7c00u | (payload != 0 ? payload : 0x200u));
    }
    if (e == 0 && m == 0)
        return sign;
    const int32_t ue = e != 0 ? (int32_t)e - 127 : -126; /* value = M * 2^(ue - 23) */
    const uint32_t big_m = e != 0 ? (m | 0x800000u) : m;
    if (ue > 15)
        return sign | 0x7c00u;
    const int32_t quantum = ue < -14 ? -24 : ue - 10; /* exponent of the result's last bit */
    const int32_t shift = quantum - (ue - 23);        /* >= 13 */
    uint32_t r = 0;
    if (shift <= 24) {
        r = big_m >> shift;
        const uint32_t rem = big_m & ((1u << shift) - 1u), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1u)))
            ++r;
    }
    if (ue < -14)
        return (uint16_t)(sign | r); /* subnormal, or rounded up to the smallest normal */
    const uint32_t bits = ((uint32_t)(ue + 15) << 10) + r - 0x400u;
    return (uint16_t)(sign | (bits >= 0x7c00u ? 0x7c00u : bits));
}

static uint16_t ref_f32_to_bf16(uint32_t x) {
    uint32_t r = x >> 16;
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN */
        return (uint16_t)((r & 0x7fu) != 0 ? r : r | 0x40u);
    const uint32_t rem = x & 0xffffu;
    if (rem > 0x8000u || (rem == 0x8000u && (r & 1u)))
        ++r; /* a carry into the exponent is right, up to infinity */
    return (uint16_t)r;
}

/* ------------------------------------------------------------ inputs */

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

#define RANDOM_COUNT (1u << 16)

typedef struct list {
    uint32_t *v;
    size_t n, cap;
} list;

static void push(list *l, uint32_t x) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 1024;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        cr_assert_not_null(l->v);
    }
    l->v[l->n++] = x;
}

/* Special float32 classes: zeros, float32 subnormals, extremes, infinities
 * and NaNs with each payload bit alone and all set, both signs, both quiet
 * states. */
static void push_specials(list *l) {
    for (uint32_t sign = 0; sign < 2; ++sign) {
        const uint32_t s = sign << 31;
        push(l, s);
        push(l, s | 1u);
        push(l, s | 0x007fffffu);
        push(l, s | 0x00400000u);
        push(l, s | 0x00800000u);
        push(l, s | 0x7f7fffffu);
        push(l, s | 0x7f800000u);
        push(l, s | 0x7fffffffu);
        for (uint32_t bit = 0; bit < 23; ++bit) {
            push(l, s | 0x7f800000u | (1u << bit)); /* quiet bit 22 is one of them */
            push(l, s | 0x7fc00000u | (1u << bit));
        }
        push(l, s | 0x7f801fffu); /* payload entirely below the float16 one */
        push(l, s | 0x7fc01fffu);
    }
}

/* Every value of a 16-bit format (float16 when !bf16), the midpoint to the
 * next one (every tie) and the float32 neighbours of that midpoint. */
static void push_directed(list *l, bool bf16) {
    for (uint32_t h = 0; h < 0x10000u; ++h) {
        const uint32_t x = bf16 ? h << 16 : ref_f16_to_f32((uint16_t)h);
        push(l, x);
        if ((x & 0x7f800000u) == 0x7f800000u)
            continue;
        const uint32_t y = bf16 ? ((h + 1u) & 0xffffu) << 16 : ref_f16_to_f32((uint16_t)(h + 1u));
        if ((h & 0x7fffu) == 0x7fffu || (y & 0x7f800000u) == 0x7f800000u)
            continue; /* no next finite magnitude: the overflow edges below */
        /* The midpoint, exact in double and then in float32 (it has one
         * significant bit more than the format). */
        float fx, fy;
        memcpy(&fx, &x, sizeof fx);
        memcpy(&fy, &y, sizeof fy);
        const float fmid = (float)(((double)fx + (double)fy) / 2.0);
        uint32_t mid;
        memcpy(&mid, &fmid, sizeof mid);
        push(l, mid);
        push(l, mid + 1u);
        push(l, mid - 1u);
    }
    /* Overflow edges of float16: 65504, 65519.996, 65520 (ties to infinity). */
    push(l, 0x477fe000u);
    push(l, 0x477fefffu);
    push(l, 0x477ff000u);
    push(l, 0xc77ff000u);
    push(l, 0x7f7f8000u); /* bfloat16's: ties to infinity */
    push(l, 0x7f7f7fffu);
    push_specials(l);
    for (uint32_t i = 0; i < RANDOM_COUNT; ++i)
        push(l, (uint32_t)mix(i + (bf16 ? 0x9e3779b9u : 0u)));
}

/* ------------------------------------------------------------ casts */

/* Casts n elements of `in` (dtype `from`) into `out` (dtype `to`) through
 * cm_cast, starting at element 3 of both tensors so that the data is
 * unaligned for vectors; the 3 destination elements before the view and
 * the 8 after it must keep their bytes. */
static void run_cast(cm_dtype from, const void *in, cm_dtype to, void *out, size_t n) {
    cm_device *cpu = NULL;
    CHECK(cm_device_open(CM_DEVICE_CPU, 0, &cpu));
    const int64_t total[1] = {(int64_t)n + 3 + 8};
    cm_tensor_desc sd = {.dtype = from, .ndim = 1, .shape = total};
    cm_tensor_desc dd = {.dtype = to, .ndim = 1, .shape = total};
    cm_tensor *src = NULL, *dst = NULL, *src_view = NULL, *dst_view = NULL;
    CHECK(cm_tensor_create(cpu, &sd, &src));
    CHECK(cm_tensor_create(cpu, &dd, &dst));
    cm_dtype_info si, di;
    CHECK(cm_dtype_get_info(from, &si));
    CHECK(cm_dtype_get_info(to, &di));
    void *p = NULL;
    CHECK(cm_tensor_host_write(src, from, &p));
    memcpy((char *)p + 3 * si.size, in, n * si.size);
    CHECK(cm_tensor_host_write(dst, to, &p));
    memset(p, 0xa5, (n + 3 + 8) * di.size);
    CHECK(cm_tensor_slice(src, 0, 3, 3 + (int64_t)n, 1, &src_view));
    CHECK(cm_tensor_slice(dst, 0, 3, 3 + (int64_t)n, 1, &dst_view));
    CHECK(cm_cast(src_view, dst_view, NULL));
    const uint8_t *q = NULL;
    CHECK(cm_tensor_host_read(dst, to, (const void **)&q));
    memcpy(out, q + 3 * di.size, n * di.size);
    for (size_t i = 0; i < (n + 3 + 8) * di.size; ++i)
        if (i < 3 * di.size || i >= (n + 3) * di.size)
            cr_assert_eq(q[i], 0xa5, "byte %zu of the destination, outside the view, changed", i);
    cm_tensor_release(src_view);
    cm_tensor_release(dst_view);
    cm_tensor_release(src);
    cm_tensor_release(dst);
    cm_device_release(cpu);
}

/* The two paths: instructions (where present), then scalar. */
static const char *path_name(int path) {
    const char *hw = cm__cpu_cast_f16_hardware();
    return path == 0 ? (hw != NULL ? hw : "scalar (no instructions on this CPU)") : "scalar";
}

/* Selects a path; the dispatch and cm__cpu_cast_f16_hardware ask the same
 * question, so a forced scalar path must report no instructions. */
static void select_path(int path) {
    cm__cpu_cast_force_scalar(path == 1);
    if (path == 1)
        cr_assert_null(cm__cpu_cast_f16_hardware(), "the scalar path is not forced");
}

static void to_f32_all(cm_dtype from, bool bf16) {
    uint16_t *in = malloc(0x10000u * sizeof *in);
    uint32_t *out = malloc(0x10000u * sizeof *out);
    cr_assert(in != NULL && out != NULL);
    for (uint32_t h = 0; h < 0x10000u; ++h)
        in[h] = (uint16_t)h;
    for (int path = 0; path < 2; ++path) {
        select_path(path);
        memset(out, 0xa5, 0x10000u * sizeof *out);
        run_cast(from, in, CM_FLOAT32, out, 0x10000u);
        for (uint32_t h = 0; h < 0x10000u; ++h) {
            const uint32_t want = bf16 ? h << 16 : ref_f16_to_f32((uint16_t)h);
            cr_assert_eq(out[h], want, "%s -> float32 (%s) of 0x%04x: 0x%08x, expected 0x%08x",
                         bf16 ? "bfloat16" : "float16", path_name(path), h, out[h], want);
        }
    }
    cm__cpu_cast_force_scalar(false);
    free(in);
    free(out);
}

static void from_f32_directed(cm_dtype to, bool bf16) {
    list l = {0};
    push_directed(&l, bf16);
    uint16_t *out = malloc(l.n * sizeof *out);
    cr_assert_not_null(out);
    for (int path = 0; path < 2; ++path) {
        select_path(path);
        memset(out, 0xa5, l.n * sizeof *out);
        run_cast(CM_FLOAT32, l.v, to, out, l.n);
        for (size_t i = 0; i < l.n; ++i) {
            const uint16_t want = bf16 ? ref_f32_to_bf16(l.v[i]) : ref_f32_to_f16(l.v[i]);
            cr_assert_eq(out[i], want, "float32 0x%08x -> %s (%s): 0x%04x, expected 0x%04x", l.v[i],
                         bf16 ? "bfloat16" : "float16", path_name(path), out[i], want);
        }
    }
    cm__cpu_cast_force_scalar(false);
    free(out);
    free(l.v);
}

Test(cpu_cast, reference_self_check) {
    /* Known encodings, so that the references are not merely consistent
     * with the runtime. */
    cr_assert_eq(ref_f16_to_f32(0x3c00u), 0x3f800000u); /* 1 */
    cr_assert_eq(ref_f16_to_f32(0x0001u), 0x33800000u); /* 2^-24 */
    cr_assert_eq(ref_f16_to_f32(0x7bffu), 0x477fe000u); /* 65504 */
    cr_assert_eq(ref_f16_to_f32(0xfd01u), 0xffa02000u); /* signaling NaN kept */
    cr_assert_eq(ref_f32_to_f16(0x3f800000u), 0x3c00u);
    cr_assert_eq(ref_f32_to_f16(0x477ff000u), 0x7c00u); /* 65520 ties up to infinity */
    cr_assert_eq(ref_f32_to_f16(0x477fefffu), 0x7bffu);
    cr_assert_eq(ref_f32_to_f16(0x33000000u), 0x0000u); /* 2^-25 ties to even 0 */
    cr_assert_eq(ref_f32_to_f16(0x33000001u), 0x0001u);
    cr_assert_eq(ref_f32_to_f16(0x33c00000u), 0x0002u); /* 1.5 * 2^-24 ties to even 2 */
    cr_assert_eq(ref_f32_to_f16(0x3f801000u), 0x3c00u); /* 1 + 2^-11 ties to even 1 */
    cr_assert_eq(ref_f32_to_f16(0x3f803000u), 0x3c02u); /* 1 + 3 * 2^-11 ties up */
    cr_assert_eq(ref_f32_to_f16(0x7f800001u), 0x7e00u); /* payload vanishes: quieted */
    cr_assert_eq(ref_f32_to_f16(0x7fa00000u), 0x7d00u); /* signaling NaN stays signaling */
    cr_assert_eq(ref_f32_to_bf16(0x3f808000u), 0x3f80u);
    cr_assert_eq(ref_f32_to_bf16(0x3f818000u), 0x3f82u);
    cr_assert_eq(ref_f32_to_bf16(0x7f7f8000u), 0x7f80u);
    cr_assert_eq(ref_f32_to_bf16(0x7f800001u), 0x7fc0u);
    cr_assert_eq(ref_f32_to_bf16(0xff810000u), 0xff81u);
    printf("float16 instructions on this CPU: %s\n", path_name(0));
}

Test(cpu_cast, every_float16_to_float32) {
    to_f32_all(CM_FLOAT16, false);
}

Test(cpu_cast, every_bfloat16_to_float32) {
    to_f32_all(CM_BFLOAT16, true);
}

Test(cpu_cast, float32_to_float16_ties_specials_random) {
    from_f32_directed(CM_FLOAT16, false);
}

Test(cpu_cast, float32_to_bfloat16_ties_specials_random) {
    from_f32_directed(CM_BFLOAT16, true);
}

/* The same directed cases with the casts' prefetching forced on (it runs
 * only on Intel by default): at 4096, 64 and 192 bytes ahead. */
Test(cpu_cast, float32_narrowing_with_prefetch_forced) {
    static const int distances[3] = {4096, 64, 192};
    for (int k = 0; k < 3; ++k) {
        cm__cpu_reduce_force_prefetch(distances[k]);
        from_f32_directed(CM_FLOAT16, false);
        from_f32_directed(CM_BFLOAT16, true);
    }
    cm__cpu_reduce_force_prefetch(-1);
}

/* Every case above with the output stored by streaming (non-temporal)
 * stores, which by size only outputs larger than four L2 caches get
 * (x86-64; elsewhere ordinary stores either way): the ragged head before
 * the first aligned store, NaN blocks and the tail keep the same bits. */
Test(cpu_cast, every_case_with_streaming_stores) {
    cm__cpu_copy_force_streaming(1);
    to_f32_all(CM_FLOAT16, false);
    to_f32_all(CM_BFLOAT16, true);
    from_f32_directed(CM_FLOAT16, false);
    from_f32_directed(CM_BFLOAT16, true);
    cm__cpu_copy_force_streaming(0);
}
