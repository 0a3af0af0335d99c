/* Round trip: a topic with 4 partitions; keyed, unkeyed, with-headers,
 * tombstone and empty-value records; consumed back by subscribe and by
 * assign + seek; contents, offsets and key-to-partition mapping checked. */
#include "check.h"

#define PARTITIONS 4
#define MAX_SENT 32

struct sent {
    mql_metadata md;
    const char *key;   /* NULL: no key */
    const char *value; /* NULL: tombstone */
    size_t headers;    /* how many headers (the with-headers record) */
    int seen;
};

static struct sent sent[MAX_SENT];
static size_t nsent;

static mql_metadata send_kv(mql_producer *p, const char *topic, const char *key, const char *value) {
    mql_metadata md;
    memset(&md, 0xAB, sizeof md);
    CHECK_OK(mql_send(p, topic, key, key ? strlen(key) : 0, value, value ? strlen(value) : 0, &md));
    CHECK(md.partition < PARTITIONS);
    CHECK(md.timestamp > 1600000000000LL); /* "now", in ms */
    CHECK(nsent < MAX_SENT);
    sent[nsent].md = md;
    sent[nsent].key = key;
    sent[nsent].value = value;
    sent[nsent].headers = 0;
    nsent++;
    return md;
}

static struct sent *find_sent(const mql_message *m) {
    for (size_t i = 0; i < nsent; i++) {
        if (sent[i].md.partition == mql_message_partition(m) && sent[i].md.offset == mql_message_offset(m))
            return &sent[i];
    }
    FAIL_AT("unexpected message at %u/%llu", (unsigned)mql_message_partition(m),
            (unsigned long long)mql_message_offset(m));
}

