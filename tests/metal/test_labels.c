/* SPDX-License-Identifier: MIT */
/* Labels (the desc's label on the MTLBuffer, the queue and the pipeline,
 * a cached buffer never keeping a previous user's) and the device's
 * residency set (cmetal/memory.h, "Residency"): read back from the Metal
 * objects through the runtime's bridge, as a debugger would see them. */
#include <cmetal/cmetal.h>

#include <criterion/criterion.h>
#include <string.h>

#include "check.h"
#include "softmetal_hooks.h"

#include "objc/bridge.h"

static cm_device *metal(void) {
    cm_device *d = NULL;
    CHECK(cm_device_open(CM_DEVICE_METAL, 0, &d));
    return d;
}

/* The label of a Metal object, "" when it has none. */
static void label_of(cm__id obj, char *buf, size_t cap) {
    void *pool = cm__objc_pool_push();
    buf[0] = '\0';
    cm__id label = cm__msg_label(obj);
    if (label != NULL)
        cm__ns_string_copy_utf8(label, buf, cap);
    cm__objc_pool_pop(pool);
}

static cm__id native_of(cm_buffer *b) {
    cm_buffer_info info;
    CHECK(cm_buffer_get_info(b, &info));
    return info.native;
}

static cm_memory_info meminfo(cm_device *d) {
    cm_memory_info m;
    CHECK(cm_device_get_memory_info(d, &m));
    return m;
}

Test(labels, buffer_and_tensor_labels_are_the_mtlbuffers) {
    cm_device *d = metal();
    char text[128];
    cm_buffer *b = NULL;
    CHECK(cm_buffer_create(d, &(cm_buffer_desc){.size = 100, .label = "weights"}, &b));
    label_of(native_of(b), text, sizeof text);
    cr_assert_str_eq(text, "weights");
    cm_buffer_release(b);
    const int64_t n = 8;
    cm_tensor *t = NULL;
    CHECK(cm_tensor_create(
        d, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = &n, .label = "kv cache"},
        &t));
    cm_tensor_info ti;
    CHECK(cm_tensor_get_info(t, &ti));
    label_of(native_of(ti.buffer), text, sizeof text);
    cr_assert_str_eq(text, "kv cache");
    cm_tensor_release(t);
    cm_device_release(d);
}

Test(labels, a_cached_buffer_takes_the_new_label_or_none) {
    cm_device *d = metal();
    char text[128];
    cm_buffer *b = NULL;
    /* Released unseen (never handed out), so it goes to the cache. */
    CHECK(cm_buffer_create(d, &(cm_buffer_desc){.size = 4000, .label = "first"}, &b));
    cm_buffer_release(b);
    const uint64_t hits = meminfo(d).cache_hits;
    CHECK(cm_buffer_create(d, &(cm_buffer_desc){.size = 4000}, &b));
    cr_assert_eq(meminfo(d).cache_hits, hits + 1, "the second buffer came from the cache");
    label_of(native_of(b), text, sizeof text);
    cr_assert_str_eq(text, "", "a reused buffer does not keep the previous label");
    cm_buffer_release(b);

    CHECK(cm_buffer_create(d, &(cm_buffer_desc){.size = 9000, .label = "old"}, &b));
    cm_buffer_release(b);
    CHECK(cm_buffer_create(d, &(cm_buffer_desc){.size = 9000, .label = "new"}, &b));
    cr_assert_eq(meminfo(d).cache_hits, hits + 2);
    label_of(native_of(b), text, sizeof text);
    cr_assert_str_eq(text, "new");
    cm_buffer_release(b);
    cm_device_release(d);
}

Test(labels, a_label_that_is_not_utf8_is_refused_and_nothing_taken) {
    cm_device *d = metal();
    cm_buffer *b = NULL;
    const cm_memory_info before = meminfo(d);
    EXPECT_FAIL(cm_buffer_create(d, &(cm_buffer_desc){.size = 64, .label = "bad \xff"}, &b),
                CM_ERR_INVALID_ARGUMENT, "desc->label");
    cr_assert_null(b);
    const cm_memory_info after = meminfo(d);
    cr_assert_eq(after.active_bytes, before.active_bytes);
    cr_assert_eq(after.cache_misses + after.cache_hits, before.cache_misses + before.cache_hits);
    cm_stream *s = NULL;
    EXPECT_FAIL(cm_stream_create_with_desc(d, &(cm_stream_desc){.label = "\xc3"}, &s),
                CM_ERR_INVALID_ARGUMENT, "desc->label");
    cr_assert_null(s);
    cm_device_release(d);
}

