/* SPDX-License-Identifier: MIT */
/* CPU cast kernels: one per (source, destination) dtype pair, generated
 * from the conversions of core/convert.h, with a contiguous loop the
 * compiler can vectorise and a strided one. */
#include "cpu_ops.h"

#include "core/convert.h"

#include <stdatomic.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* The float32 -> float16 / bfloat16 loops ask for their source lines
 * ahead as the reductions do (cm__cpu_prefetch_distance: Intel only), once
 * per 64 bytes. CM__CAST_PREFETCH=0 builds without (for comparisons). */
#ifndef CM__CAST_PREFETCH
#define CM__CAST_PREFETCH 1
#endif
#if CM__CAST_PREFETCH && (defined(__GNUC__) || defined(__clang__))
#define CM__CAST_PF_DECL const uintptr_t cm__pf = cm__cpu_prefetch_distance()
#define CM__CAST_PF(p, i)                                                                          \
    do {                                                                                           \
        if ((i) % 16 == 0)                                                                         \
            cm__cpu_prefetch_ahead(p, cm__pf);                                                     \
    } while (0)
#else
#define CM__CAST_PF_DECL const uintptr_t cm__pf = 0
#define CM__CAST_PF(p, i) ((void)cm__pf)
#endif

#define CM__CAST_FN(SE, ST, SDOM, SLD, SKIND, SSAT, SMTL, DE, DT, DDOM, DLD, DKIND, DSAT, DMTL)    \
    static void cm__cast_##SE##_##DE(int64_t n, char *o, int64_t os, const char *a, int64_t as) {  \
        if (os == (int64_t)sizeof(DT) && as == (int64_t)sizeof(ST)) {                              \
            DT *d_ = (DT *)(void *)o;                                                              \
            const ST *s_ = (const ST *)(const void *)a;                                            \
            for (int64_t i = 0; i < n; ++i)                                                        \
                d_[i] = CM__CONVERT(SDOM, DKIND, DT, DSAT, SLD(s_[i]));                            \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; ++i) {                                                      \
                const ST v_ = *(const ST *)(const void *)(a + i * as);                             \
                *(DT *)(void *)(o + i * os) = CM__CONVERT(SDOM, DKIND, DT, DSAT, SLD(v_));         \
            }                                                                                      \
        }                                                                                          \
    }
#define CM__CAST_ROW(SE, ST, SDOM, SLD, SKIND, SSAT, SMTL)                                         \
    CM__DTYPE_LIST_WITH(CM__CAST_FN, SE, ST, SDOM, SLD, SKIND, SSAT, SMTL)
CM__DTYPE_LIST(CM__CAST_ROW)
#undef CM__CAST_ROW
#undef CM__CAST_FN

/* ------------------------------------------------------------ float16, bfloat16
 * The float16/bfloat16 <-> float32 conversions, the common ones, have
 * contiguous kernels of their own:
 * - float16 uses the CPU's conversion instructions where it has them
 *   (F16C on x86-64, chosen at run time; fcvtn/fcvtl on arm64). Both quiet
 *   signaling NaNs, which ops.h does not (a NaN keeps its payload), so a
 *   vector holding a NaN is converted by the scalar path instead; every
 *   other value (subnormals, ties, overflow) converts identically, with
 *   round to nearest even.
 * - bfloat16 is a shift and an integer rounding: written with vector
 *   types, so that plain -O2 builds vectorise it.
 * cm__cpu_cast_force_scalar (a test hook) turns the instructions off. */
static atomic_bool cm__cast_scalar_only;

void cm__cpu_cast_force_scalar(bool scalar_only) {
    atomic_store_explicit(&cm__cast_scalar_only, scalar_only, memory_order_relaxed);
}

#define CM__SCALAR_LOOP(n, o, a, CONV)                                                             \
    for (int64_t i_ = 0; i_ < (n); ++i_)                                                           \
    (o)[i_] = CONV((a)[i_])

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define CM__F16_HW "f16c"

