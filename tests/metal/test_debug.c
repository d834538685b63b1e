/* SPDX-License-Identifier: MIT */
/* Debugging a Metal program: the GPU time of a stream's command buffers
 * (cm_stream_get_gpu_time) and GPU captures (cm_capture_begin/end). */
#include <cmetal/cmetal.h>

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

static cm_device *metal(void) {
    cm_device *d = NULL;
    CHECK(cm_device_open(CM_DEVICE_METAL, 0, &d));
    return d;
}

/* A fill of n floats on stream s, then a synchronize. */
static void fill(cm_device *d, cm_stream *s, int64_t n) {
    cm_tensor *t = NULL;
    CHECK(cm_tensor_create(d, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = &n}, &t));
    const float v = 3;
    CHECK(cm_fill(t, CM_FLOAT32, &v, s));
    CHECK(cm_stream_synchronize(s));
    cm_tensor_release(t);
}

Test(debug, gpu_time_is_positive_ordered_and_accumulates) {
    cm_device *d = metal();
    cm_stream *s = NULL;
    CHECK(cm_stream_create(d, &s));
    cm_stream_gpu_time t0, t1, t2;
    CHECK(cm_stream_get_gpu_time(s, &t0));
    cr_assert(t0.command_buffers == 0 && t0.seconds == 0 && t0.last_start == 0 && t0.last_end == 0,
              "a new stream has run nothing");

    fill(d, s, 1 << 20);
    CHECK(cm_stream_get_gpu_time(s, &t1));
    cr_assert_eq(t1.command_buffers, 1, "one command buffer: %llu",
                 (unsigned long long)t1.command_buffers);
    cr_assert_gt(t1.seconds, 0.0, "GPU time %g s", t1.seconds);
    cr_assert_lt(t1.seconds, 60.0, "GPU time %g s", t1.seconds);
    cr_assert_gt(t1.last_start, 0.0);
    cr_assert_leq(t1.last_start, t1.last_end, "start %.9f end %.9f", t1.last_start, t1.last_end);
    cr_assert_float_eq(t1.seconds, t1.last_end - t1.last_start, 1e-12);

    fill(d, s, 1 << 20);
    fill(d, s, 1 << 20);
    CHECK(cm_stream_get_gpu_time(s, &t2));
    cr_assert_eq(t2.command_buffers, 3);
    cr_assert_gt(t2.seconds, t1.seconds, "accumulates: %g then %g", t1.seconds, t2.seconds);
    cr_assert_leq(t2.last_start, t2.last_end);
    cr_assert_geq(t2.last_start, t1.last_start, "later command buffers start later");

    /* Another stream counts only its own. */
    cm_stream *def = NULL;
    CHECK(cm_device_get_stream(d, &def));
    cm_stream_gpu_time td;
    CHECK(cm_stream_get_gpu_time(def, &td));
    cr_assert_eq(td.command_buffers, 0);
    cm_stream_release(s);
    cm_device_release(d);
}

Test(debug, gpu_time_counts_every_command_buffer_of_a_sync) {
    cm_device *d = metal();
    cm_stream *s = NULL;
    CHECK(cm_stream_create(d, &s));
    int64_t n = 4096;
    cm_tensor *t = NULL;
    CHECK(cm_tensor_create(d, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = &n}, &t));
    const float v = 1;
    for (int i = 0; i < 5; ++i) {
        CHECK(cm_fill(t, CM_FLOAT32, &v, s));
        CHECK(cm_stream_flush(s)); /* one command buffer each */
    }
    CHECK(cm_stream_synchronize(s));
    uint64_t submitted = 0;
    CHECK(cm_stream_get_submissions(s, &submitted));
    cm_stream_gpu_time g;
    CHECK(cm_stream_get_gpu_time(s, &g));
    cr_assert_eq(g.command_buffers, submitted, "%llu counted of %llu committed",
                 (unsigned long long)g.command_buffers, (unsigned long long)submitted);
    cr_assert_geq(submitted, 5);
    cm_tensor_release(t);
    cm_stream_release(s);
    cm_device_release(d);
}

