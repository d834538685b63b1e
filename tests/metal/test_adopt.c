/* SPDX-License-Identifier: MIT */
/* The program's own Metal objects in cmetal (cmetal/metal.h): a device, a
 * queue and a shared event made by the test itself through Objective-C
 * sends (the runtime's bridge), cmetal's ops run on them, cmetal's work
 * waiting for the program's event, ownership (retained, released once) and
 * objects of the wrong class refused. */
#include <cmetal/cmetal.h>

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "softmetal_hooks.h"

#include "objc/bridge.h"

/* The program's own MTLDevice (+1), made as a Metal program makes it. */
static cm__id own_device(void) {
    cr_assert_eq(cm__metal_load(), CM_OK, "%s", cm_last_error());
    cm__id dev = cm__metal_create_system_default_device();
    cr_assert_not_null(dev, "MTLCreateSystemDefaultDevice");
    return dev;
}

static cm_tensor *vec(cm_device *d, int64_t n) {
    cm_tensor *t = NULL;
    CHECK(cm_tensor_create(d, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = &n}, &t));
    return t;
}

static atomic_bool signalled;

static void *signal_later(void *event) {
    nanosleep(&(struct timespec){0, 150 * 1000 * 1000}, NULL);
    atomic_store(&signalled, true);
    void *pool = cm__objc_pool_push();
    cm__msg_setSignaledValue((cm__id)event, 3);
    cm__objc_pool_pop(pool);
    return NULL;
}

Test(adopt, cmetal_runs_on_the_programs_device_and_queue_and_waits_for_its_event) {
    void *pool = cm__objc_pool_push();
    cm__id dev = own_device();
    cm__id queue = cm__msg_newCommandQueue(dev);
    cm__id event = cm__msg_newSharedEvent(dev);
    cr_assert(queue != NULL && event != NULL);
    const bool sm = sm_present();
    const long queue_refs = sm ? (long)cm__msg_retainCount(queue) : 0;
    const long event_refs = sm ? (long)cm__msg_retainCount(event) : 0;

    cm_device *d = NULL;
    CHECK(cm_device_wrap_metal(dev, &d));
    void *native = NULL;
    CHECK(cm_device_get_metal_device(d, &native));
    cr_assert_eq(native, (void *)dev, "the device is the program's");
    cm_stream *s = NULL;
    CHECK(cm_stream_wrap_metal(d, queue, &s));
    CHECK(cm_stream_get_metal_queue(s, &native));
    cr_assert_eq(native, (void *)queue, "the stream commits to the program's queue");
    cm_fence *f = NULL;
    CHECK(cm_fence_wrap_metal(d, event, 3, &f));
    cm_fence_info fi;
    CHECK(cm_fence_get_info(f, &fi));
    cr_assert(fi.shared_event == (void *)event && fi.value == 3 && !fi.signaled);
    EXPECT_FAIL(cm_fence_wait(f, 1000000), CM_ERR_DEVICE, "timeout_ns");

    /* Ops on the program's queue, the second one after the program's event. */
    cm_tensor *t = vec(d, 1000);
    const float one = 1, two = 2;
    CHECK(cm_fill(t, CM_FLOAT32, &one, s));
    CHECK(cm_stream_wait(s, f));
    CHECK(cm_fill(t, CM_FLOAT32, &two, s));
    CHECK(cm_stream_flush(s));
    atomic_store(&signalled, false);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, signal_later, event), 0);
    CHECK(cm_stream_synchronize(s));
    cr_assert(atomic_load(&signalled), "the stream's work finished before the event signalled");
    pthread_join(th, NULL);
    float got = 0;
    CHECK(cm_tensor_get_element(t, &(int64_t){999}, CM_FLOAT32, &got));
    cr_assert_eq(got, 2.0f);
    CHECK(cm_fence_wait(f, UINT64_MAX));
    cm_tensor_release(t);

    /* The device's own default stream works too. */
    cm_tensor *u = vec(d, 16);
    CHECK(cm_fill(u, CM_FLOAT32, &two, NULL));
    CHECK(cm_tensor_get_element(u, &(int64_t){15}, CM_FLOAT32, &got));
    cr_assert_eq(got, 2.0f);
    cm_tensor_release(u);

    cm_fence_release(f);
    cm_stream_release(s);
    cm_device_release(d);
    if (sm) {
        sm_quiesce();
        cr_assert_eq((long)cm__msg_retainCount(queue), queue_refs, "the queue released once");
        cr_assert_eq((long)cm__msg_retainCount(event), event_refs, "the event released once");
    }
    cm__objc_release(event);
    cm__objc_release(queue);
    cm__objc_release(dev);
    cm__objc_pool_pop(pool);
}

