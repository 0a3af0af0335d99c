/* Durability across close and reopen: topics, partitions, records (keys,
 * values, headers, timestamps) all come back; new records continue the
 * offsets; the data-directory config (file mode) is applied. */
#define _POSIX_C_SOURCE 200809L
#include <sys/stat.h>

#include "check.h"

#define N 200

static mql_broker *open_dir(const char *dir) {
    mql_config *cfg;
    CHECK_OK(mql_config_new(&cfg));
    CHECK_OK(mql_config_set_file_mode(cfg, 0640));
    CHECK_OK(mql_config_set_prefault(cfg, false));
    mql_broker *mq;
    CHECK_OK(mql_open(dir, cfg, &mq));
    mql_config_free(cfg);
    return mq;
}

/* Consumes the whole topic and checks every record; returns the count. */
static uint64_t check_all(mql_broker *mq, int64_t *last_ts) {
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, NULL, NULL, &c));
    CHECK_OK(mql_subscribe(c, "durable"));
    uint64_t n = 0;
    mql_message *m;
    char want[64];
    while (mql_poll(c, 300, &m) == MQL_OK) {
        size_t klen;
        const char *key = mql_message_key(m, &klen);
        CHECK(key != NULL && klen > 1 && klen < 32 && key[0] == 'k');
        snprintf(want, sizeof want, "value %.*s", (int)(klen - 1), key + 1);
        CHECK(value_is(m, want));
        CHECK(mql_message_header_count(m) == 1);
        const char *name;
        const void *hv;
        size_t name_len, hv_len;
        CHECK_OK(mql_message_header(m, 0, &name, &name_len, &hv, &hv_len));
        CHECK(bytes_eq(name, name_len, "seq"));
        CHECK(bytes_eq(hv, hv_len, key + 1) || (hv_len == klen - 1 && memcmp(hv, key + 1, hv_len) == 0));
        long i = strtol(want + 6, NULL, 10);
        CHECK(mql_message_timestamp(m) == 1700000000000LL + i);
        if (mql_message_timestamp(m) > *last_ts) *last_ts = mql_message_timestamp(m);
        n++;
        mql_message_free(m);
    }
    CHECK(mql_last_error_code() == MQL_TIMEOUT);
    mql_consumer_free(c);
    return n;
}

static void send_n(mql_producer *p, int from, int to) {
    char key[32], value[64];
    for (int i = from; i < to; i++) {
        snprintf(key, sizeof key, "k%d", i);
        snprintf(value, sizeof value, "value %d", i);
        mql_header h = {"seq", 3, key + 1, strlen(key + 1)};
        mql_record rec = MQL_RECORD_INIT;
        rec.topic = "durable";
        rec.key = key;
        rec.key_len = strlen(key);
        rec.value = value;
        rec.value_len = strlen(value);
        rec.headers = &h;
        rec.header_count = 1;
        rec.timestamp = 1700000000000LL + i;
        CHECK_OK(mql_send_record(p, &rec, NULL));
    }
}

static uint64_t total(mql_broker *mq) {
    uint32_t parts;
    CHECK_OK(mql_topic_partition_count(mq, "durable", &parts));
    CHECK(parts == 2);
    uint64_t sum = 0;
    for (uint32_t i = 0; i < parts; i++) {
        uint64_t start, end;
        CHECK_OK(mql_topic_offsets(mq, "durable", i, &start, &end));
        sum += end - start;
    }
    return sum;
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);

    mql_broker *mq = open_dir(dir);
    mql_topic_config *tc;
    CHECK_OK(mql_topic_config_new(2, &tc));
    CHECK_OK(mql_topic_config_set_segment_bytes(tc, 8192)); /* several segments */
    CHECK_OK(mql_topic_config_set_max_message_bytes(tc, 4096));
    CHECK_OK(mql_topic_config_set_retention_ms(tc, -1));
    CHECK_OK(mql_topic_config_set_retention_bytes(tc, -1));
    CHECK_OK(mql_topic_create(mq, "durable", tc));
    mql_topic_config_free(tc);
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_acks(pc, -1)); /* flushed to disk */
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, pc, &p));
    mql_producer_config_free(pc);
    send_n(p, 0, N);
    CHECK_OK(mql_producer_flush(p));
    mql_producer_free(p);
    CHECK_OK(mql_close(mq));

    /* The file mode from the config. */
    char seg[4200];
    snprintf(seg, sizeof seg, "%s/topics/durable/0/00000000000000000000.log", dir);
    struct stat st;
    CHECK(stat(seg, &st) == 0);
    CHECK((st.st_mode & 0777) == 0640);

    /* Everything is back after reopening. */
    mq = open_dir(dir);
    CHECK(total(mq) == N);
    int64_t last_ts = 0;
    CHECK(check_all(mq, &last_ts) == N);
    CHECK(last_ts == 1700000000000LL + N - 1);

    /* New records continue where the old ones ended. */
    CHECK_OK(mql_producer_new(mq, NULL, &p));
    send_n(p, N, N + 10);
    mql_producer_free(p);
    CHECK_OK(mql_close(mq));

    mq = open_dir(dir);
    CHECK(total(mq) == N + 10);
    CHECK(check_all(mq, &last_ts) == N + 10);
    CHECK(last_ts == 1700000000000LL + N + 9);
    CHECK_OK(mql_close(mq));
    puts("durability: ok");
    return 0;
}
