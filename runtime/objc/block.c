/* SPDX-License-Identifier: MIT */
/* Blocks built in C, by the clang Block ABI:
 *   literal     { isa, flags, reserved, invoke, descriptor, captures... }
 *   descriptor  { reserved, size, [copy, dispose if HAS_COPY_DISPOSE],
 *                 [signature, layout if HAS_SIGNATURE] }
 * (layout is NULL: we set no extended-layout flag, as clang emits it.)
 * _Block_copy of a stack-style literal mallocs a copy of `size` bytes and
 * calls copy(dst, src); the last _Block_release of that copy calls
 * dispose(copy). Our captures are fn, context and a shared state whose
 * count has one reference for the literal we built and one per live copy;
 * dispose(context) runs when it reaches zero. */
#include "objc/bridge.h"

enum {
    CM__BLOCK_HAS_COPY_DISPOSE = 1 << 25,
    CM__BLOCK_IS_GLOBAL = 1 << 28,
    CM__BLOCK_HAS_SIGNATURE = 1 << 30,
};

struct cm__block_state {
    cm__refcount refs;
    cm__dispose_fn dispose;
    void *context;
};

typedef struct cm__block_descriptor_helpers {
    unsigned long reserved;
    unsigned long size;
    void (*copy)(void *dst, const void *src);
    void (*dispose)(const void *block);
    const char *signature;
    const char *layout;
} cm__block_descriptor_helpers;

typedef struct cm__block_descriptor_plain {
    unsigned long reserved;
    unsigned long size;
    const char *signature;
    const char *layout;
} cm__block_descriptor_plain;

/* Objective-C type encodings of the block types (block pointer "@?" first). */
#define CM__DEALLOCATOR_SIGNATURE "v24@?0^v8Q16"
#define CM__COMPLETED_SIGNATURE "v16@?0@8"

static void cm__block_copy_helper(void *dst, const void *src) {
    (void)dst; /* dst holds the same state pointer as src */
    cm__ref_retain(&((const cm__block *)src)->state->refs);
}

static void cm__block_state_release(struct cm__block_state *state) {
    if (cm__ref_release(&state->refs)) {
        if (state->dispose != NULL)
            state->dispose(state->context);
        cm__free(state);
    }
}

static void cm__block_dispose_helper(const void *block) {
    cm__block_state_release(((const cm__block *)block)->state);
}

/* Invocations run inside a pool: Metal calls them on its own threads. */
static void cm__block_invoke_deallocator(cm__block *block, void *pointer, cm__uint length) {
    void *pool = cm__objc_pool_push();
    ((cm__deallocator_fn)block->fn)(block->context, pointer, length);
    cm__objc_pool_pop(pool);
}

static void cm__block_invoke_completed(cm__block *block, cm__id command_buffer) {
    void *pool = cm__objc_pool_push();
    ((cm__completed_fn)block->fn)(block->context, command_buffer);
    cm__objc_pool_pop(pool);
}

static const cm__block_descriptor_helpers cm__deallocator_descriptor = {0,
                                                                        sizeof(cm__block),
                                                                        cm__block_copy_helper,
                                                                        cm__block_dispose_helper,
                                                                        CM__DEALLOCATOR_SIGNATURE,
                                                                        NULL};
static const cm__block_descriptor_helpers cm__completed_descriptor = {0,
                                                                      sizeof(cm__block),
                                                                      cm__block_copy_helper,
                                                                      cm__block_dispose_helper,
                                                                      CM__COMPLETED_SIGNATURE,
                                                                      NULL};
static const cm__block_descriptor_plain cm__global_deallocator_descriptor = {
    0, sizeof(cm__block), CM__DEALLOCATOR_SIGNATURE, NULL};
static const cm__block_descriptor_plain cm__global_completed_descriptor = {
    0, sizeof(cm__block), CM__COMPLETED_SIGNATURE, NULL};

static cm_status cm__block_require_runtime(const char *func, void *isa) {
    if (isa == NULL)
        return cm__fail_as(func, CM_ERR_UNSUPPORTED,
                           "no blocks runtime (_NSConcreteStackBlock and "
                           "_NSConcreteGlobalBlock not found; on Linux install "
                           "libBlocksRuntime.so.0)");
    return CM_OK;
}

static cm_status cm__block_init_stack(const char *func, cm__block *block, cm__fnptr invoke,
                                      cm__fnptr fn, void *context, cm__dispose_fn dispose,
                                      const cm__block_descriptor_helpers *desc) {
    if (block == NULL || fn == NULL)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT, "%s = NULL must not be NULL",
                           block == NULL ? "block" : "fn");
    CM__TRY(cm__block_require_runtime(func, cm__objc_rt.stack_block_isa));
    struct cm__block_state *state = CM__NEW(struct cm__block_state);
    if (state == NULL)
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY,
                           "cannot allocate %zu bytes for a block's state", sizeof *state);
    cm__ref_init(&state->refs);
    state->dispose = dispose;
    state->context = context;
    *block = (cm__block){
        .isa = cm__objc_rt.stack_block_isa,
        .flags = CM__BLOCK_HAS_COPY_DISPOSE | CM__BLOCK_HAS_SIGNATURE,
        .invoke = invoke,
        .descriptor = desc,
        .fn = fn,
        .context = context,
        .state = state,
    };
    return CM_OK;
}

static cm_status cm__block_init_global(const char *func, cm__block *block, cm__fnptr invoke,
                                       cm__fnptr fn, void *context,
                                       const cm__block_descriptor_plain *desc) {
    if (block == NULL || fn == NULL)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT, "%s = NULL must not be NULL",
                           block == NULL ? "block" : "fn");
    CM__TRY(cm__block_require_runtime(func, cm__objc_rt.global_block_isa));
    *block = (cm__block){
        .isa = cm__objc_rt.global_block_isa,
        .flags = CM__BLOCK_IS_GLOBAL | CM__BLOCK_HAS_SIGNATURE,
        .invoke = invoke,
        .descriptor = desc,
        .fn = fn,
        .context = context,
        .state = NULL,
    };
    return CM_OK;
}

cm_status cm__block_init_deallocator(cm__block *block, cm__deallocator_fn fn, void *context,
                                     cm__dispose_fn dispose) {
    return cm__block_init_stack(__func__, block, (cm__fnptr)cm__block_invoke_deallocator,
                                (cm__fnptr)fn, context, dispose, &cm__deallocator_descriptor);
}

cm_status cm__block_init_completed(cm__block *block, cm__completed_fn fn, void *context,
                                   cm__dispose_fn dispose) {
    return cm__block_init_stack(__func__, block, (cm__fnptr)cm__block_invoke_completed,
                                (cm__fnptr)fn, context, dispose, &cm__completed_descriptor);
}

void cm__block_release(cm__block *block) {
    if (block == NULL || block->state == NULL)
        return;
    struct cm__block_state *state = block->state;
    block->state = NULL;
    cm__block_state_release(state);
}

cm_status cm__block_init_global_deallocator(cm__block *block, cm__deallocator_fn fn,
                                            void *context) {
    return cm__block_init_global(__func__, block, (cm__fnptr)cm__block_invoke_deallocator,
                                 (cm__fnptr)fn, context, &cm__global_deallocator_descriptor);
}

cm_status cm__block_init_global_completed(cm__block *block, cm__completed_fn fn, void *context) {
    return cm__block_init_global(__func__, block, (cm__fnptr)cm__block_invoke_completed,
                                 (cm__fnptr)fn, context, &cm__global_completed_descriptor);
}