/* F16C needs AVX, and the OS must save the YMM registers. */
static bool cm__f16_hw_present(void) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return false;
    const unsigned need = bit_OSXSAVE | bit_AVX | bit_F16C;
    if ((c & need) != need)
        return false;
    unsigned lo = 0, hi = 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    return (lo & 6u) == 6u; /* XMM and YMM state enabled */
}

__attribute__((target("avx,f16c"))) static void cm__f32_to_f16_hw(int64_t n, uint16_t *o,
                                                                  const float *a) {
    int64_t i = 0;
    CM__CAST_PF_DECL;
    for (; i + 8 <= n; i += 8) {
        CM__CAST_PF(a + i, i);
        const __m256 v = _mm256_loadu_ps(a + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) {
            CM__SCALAR_LOOP(8, o + i, a + i, cm__f32_to_f16);
            continue;
        }
        const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(void *)(o + i), h);
    }
    CM__SCALAR_LOOP(n - i, o + i, a + i, cm__f32_to_f16);
}

__attribute__((target("avx,f16c"))) static void cm__f16_to_f32_hw(int64_t n, float *o,
                                                                  const uint16_t *a) {
    const __m128i magnitude = _mm_set1_epi16(0x7fff), inf = _mm_set1_epi16(0x7c00);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(a + i));
        /* |h| > inf as signed 16-bit lanes (both are below 0x8000): NaN */
        if (_mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(h, magnitude), inf)) != 0) {
            CM__SCALAR_LOOP(8, o + i, a + i, cm__f16_to_f32);
            continue;
        }
        _mm256_storeu_ps(o + i, _mm256_cvtph_ps(h));
    }
    CM__SCALAR_LOOP(n - i, o + i, a + i, cm__f16_to_f32);
}

#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#include <arm_neon.h>
#define CM__F16_HW "neon"

static bool cm__f16_hw_present(void) {
    return true; /* fcvtn/fcvtl are in every arm64 CPU */
}

static void cm__f32_to_f16_hw(int64_t n, uint16_t *o, const float *a) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const float32x4_t lo = vld1q_f32(a + i), hi = vld1q_f32(a + i + 4);
        /* a lane that is not equal to itself is a NaN */
        const uint32x4_t ordered = vandq_u32(vceqq_f32(lo, lo), vceqq_f32(hi, hi));
        if (vminvq_u32(ordered) == 0) {
            CM__SCALAR_LOOP(8, o + i, a + i, cm__f32_to_f16);
            continue;
        }
        const float16x8_t h = vcvt_high_f16_f32(vcvt_f16_f32(lo), hi);
        vst1q_u16(o + i, vreinterpretq_u16_f16(h));
    }
    CM__SCALAR_LOOP(n - i, o + i, a + i, cm__f32_to_f16);
}

static void cm__f16_to_f32_hw(int64_t n, float *o, const uint16_t *a) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const uint16x8_t h = vld1q_u16(a + i);
        const uint16x8_t nan = vcgtq_u16(vandq_u16(h, vdupq_n_u16(0x7fff)), vdupq_n_u16(0x7c00));
        if (vmaxvq_u16(nan) != 0) {
            CM__SCALAR_LOOP(8, o + i, a + i, cm__f16_to_f32);
            continue;
        }
        const float16x8_t f = vreinterpretq_f16_u16(h);
        vst1q_f32(o + i, vcvt_f32_f16(vget_low_f16(f)));
        vst1q_f32(o + i + 4, vcvt_high_f32_f16(f));
    }
    CM__SCALAR_LOOP(n - i, o + i, a + i, cm__f16_to_f32);
}

#else
#define CM__F16_HW NULL
static bool cm__f16_hw_present(void) {
    return false;
}
static void cm__f32_to_f16_hw(int64_t n, uint16_t *o, const float *a) {
    CM__SCALAR_LOOP(n, o, a, cm__f32_to_f16);
}
static void cm__f16_to_f32_hw(int64_t n, float *o, const uint16_t *a) {
    CM__SCALAR_LOOP(n, o, a, cm__f16_to_f32);
}
#endif

/* 1 present, -1 absent, 0 not asked yet (asking twice is harmless). */
static atomic_int cm__f16_hw_state;

