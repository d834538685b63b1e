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

#define CM__CAST_ENTRY(SE, DE, DT, DDOM, DLD, DKIND, DSAT) [DE] = cm__cast_##SE##_##DE,
#define CM__CAST_ROW(SE, ST, SDOM, SLD, SKIND, SSAT) \
    [SE] = {CM__DTYPE_LIST_WITH(CM__CAST_ENTRY, SE)},
static const cm__cpu_map1_fn cm__cast_table[CM_DTYPE_COUNT][CM_DTYPE_COUNT] = {
    CM__DTYPE_LIST(CM__CAST_ROW)};
#undef CM__CAST_ROW
#undef CM__CAST_ENTRY

cm__cpu_map1_fn cm__cpu_cast_kernel(cm_dtype from, cm_dtype to) {
    return cm__cast_table[from][to];
}