Test(labels, stream_desc_labels_the_queue) {
    cm_device *d = metal();
    char text[128];
    cm_stream *s = NULL, *plain = NULL;
    CHECK(cm_stream_create_with_desc(d, &(cm_stream_desc){.label = "decoder"}, &s));
    CHECK(cm_stream_create_with_desc(d, NULL, &plain));
    void *q = NULL;
    CHECK(cm_stream_get_metal_queue(s, &q));
    label_of(q, text, sizeof text);
    cr_assert_str_eq(text, "decoder");
    CHECK(cm_stream_get_metal_queue(plain, &q));
    label_of(q, text, sizeof text);
    cr_assert_str_eq(text, "cmetal stream");
    cm_stream_release(plain);
    cm_stream_release(s);
    cm_device_release(d);
}

/* cmetal's own command buffers and encoders say what they run ("cmetal:
 * " and the function): read back as committed (softmetal keeps them). */
Test(labels, command_buffers_and_encoders_name_what_they_run) {
    cm_device *d = metal();
    const int64_t n = 64;
    const cm_tensor_desc desc = {.dtype = CM_FLOAT32, .ndim = 1, .shape = &n};
    cm_tensor *a = NULL, *b = NULL;
    CHECK(cm_tensor_create(d, &desc, &a));
    CHECK(cm_tensor_create(d, &desc, &b));
    CHECK(cm_device_synchronize(d));
    const double one = 1.0;
    CHECK(cm_fill(a, CM_FLOAT64, &one, NULL));
    CHECK(cm_binary(CM_BINARY_ADD, a, a, b, NULL));
    CHECK(cm_device_synchronize(d));
    size_t (*labels)(char *, size_t);
    void *sym = softmetal_hook("softmetal_last_commit_labels");
    memcpy(&labels, &sym, sizeof labels);
    char text[512];
    const size_t len = labels(text, sizeof text);
    cr_assert_lt(len, sizeof text);
    /* The command buffer was opened by the fill; its passes are the fill's
     * and the add's, in order. */
    cr_assert_str_eq(text, "cmetal: cm_fill\ncmetal: cm_fill\ncmetal: cm_binary\n",
                     "labels of the last commit: \"%s\"", text);
    cm_tensor_release(a);
    cm_tensor_release(b);
    cm_device_release(d);
}

static const char *source = "#include <metal_stdlib>\n"
                            "kernel void twice(device float *x [[buffer(0)]],\n"
                            "                  uint i [[thread_position_in_grid]]) {\n"
                            "    x[i] *= 2;\n"
                            "}\n";

Test(labels, kernel_desc_labels_the_pipeline_and_keys_the_cache) {
    cm_device *d = metal();
    char text[128];
    cm_library *lib = NULL;
    CHECK(cm_library_create(d, &(cm_library_desc){.source = source}, &lib));
    cm_kernel *a = NULL, *b = NULL, *plain = NULL;
    CHECK(cm_kernel_create(lib, &(cm_kernel_desc){.name = "twice", .label = "scale A"}, &a));
    CHECK(cm_kernel_create(lib, &(cm_kernel_desc){.name = "twice", .label = "scale B"}, &b));
    CHECK(cm_kernel_create(lib, &(cm_kernel_desc){.name = "twice"}, &plain));
    void *pa = NULL, *pb = NULL, *pp = NULL;
    CHECK(cm_kernel_get_metal_pipeline(a, &pa));
    CHECK(cm_kernel_get_metal_pipeline(b, &pb));
    CHECK(cm_kernel_get_metal_pipeline(plain, &pp));
    cr_assert(pa != pb && pa != pp, "each label has its own pipeline state");
    label_of(pa, text, sizeof text);
    cr_assert_str_eq(text, "scale A");
    label_of(pb, text, sizeof text);
    cr_assert_str_eq(text, "scale B");
    label_of(pp, text, sizeof text);
    cr_assert_str_eq(text, "");
    /* The labelled pipeline runs. */
    const int64_t n = 4;
    cm_tensor *x = NULL;
    CHECK(cm_tensor_create(d, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = &n}, &x));
    const float three = 3;
    CHECK(cm_fill(x, CM_FLOAT32, &three, NULL));
    const cm_kernel_arg args[] = {{.type = CM_ARG_OUTPUT, .index = 0, .tensor = x}};
    CHECK(cm_kernel_dispatch(
        a, NULL,
        &(cm_dispatch_desc){
            .args = args, .arg_count = 1, .grid = {4, 1, 1}, .threadgroup = {4, 1, 1}}));
    const void *p = NULL;
    CHECK(cm_tensor_host_read(x, CM_FLOAT32, &p));
    for (int i = 0; i < 4; ++i)
        cr_assert_eq(((const float *)p)[i], 6.0f);
    cm_tensor_release(x);
    cm_kernel_release(plain);
    cm_kernel_release(b);
    cm_kernel_release(a);
    cm_library_release(lib);
    cm_device_release(d);
}

/* ------------------------------------------------------------ residency */

