/* SPDX-License-Identifier: MIT */
/* Personas and validation modes, both read when the library loads.
 * SOFTMETAL_PERSONA: which kind of Mac every device answers as (its name,
 * families, SIMD width, memory and limits, the kernel features it has).
 * MTL_DEBUG_LAYER=1: API misuse that Metal's validation layer reports aborts
 * at encode; without it, misuse that a Mac tolerates is tolerated and
 * counted (softmetal_stats.lenient_api_uses, a warning once per rule). */
#include "sm_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* MTLGPUFamily values (Apple's MTLDevice.h). */
enum {
  FAMILY_APPLE1 = 1001,
  FAMILY_APPLE5 = 1005,
  FAMILY_APPLE9 = 1009,
  FAMILY_MAC1 = 2001,
  FAMILY_MAC2 = 2002,
  FAMILY_COMMON1 = 3001,
  FAMILY_COMMON3 = 3003,
  FAMILY_METAL3 = 5001,
};

static const sm_persona PERSONAS[] = {
    /* Today's softmetal: an Apple-silicon Mac (Apple1..9, Mac2, Common1..3, Metal3). */
    {SM_PERSONA_APPLE_SILICON, "apple-silicon", NULL, false, true, 32, 1024, 32768,
     (NSUInteger)1 << 34, (uint64_t)8 << 30, SM_FEATURE_ALL},
    /* GitHub's hosted macOS runners: one "Apple Paravirtual device", Apple5
     * and below (no Apple6, no Mac2, no Metal3). Apple5 has neither the SIMD-
     * group permute functions (Apple6+, Mac2) nor the reductions (Apple7+,
     * Mac2) nor SIMD-group matrices (Apple7+); quad functions are Apple4+. */
    {SM_PERSONA_PARAVIRTUAL, "paravirtual", "Apple Paravirtual device", true, true, 32, 1024, 32768,
     (NSUInteger)1 << 34, (uint64_t)8 << 30, 0},
    /* A discrete AMD GPU of an Intel Mac: Mac2 (and Mac1), Common1..3, Metal3
     * (AMD 5000-series); 64-lane SIMD groups, no unified memory, 64 KiB of
     * threadgroup memory; SIMD permutes and reductions, no SIMD-group
     * matrices (Apple7+ only). */
    {SM_PERSONA_AMD_DISCRETE, "amd-discrete", "AMD Radeon Pro 5500M", false, false, 64, 1024, 65536,
     (NSUInteger)3584 << 20, (uint64_t)8 << 30,
     SM_FEATURE_SIMD_PERMUTE | SM_FEATURE_SIMD_REDUCTION},
};

static const sm_persona *g_persona = &PERSONAS[0];
static bool g_debug_layer;
static atomic_long g_lenient_uses;
static atomic_uint g_warned; /* bit r: rule r was warned about */

void sm__modes_init(void) {
  const char *v = getenv("SOFTMETAL_PERSONA");
  if (v && *v) {
    g_persona = NULL;
    for (size_t i = 0; i < sizeof PERSONAS / sizeof *PERSONAS; i++)
      if (strcmp(v, PERSONAS[i].env_name) == 0) g_persona = &PERSONAS[i];
    if (!g_persona)
      sm__fatal("SOFTMETAL_PERSONA = '%s' must be apple-silicon, paravirtual or amd-discrete", v);
  }
  const char *d = getenv("MTL_DEBUG_LAYER");
  if (d && *d && strcmp(d, "0") != 0) {
    if (strcmp(d, "1") != 0) sm__fatal("MTL_DEBUG_LAYER = '%s' must be 0 or 1", d);
    g_debug_layer = true;
  }
}

const sm_persona *sm__persona(void) { return g_persona; }
bool sm__debug_layer(void) { return g_debug_layer; }

bool sm__persona_supports_family(NSInteger family) {
  switch (g_persona->kind) {
  case SM_PERSONA_PARAVIRTUAL:
    return (family >= FAMILY_APPLE1 && family <= FAMILY_APPLE5) ||
           (family >= FAMILY_COMMON1 && family <= FAMILY_COMMON3);
  case SM_PERSONA_AMD_DISCRETE:
    return family == FAMILY_MAC1 || family == FAMILY_MAC2 ||
           (family >= FAMILY_COMMON1 && family <= FAMILY_COMMON3) || family == FAMILY_METAL3;
  default:
    /* Apple1..9, Mac2, Common1..3, Metal3: what our kernels may assume. */
    return (family >= FAMILY_APPLE1 && family <= FAMILY_APPLE9) || family == FAMILY_MAC2 ||
           (family >= FAMILY_COMMON1 && family <= FAMILY_COMMON3) || family == FAMILY_METAL3;
  }
}

const char *sm__feature_missing(uint32_t features) {
  uint32_t missing = features & ~g_persona->features;
  if (missing & SM_FEATURE_SIMD_REDUCTION)
    return "SIMD-group reduction functions (simd_sum, simd_product, simd_min, simd_max, "
           "simd_and, simd_or, simd_xor, simd_prefix_*: GPU families Apple7 and later, Mac2)";
  if (missing & SM_FEATURE_SIMD_PERMUTE)
    return "SIMD-group permute functions (simd_shuffle*, simd_broadcast*: GPU families Apple6 "
           "and later, Mac2)";
  if (missing & SM_FEATURE_SIMDGROUP_MATRIX)
    return "SIMD-group matrices (simdgroup_matrix, simdgroup_load/store/multiply: GPU families "
           "Apple7 and later)";
  return NULL;
}

void sm__api_misuse_abort(const char *cls, const char *msg) {
  if (g_debug_layer)
    sm__fatal("-[%s]: failed assertion `%s' (Metal API validation, MTL_DEBUG_LAYER=1)", cls, msg);
}

void sm__lenient(unsigned rule, const char *what) {
  atomic_fetch_add(&g_lenient_uses, 1);
  unsigned bit = 1u << (rule & 31u);
  if (!(atomic_fetch_or(&g_warned, bit) & bit))
    fprintf(stderr,
            "softmetal: warning: %s; Metal's API validation (MTL_DEBUG_LAYER=1) reports "
            "this, a Mac without it goes on as softmetal does now (warned once)\n",
            what);
}

long sm__lenient_uses(void) { return atomic_load(&g_lenient_uses); }

SM_EXPORT const char *softmetal_persona(void) { return g_persona->env_name; }
