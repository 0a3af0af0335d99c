/* Choosing partitions: a custom C selector (what it sees, what it
 * returns, its errors), round-robin, sticky, keys, and the names. */
#include <stdatomic.h>

#include "check.h"

#define PARTITIONS 4

struct seen {
    atomic_int calls;
    uint32_t partitions;
    char topic[64];
    mql_record_view last;   /* pointers valid only during the call: not read later */
    char value[64];         /* a copy of the last value */
    char header_name[16];
    size_t header_count;
    int has_key;
    uint32_t force; /* when not UINT32_MAX: the answer */
};

/* Chooses value_len % partitions, and remembers what it saw. */
static uint32_t by_value_len(void *user_data, const mql_record_view *rec, uint32_t partitions) {
    struct seen *s = user_data;
    atomic_fetch_add(&s->calls, 1);
    s->partitions = partitions;
    snprintf(s->topic, sizeof s->topic, "%s", rec->topic);
    s->last = *rec;
    s->has_key = rec->key != NULL;
    s->value[0] = '\0';
    if (rec->value && rec->value_len < sizeof s->value) {
        memcpy(s->value, rec->value, rec->value_len);
        s->value[rec->value_len] = '\0';
    }
    s->header_count = rec->header_count;
    s->header_name[0] = '\0';
    if (rec->header_count > 0 && rec->headers[0].name_len < sizeof s->header_name) {
        memcpy(s->header_name, rec->headers[0].name, rec->headers[0].name_len);
        s->header_name[rec->headers[0].name_len] = '\0';
    }
    if (s->force != UINT32_MAX) return s->force;
    return (uint32_t)(rec->value_len % partitions);
}

static mql_producer *producer_with(mql_broker *mq, mql_producer_config *pc) {
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, pc, &p));
    mql_producer_config_free(pc);
    return p;
}

