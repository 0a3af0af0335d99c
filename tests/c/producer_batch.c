/* mql_send_batch: metadata per record in input order, matching what a
 * consumer reads back; records of a partition share batches; NULL out;
 * empty batches; an invalid or unroutable record sends nothing. */
#include "check.h"

#define N 40
#define PARTITIONS 4

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq = open_data(dir, "data");
    make_topic(mq, "b", PARTITIONS);
    make_topic(mq, "other", 1);

    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, NULL, &p));

    static char keys[N][16], values[N][32];
    mql_header hdr = {"h", 1, "hv", 2};
    mql_record recs[N];
    for (int i = 0; i < N; i++) {
        recs[i] = (mql_record)MQL_RECORD_INIT;
        recs[i].topic = i % 10 == 9 ? "other" : "b";
        int vl = snprintf(values[i], sizeof values[i], "batch-%d", i);
        recs[i].value = values[i];
        recs[i].value_len = (size_t)vl;
        if (i % 3 == 0) {
            int kl = snprintf(keys[i], sizeof keys[i], "key-%d", i % 4);
            recs[i].key = keys[i];
            recs[i].key_len = (size_t)kl;
        }
        if (i % 7 == 0 && recs[i].topic[0] == 'b') recs[i].partition = 3;
        if (i % 5 == 0) {
            recs[i].headers = &hdr;
            recs[i].header_count = 1;
        }
        if (i == 4) recs[i].timestamp = 1700000000000LL;
    }

    mql_producer_stats before;
    CHECK_OK(mql_producer_get_stats(p, &before));
    mql_metadata out[N];
    memset(out, 0xEE, sizeof out);
    CHECK_OK(mql_send_batch(p, recs, N, out));
    mql_producer_stats after;
    CHECK_OK(mql_producer_get_stats(p, &after));
    CHECK(after.records - before.records == N);
    CHECK(after.batches - before.batches <= PARTITIONS + 1); /* one batch per partition */
    CHECK(after.average_batch_records > 1.0);

    /* Metadata in input order; offsets per partition consecutive from 0. */
    uint64_t next[PARTITIONS] = {0}, next_other = 0;
    for (int i = 0; i < N; i++) {
        CHECK(!out[i].duplicate);
        if (recs[i].topic[0] == 'o') {
            CHECK(out[i].partition == 0 && out[i].offset == next_other++);
        } else {
            CHECK(out[i].partition < PARTITIONS);
            if (recs[i].partition >= 0) CHECK(out[i].partition == (uint32_t)recs[i].partition);
            CHECK(out[i].offset == next[out[i].partition]++);
        }
        if (i == 4) CHECK(out[i].timestamp == 1700000000000LL);
        /* Read back. */
        mql_message *m = read_at(mq, recs[i].topic, out[i].partition, out[i].offset);
        CHECK(value_is(m, values[i]));
        if (recs[i].key) CHECK(key_is(m, keys[i]));
        else CHECK(mql_message_key(m, NULL) == NULL);
        CHECK(mql_message_timestamp(m) == out[i].timestamp);
        CHECK(mql_message_header_count(m) == recs[i].header_count);
        mql_message_free(m);
    }
    /* Keyed records go where a single send of the same key goes. */
    mql_metadata single;
    CHECK(recs[3].partition == MQL_PARTITION_ANY && strcmp(keys[3], "key-3") == 0);
    CHECK_OK(mql_send(p, "b", "key-3", 5, "single", 6, &single));
    CHECK(single.partition == out[3].partition);

    /* NULL out, and empty batches. */
    uint64_t end3 = end_of(mq, "b", 3);
    mql_record two[2] = {MQL_RECORD_INIT, MQL_RECORD_INIT};
    two[0].topic = two[1].topic = "b";
    two[0].partition = two[1].partition = 3;
    two[0].value = "x";
    two[0].value_len = 1;
    CHECK_OK(mql_send_batch(p, two, 2, NULL));
    CHECK(end_of(mq, "b", 3) == end3 + 2);
    CHECK_OK(mql_send_batch(p, NULL, 0, NULL));
    CHECK_OK(mql_send_batch(p, two, 0, out)); /* nothing sent, nothing written */

    /* An invalid record anywhere sends nothing and writes no metadata. */
    uint64_t ends[PARTITIONS];
    for (uint32_t q = 0; q < PARTITIONS; q++) ends[q] = end_of(mq, "b", q);
    memset(out, 0x5A, sizeof out);
    mql_metadata untouched[N];
    memcpy(untouched, out, sizeof out);
    recs[5].topic = NULL;
    CHECK_FAIL(mql_send_batch(p, recs, N, out), MQL_NULL_ARGUMENT, "records[5].topic");
    recs[5].topic = "b";
    recs[6].value_len = 100; /* value NULL with a length */
    recs[6].value = NULL;
    CHECK_FAIL(mql_send_batch(p, recs, N, out), MQL_NULL_ARGUMENT, "records[6].value");
    recs[6].value = values[6];
    recs[6].value_len = strlen(values[6]);
    mql_header bad = {"\xff", 1, NULL, 0};
    recs[8].headers = &bad;
    recs[8].header_count = 1;
    CHECK_FAIL(mql_send_batch(p, recs, N, out), MQL_INVALID_UTF8, "records[8].headers[0].name");
    recs[8].headers = NULL;
    recs[8].header_count = 0;
    recs[11].partition = -9;
    CHECK_FAIL(mql_send_batch(p, recs, N, out), MQL_INVALID_ARGUMENT, "records[11].partition");
    recs[11].partition = MQL_PARTITION_ANY;
    recs[12].topic = "missing";
    CHECK_FAIL(mql_send_batch(p, recs, N, out), MQL_UNKNOWN_TOPIC, "missing");
    recs[12].topic = "b";
    recs[13].partition = 9;
    CHECK_FAIL(mql_send_batch(p, recs, N, out), MQL_UNKNOWN_PARTITION, "partition 9");
    recs[13].partition = MQL_PARTITION_ANY;
    CHECK(memcmp(out, untouched, sizeof out) == 0);
    for (uint32_t q = 0; q < PARTITIONS; q++) CHECK(end_of(mq, "b", q) == ends[q]);

    /* And the batch goes through once fixed. */
    CHECK_OK(mql_send_batch(p, recs, N, out));

    mql_producer_free(p);
    CHECK_OK(mql_close(mq));
    puts("producer_batch: ok");
    return 0;
}
