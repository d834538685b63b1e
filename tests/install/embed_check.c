/* SPDX-License-Identifier: MIT */
/* cmetal_embed_library() from the installed package: this directory's
 * CMakeLists.txt, embedded as bytes, must come back whole. */
#include <stdio.h>
#include <string.h>

extern const unsigned char cm_embedded[];
extern const size_t cm_embedded_size;

int main(void) {
    /* its first command, after the licence line; the bytes end in a 0 */
    static const char head[] = "\ncmake_minimum_required";
    if (cm_embedded[cm_embedded_size] != 0 ||
        strlen((const char *)cm_embedded) != cm_embedded_size ||
        strstr((const char *)cm_embedded, head) == NULL) {
        fprintf(stderr, "embedded bytes are not CMakeLists.txt (%zu bytes)\n", cm_embedded_size);
        return 1;
    }
    printf("cmetal_embed_library: %zu bytes embedded\n", cm_embedded_size);
    return 0;
}