static bool cm__f16_hw_usable(void) {
    if (atomic_load_explicit(&cm__cast_scalar_only, memory_order_relaxed))
        return false;
    int state = atomic_load_explicit(&cm__f16_hw_state, memory_order_relaxed);
    if (state == 0) {
        state = cm__f16_hw_present() ? 1 : -1;
        atomic_store_explicit(&cm__f16_hw_state, state, memory_order_relaxed);
    }
    return state > 0;
}

const char *cm__cpu_cast_f16_hardware(void) {
    return cm__f16_hw_usable() ? CM__F16_HW : NULL;
}

/* The scalar float16 loops, also built for AVX2 where GCC can choose at
 * load time (x86-64 ELF): the fallback without the instructions. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__ELF__)
#define CM__CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CM__CLONES
#endif

CM__CLONES static void cm__f32_to_f16_scalar(int64_t n, uint16_t *restrict o,
                                             const float *restrict a) {
    CM__SCALAR_LOOP(n, o, a, cm__f32_to_f16);
}

CM__CLONES static void cm__f16_to_f32_scalar(int64_t n, float *restrict o,
                                             const uint16_t *restrict a) {
    CM__SCALAR_LOOP(n, o, a, cm__f16_to_f32);
}

static void cm__fast_f32_to_f16(int64_t n, uint16_t *o, const float *a) {
    if (cm__f16_hw_usable())
        cm__f32_to_f16_hw(n, o, a);
    else
        cm__f32_to_f16_scalar(n, o, a);
}

static void cm__fast_f16_to_f32(int64_t n, float *o, const uint16_t *a) {
    if (cm__f16_hw_usable())
        cm__f16_to_f32_hw(n, o, a);
    else
        cm__f16_to_f32_scalar(n, o, a);
}

/* bfloat16 in blocks of 4 lanes of 16-byte vector types (GCC and Clang
 * lower them to SSE2, NEON, or wider through the clones), the arithmetic
 * of convert.h's cm__f32_to_bf16 and cm__bf16_to_f32. Comparisons are on
 * signed lanes (every value compared is below 2^31): SSE2 has no others. */
#if defined(__GNUC__) || defined(__clang__)
typedef uint32_t cm__v4u32 __attribute__((vector_size(16)));
typedef int32_t cm__v4i32 __attribute__((vector_size(16)));
typedef uint16_t cm__v4u16 __attribute__((vector_size(8)));
#define CM__BF16_VECTORS 1
#endif

#if defined(CM__BF16_VECTORS) && !defined(__SSE2__)
/* Four float32 lanes whose high halves become the bfloat16 results. */
static inline cm__v4u32 cm__bf16_in_high_half(cm__v4u32 u) {
    const cm__v4i32 h = (cm__v4i32)(u >> 16);
    /* NaN keeps its payload; the quiet bit is set only if none is left */
    const cm__v4u32 quiet = (cm__v4u32)(((h & 0x7f) == 0) & 0x40) << 16;
    const cm__v4u32 is_nan = (cm__v4u32)((cm__v4i32)(u & 0x7fffffffu) > 0x7f800000);
    const cm__v4u32 rounded = u + 0x7fffu + ((u >> 16) & 1u);
    return ((u | quiet) & is_nan) | (rounded & ~is_nan);
}
#endif

