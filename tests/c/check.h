/* Assertions shared by the C tests. Each test is a program that gets a
 * fresh, empty scratch directory as argv[1] and exits 0 on success. */
#ifndef MQLITE_TEST_CHECK_H
#define MQLITE_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mqlite.h"

#define FAIL_AT(...)                                                    \
    do {                                                                \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                 \
        fprintf(stderr, __VA_ARGS__);                                   \
        fprintf(stderr, "\n");                                          \
        exit(1);                                                        \
    } while (0)

/* A condition that must hold. */
#define CHECK(cond)                                                     \
    do {                                                                \
        if (!(cond)) FAIL_AT("check failed: %s", #cond);                \
    } while (0)

/* A call that must return `want` (an mql_status). */
#define CHECK_STATUS(call, want)                                        \
    do {                                                                \
        mql_status got_ = (call);                                       \
        if (got_ != (want))                                             \
            FAIL_AT("%s returned %s, want %s (last error: %s)", #call,  \
                    mql_status_str(got_), mql_status_str(want),         \
                    got_ == MQL_OK ? "-" : mql_last_error());           \
    } while (0)

/* A call that must succeed. */
#define CHECK_OK(call) CHECK_STATUS(call, MQL_OK)

/* `path` = dir + "/" + name. */
static inline void join_path(char *path, size_t size, const char *dir, const char *name) {
    int n = snprintf(path, size, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= size) FAIL_AT("path too long: %s/%s", dir, name);
}

/* The scratch directory given by the test runner. */
static inline const char *scratch_dir(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
        exit(2);
    }
    return argv[1];
}

/* Whether `len` bytes at `p` equal the C string `s`. */
static inline int bytes_eq(const void *p, size_t len, const char *s) {
    return p != NULL && len == strlen(s) && memcmp(p, s, len) == 0;
}

/* Whether message `m`'s value equals the C string `s`. */
static inline int value_is(const mql_message *m, const char *s) {
    size_t len = 0;
    const void *v = mql_message_value(m, &len);
    return bytes_eq(v, len, s);
}

/* Whether message `m`'s key equals the C string `s`. */
static inline int key_is(const mql_message *m, const char *s) {
    size_t len = 0;
    const void *k = mql_message_key(m, &len);
    return bytes_eq(k, len, s);
}

#endif