/* Whether the device has residency sets as cmetal requires them. */
static bool has_residency(cm_device *d) {
    void *dev = NULL;
    CHECK(cm_device_get_metal_device(d, &dev));
    return cm__msg_respondsToSelector(dev, CM__SEL(newResidencySetWithDescriptor_error)) &&
           cm__msg_supportsFamily(dev, 1006 /* MTLGPUFamilyApple6 */);
}

static bool contains(void *set, cm__id mtl) {
    return cm__msg_containsAllocation(set, mtl);
}

static size_t set_count(void *set) {
    void *pool = cm__objc_pool_push();
    cm__id all = cm__msg_allAllocations(set);
    const size_t n = all != NULL ? (size_t)cm__msg_count(all) : 0;
    cm__objc_pool_pop(pool);
    return n;
}

Test(residency, buffers_are_in_the_set_until_released_or_evicted) {
    cm_device *d = metal();
    if (!has_residency(d)) {
        /* Nothing changes: no set, no wired limit. */
        void *set = (void *)1;
        EXPECT_FAIL(cm_device_get_metal_residency_set(d, &set), CM_ERR_UNSUPPORTED,
                    "no residency sets");
        cr_assert_null(set);
        const cm_memory_info m = meminfo(d);
        cr_assert(!m.residency_set && m.wired_limit == 0 && m.resident_bytes == 0);
        EXPECT_FAIL(cm_device_set_wired_limit(d, 1 << 20, NULL), CM_ERR_UNSUPPORTED,
                    "residency sets");
        cm_device_release(d);
        return;
    }
    void *set = NULL;
    CHECK(cm_device_get_metal_residency_set(d, &set));
    char text[128];
    label_of(set, text, sizeof text);
    cr_assert_str_eq(text, "cmetal allocations");
    cm_device_info info;
    CHECK(cm_device_get_info(d, &info));
    cm_memory_info m = meminfo(d);
    cr_assert(m.residency_set);
    cr_assert_eq(m.wired_limit, info.recommended_working_set);
    cr_assert_eq(m.resident_bytes, 0);
    cr_assert_eq(set_count(set), 0);

    /* Above 16 KiB: buffers of their own (smaller ones share heaps, whose
     * residency the test below checks). */
    cm_buffer *a = NULL, *b = NULL;
    CHECK(cm_buffer_create(d, &(cm_buffer_desc){.size = 20000}, &a));
    CHECK(cm_buffer_create(d, &(cm_buffer_desc){.size = 50000, .storage = CM_STORAGE_PRIVATE}, &b));
    m = meminfo(d);
    cr_assert_eq(m.resident_bytes, m.active_bytes, "every new MTLBuffer is resident");
    cr_assert_eq(set_count(set), 2);
    /* b goes to the cache and stays in the set; clearing the cache takes
     * it out. a was handed out (get_info), so it is released at once and
     * leaves the set. */
    cm__id mtl_a = cm__objc_retain(native_of(a));
    cm_buffer_release(b);
    m = meminfo(d);
    cr_assert_eq(set_count(set), 2, "a cached buffer stays resident");
    cr_assert_eq(m.resident_bytes, m.active_bytes + m.cached_bytes);
    cm_buffer_release(a);
    cr_assert(!contains(set, mtl_a), "a released buffer leaves the set");
    cm__objc_release(mtl_a);
    cr_assert_eq(set_count(set), 1);
    CHECK(cm_device_clear_cache(d));
    cr_assert_eq(set_count(set), 0, "an evicted buffer leaves the set");
    cr_assert_eq(meminfo(d).resident_bytes, 0);
    cm_device_release(d);
}

Test(residency, the_wired_limit_bounds_the_set) {
    cm_device *d = metal();
    if (!has_residency(d))
        cr_skip_test("the device has no residency sets (the test above checks nothing changes)");
    void *set = NULL;
    CHECK(cm_device_get_metal_residency_set(d, &set));
    uint64_t old = 0;
    CHECK(cm_device_set_wired_limit(d, 80000, &old));
    cr_assert_gt(old, 0);
    cm_buffer *b[3] = {NULL};
    for (int i = 0; i < 3; ++i)
        CHECK(cm_buffer_create(d, &(cm_buffer_desc){.size = 32768}, &b[i]));
    cm_memory_info m = meminfo(d);
    cr_assert_eq(m.wired_limit, 80000);
    cr_assert_eq(m.resident_bytes, 2 * 32768, "the third buffer stays out of the set");
    cr_assert_eq(set_count(set), 2);
    CHECK(cm_device_set_wired_limit(d, 40000, NULL));
    m = meminfo(d);
    cr_assert_eq(m.resident_bytes, 32768, "a lower limit takes buffers out until it fits");
    cr_assert_eq(set_count(set), 1);
    CHECK(cm_device_set_wired_limit(d, 0, NULL));
    cr_assert_eq(meminfo(d).resident_bytes, 0);
    cr_assert_eq(set_count(set), 0);
    for (int i = 0; i < 3; ++i)
        cm_buffer_release(b[i]);
    cm_device_release(d);
}

