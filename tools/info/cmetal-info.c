/* SPDX-License-Identifier: MIT */
/* cmetal-info: what this build of cmetal is and which devices it sees.
 *   cmetal-info          a report for people
 *   cmetal-info --json   the same as one JSON object */
#include <cmetal/cmetal.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct device_report {
    cm_device_type type;
    bool present;
    char error[512]; /* why it could not be opened */
    cm_device_info info;
    bool storage[4]; /* indexed by cm_storage_mode */
} device_report;

static void probe(cm_device_type type, uint32_t index, device_report *r) {
    memset(r, 0, sizeof *r);
    r->type = type;
    cm_device *d = NULL;
    if (cm_device_open(type, index, &d) != CM_OK) {
        snprintf(r->error, sizeof r->error, "%s", cm_last_error());
        return;
    }
    r->present = cm_device_get_info(d, &r->info) == CM_OK;
    for (int m = CM_STORAGE_SHARED; m <= CM_STORAGE_PRIVATE; ++m) {
        cm_buffer *b = NULL;
        r->storage[m] =
            cm_buffer_create(d, &(cm_buffer_desc){.size = 64, .storage = (cm_storage_mode)m}, &b) ==
            CM_OK;
        cm_buffer_release(b);
    }
    cm_device_release(d);
}

static const char *storage_names[4] = {"default", "shared", "managed", "private"};

static void json_string(const char *s) {
    putchar('"');
    for (; *s; ++s) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

/* The CPU device's max_buffer_length is PTRDIFF_MAX: no limit of its own
 * (cmetal/device.h); what bounds a buffer there is the host's memory. */
static bool unlimited(const cm_device_info *d) {
    return d->type == CM_DEVICE_CPU && d->max_buffer_length >= (uint64_t)PTRDIFF_MAX;
}

/* The host's physical memory in bytes, 0 when unknown. */
static unsigned long long host_memory(void) {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (unsigned long long)pages * (unsigned long long)page : 0;
}

static void print_json(const cm_build_info *b, const device_report *r, int n) {
    printf("{\"version\": ");
    json_string(b->version);
    printf(", \"build\": {\"objc_runtime\": ");
    json_string(b->objc_runtime);
    printf(", \"metal_backend\": %s, \"sanitizers\": %s, \"compiler\": ",
           b->metal_backend ? "true" : "false", b->sanitizers ? "true" : "false");
    json_string(b->compiler);
    printf("}, \"devices\": [");
    for (int i = 0; i < n; ++i) {
        printf(i ? ", {" : "{");
        printf("\"type\": ");
        json_string(cm_device_type_name(r[i].type));
        printf(", \"present\": %s", r[i].present ? "true" : "false");
        if (!r[i].present) {
            printf(", \"error\": ");
            json_string(r[i].error);
            printf("}");
            continue;
        }
        const cm_device_info *d = &r[i].info;
        printf(", \"name\": ");
        json_string(d->name);
        /* max_buffer_length: null where the device has no limit of its own */
        char max_buffer[32];
        snprintf(max_buffer, sizeof max_buffer, "%llu", (unsigned long long)d->max_buffer_length);
        printf(", \"software\": %s, \"unified_memory\": %s, \"registry_id\": %llu"
               ", \"max_buffer_length\": %s, \"recommended_working_set\": %llu"
               ", \"max_threads_per_threadgroup\": [%llu, %llu, %llu], \"gpu_families\": %u"
               ", \"storage_modes\": [",
               d->software ? "true" : "false", d->unified_memory ? "true" : "false",
               (unsigned long long)d->registry_id, unlimited(d) ? "null" : max_buffer,
               (unsigned long long)d->recommended_working_set,
               (unsigned long long)d->max_threads_per_threadgroup[0],
               (unsigned long long)d->max_threads_per_threadgroup[1],
               (unsigned long long)d->max_threads_per_threadgroup[2], d->gpu_families);
        bool first = true;
        for (int m = 1; m < 4; ++m)
            if (r[i].storage[m]) {
                printf(first ? "\"%s\"" : ", \"%s\"", storage_names[m]);
                first = false;
            }
        printf("]}");
    }
    printf("]}\n");
}

static void print_text(const cm_build_info *b, const device_report *r, int n) {
    printf("cmetal %s\n", b->version);
    printf("  build: objc runtime %s, Metal backend %s, sanitizers %s, %s\n", b->objc_runtime,
           b->metal_backend ? "yes" : "no", b->sanitizers ? "on" : "off", b->compiler);
    for (int i = 0; i < n; ++i) {
        printf("\n%s device:\n", cm_device_type_name(r[i].type));
        if (!r[i].present) {
            printf("  not available: %s\n", r[i].error);
            continue;
        }
        const cm_device_info *d = &r[i].info;
        printf("  name:                        %s%s\n", d->name,
               d->software && d->type == CM_DEVICE_METAL
                   ? " (software Metal: timings and limits are not Apple hardware's)"
                   : "");
        printf("  unified memory:              %s\n", d->unified_memory ? "yes" : "no");
        if (d->type == CM_DEVICE_METAL) {
            printf("  registry id:                 %llu\n", (unsigned long long)d->registry_id);
            printf("  recommended working set:     %llu bytes\n",
                   (unsigned long long)d->recommended_working_set);
            printf("  max threads per threadgroup: %llu x %llu x %llu\n",
                   (unsigned long long)d->max_threads_per_threadgroup[0],
                   (unsigned long long)d->max_threads_per_threadgroup[1],
                   (unsigned long long)d->max_threads_per_threadgroup[2]);
        }
        if (d->type == CM_DEVICE_METAL) {
            static const char *names[] = {"Apple7", "Apple8", "Apple9", "Mac2", "Metal3"};
            printf("  GPU families:               ");
            for (int f = 0; f < 5; ++f)
                if (d->gpu_families & (1u << f))
                    printf(" %s", names[f]);
            printf("\n");
        }
        if (unlimited(d))
            printf("  max buffer length:           no limit of its own (host memory: %llu bytes)\n",
                   host_memory());
        else
            printf("  max buffer length:           %llu bytes\n",
                   (unsigned long long)d->max_buffer_length);
        printf("  storage modes:              ");
        for (int m = 1; m < 4; ++m)
            if (r[i].storage[m])
                printf(" %s", storage_names[m]);
        printf("\n");
    }
}

int main(int argc, char **argv) {
    bool json = false;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else {
            fprintf(stderr, "cmetal-info: unknown argument '%s'\nusage: cmetal-info [--json]\n",
                    argv[i]);
            return 2;
        }
    }
    cm_build_info build;
    cm_get_build_info(&build);
    device_report reports[1 + 8];
    int n = 0;
    probe(CM_DEVICE_CPU, 0, &reports[n++]);
    uint32_t metal = 0;
    cm_device_count(CM_DEVICE_METAL, &metal);
    if (metal == 0)
        probe(CM_DEVICE_METAL, 0, &reports[n++]); /* records why there is none */
    for (uint32_t i = 0; i < metal && n < 9; ++i)
        probe(CM_DEVICE_METAL, i, &reports[n++]);
    if (json)
        print_json(&build, reports, n);
    else
        print_text(&build, reports, n);
    return 0;
}
