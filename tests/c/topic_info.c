/* The broker's topic calls beyond create/delete: mql_topic_describe (config,
 * offsets, sizes, recovery counters), mql_flush, mql_enforce_retention,
 * mql_offset_for_timestamp, mql_partition_for_key and mql_murmur2; each
 * with its errors (NULL arguments, unknown topic or partition, bad
 * values), which write no out-parameter. */
#define _POSIX_C_SOURCE 200809L
#include <time.h>

#include "check.h"

static void send_at(mql_producer *p, const char *topic, uint32_t partition, int64_t ts, const char *value) {
    mql_record rec = MQL_RECORD_INIT;
    rec.topic = topic;
    rec.partition = partition;
    rec.value = value;
    rec.value_len = strlen(value);
    rec.timestamp = ts;
    CHECK_OK(mql_send_record(p, &rec, NULL));
}

static void describe(mql_broker *mq) {
    mql_topic_config *tc;
    CHECK_OK(mql_topic_config_new(3, &tc));
    CHECK_OK(mql_topic_config_set_segment_bytes(tc, 1 << 20));
    CHECK_OK(mql_topic_config_set_retention_ms(tc, 86400000));
    CHECK_OK(mql_topic_config_set_max_message_bytes(tc, 5000));
    CHECK_OK(mql_topic_config_set_retention_respects_groups(tc, true));
    CHECK_OK(mql_topic_create(mq, "described", tc));
    mql_topic_config_free(tc);

    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, NULL, &p));
    for (int i = 0; i < 5; i++) send_at(p, "described", 1, MQL_TIMESTAMP_NOW, "one");
    send_at(p, "described", 2, MQL_TIMESTAMP_NOW, "two");
    mql_producer_free(p);
    CHECK_OK(mql_flush(mq));

    mql_topic_info *info = NULL;
    CHECK_OK(mql_topic_describe(mq, "described", &info));
    CHECK(strcmp(mql_topic_info_name(info), "described") == 0);
    mql_topic_settings s;
    memset(&s, 0, sizeof s);
    CHECK_OK(mql_topic_info_config(info, &s));
    CHECK(s.partitions == 3);
    CHECK(s.segment_bytes == 1 << 20);
    CHECK(s.retention_ms == 86400000);
    CHECK(s.retention_bytes == -1);
    CHECK(s.max_message_bytes == 5000);
    CHECK(s.index_interval_bytes == 4096);
    CHECK(!s.log_append_time);
    CHECK(s.retention_respects_groups);

    CHECK(mql_topic_info_partition_count(info) == 3);
    uint64_t ends[3] = {0, 5, 1};
    for (size_t i = 0; i < 3; i++) {
        mql_partition_info pi;
        memset(&pi, 0xff, sizeof pi);
        CHECK_OK(mql_topic_info_partition(info, i, &pi));
        CHECK(pi.partition == i);
        CHECK(pi.start_offset == 0 && pi.end_offset == ends[i]);
        CHECK(pi.segments == 1);
        CHECK(ends[i] == 0 ? pi.size_bytes == 0 : pi.size_bytes > 0);
        /* Agrees with the older per-partition calls. */
        uint64_t start, end;
        CHECK_OK(mql_topic_offsets(mq, "described", (uint32_t)i, &start, &end));
        CHECK(start == pi.start_offset && end == pi.end_offset);
        mql_recovery_stats r;
        CHECK_OK(mql_partition_recovery(mq, "described", (uint32_t)i, &r));
        CHECK(memcmp(&r, &pi.recovery, sizeof r) == 0);
        CHECK(pi.recovery.truncated_bytes == 0 && pi.recovery.lost_records == 0);
    }
    /* Out of range, and NULL arguments: nothing written. */
    mql_partition_info untouched;
    memset(&untouched, 0x5a, sizeof untouched);
    mql_partition_info copy = untouched;
    CHECK_FAIL(mql_topic_info_partition(info, 3, &untouched), MQL_INVALID_ARGUMENT, "out of range");
    CHECK(memcmp(&copy, &untouched, sizeof copy) == 0);
    CHECK_FAIL(mql_topic_info_partition(NULL, 0, &untouched), MQL_NULL_ARGUMENT, "`info` is NULL");
    CHECK_FAIL(mql_topic_info_partition(info, 0, NULL), MQL_NULL_ARGUMENT, "`out` is NULL");
    CHECK_FAIL(mql_topic_info_config(NULL, &s), MQL_NULL_ARGUMENT, "`info` is NULL");
    CHECK_FAIL(mql_topic_info_config(info, NULL), MQL_NULL_ARGUMENT, "`out` is NULL");
    CHECK(mql_topic_info_name(NULL) == NULL);
    CHECK(mql_topic_info_partition_count(NULL) == 0);

    /* A snapshot: later writes do not change it. */
    fill(mq, "described", 3, 2);
    mql_partition_info pi;
    CHECK_OK(mql_topic_info_partition(info, 0, &pi));
    CHECK(pi.end_offset == 0);
    mql_topic_info_free(info);
    mql_topic_info_free(NULL);

    /* Growing the topic shows in a new description. */
    CHECK_OK(mql_topic_add_partitions(mq, "described", 4));
    CHECK_OK(mql_topic_describe(mq, "described", &info));
    CHECK_OK(mql_topic_info_config(info, &s));
    CHECK(s.partitions == 4 && mql_topic_info_partition_count(info) == 4);
    mql_topic_info_free(info);

    mql_topic_info *none = (mql_topic_info *)&copy;
    CHECK_FAIL(mql_topic_describe(mq, "nope", &none), MQL_UNKNOWN_TOPIC, "nope");
    CHECK(none == (mql_topic_info *)&copy);
    CHECK_FAIL(mql_topic_describe(mq, "bad name", &none), MQL_UNKNOWN_TOPIC, "bad name");
    CHECK_FAIL(mql_topic_describe(NULL, "described", &none), MQL_NULL_ARGUMENT, "`broker` is NULL");
    CHECK_FAIL(mql_topic_describe(mq, NULL, &none), MQL_NULL_ARGUMENT, "`name` is NULL");
    CHECK_FAIL(mql_topic_describe(mq, "described", NULL), MQL_NULL_ARGUMENT, "`out` is NULL");
    CHECK(none == (mql_topic_info *)&copy);
    CHECK_FAIL(mql_flush(NULL), MQL_NULL_ARGUMENT, "`broker` is NULL");
}

