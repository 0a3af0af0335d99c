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

/* A call that must fail with `want`, and whose error text mentions `text`. */
#define CHECK_FAIL(call, want, text)                                         \
    do {                                                                     \
        CHECK_STATUS(call, want);                                            \
        CHECK(mql_last_error_code() == (want));                              \
        if (strstr(mql_last_error(), (text)) == NULL)                        \
            FAIL_AT("error text \"%s\" lacks \"%s\"", mql_last_error(), (text)); \
    } while (0)

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

/* Opens (creating) the data directory dir/name with prefault and the
 * retention thread off. */
/* The data directory `path` opened in shared mode (other processes may have
 * it open), without prefaulting or a retention thread. */
static inline mql_broker *open_shared(const char *path) {
    mql_config *cfg;
    CHECK_OK(mql_config_new(&cfg));
    CHECK_OK(mql_config_set_prefault(cfg, false));
    CHECK_OK(mql_config_set_retention_check_interval_ms(cfg, 0));
    CHECK_OK(mql_config_set_shared(cfg, true));
    mql_broker *mq = NULL;
    CHECK_OK(mql_open(path, cfg, &mq));
    mql_config_free(cfg);
    return mq;
}

/* mql_open of `path` in exclusive mode by name (whatever the default), for
 * the tests of that mode's lock, files and recovery; returns its status. */
static inline mql_status open_exclusive(const char *path, mql_broker **out) {
    mql_config *cfg;
    CHECK_OK(mql_config_new(&cfg));
    CHECK_OK(mql_config_set_prefault(cfg, false));
    CHECK_OK(mql_config_set_retention_check_interval_ms(cfg, 0));
    CHECK_OK(mql_config_set_mode(cfg, "exclusive"));
    mql_status status = mql_open(path, cfg, out);
    mql_config_free(cfg);
    return status;
}

static inline mql_broker *open_data(const char *dir, const char *name) {
    char path[4096];
    join_path(path, sizeof path, dir, name);
    mql_config *cfg;
    CHECK_OK(mql_config_new(&cfg));
    CHECK_OK(mql_config_set_prefault(cfg, false));
    CHECK_OK(mql_config_set_retention_check_interval_ms(cfg, 0));
    mql_broker *mq;
    CHECK_OK(mql_open(path, cfg, &mq));
    mql_config_free(cfg);
    return mq;
}

/* Creates `topic` with `partitions` partitions of 1 MiB segments. */
static inline void make_topic(mql_broker *mq, const char *topic, uint32_t partitions) {
    mql_topic_config *tc;
    CHECK_OK(mql_topic_config_new(partitions, &tc));
    CHECK_OK(mql_topic_config_set_segment_bytes(tc, 1 << 20));
    CHECK_OK(mql_topic_create(mq, topic, tc));
    mql_topic_config_free(tc);
}

/* The offset the next record of topic/partition will get. */
static inline uint64_t end_of(mql_broker *mq, const char *topic, uint32_t partition) {
    uint64_t start, end;
    CHECK_OK(mql_topic_offsets(mq, topic, partition, &start, &end));
    return end;
}

/* The record at topic/partition/offset, read with a fresh consumer; free it
 * with mql_message_free. */
static inline mql_message *read_at(mql_broker *mq, const char *topic, uint32_t partition, uint64_t offset) {
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, NULL, NULL, &c));
    CHECK_OK(mql_assign(c, topic, partition));
    CHECK_OK(mql_seek(c, topic, partition, offset));
    mql_message *m = NULL;
    CHECK_OK(mql_poll(c, 1000, &m));
    CHECK(mql_message_partition(m) == partition && mql_message_offset(m) == offset);
    mql_consumer_free(c);
    return m;
}

/* Whether the record at topic/partition/offset has value `value`. */
static inline int value_at(mql_broker *mq, const char *topic, uint32_t partition, uint64_t offset,
                           const char *value) {
    mql_message *m = read_at(mq, topic, partition, offset);
    int ok = value_is(m, value);
    mql_message_free(m);
    return ok;
}

/* Sends `value` to topic/partition and returns its offset. */
static inline uint64_t send_to(mql_producer *p, const char *topic, uint32_t partition, const char *value) {
    mql_record rec = MQL_RECORD_INIT;
    rec.topic = topic;
    rec.partition = partition;
    rec.value = value;
    rec.value_len = strlen(value);
    mql_metadata md;
    CHECK_OK(mql_send_record(p, &rec, &md));
    CHECK(md.partition == partition);
    return md.offset;
}

/* Sends `n` records to every one of the `partitions` partitions of `topic`. */
static inline void fill(mql_broker *mq, const char *topic, uint32_t partitions, int n) {
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, NULL, &p));
    char value[64];
    for (int i = 0; i < n; i++)
        for (uint32_t part = 0; part < partitions; part++) {
            snprintf(value, sizeof value, "%u:%d", part, i);
            send_to(p, topic, part, value);
        }
    mql_producer_free(p);
}

#endif