Test(debug, gpu_time_on_the_cpu_is_zero_and_arguments_are_checked) {
    cm_device *cpu = NULL;
    CHECK(cm_device_open(CM_DEVICE_CPU, 0, &cpu));
    cm_stream *s = NULL;
    CHECK(cm_device_get_stream(cpu, &s));
    fill(cpu, s, 1000);
    cm_stream_gpu_time g = {.command_buffers = 7, .seconds = 1};
    CHECK(cm_stream_get_gpu_time(s, &g));
    cr_assert(g.command_buffers == 0 && g.seconds == 0);
    EXPECT_FAIL(cm_stream_get_gpu_time(NULL, &g), CM_ERR_INVALID_ARGUMENT, "stream");
    EXPECT_FAIL(cm_stream_get_gpu_time(s, NULL), CM_ERR_INVALID_ARGUMENT, "out");
    cm_device_release(cpu);
}

/* Metal writes a trace document only under MTL_CAPTURE_ENABLED=1 (softmetal
 * never: it has no GPU trace); otherwise the error says so. */
static void capture_once(const cm_capture_desc *desc, cm_device *d, cm_stream *s) {
    const cm_status st = cm_capture_begin(desc);
    if (st == CM_OK) { /* a Mac with capture enabled */
        fill(d, s, 1000);
        CHECK(cm_capture_end());
        struct stat info;
        cr_assert_eq(stat(desc->path, &info), 0, "%s was written", desc->path);
        return;
    }
    cr_assert_eq(st, CM_ERR_UNSUPPORTED, "%s: %s", cm_status_name(st), cm_last_error());
    cr_assert(strstr(cm_last_error(), "MTL_CAPTURE_ENABLED") != NULL, "%s", cm_last_error());
    cr_assert(strstr(cm_last_error(), desc->path) != NULL, "%s", cm_last_error());
    EXPECT_FAIL(cm_capture_end(), CM_ERR_INVALID_ARGUMENT, "no capture");
}

Test(debug, a_capture_of_a_device_or_stream_is_begun_or_refused_naming_the_setting) {
    cm_device *d = metal();
    cm_stream *s = NULL;
    CHECK(cm_stream_create(d, &s));
    char path[64];
    snprintf(path, sizeof path, "cm_capture_%ld_device.gputrace", (long)getpid());
    capture_once(&(cm_capture_desc){.device = d, .path = path}, d, s);
    snprintf(path, sizeof path, "cm_capture_%ld_stream.gputrace", (long)getpid());
    capture_once(&(cm_capture_desc){.stream = s, .path = path}, d, s);
    cm_stream_release(s);
    cm_device_release(d);
}

Test(debug, capture_arguments_are_checked) {
    cm_device *d = metal();
    cm_stream *s = NULL;
    CHECK(cm_device_get_stream(d, &s));
    EXPECT_FAIL(cm_capture_begin(NULL), CM_ERR_INVALID_ARGUMENT, "desc");
    EXPECT_FAIL(cm_capture_begin(&(cm_capture_desc){.path = "a.gputrace"}), CM_ERR_INVALID_ARGUMENT,
                "exactly one");
    EXPECT_FAIL(
        cm_capture_begin(&(cm_capture_desc){.device = d, .stream = s, .path = "a.gputrace"}),
        CM_ERR_INVALID_ARGUMENT, "exactly one");
    EXPECT_FAIL(cm_capture_begin(&(cm_capture_desc){.device = d}), CM_ERR_INVALID_ARGUMENT,
                "desc->path = NULL");
    EXPECT_FAIL(cm_capture_begin(&(cm_capture_desc){.device = d, .path = ""}),
                CM_ERR_INVALID_ARGUMENT, "desc->path");
    EXPECT_FAIL(cm_capture_begin(&(cm_capture_desc){.device = d, .path = "trace.txt"}),
                CM_ERR_INVALID_ARGUMENT, "\"trace.txt\" must end in \".gputrace\"");
    cm_device *cpu = NULL;
    CHECK(cm_device_open(CM_DEVICE_CPU, 0, &cpu));
    EXPECT_FAIL(cm_capture_begin(&(cm_capture_desc){.device = cpu, .path = "a.gputrace"}),
                CM_ERR_UNSUPPORTED, "not Metal");
    EXPECT_FAIL(cm_capture_end(), CM_ERR_INVALID_ARGUMENT, "no capture");
    cm_device_release(cpu);
    cm_device_release(d);
}
