/* CPU cast kernels: one per (source, destination) dtype pair, generated
 * from the conversions of core/convert.h, with a contiguous loop the
 * compiler can vectorise and a strided one. */
#include "cpu_ops.h"

#include "core/convert.h"

#define CM__CAST_FN(SE, ST, SDOM, SLD, SKIND, SSAT, DE, DT, DDOM, DLD, DKIND, DSAT)            \
    static void cm__cast_##SE##_##DE(int64_t n, char *o, int64_t os, const char *a,           \
                                     int64_t as) {                                            \
        if (os == (int64_t)sizeof(DT) && as == (int64_t)sizeof(ST)) {                         \
            DT *d_ = (DT *)(void *)o;                                                         \
            const ST *s_ = (const ST *)(const void *)a;                                       \
            for (int64_t i = 0; i < n; ++i)                                                   \
                d_[i] = CM__CONVERT(SDOM, DKIND, DT, DSAT, SLD(s_[i]));                       \
        } else {                                                                              \
            for (int64_t i = 0; i < n; ++i) {                                                 \
                const ST v_ = *(const ST *)(const void *)(a + i * as);                        \
                *(DT *)(void *)(o + i * os) = CM__CONVERT(SDOM, DKIND, DT, DSAT, SLD(v_));    \
            }                                                                                 \
        }                                                                                     \
    }
#define CM__CAST_ROW(SE, ST, SDOM, SLD, SKIND, SSAT) \
    CM__DTYPE_LIST_WITH(CM__CAST_FN, SE, ST, SDOM, SLD, SKIND, SSAT)
CM__DTYPE_LIST(CM__CAST_ROW)
#undef CM__CAST_ROW
#undef CM__CAST_FN

/* The float16/bfloat16 <-> float32 conversions, the common ones, also get
 * an AVX2 build chosen at load time where GCC can do so (x86-64 ELF); the
 * portable loop is the fallback everywhere else. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__ELF__)
#define CM__CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CM__CLONES
#endif

#define CM__FAST_CAST(SE, ST, DE, DT, CONV)                                                  \
    CM__CLONES static void cm__fast_##SE##_##DE(int64_t n, DT *o, const ST *a) {             \
        for (int64_t i = 0; i < n; ++i)                                                      \
            o[i] = CONV(a[i]);                                                               \
    }                                                                                        \
    static void cm__castf_##SE##_##DE(int64_t n, char *o, int64_t os, const char *a,         \
                                      int64_t as) {                                          \
        if (os == (int64_t)sizeof(DT) && as == (int64_t)sizeof(ST))                          \
            cm__fast_##SE##_##DE(n, (DT *)(void *)o, (const ST *)(const void *)a);           \
        else                                                                                 \
            cm__cast_##SE##_##DE(n, o, os, a, as);                                           \
    }
CM__FAST_CAST(CM_FLOAT32, float, CM_FLOAT16, uint16_t, cm__f32_to_f16)
CM__FAST_CAST(CM_FLOAT16, uint16_t, CM_FLOAT32, float, cm__f16_to_f32)
CM__FAST_CAST(CM_FLOAT32, float, CM_BFLOAT16, uint16_t, cm__f32_to_bf16)
CM__FAST_CAST(CM_BFLOAT16, uint16_t, CM_FLOAT32, float, cm__bf16_to_f32)
#undef CM__FAST_CAST

#define CM__CAST_ENTRY(SE, DE, DT, DDOM, DLD, DKIND, DSAT) [DE] = cm__cast_##SE##_##DE,
#define CM__CAST_ROW(SE, ST, SDOM, SLD, SKIND, SSAT) \
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