static void offsets_for_times(mql_broker *mq) {
    make_topic(mq, "timed", 2);
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, NULL, &p));
    send_at(p, "timed", 0, 1000, "a");
    send_at(p, "timed", 0, 2000, "b");
    send_at(p, "timed", 0, 3000, "c");
    mql_producer_free(p);
    struct {
        int64_t ts;
        uint64_t want;
    } cases[] = {{0, 0}, {1000, 0}, {1001, 1}, {2000, 1}, {2500, 2}, {3000, 2}, {3001, MQL_OFFSET_UNKNOWN}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t got = 12345;
        CHECK_OK(mql_offset_for_timestamp(mq, "timed", 0, cases[i].ts, &got));
        if (got != cases[i].want)
            FAIL_AT("offset for %lld: %llu, want %llu", (long long)cases[i].ts, (unsigned long long)got,
                    (unsigned long long)cases[i].want);
    }
    uint64_t got = 12345;
    CHECK_OK(mql_offset_for_timestamp(mq, "timed", 1, 0, &got)); /* empty partition */
    CHECK(got == MQL_OFFSET_UNKNOWN);
    got = 12345;
    CHECK_FAIL(mql_offset_for_timestamp(mq, "nope", 0, 0, &got), MQL_UNKNOWN_TOPIC, "nope");
    CHECK_FAIL(mql_offset_for_timestamp(mq, "timed", 2, 0, &got), MQL_UNKNOWN_PARTITION, "partition 2");
    CHECK_FAIL(mql_offset_for_timestamp(NULL, "timed", 0, 0, &got), MQL_NULL_ARGUMENT, "`broker` is NULL");
    CHECK_FAIL(mql_offset_for_timestamp(mq, NULL, 0, 0, &got), MQL_NULL_ARGUMENT, "`topic` is NULL");
    CHECK_FAIL(mql_offset_for_timestamp(mq, "timed", 0, 0, NULL), MQL_NULL_ARGUMENT, "`offset` is NULL");
    CHECK(got == 12345);
}

/* Time retention applied on demand: every closed segment is older than
 * retention_ms once it has passed. */