Test(adopt, objects_of_the_wrong_class_are_refused) {
    void *pool = cm__objc_pool_push();
    cm__id dev = own_device();
    cm__id queue = cm__msg_newCommandQueue(dev);
    cm__id event = cm__msg_newSharedEvent(dev);
    cm_device *d = NULL;
    EXPECT_FAIL(cm_device_wrap_metal(queue, &d), CM_ERR_INVALID_ARGUMENT,
                "does not respond to newCommandQueue: not an id<MTLDevice>");
    cr_assert_null(d);
    EXPECT_FAIL(cm_device_wrap_metal(NULL, &d), CM_ERR_INVALID_ARGUMENT, "mtl_device = NULL");
    CHECK(cm_device_wrap_metal(dev, &d));
    cm_stream *s = NULL;
    EXPECT_FAIL(cm_stream_wrap_metal(d, dev, &s), CM_ERR_INVALID_ARGUMENT, "queue = 0x");
    cr_assert(strstr(cm_last_error(), "does not respond to commandBuffer") != NULL, "%s",
              cm_last_error());
    cr_assert_null(s);
    cm_fence *f = NULL;
    EXPECT_FAIL(cm_fence_wrap_metal(d, queue, 1, &f), CM_ERR_INVALID_ARGUMENT,
                "does not respond to signaledValue: not an id<MTLSharedEvent>");
    cr_assert_null(f);
    cm_device *cpu = NULL;
    CHECK(cm_device_open(CM_DEVICE_CPU, 0, &cpu));
    EXPECT_FAIL(cm_stream_wrap_metal(cpu, queue, &s), CM_ERR_UNSUPPORTED, "not Metal");
    EXPECT_FAIL(cm_fence_wrap_metal(cpu, event, 1, &f), CM_ERR_UNSUPPORTED, "not Metal");
    cm_device_release(d);
    cm__objc_release(event);
    cm__objc_release(queue);
    cm__objc_release(dev);
    cm__objc_pool_pop(pool);
}

Test(adopt, a_queue_or_event_of_another_device_is_refused) {
    setenv("SOFTMETAL_DEVICE_COUNT", "2", 1);
    cm_device *a = NULL, *b = NULL;
    CHECK(cm_device_open(CM_DEVICE_METAL, 0, &a));
    uint32_t n = 0;
    CHECK(cm_device_count(CM_DEVICE_METAL, &n));
    if (n < 2) {
        cm_device_release(a);
        cr_skip_test("one Metal device: nothing to mix");
    }
    CHECK(cm_device_open(CM_DEVICE_METAL, 1, &b));
    cm_stream *sb = NULL;
    CHECK(cm_stream_create(b, &sb));
    void *qb = NULL;
    CHECK(cm_stream_get_metal_queue(sb, &qb));
    cm_stream *s = NULL;
    EXPECT_FAIL(cm_stream_wrap_metal(a, qb, &s), CM_ERR_INVALID_ARGUMENT,
                "queue belongs to the MTLDevice");
    cm_fence *fb = NULL;
    CHECK(cm_stream_signal(sb, &fb));
    cm_fence_info info;
    CHECK(cm_fence_get_info(fb, &info));
    cm_fence *f = NULL;
    EXPECT_FAIL(cm_fence_wrap_metal(a, info.shared_event, 1, &f), CM_ERR_INVALID_ARGUMENT,
                "shared_event belongs to the MTLDevice");
    cm_fence_release(fb);
    cm_stream_release(sb);
    cm_device_release(b);
    cm_device_release(a);
}

/* The label of a Metal object, "" when it has none. */
static void label_of(cm__id obj, char *buf, size_t cap) {
    void *pool = cm__objc_pool_push();
    cm__ns_string_copy_utf8(cm__msg_label(obj), buf, cap);
    cm__objc_pool_pop(pool);
}

Test(adopt, cmetal_labels_its_own_queues_and_leaves_the_programs) {
    cm_device *d = NULL;
    CHECK(cm_device_open(CM_DEVICE_METAL, 0, &d));
    cm_stream *def = NULL, *s = NULL;
    CHECK(cm_device_get_stream(d, &def));
    CHECK(cm_stream_create(d, &s));
    void *q = NULL;
    char text[128];
    CHECK(cm_stream_get_metal_queue(def, &q));
    label_of(q, text, sizeof text);
    cr_assert_str_eq(text, "cmetal default stream");
    CHECK(cm_stream_get_metal_queue(s, &q));
    label_of(q, text, sizeof text);
    cr_assert_str_eq(text, "cmetal stream");
    void *dev = NULL;
    CHECK(cm_device_get_metal_device(d, &dev));
    cm__id own = cm__msg_newCommandQueue(dev);
    cm_stream *adopted = NULL;
    CHECK(cm_stream_wrap_metal(d, own, &adopted));
    label_of(own, text, sizeof text);
    cr_assert_str_eq(text, "", "the program's queue keeps its own label");
    cm_stream_release(adopted);
    cm__objc_release(own);
    cm_stream_release(s);
    cm_device_release(d);
}