CM__CLONES static void cm__fast_f32_to_bf16(int64_t n, uint16_t *o, const float *a) {
    int64_t i = 0;
#if defined(__SSE2__)
    /* SSE2: a block holding a NaN goes to the scalar path, the others need
     * only the rounding; arithmetic shifts keep the halves exact through
     * the signed pack. */
    const __m128i magnitude = _mm_set1_epi32(0x7fffffff), inf = _mm_set1_epi32(0x7f800000);
    const __m128i bias = _mm_set1_epi32(0x7fff), one = _mm_set1_epi32(1);
    CM__CAST_PF_DECL;
    for (; i + 8 <= n; i += 8) {
        CM__CAST_PF(a + i, i);
        const __m128i u0 = _mm_loadu_si128((const __m128i *)(const void *)(a + i));
        const __m128i u1 = _mm_loadu_si128((const __m128i *)(const void *)(a + i + 4));
        const __m128i nan = _mm_or_si128(_mm_cmpgt_epi32(_mm_and_si128(u0, magnitude), inf),
                                         _mm_cmpgt_epi32(_mm_and_si128(u1, magnitude), inf));
        if (_mm_movemask_epi8(nan) != 0) {
            CM__SCALAR_LOOP(8, o + i, a + i, cm__f32_to_bf16);
            continue;
        }
        const __m128i r0 =
            _mm_add_epi32(_mm_add_epi32(u0, bias), _mm_and_si128(_mm_srli_epi32(u0, 16), one));
        const __m128i r1 =
            _mm_add_epi32(_mm_add_epi32(u1, bias), _mm_and_si128(_mm_srli_epi32(u1, 16), one));
        _mm_storeu_si128((__m128i *)(void *)(o + i),
                         _mm_packs_epi32(_mm_srai_epi32(r0, 16), _mm_srai_epi32(r1, 16)));
    }
#elif defined(CM__BF16_VECTORS)
    for (; i + 8 <= n; i += 8) {
        cm__v4u32 u0, u1;
        memcpy(&u0, a + i, sizeof u0);
        memcpy(&u1, a + i + 4, sizeof u1);
        const cm__v4u16 n0 = __builtin_convertvector(cm__bf16_in_high_half(u0) >> 16, cm__v4u16);
        const cm__v4u16 n1 = __builtin_convertvector(cm__bf16_in_high_half(u1) >> 16, cm__v4u16);
        memcpy(o + i, &n0, sizeof n0);
        memcpy(o + i + 4, &n1, sizeof n1);
    }
#endif
    CM__SCALAR_LOOP(n - i, o + i, a + i, cm__f32_to_bf16);
}

CM__CLONES static void cm__fast_bf16_to_f32(int64_t n, float *o, const uint16_t *a) {
    int64_t i = 0;
#if defined(CM__BF16_VECTORS)
    for (; i + 4 <= n; i += 4) {
        cm__v4u16 h;
        memcpy(&h, a + i, sizeof h);
        const cm__v4u32 wide = __builtin_convertvector(h, cm__v4u32) << 16;
        memcpy(o + i, &wide, sizeof wide);
    }
#endif
    CM__SCALAR_LOOP(n - i, o + i, a + i, cm__bf16_to_f32);
}

#define CM__FAST_CAST(SE, ST, DE, DT, FAST)                                                        \
    static void cm__castf_##SE##_##DE(int64_t n, char *o, int64_t os, const char *a, int64_t as) { \
        if (os == (int64_t)sizeof(DT) && as == (int64_t)sizeof(ST))                                \
            FAST(n, (DT *)(void *)o, (const ST *)(const void *)a);                                 \
        else                                                                                       \
            cm__cast_##SE##_##DE(n, o, os, a, as);                                                 \
    }
CM__FAST_CAST(CM_FLOAT32, float, CM_FLOAT16, uint16_t, cm__fast_f32_to_f16)
CM__FAST_CAST(CM_FLOAT16, uint16_t, CM_FLOAT32, float, cm__fast_f16_to_f32)
CM__FAST_CAST(CM_FLOAT32, float, CM_BFLOAT16, uint16_t, cm__fast_f32_to_bf16)
CM__FAST_CAST(CM_BFLOAT16, uint16_t, CM_FLOAT32, float, cm__fast_bf16_to_f32)
#undef CM__FAST_CAST