static void retention(mql_broker *mq) {
    mql_topic_config *tc;
    CHECK_OK(mql_topic_config_new(1, &tc));
    CHECK_OK(mql_topic_config_set_segment_bytes(tc, 4096));
    CHECK_OK(mql_topic_config_set_max_message_bytes(tc, 4096));
    CHECK_OK(mql_topic_config_set_retention_ms(tc, 300));
    CHECK_OK(mql_topic_create(mq, "kept", tc));
    mql_topic_config_free(tc);
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, NULL, &p));
    char value[200];
    memset(value, 'v', sizeof value - 1);
    value[sizeof value - 1] = '\0';
    for (int i = 0; i < 100; i++) send_at(p, "kept", 0, MQL_TIMESTAMP_NOW, value);
    mql_producer_free(p);

    mql_topic_info *info;
    mql_partition_info before, after;
    CHECK_OK(mql_topic_describe(mq, "kept", &info));
    CHECK_OK(mql_topic_info_partition(info, 0, &before));
    mql_topic_info_free(info);
    CHECK(before.segments >= 2 && before.end_offset == 100);

    struct timespec wait = {0, 600 * 1000 * 1000};
    nanosleep(&wait, NULL);
    size_t deleted = 999;
    CHECK_OK(mql_enforce_retention(mq, &deleted));
    CHECK_OK(mql_topic_describe(mq, "kept", &info));
    CHECK_OK(mql_topic_info_partition(info, 0, &after));
    mql_topic_info_free(info);
    /* All but the active segment went. */
    CHECK(deleted == before.segments - 1);
    CHECK(after.segments == 1);
    CHECK(after.start_offset > 0 && after.end_offset == 100);
    CHECK(after.size_bytes < before.size_bytes);
    /* Nothing more to delete. */
    CHECK_OK(mql_enforce_retention(mq, &deleted));
    CHECK(deleted == 0);

    deleted = 999;
    CHECK_FAIL(mql_enforce_retention(NULL, &deleted), MQL_NULL_ARGUMENT, "`broker` is NULL");
    CHECK_FAIL(mql_enforce_retention(mq, NULL), MQL_NULL_ARGUMENT, "`deleted` is NULL");
    CHECK(deleted == 999);
}

static void partitioner(void) {
    /* Kafka's murmur2 of known inputs (as Kafka's own tests give them). */
    int32_t h = 0;
    CHECK_OK(mql_murmur2("21", 2, &h));
    CHECK(h == -973932308);
    CHECK_OK(mql_murmur2("foobar", 6, &h));
    CHECK(h == -790332482);
    CHECK_OK(mql_murmur2(NULL, 0, &h));
    int32_t empty = h;
    CHECK_OK(mql_murmur2("", 0, &h));
    CHECK(h == empty && h == 275646681);
    /* partition_for_key = (murmur2 & 0x7fffffff) % n. */
    for (uint32_t n = 1; n <= 7; n++) {
        uint32_t part = 99;
        CHECK_OK(mql_partition_for_key("foobar", 6, n, &part));
        CHECK(part == ((uint32_t)-790332482 & 0x7fffffffu) % n);
    }
    uint32_t part = 99;
    CHECK_OK(mql_partition_for_key(NULL, 0, 5, &part));
    CHECK(part == (275646681u & 0x7fffffffu) % 5);
    part = 99;
    CHECK_FAIL(mql_partition_for_key("k", 1, 0, &part), MQL_INVALID_ARGUMENT, "at least 1");
    CHECK_FAIL(mql_partition_for_key(NULL, 1, 3, &part), MQL_NULL_ARGUMENT, "`key` is NULL");
    CHECK_FAIL(mql_partition_for_key("k", 1, 3, NULL), MQL_NULL_ARGUMENT, "`out` is NULL");
    CHECK(part == 99);
    h = 7;
    CHECK_FAIL(mql_murmur2(NULL, 3, &h), MQL_NULL_ARGUMENT, "`data` is NULL");
    CHECK_FAIL(mql_murmur2("k", 1, NULL), MQL_NULL_ARGUMENT, "`out` is NULL");
    CHECK(h == 7);
}

/* The partition a keyed record goes to is mql_partition_for_key's. */
static void keyed_sends_agree(mql_broker *mq) {
    make_topic(mq, "keyed", 5);
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, NULL, &p));
    char key[16];
    for (int i = 0; i < 50; i++) {
        snprintf(key, sizeof key, "key-%d", i);
        mql_record rec = MQL_RECORD_INIT;
        rec.topic = "keyed";
        rec.key = key;
        rec.key_len = strlen(key);
        rec.value = "v";
        rec.value_len = 1;
        mql_metadata md;
        CHECK_OK(mql_send_record(p, &rec, &md));
        uint32_t want;
        CHECK_OK(mql_partition_for_key(key, strlen(key), 5, &want));
        CHECK(md.partition == want);
    }
    mql_producer_free(p);
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq = open_data(dir, "data");
    describe(mq);
    offsets_for_times(mq);
    retention(mq);
    partitioner();
    keyed_sends_agree(mq);
    CHECK_OK(mql_close(mq));
    return 0;
}
