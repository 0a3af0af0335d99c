/* The C API on a Kafka cluster: mql_open("kafka://...") with a librdkafka
 * property from mql_config_set_kafka_property gives a broker whose topics,
 * producers and consumers are the cluster's, with the calls and statuses of
 * a data directory: topics created, listed by count and deleted; records
 * sent to a partition and by key (murmur2, as mql_partition_for_key says)
 * and read back whole; a group that commits and a new member resuming
 * there; MQL_TOPIC_EXISTS, MQL_UNKNOWN_PARTITION and MQL_INVALID_ARGUMENT
 * (commit without a group) as on a directory. The cluster is the broker
 * run.sh starts (MQLITE_KAFKA_URL); without one the test says so and
 * passes. */
#include "check.h"

#include <stdlib.h>
#include <unistd.h>

static mql_consumer *member(mql_broker *mq, const char *group, const char *topic) {
    mql_consumer_config *cc;
    CHECK_OK(mql_consumer_config_new(&cc));
    CHECK_OK(mql_consumer_config_set_enable_auto_commit(cc, false));
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, group, cc, &c));
    mql_consumer_config_free(cc);
    CHECK_OK(mql_subscribe(c, topic));
    return c;
}

/* The next message within 30 s. */
static mql_message *next(mql_consumer *c) {
    for (int i = 0; i < 150; i++) {
        mql_message *m = NULL;
        mql_status st = mql_poll(c, 200, &m);
        if (st == MQL_OK) return m;
        CHECK(st == MQL_TIMEOUT);
    }
    FAIL_AT("no message within 30 s");
    return NULL;
}

int main(int argc, char **argv) {
    (void)scratch_dir(argc, argv);
    const char *url = getenv("MQLITE_KAFKA_URL");
    if (url == NULL || *url == '\0') {
        printf("skipped: no MQLITE_KAFKA_URL (run.sh sets it when tansu is installed)\n");
        return 0;
    }
    mql_config *cfg;
    CHECK_OK(mql_config_new(&cfg));
    CHECK_OK(mql_config_set_kafka_property(cfg, "request.timeout.ms", "20000"));
    mql_broker *mq;
    CHECK_OK(mql_open(url, cfg, &mq));
    mql_config_free(cfg);

    char topic[64], group[64];
    snprintf(topic, sizeof topic, "c-kafka-%d", (int)getpid());
    snprintf(group, sizeof group, "c-group-%d", (int)getpid());
    make_topic(mq, topic, 3);
    uint32_t count = 0;
    CHECK_OK(mql_topic_partition_count(mq, topic, &count));
    CHECK(count == 3);
    mql_topic_config *tc;
    CHECK_OK(mql_topic_config_new(3, &tc));
    CHECK_FAIL(mql_topic_create(mq, topic, tc), MQL_TOPIC_EXISTS, "exists");
    mql_topic_config_free(tc);

    /* Explicit partitions: dense offsets; keys: murmur2's partition. */
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, NULL, &p));
    for (int i = 0; i < 4; i++) CHECK(send_to(p, topic, 1, "explicit") == (uint64_t)i);
    mql_metadata md;
    CHECK_OK(mql_send(p, topic, "user-7", 6, "keyed", 5, &md));
    uint32_t want = 0;
    CHECK_OK(mql_partition_for_key("user-7", 6, 3, &want));
    CHECK(md.partition == want);
    mql_record rec = MQL_RECORD_INIT;
    rec.topic = topic;
    rec.partition = 5;
    rec.value = "x";
    rec.value_len = 1;
    CHECK_FAIL(mql_send_record(p, &rec, NULL), MQL_UNKNOWN_PARTITION, "partition");
    CHECK_OK(mql_producer_flush(p));

    /* A group reads all 5, commits 2 of partition 1; a new member resumes. */
    mql_consumer *c = member(mq, group, topic);
    int keyed = 0, explicit_ = 0;
    for (int i = 0; i < 5; i++) {
        mql_message *m = next(c);
        if (value_is(m, "keyed")) {
            CHECK(key_is(m, "user-7") && mql_message_partition(m) == want);
            keyed++;
        } else {
            CHECK(value_is(m, "explicit") && mql_message_partition(m) == 1);
            explicit_++;
        }
        mql_message_free(m);
    }
    CHECK(keyed == 1 && explicit_ == 4);
    /* Partition 1 at 2; the keyed record's partition past it (when it is
     * another one). */
    mql_committed_offset co[2] = {{topic, 1, 2, "", 0}, {topic, want, 1, "", 0}};
    CHECK_OK(mql_commit_offsets(c, co, want != 1 ? 2 : 1));
    uint64_t off = 0;
    CHECK_OK(mql_committed(c, topic, 1, &off, NULL, 0, NULL));
    CHECK(off == 2);
    mql_consumer_free(c);
    mql_consumer *again = member(mq, group, topic);
    mql_message *m = next(again);
    CHECK(mql_message_partition(m) == 1 && mql_message_offset(m) == 2);
    mql_message_free(m);
    mql_consumer_free(again);

    /* No group: nothing to commit to. */
    mql_consumer *free_c;
    CHECK_OK(mql_consumer_new(mq, NULL, NULL, &free_c));
    CHECK_OK(mql_assign(free_c, topic, 0));
    CHECK_FAIL(mql_commit(free_c), MQL_INVALID_ARGUMENT, "group");
    mql_consumer_free(free_c);

    /* A named producer needs Kafka's transactions, which tansu lacks:
     * refused, with the reason. */
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_name(pc, "c-named"));
    mql_producer *named = NULL;
    CHECK_FAIL(mql_producer_new(mq, pc, &named), MQL_INVALID_CONFIG, "transactions");
    CHECK(named == NULL);
    mql_producer_config_free(pc);

    mql_producer_free(p);
    CHECK_OK(mql_topic_delete(mq, topic));
    CHECK_OK(mql_close(mq));
    printf("ok\n");
    return 0;
}
