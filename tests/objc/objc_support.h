/* SPDX-License-Identifier: MIT */
/* Test support for the bridge: a tiny Foundation and Metal made from C on
 * GNU libobjc, built as a shared library that is also the "Metal framework"
 * (CMETAL_METAL_FRAMEWORK) and, for the Apple-dispatch tests, the runtime
 * (it adds objc_msgSend / objc_msgSend_stret over objc_msg_lookup).
 *
 * Classes (all made by cmtest_objc_setup, once per process):
 *   CMTestObject  root class: counts its retains, autoreleases into the pool
 *                 below, and implements the test methods and the Metal
 *                 selectors the tests send (see objc_support.c);
 *   NSString, NSError, NSArray  minimal subclasses.
 * Its header has no objc types: objects are void *. */
#ifndef CMETAL_TESTS_OBJC_SUPPORT_H
#define CMETAL_TESTS_OBJC_SUPPORT_H

#include <stddef.h>
#include <stdint.h>

/* Every object's layout (ivars in this order, all 8 bytes). */
#define CMTEST_MAX_HANDLERS 4
struct cmtest_size {
    unsigned long width, height, depth;
};
struct cmtest_object {
    void *isa;
    long extra_refs;   /* retainCount - 1 */
    void *pointer;     /* contents, string bytes */
    long owns_pointer; /* free(pointer) at dealloc */
    unsigned long length;
    void *deallocator;                   /* copied block, invoked at dealloc */
    void *object;                        /* NSArray's element, a held object */
    long code;                           /* NSError code, last NSInteger argument */
    void *handlers[CMTEST_MAX_HANDLERS]; /* copied completion handlers */
    long handler_count;
    struct cmtest_size size_a, size_b; /* last dispatch arguments */
    unsigned long range_location, range_length;
    unsigned long byte_value;
    uint64_t u64;
};

void cmtest_objc_setup(void);

/* Counters. */
long cmtest_live_objects(void);
long cmtest_pool_depth(void);
long cmtest_pool_pushes(void);
long cmtest_pool_pops(void);
/* Calls of the shim's objc_msgSend and objc_msgSend_stret. */
extern long cmtest_msgsend_calls, cmtest_stret_calls;
/* Name of the last selector that no class implemented ("" if none). */
const char *cmtest_last_forwarded(void);

/* +1 objects. */
void *cmtest_new_object(void);
void *cmtest_new_error(const char *description, const char *domain, long code);

/* MTLCreateSystemDefaultDevice / MTLCopyAllDevices behaviour:
 * 0 default device, 1 none by default but one in MTLCopyAllDevices, 2 none. */
void cmtest_set_device_mode(int mode);

/* The blocks runtime, declared here (Block.h is not needed). */
void *_Block_copy(const void *block);
void _Block_release(const void *block);

#endif