/* ------------------------------------------------------------ streaming
 * The four float16/bfloat16 casts over contiguous runs with non-temporal
 * stores (x86-64; the caller fences them), for outputs too large to stay
 * in cache (cpu_ops.c decides): an ordinary store first reads its line
 * for ownership, which for float16 -> float32 adds two thirds to the
 * traffic. Each input line is asked for ahead on Intel, once per 64 bytes.
 * The stores start at the output's first 16-byte (float32: 32-byte)
 * boundary; the head, the tail and blocks holding a NaN take the ordinary
 * kernels' scalar path, so the bits are theirs. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx,f16c"))) static void cm__f32_to_f16_stream(int64_t n, uint16_t *o,
                                                                      const float *a) {
    CM__CAST_PF_DECL;
    int64_t i = cm__cpu_unaligned_head(o, sizeof *o, 16, n);
    CM__SCALAR_LOOP(i, o, a, cm__f32_to_f16);
    for (; i + 16 <= n; i += 16) {
        cm__cpu_prefetch_ahead(a + i, cm__pf);
        for (int k = 0; k < 16; k += 8) {
            const __m256 v = _mm256_loadu_ps(a + i + k);
            if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) {
                CM__SCALAR_LOOP(8, o + i + k, a + i + k, cm__f32_to_f16);
                continue;
            }
            _mm_stream_si128((__m128i *)(void *)(o + i + k),
                             _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
    }
    CM__SCALAR_LOOP(n - i, o + i, a + i, cm__f32_to_f16);
}

__attribute__((target("avx,f16c"))) static void cm__f16_to_f32_stream(int64_t n, float *o,
                                                                      const uint16_t *a) {
    CM__CAST_PF_DECL;
    const __m128i magnitude = _mm_set1_epi16(0x7fff), inf = _mm_set1_epi16(0x7c00);
    int64_t i = cm__cpu_unaligned_head(o, sizeof *o, 32, n);
    CM__SCALAR_LOOP(i, o, a, cm__f16_to_f32);
    for (; i + 32 <= n; i += 32) {
        cm__cpu_prefetch_ahead(a + i, cm__pf);
        for (int k = 0; k < 32; k += 8) {
            const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(a + i + k));
            if (_mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(h, magnitude), inf)) != 0) {
                CM__SCALAR_LOOP(8, o + i + k, a + i + k, cm__f16_to_f32);
                continue;
            }
            _mm256_stream_ps(o + i + k, _mm256_cvtph_ps(h));
        }
    }
    CM__SCALAR_LOOP(n - i, o + i, a + i, cm__f16_to_f32);
}

static void cm__f32_to_bf16_stream(int64_t n, uint16_t *o, const float *a) {
    CM__CAST_PF_DECL;
    const __m128i magnitude = _mm_set1_epi32(0x7fffffff), inf = _mm_set1_epi32(0x7f800000);
    const __m128i bias = _mm_set1_epi32(0x7fff), one = _mm_set1_epi32(1);
    int64_t i = cm__cpu_unaligned_head(o, sizeof *o, 16, n);
    CM__SCALAR_LOOP(i, o, a, cm__f32_to_bf16);
    for (; i + 16 <= n; i += 16) {
        cm__cpu_prefetch_ahead(a + i, cm__pf);
        for (int k = 0; k < 16; k += 8) {
            const __m128i u0 = _mm_loadu_si128((const __m128i *)(const void *)(a + i + k));
            const __m128i u1 = _mm_loadu_si128((const __m128i *)(const void *)(a + i + k + 4));
            const __m128i nan = _mm_or_si128(_mm_cmpgt_epi32(_mm_and_si128(u0, magnitude), inf),
                                             _mm_cmpgt_epi32(_mm_and_si128(u1, magnitude), inf));
            if (_mm_movemask_epi8(nan) != 0) {
                CM__SCALAR_LOOP(8, o + i + k, a + i + k, cm__f32_to_bf16);
                continue;
            }
            const __m128i r0 =
                _mm_add_epi32(_mm_add_epi32(u0, bias), _mm_and_si128(_mm_srli_epi32(u0, 16), one));
            const __m128i r1 =
                _mm_add_epi32(_mm_add_epi32(u1, bias), _mm_and_si128(_mm_srli_epi32(u1, 16), one));
            _mm_stream_si128((__m128i *)(void *)(o + i + k),
                             _mm_packs_epi32(_mm_srai_epi32(r0, 16), _mm_srai_epi32(r1, 16)));
        }
    }
    CM__SCALAR_LOOP(n - i, o + i, a + i, cm__f32_to_bf16);
}

static void cm__bf16_to_f32_stream(int64_t n, float *o, const uint16_t *a) {
    CM__CAST_PF_DECL;
    const __m128i zero = _mm_setzero_si128();
    int64_t i = cm__cpu_unaligned_head(o, sizeof *o, 16, n);
    CM__SCALAR_LOOP(i, o, a, cm__bf16_to_f32);
    for (; i + 32 <= n; i += 32) {
        cm__cpu_prefetch_ahead(a + i, cm__pf);
        for (int k = 0; k < 32; k += 8) {
            const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(a + i + k));
            /* zero below each element: the element shifted up 16 bits */
            _mm_stream_si128((__m128i *)(void *)(o + i + k), _mm_unpacklo_epi16(zero, h));
            _mm_stream_si128((__m128i *)(void *)(o + i + k + 4), _mm_unpackhi_epi16(zero, h));
        }
    }
    CM__SCALAR_LOOP(n - i, o + i, a + i, cm__bf16_to_f32);
}

