/* mql_poll_batch hands out every message of one fetch at once: across two
 * partitions and small fetches it delivers exactly what mql_poll delivers, in
 * the same order; after an mql_poll it returns the rest of that fetch
 * without fetching again; positions, commits and statistics count the whole
 * batch; borrowed messages read like owned ones; an index past the end is
 * NULL; it times out like mql_poll, with `*out` untouched. */
#include "check.h"

#define PER_PARTITION 300

static mql_consumer *consumer(mql_broker *mq, const char *group, uint32_t max_poll) {
    mql_consumer_config *cc;
    CHECK_OK(mql_consumer_config_new(&cc));
    CHECK_OK(mql_consumer_config_set_max_poll_records(cc, max_poll));
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, group, cc, &c));
    mql_consumer_config_free(cc);
    CHECK_OK(mql_assign(c, "events", 0));
    CHECK_OK(mql_assign(c, "events", 1));
    return c;
}

/* "partition:offset:value" of a message, for comparing deliveries. */
static void describe(const mql_message *m, char *out, size_t size) {
    size_t len;
    const char *v = mql_message_value(m, &len);
    snprintf(out, size, "%u:%llu:%.*s", mql_message_partition(m),
             (unsigned long long)mql_message_offset(m), (int)len, v);
}

/* What mql_poll hands out, one message per call, with fetches of
 * `max_poll` (the order across partitions depends on it). */
static void reference(mql_broker *mq, uint32_t max_poll, char (*out)[64], int n) {
    mql_consumer *a = consumer(mq, NULL, max_poll);
    for (int i = 0; i < n; i++) {
        mql_message *m;
        CHECK_OK(mql_poll(a, 1000, &m));
        describe(m, out[i], sizeof out[i]);
        mql_message_free(m);
    }
    mql_consumer_free(a);
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq = open_data(dir, "data");
    make_topic(mq, "events", 2);
    fill(mq, "events", 2, PER_PARTITION);
    const int total = 2 * PER_PARTITION;
    static char want[2 * PER_PARTITION][64], got[64];
    reference(mq, 7, want, total);

    /* The same messages, in the same order, a batch at a time. */
    mql_consumer *b = consumer(mq, "g", 7);
    int seen = 0, batches = 0;
    while (seen < total) {
        mql_message_batch *batch;
        CHECK_OK(mql_poll_batch(b, 1000, &batch));
        size_t n = mql_message_batch_len(batch);
        CHECK(n >= 1 && n <= 7);
        for (size_t i = 0; i < n; i++) {
            const mql_message *m = mql_message_batch_get(batch, i);
            CHECK(m != NULL);
            CHECK(strcmp(mql_message_topic(m), "events") == 0);
            CHECK(mql_message_timestamp(m) > 0);
            describe(m, got, sizeof got);
            CHECK(strcmp(got, want[seen]) == 0);
            seen++;
        }
        CHECK(mql_message_batch_get(batch, n) == NULL);
        CHECK(mql_message_batch_get(batch, (size_t)-1) == NULL);
        mql_message_batch_free(batch);
        batches++;
    }
    printf("%d messages in %d batches\n", seen, batches);
    CHECK(batches >= total / 7);

    /* Nothing left: a timeout, with *out untouched. */
    mql_message_batch *untouched = (mql_message_batch *)&untouched;
    CHECK_STATUS(mql_poll_batch(b, 50, &untouched), MQL_TIMEOUT);
    CHECK(untouched == (mql_message_batch *)&untouched);

    /* Every message was handed out: positions at the end, commits cover all,
     * statistics count all. */
    uint64_t pos;
    for (uint32_t p = 0; p < 2; p++) {
        CHECK_OK(mql_position(b, "events", p, &pos));
        CHECK(pos == PER_PARTITION);
    }
    CHECK_OK(mql_commit(b));
    uint64_t committed;
    CHECK_OK(mql_committed(b, "events", 1, &committed, NULL, 0, NULL));
    CHECK(committed == PER_PARTITION);
    mql_consumer_stats st;
    CHECK_OK(mql_consumer_get_stats(b, &st));
    CHECK(st.records == (uint64_t)total);
    mql_consumer_free(b);

    /* After an mql_poll, mql_poll_batch hands out the rest of that fetch
     * (no new fetch): the two together are the first fetch. */
    reference(mq, 10, want, 10);
    mql_consumer *c = consumer(mq, NULL, 10);
    mql_message *first;
    CHECK_OK(mql_poll(c, 1000, &first));
    describe(first, got, sizeof got);
    CHECK(strcmp(got, want[0]) == 0);
    mql_message_batch *rest;
    CHECK_OK(mql_poll_batch(c, 1000, &rest));
    CHECK(mql_message_batch_len(rest) == 9);
    for (size_t i = 0; i < 9; i++) {
        describe(mql_message_batch_get(rest, i), got, sizeof got);
        CHECK(strcmp(got, want[1 + i]) == 0);
    }
    CHECK_OK(mql_consumer_get_stats(c, &st));
    CHECK(st.records == 10 && st.polls == 2);
    /* A borrowed message stays readable after its consumer is gone, until
     * its batch is freed (like an owned one until mql_message_free). */
    mql_consumer_free(c);
    describe(mql_message_batch_get(rest, 8), got, sizeof got);
    CHECK(strcmp(got, want[9]) == 0);
    mql_message_batch_free(rest);
    mql_message_free(first);

    /* NULL handles: neutral values, or a typed error. */
    CHECK(mql_message_batch_len(NULL) == 0);
    CHECK(mql_message_batch_get(NULL, 0) == NULL);
    mql_message_batch_free(NULL);
    mql_message_batch *out;
    CHECK_FAIL(mql_poll_batch(NULL, 0, &out), MQL_NULL_ARGUMENT, "consumer");

    CHECK_OK(mql_close(mq));
    printf("poll_batch: ok\n");
    return 0;
}