static uint32_t send_unkeyed(mql_producer *p, const char *value) {
    mql_metadata md;
    CHECK_OK(mql_send(p, "t", NULL, 0, value, strlen(value), &md));
    CHECK(md.partition < PARTITIONS);
    return md.partition;
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq = open_data(dir, "data");
    make_topic(mq, "t", PARTITIONS);

    /* --- names --- */
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_FAIL(mql_producer_config_set_partitioner(pc, "random"), MQL_INVALID_ARGUMENT, "random");
    CHECK_FAIL(mql_producer_config_set_partitioner(pc, "custom"), MQL_INVALID_ARGUMENT, "partitioner");
    CHECK_OK(mql_producer_config_set_partitioner(pc, "STICKY"));
    CHECK_OK(mql_producer_config_set_partitioner(pc, "round_robin"));
    CHECK_FAIL(mql_producer_config_set_partitioner_fn(pc, NULL, NULL), MQL_NULL_ARGUMENT, "select");

    /* --- round-robin: the partitions in turn --- */
    mql_producer *p = producer_with(mq, pc);
    uint32_t first = send_unkeyed(p, "rr");
    for (int i = 1; i < 2 * PARTITIONS; i++) CHECK(send_unkeyed(p, "rr") == (first + (uint32_t)i) % PARTITIONS);
    /* Keys still decide: Kafka's murmur2 ("k1" is partition 1 of 4). */
    mql_metadata md;
    for (int i = 0; i < 3; i++) {
        CHECK_OK(mql_send(p, "t", "k1", 2, "v", 1, &md));
        CHECK(md.partition == 1);
    }
    mql_producer_free(p);

    /* --- sticky (the default): one partition for a while --- */
    p = producer_with(mq, NULL);
    uint32_t sticky = send_unkeyed(p, "s");
    for (int i = 0; i < 10; i++) CHECK(send_unkeyed(p, "s") == sticky);
    CHECK_OK(mql_send(p, "t", "k1", 2, "v", 1, &md));
    CHECK(md.partition == 1);
    mql_producer_free(p);
    /* ... and it moves on once batch_size bytes went there. */
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_partitioner(pc, "sticky"));
    CHECK_OK(mql_producer_config_set_batch_size(pc, 1));
    p = producer_with(mq, pc);
    uint32_t prev = send_unkeyed(p, "m");
    for (int i = 0; i < 6; i++) {
        uint32_t now = send_unkeyed(p, "m");
        CHECK(now != prev);
        prev = now;
    }
    mql_producer_free(p);

    /* --- a custom selector --- */
    struct seen seen;
    memset(&seen, 0, sizeof seen);
    seen.force = UINT32_MAX;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_partitioner_fn(pc, by_value_len, &seen));
    p = producer_with(mq, pc);
    for (size_t len = 1; len <= 8; len++) {
        char value[16];
        memset(value, 'x', len);
        value[len] = '\0';
        CHECK(send_unkeyed(p, value) == len % PARTITIONS);
        CHECK(strcmp(seen.value, value) == 0);
    }
    CHECK(atomic_load(&seen.calls) == 8);
    CHECK(seen.partitions == PARTITIONS);
    CHECK(strcmp(seen.topic, "t") == 0);
    CHECK(!seen.has_key && seen.last.key_len == 0);
    CHECK(seen.last.partition == MQL_PARTITION_ANY);
    CHECK(seen.last.timestamp == MQL_TIMESTAMP_NOW);
    CHECK(!seen.last.has_sequence && seen.last.sequence == -1);
    CHECK(seen.header_count == 0 && seen.last.headers == NULL);
    /* It sees keyed records too, with their headers and timestamp. */
    mql_header h = {"trace", 5, "1", 1};
    mql_record rec = MQL_RECORD_INIT;
    rec.topic = "t";
    rec.key = "k1";
    rec.key_len = 2;
    rec.value = "abc";
    rec.value_len = 3;
    rec.headers = &h;
    rec.header_count = 1;
    rec.timestamp = 1600000000123LL;
    CHECK_OK(mql_send_record(p, &rec, &md));
    CHECK(md.partition == 3); /* len 3, not the key's partition 1 */
    CHECK(seen.has_key && seen.last.key_len == 2);
    CHECK(seen.header_count == 1 && strcmp(seen.header_name, "trace") == 0);
    CHECK(seen.last.timestamp == 1600000000123LL);
    /* An explicit partition bypasses it. */
    int calls = atomic_load(&seen.calls);
    rec.partition = 0;
    CHECK_OK(mql_send_record(p, &rec, &md));
    CHECK(md.partition == 0);
    CHECK(atomic_load(&seen.calls) == calls);
    /* It is used by batches and asynchronous sends as well. */
    rec.partition = MQL_PARTITION_ANY;
    mql_record two[2] = {rec, rec};
    two[1].value = "abcdef";
    two[1].value_len = 6;
    mql_metadata mds[2];
    CHECK_OK(mql_send_batch(p, two, 2, mds));
    CHECK(mds[0].partition == 3 && mds[1].partition == 2);
    CHECK_OK(mql_produce(p, &rec, NULL, NULL));
    CHECK(atomic_load(&seen.calls) == calls + 3);
    /* An answer out of range fails the send, which writes nothing. */
    uint64_t ends = 0;
    for (uint32_t q = 0; q < PARTITIONS; q++) ends += end_of(mq, "t", q);
    seen.force = 99;
    CHECK_FAIL(mql_send_record(p, &rec, &md), MQL_UNKNOWN_PARTITION, "partition 99");
    CHECK_FAIL(mql_produce(p, &rec, NULL, NULL), MQL_UNKNOWN_PARTITION, "partition 99");
    CHECK_FAIL(mql_send_batch(p, two, 2, mds), MQL_UNKNOWN_PARTITION, "partition 99");
    CHECK_OK(mql_producer_flush(p));
    uint64_t ends_after = 0;
    for (uint32_t q = 0; q < PARTITIONS; q++) ends_after += end_of(mq, "t", q);
    CHECK(ends_after == ends);
    seen.force = UINT32_MAX;
    mql_producer_free(p);

    /* Setting a named partitioner replaces the selector. */
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_partitioner_fn(pc, by_value_len, &seen));
    CHECK_OK(mql_producer_config_set_partitioner(pc, "round_robin"));
    p = producer_with(mq, pc);
    calls = atomic_load(&seen.calls);
    send_unkeyed(p, "after");
    CHECK(atomic_load(&seen.calls) == calls);
    mql_producer_free(p);

    CHECK_OK(mql_close(mq));
    puts("producer_partitioner: ok");
    return 0;
}