#define CM__STREAM_CAST(SE, ST, DE, DT, FAST)                                                      \
    static void cm__casts_##SE##_##DE(int64_t n, char *o, int64_t os, const char *a, int64_t as) { \
        (void)os, (void)as; /* contiguous: the caller checked */                                   \
        FAST(n, (DT *)(void *)o, (const ST *)(const void *)a);                                     \
    }
CM__STREAM_CAST(CM_FLOAT32, float, CM_FLOAT16, uint16_t, cm__f32_to_f16_stream)
CM__STREAM_CAST(CM_FLOAT16, uint16_t, CM_FLOAT32, float, cm__f16_to_f32_stream)
CM__STREAM_CAST(CM_FLOAT32, float, CM_BFLOAT16, uint16_t, cm__f32_to_bf16_stream)
CM__STREAM_CAST(CM_BFLOAT16, uint16_t, CM_FLOAT32, float, cm__bf16_to_f32_stream)
#undef CM__STREAM_CAST

cm__cpu_map1_fn cm__cpu_cast_stream_kernel(cm_dtype from, cm_dtype to) {
    const bool f16 = cm__f16_hw_usable();
    if (from == CM_FLOAT32 && to == CM_FLOAT16 && f16)
        return cm__casts_CM_FLOAT32_CM_FLOAT16;
    if (from == CM_FLOAT16 && to == CM_FLOAT32 && f16)
        return cm__casts_CM_FLOAT16_CM_FLOAT32;
    if (from == CM_FLOAT32 && to == CM_BFLOAT16)
        return cm__casts_CM_FLOAT32_CM_BFLOAT16;
    if (from == CM_BFLOAT16 && to == CM_FLOAT32)
        return cm__casts_CM_BFLOAT16_CM_FLOAT32;
    return NULL;
}
#else
cm__cpu_map1_fn cm__cpu_cast_stream_kernel(cm_dtype from, cm_dtype to) {
    (void)from, (void)to;
    return NULL;
}
#endif

#define CM__CAST_ENTRY(SE, DE, DT, DDOM, DLD, DKIND, DSAT, DMTL) [DE] = cm__cast_##SE##_##DE,
#define CM__CAST_ROW(SE, ST, SDOM, SLD, SKIND, SSAT, SMTL)                                         \
    [SE] = {CM__DTYPE_LIST_WITH(CM__CAST_ENTRY, SE)},
static const cm__cpu_map1_fn cm__cast_table[CM_DTYPE_COUNT][CM_DTYPE_COUNT] = {
    CM__DTYPE_LIST(CM__CAST_ROW)};
#undef CM__CAST_ROW
#undef CM__CAST_ENTRY

cm__cpu_map1_fn cm__cpu_cast_kernel(cm_dtype from, cm_dtype to) {
    if (from == CM_FLOAT32 && to == CM_FLOAT16)
        return cm__castf_CM_FLOAT32_CM_FLOAT16;
    if (from == CM_FLOAT16 && to == CM_FLOAT32)
        return cm__castf_CM_FLOAT16_CM_FLOAT32;
    if (from == CM_FLOAT32 && to == CM_BFLOAT16)
        return cm__castf_CM_FLOAT32_CM_BFLOAT16;
    if (from == CM_BFLOAT16 && to == CM_FLOAT32)
        return cm__castf_CM_BFLOAT16_CM_FLOAT32;
    return cm__cast_table[from][to];
}