/* Checks a consumed message against what was sent. */
static void check_message(const mql_message *m) {
    struct sent *s = find_sent(m);
    CHECK(strcmp(mql_message_topic(m), "orders") == 0);
    CHECK(mql_message_timestamp(m) == s->md.timestamp);
    size_t len = 12345;
    const void *key = mql_message_key(m, &len);
    if (s->key == NULL) {
        CHECK(key == NULL);
        CHECK(len == 0);
    } else {
        CHECK(bytes_eq(key, len, s->key));
    }
    len = 12345;
    const void *value = mql_message_value(m, &len);
    if (s->value == NULL) {
        CHECK(value == NULL);
        CHECK(len == 0);
    } else {
        CHECK(value != NULL); /* an empty value is not a null value */
        CHECK(bytes_eq(value, len, s->value));
    }
    CHECK(mql_message_header_count(m) == s->headers);
    if (s->headers) {
        const char *name;
        const void *hv;
        size_t name_len, hv_len;
        CHECK_OK(mql_message_header(m, 0, &name, &name_len, &hv, &hv_len));
        CHECK(bytes_eq(name, name_len, "trace-id"));
        CHECK(name[name_len] == '\0');
        CHECK(bytes_eq(hv, hv_len, "abc123"));
        CHECK_OK(mql_message_header(m, 1, &name, &name_len, &hv, &hv_len));
        CHECK(bytes_eq(name, name_len, "trace-id")); /* names may repeat */
        CHECK(hv != NULL && hv_len == 0);              /* empty value */
        CHECK_OK(mql_message_header(m, 2, &name, &name_len, &hv, &hv_len));
        CHECK(name_len == 4 && memcmp(name, "bi\0n", 4) == 0); /* embedded NUL */
        CHECK(hv_len == 3 && memcmp(hv, "\x00\xff\x01", 3) == 0);
    }
    s->seen++;
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);

    /* The library matches the header it was compiled against. */
    CHECK(strcmp(mql_version(), MQLITE_VERSION) == 0);
    char v[32];
    snprintf(v, sizeof v, "%d.%d.%d", MQLITE_VERSION_MAJOR, MQLITE_VERSION_MINOR, MQLITE_VERSION_PATCH);
    CHECK(strcmp(v, MQLITE_VERSION) == 0);
    CHECK(strcmp(mql_status_str(MQL_UNKNOWN_TOPIC), "MQL_UNKNOWN_TOPIC") == 0);
    CHECK(strcmp(mql_last_error(), "") == 0);
    CHECK(mql_last_error_code() == MQL_OK);

    mql_config *cfg;
    CHECK_OK(mql_config_new(&cfg));
    CHECK_OK(mql_config_set_prefault(cfg, false));
    CHECK_OK(mql_config_set_retention_check_interval_ms(cfg, 0));
    mql_broker *mq;
    CHECK_OK(mql_open(dir, cfg, &mq));
    mql_config_free(cfg);

    mql_topic_config *tc;
    CHECK_OK(mql_topic_config_new(PARTITIONS, &tc));
    CHECK_OK(mql_topic_config_set_segment_bytes(tc, 1 << 20));
    CHECK_OK(mql_topic_create(mq, "orders", tc));
    mql_topic_config_free(tc);
    uint32_t count = 0;
    CHECK_OK(mql_topic_partition_count(mq, "orders", &count));
    CHECK(count == PARTITIONS);

    /* Round-robin for records without a key (the default is sticky). */
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_partitioner(pc, "round_robin"));
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, pc, &p));
    mql_producer_config_free(pc);

    /* Keyed: the same key always lands in the same partition, the one
     * Kafka's murmur2 partitioner picks (k1 -> 1 of 4). */
    mql_metadata k1a = send_kv(p, "orders", "k1", "first");
    mql_metadata k1b = send_kv(p, "orders", "k1", "second");
    mql_metadata k1c = send_kv(p, "orders", "k1", "third");
    CHECK(k1a.partition == 1);
    CHECK(k1b.partition == k1a.partition && k1c.partition == k1a.partition);
    CHECK(k1a.offset == 0 && k1b.offset == 1 && k1c.offset == 2);
    CHECK(send_kv(p, "orders", "user-42", "x").partition == 0);

    /* Unkeyed: round-robin over every partition. */
    unsigned mask = 0;
    for (int i = 0; i < PARTITIONS; i++) mask |= 1u << send_kv(p, "orders", NULL, "no key").partition;
    CHECK(mask == (1u << PARTITIONS) - 1);

    /* Tombstone (NULL value) and empty value (non-NULL, length 0). */
    send_kv(p, "orders", "dead", NULL);
    send_kv(p, "orders", "empty", "");
    /* The metadata out-parameter is optional. */
    CHECK_OK(mql_send(p, "orders", "nomd", 4, "v", 1, NULL));
    sent[nsent].md.partition = 0; /* filled below from the consumed copy */
    sent[nsent].key = "nomd";
    sent[nsent].value = "v";
    sent[nsent].md.offset = UINT64_MAX;
    size_t nomd = nsent++;

    /* A full record: explicit partition and timestamp, headers. */
    mql_header headers[3] = {
        {"trace-id", 8, "abc123", 6},
        {"trace-id", 8, NULL, 0},
        {"bi\0n", 4, "\x00\xff\x01", 3},
    };
    mql_record rec = MQL_RECORD_INIT;
    CHECK(rec.partition == MQL_PARTITION_ANY && rec.timestamp == MQL_TIMESTAMP_NOW);
    rec.topic = "orders";
    rec.partition = 2;
    rec.key = "hk";
    rec.key_len = 2;
    rec.value = "with headers";
    rec.value_len = strlen("with headers");
    rec.headers = headers;
    rec.header_count = 3;
    rec.timestamp = 1234567890123LL;
    mql_metadata md;
    CHECK_OK(mql_send_record(p, &rec, &md));
    CHECK(md.partition == 2);
    CHECK(md.timestamp == 1234567890123LL);
    sent[nsent].md = md;
    sent[nsent].key = "hk";
    sent[nsent].value = "with headers";
    sent[nsent].headers = 3;
    nsent++;
    CHECK_OK(mql_producer_flush(p));

    /* The offsets add up. */
    uint64_t total = 0;
    for (uint32_t part = 0; part < PARTITIONS; part++) {
        uint64_t start = 99, end = 99;
        CHECK_OK(mql_topic_offsets(mq, "orders", part, &start, &end));
        CHECK(start == 0);
        total += end - start;
    }
    CHECK(total == nsent);

    /* 1. Consume everything by subscription. */
    mql_consumer_config *cc;
    CHECK_OK(mql_consumer_config_new(&cc));
    CHECK_OK(mql_consumer_config_set_auto_offset_reset(cc, MQL_OFFSET_RESET_EARLIEST));
    CHECK_OK(mql_consumer_config_set_max_poll_records(cc, 3)); /* exercises the buffer */
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, "roundtrip", cc, &c));
    mql_consumer_config_free(cc);
    CHECK_OK(mql_subscribe(c, "orders"));
    CHECK_OK(mql_subscribe(c, "orders")); /* twice is harmless */
    uint64_t last_offset[PARTITIONS] = {0};
    int any[PARTITIONS] = {0};
    for (size_t got = 0; got < nsent; got++) {
        mql_message *m = NULL;
        CHECK_OK(mql_poll(c, 2000, &m));
        CHECK(m != NULL);
        uint32_t part = mql_message_partition(m);
        /* In order within a partition. */
        if (any[part]) CHECK(mql_message_offset(m) == last_offset[part] + 1);
        any[part] = 1;
        last_offset[part] = mql_message_offset(m);
        size_t kl;
        const void *k = mql_message_key(m, &kl);
        if (bytes_eq(k, kl, "nomd")) {
            sent[nomd].md.partition = part;
            sent[nomd].md.offset = mql_message_offset(m);
            sent[nomd].md.timestamp = mql_message_timestamp(m);
        }
        check_message(m);
        mql_message_free(m);
    }
    for (size_t i = 0; i < nsent; i++) CHECK(sent[i].seen == 1);
    mql_message *none = (mql_message *)&none; /* sentinel: must stay untouched */
    CHECK_STATUS(mql_poll(c, 0, &none), MQL_TIMEOUT);
    CHECK(none == (mql_message *)&none);
    CHECK(mql_last_error_code() == MQL_TIMEOUT);
    uint64_t pos = 0;
    for (uint32_t part = 0; part < PARTITIONS; part++) {
        uint64_t in_part = 0;
        for (size_t i = 0; i < nsent; i++) in_part += sent[i].md.partition == part;
        CHECK_OK(mql_position(c, "orders", part, &pos));
        CHECK(pos == in_part);
    }
    mql_consumer_free(c);

    /* 2. Assign one partition and seek into the middle. */
    CHECK_OK(mql_consumer_new(mq, NULL, NULL, &c));
    CHECK_OK(mql_assign(c, "orders", k1a.partition));
    CHECK_OK(mql_seek(c, "orders", k1a.partition, 1));
    CHECK_OK(mql_position(c, "orders", k1a.partition, &pos));
    CHECK(pos == 1);
    mql_message *m;
    CHECK_OK(mql_poll(c, 1000, &m));
    CHECK(mql_message_offset(m) == 1 && mql_message_partition(m) == k1a.partition);
    CHECK(value_is(m, "second"));
    mql_message_free(m);
    /* Position counts only what was handed out, not what is buffered. */
    CHECK_OK(mql_position(c, "orders", k1a.partition, &pos));
    CHECK(pos == 2);
    CHECK_OK(mql_poll(c, 1000, &m));
    CHECK(mql_message_offset(m) == 2);
    CHECK(value_is(m, "third"));
    mql_message_free(m);
    /* Seeking back discards what was buffered. */
    CHECK_OK(mql_seek(c, "orders", k1a.partition, 0));
    CHECK_OK(mql_poll(c, 1000, &m));
    CHECK(mql_message_offset(m) == 0);
    CHECK(value_is(m, "first"));
    mql_message_free(m);
    /* Adding a second partition keeps the first one's position. */
    CHECK_OK(mql_assign(c, "orders", 2));
    CHECK_OK(mql_position(c, "orders", k1a.partition, &pos));
    CHECK(pos == 1);
    /* A partition that is not assigned cannot be sought. */
    CHECK_STATUS(mql_seek(c, "orders", 3, 0), MQL_INVALID_ARGUMENT);
    CHECK_OK(mql_unsubscribe(c));
    CHECK_STATUS(mql_poll(c, 0, &m), MQL_INVALID_ARGUMENT);
    mql_consumer_free(c);

    /* 3. Several topics at once; a message outlives its topic and broker. */
    CHECK_OK(mql_topic_create(mq, "other", NULL));
    CHECK_OK(mql_send(p, "other", NULL, 0, "from other", 10, NULL));
    CHECK_OK(mql_consumer_new(mq, NULL, NULL, &c));
    const char *topics[2] = {"orders", "other"};
    CHECK_OK(mql_subscribe_many(c, topics, 2));
    size_t from_other = 0, from_orders = 0;
    mql_message *kept = NULL;
    while (mql_poll(c, 200, &m) == MQL_OK) {
        if (strcmp(mql_message_topic(m), "other") == 0) {
            from_other++;
            kept = m;
        } else {
            from_orders++;
            mql_message_free(m);
        }
    }
    CHECK(mql_last_error_code() == MQL_TIMEOUT);
    CHECK(from_other == 1 && from_orders == nsent);
    CHECK(kept != NULL);

    /* Partitions can be added. */
    CHECK_OK(mql_topic_add_partitions(mq, "orders", 6));
    CHECK_OK(mql_topic_partition_count(mq, "orders", &count));
    CHECK(count == 6);

    CHECK_OK(mql_topic_delete(mq, "other"));
    CHECK_STATUS(mql_topic_partition_count(mq, "other", &count), MQL_UNKNOWN_TOPIC);
    mql_consumer_free(c);
    mql_producer_free(p);
    CHECK_OK(mql_close(mq));
    /* Still readable: the message holds its segment mapped. */
    CHECK(value_is(kept, "from other"));
    CHECK(strcmp(mql_message_topic(kept), "other") == 0);
    mql_message_free(kept);

    puts("roundtrip: ok");
    return 0;
}