Test(residency, streams_attach_the_set_and_work_runs) {
    cm_device *d = metal();
    const bool resident = has_residency(d);
    cm_stream *s = NULL;
    CHECK(cm_stream_create(d, &s));
    /* An adopted queue: cmetal's command buffers use the set on it. */
    void *dev = NULL;
    CHECK(cm_device_get_metal_device(d, &dev));
    cm__id own = cm__msg_newCommandQueue(dev);
    cm_stream *adopted = NULL;
    CHECK(cm_stream_wrap_metal(d, own, &adopted));
    const int64_t n = 1024;
    cm_tensor *t = NULL;
    CHECK(cm_tensor_create(d, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = &n}, &t));
    const float v = 2;
    CHECK(cm_fill(t, CM_FLOAT32, &v, s));
    CHECK(cm_stream_synchronize(s));
    CHECK(cm_fill(t, CM_FLOAT32, &v, adopted));
    CHECK(cm_stream_synchronize(adopted));
    const void *p = NULL;
    CHECK(cm_tensor_host_read(t, CM_FLOAT32, &p));
    cr_assert_eq(((const float *)p)[3], 2.0f);
    /* 4 KiB: a small buffer, in a heap; the heap is what is resident. */
    const cm_memory_info m = meminfo(d);
    cr_assert_eq(m.resident_bytes, resident ? m.heap_bytes : 0u);
    cm_tensor_release(t);
    cm_stream_release(adopted);
    cm__objc_release(own);
    cm_stream_release(s);
    cm_device_release(d);
}

Test(residency, small_buffers_are_resident_through_their_heap) {
    cm_device *d = metal();
    if (!has_residency(d))
        cr_skip_test("the device has no residency sets");
    void *set = NULL;
    CHECK(cm_device_get_metal_residency_set(d, &set));
    cm_buffer *b[3] = {NULL};
    for (int i = 0; i < 3; ++i)
        CHECK(cm_buffer_create(d, &(cm_buffer_desc){.size = 1000}, &b[i]));
    cm_memory_info m = meminfo(d);
    cr_assert_eq(m.heaps, 1);
    cr_assert_eq(set_count(set), 1, "the heap is in the set, not its three buffers");
    cr_assert_eq(m.resident_bytes, m.heap_bytes);
    /* A wired limit below the heap takes it out. */
    CHECK(cm_device_set_wired_limit(d, 1000, NULL));
    cr_assert_eq(set_count(set), 0);
    cr_assert_eq(meminfo(d).resident_bytes, 0);
    for (int i = 0; i < 3; ++i)
        cm_buffer_release(b[i]);
    CHECK(cm_device_clear_cache(d));
    cr_assert_eq(meminfo(d).heaps, 0);
    cm_device_release(d);
}

/* MTLGPUFamilyApple1: a Mac whose heaps take shared storage. */
Test(heaps, shared_small_buffers_share_heaps_only_on_apple_gpus) {
    cm_device *d = metal();
    void *dev = NULL;
    CHECK(cm_device_get_metal_device(d, &dev));
    const bool apple = cm__msg_supportsFamily(dev, 1001);
    cm_buffer *s[2] = {NULL}, *p[2] = {NULL};
    for (int i = 0; i < 2; ++i) {
        CHECK(cm_buffer_create(d, &(cm_buffer_desc){.size = 512}, &s[i]));
        CHECK(cm_buffer_create(d, &(cm_buffer_desc){.size = 512, .storage = CM_STORAGE_PRIVATE},
                               &p[i]));
    }
    cm_memory_info m = meminfo(d);
    cr_assert_eq(m.heaps, apple ? 2u : 1u, "private heaps everywhere, shared ones on Apple GPUs");
    cr_assert_eq(m.allocations, apple ? 2u : 3u);
    cm_buffer *managed = NULL;
    CHECK(cm_buffer_create(d, &(cm_buffer_desc){.size = 512, .storage = CM_STORAGE_MANAGED},
                           &managed));
    cr_assert_eq(meminfo(d).heaps, m.heaps, "managed buffers never come from heaps");
    /* Shared ones work from the host as any other. */
    const uint32_t v = 0xabcd1234u;
    uint32_t back = 0;
    CHECK(cm_buffer_write(s[1], 508, &v, 4));
    CHECK(cm_buffer_read(s[1], 508, &back, 4));
    cr_assert_eq(back, v);
    cm_buffer_release(managed);
    for (int i = 0; i < 2; ++i) {
        cm_buffer_release(s[i]);
        cm_buffer_release(p[i]);
    }
    cm_device_release(d);
}
