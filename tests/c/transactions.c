/* Transactions: a commit across two topics and partitions shows every
 * record (metadata in send order), an abort or a free without commit shows
 * none, offsets sent into a transaction are committed with it and only
 * then, a newer producer with the same transactional id fences the older
 * one, max_transaction_bytes, calls after the end, a transaction outliving
 * its producer, NULL arguments, and the isolation levels (both read the
 * same records; lag 0 over the markers). */
#define _POSIX_C_SOURCE 200809L
#include <time.h>

#include "check.h"

static mql_producer *txn_producer(mql_broker *mq, const char *id, size_t max_bytes) {
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_transactional_id(pc, id));
    if (max_bytes) CHECK_OK(mql_producer_config_set_max_transaction_bytes(pc, max_bytes));
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, pc, &p));
    mql_producer_config_free(pc);
    return p;
}

static mql_record record(const char *topic, int64_t partition, const char *value) {
    mql_record r = MQL_RECORD_INIT;
    r.topic = topic;
    r.partition = partition;
    r.value = value;
    r.value_len = strlen(value);
    return r;
}

static void tx_send(mql_txn *t, const char *topic, int64_t partition, const char *value) {
    mql_record r = record(topic, partition, value);
    CHECK_OK(mql_txn_send(t, &r));
}

/* Every value of topic/partition, joined with ",", read by a consumer at
 * isolation level `level` (-1: the default). */
static void read_all(mql_broker *mq, const char *topic, uint32_t partition, int level, char *out,
                     size_t size) {
    mql_consumer_config *cc;
    CHECK_OK(mql_consumer_config_new(&cc));
    if (level >= 0) CHECK_OK(mql_consumer_config_set_isolation_level(cc, level));
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, NULL, cc, &c));
    mql_consumer_config_free(cc);
    CHECK_OK(mql_assign(c, topic, partition));
    out[0] = '\0';
    uint64_t end = end_of(mq, topic, partition);
    for (;;) {
        uint64_t pos;
        CHECK_OK(mql_position(c, topic, partition, &pos));
        if (pos >= end) break;
        mql_message *m;
        CHECK_OK(mql_poll(c, 1000, &m));
        size_t len;
        const void *v = mql_message_value(m, &len);
        if (out[0] != '\0') strncat(out, ",", size - strlen(out) - 1);
        strncat(out, v, len < size - strlen(out) - 1 ? len : size - strlen(out) - 1);
        mql_message_free(m);
    }
    /* Nothing more: the markers are never delivered. */
    mql_message *m = NULL;
    CHECK_STATUS(mql_poll(c, 0, &m), MQL_TIMEOUT);
    mql_consumer_free(c);
}

static int reads(mql_broker *mq, const char *topic, uint32_t partition, const char *want) {
    char got[1024];
    read_all(mq, topic, partition, -1, got, sizeof got);
    if (strcmp(got, want) != 0) fprintf(stderr, "%s/%u holds \"%s\", want \"%s\"\n", topic, partition, got, want);
    return strcmp(got, want) == 0;
}

static uint64_t committed(mql_broker *mq, const char *group, const char *topic, uint32_t partition) {
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, group, NULL, &c));
    uint64_t off;
    CHECK_OK(mql_committed(c, topic, partition, &off, NULL, 0, NULL));
    mql_consumer_free(c);
    return off;
}

static void commit_across_topics_and_partitions(mql_broker *mq) {
    mql_producer *p = txn_producer(mq, "etl", 0);
    mql_txn *t;
    CHECK_OK(mql_txn_begin(p, &t));
    tx_send(t, "a", 0, "a0-1");
    tx_send(t, "a", 1, "a1-1");
    tx_send(t, "b", 0, "b0-1");
    tx_send(t, "a", 0, "a0-2");
    size_t n = 0;
    CHECK_OK(mql_txn_len(t, &n));
    CHECK(n == 4);
    /* Nothing is visible before the commit. */
    CHECK(end_of(mq, "a", 0) == 0 && end_of(mq, "a", 1) == 0 && end_of(mq, "b", 0) == 0);
    /* Too small an out array: refused, nothing done, still open. */
    mql_metadata md[5];
    memset(md, 0x5A, sizeof md);
    CHECK_FAIL(mql_txn_commit(t, md, 3), MQL_INVALID_ARGUMENT, "3 entries for 4 records");
    CHECK(end_of(mq, "a", 0) == 0);
    CHECK_OK(mql_txn_commit(t, md, 5));
    /* Metadata in send order; the entry after the records is untouched. */
    CHECK(md[0].partition == 0 && md[0].offset == 0);
    CHECK(md[1].partition == 1 && md[1].offset == 0);
    CHECK(md[2].partition == 0 && md[2].offset == 0);
    CHECK(md[3].partition == 0 && md[3].offset == 1);
    const unsigned char *rest = (const unsigned char *)&md[4];
    for (size_t i = 0; i < sizeof md[4]; i++) CHECK(rest[i] == 0x5A);
    CHECK(reads(mq, "a", 0, "a0-1,a0-2"));
    CHECK(reads(mq, "a", 1, "a1-1"));
    CHECK(reads(mq, "b", 0, "b0-1"));

    /* The handle stays valid; every later call is refused. */
    mql_record r = record("a", 0, "late");
    CHECK_FAIL(mql_txn_send(t, &r), MQL_INVALID_ARGUMENT, "already committed or aborted");
    CHECK_FAIL(mql_txn_commit(t, NULL, 0), MQL_INVALID_ARGUMENT, "already committed or aborted");
    CHECK_FAIL(mql_txn_abort(t), MQL_INVALID_ARGUMENT, "already committed or aborted");
    mql_committed_offset o = {"a", 0, 1, NULL, 0};
    CHECK_FAIL(mql_txn_send_offsets_to(t, "g", &o, 1), MQL_INVALID_ARGUMENT, "already committed");
    CHECK_OK(mql_txn_len(t, &n));
    CHECK(n == 0);
    mql_txn_free(t);

    /* Commit without metadata: out NULL. An empty transaction commits too. */
    CHECK_OK(mql_txn_begin(p, &t));
    tx_send(t, "b", 0, "b0-2");
    CHECK_OK(mql_txn_commit(t, NULL, 0));
    mql_txn_free(t);
    CHECK_OK(mql_txn_begin(p, &t));
    CHECK_OK(mql_txn_commit(t, NULL, 0));
    mql_txn_free(t);
    CHECK(reads(mq, "b", 0, "b0-1,b0-2"));
    mql_producer_free(p);
}

static void abort_and_free_write_nothing(mql_broker *mq) {
    mql_producer *p = txn_producer(mq, "etl", 0);
    uint64_t a0 = end_of(mq, "a", 0), b0 = end_of(mq, "b", 0);
    mql_txn *t;
    CHECK_OK(mql_txn_begin(p, &t));
    tx_send(t, "a", 0, "aborted");
    tx_send(t, "b", 0, "aborted");
    /* One transaction at a time per producer. */
    mql_txn *second = NULL;
    CHECK_FAIL(mql_txn_begin(p, &second), MQL_INVALID_ARGUMENT, "already open");
    CHECK(second == NULL);
    CHECK_OK(mql_txn_abort(t));
    CHECK_FAIL(mql_txn_abort(t), MQL_INVALID_ARGUMENT, "already committed or aborted");
    mql_record r = record("a", 0, "late");
    CHECK_FAIL(mql_txn_send(t, &r), MQL_INVALID_ARGUMENT, "already committed or aborted");
    CHECK_FAIL(mql_txn_commit(t, NULL, 0), MQL_INVALID_ARGUMENT, "already committed or aborted");
    mql_txn_free(t);
    CHECK(end_of(mq, "a", 0) == a0 && end_of(mq, "b", 0) == b0);

    /* Freed while open: aborted, and the producer may begin again. */
    CHECK_OK(mql_txn_begin(p, &t));
    tx_send(t, "a", 0, "freed");
    mql_txn_free(t);
    mql_txn_free(NULL);
    CHECK(end_of(mq, "a", 0) == a0);
    CHECK_OK(mql_txn_begin(p, &t));
    tx_send(t, "a", 0, "after");
    CHECK_OK(mql_txn_commit(t, NULL, 0));
    mql_txn_free(t);
    CHECK(reads(mq, "a", 0, "a0-1,a0-2,after"));

    /* A transaction that outlives its producer: refused, not a crash. */
    CHECK_OK(mql_txn_begin(p, &t));
    tx_send(t, "a", 0, "orphan");
    mql_producer_free(p);
    CHECK_FAIL(mql_txn_send(t, &r), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_txn_commit(t, NULL, 0), MQL_CLOSED, "closed");
    mql_txn_free(t);
    CHECK(reads(mq, "a", 0, "a0-1,a0-2,after"));
}

static void offsets_commit_with_the_transaction(mql_broker *mq) {
    make_topic(mq, "in", 1);
    fill(mq, "in", 1, 3);
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, "g", NULL, &c));
    CHECK_OK(mql_assign(c, "in", 0));
    mql_message *m;
    CHECK_OK(mql_poll(c, 1000, &m));
    mql_message_free(m);
    CHECK_OK(mql_poll(c, 1000, &m));
    mql_message_free(m);

    mql_producer *p = txn_producer(mq, "ctp", 0);
    mql_txn *t;
    /* Aborted: neither the record nor the offsets. */
    CHECK_OK(mql_txn_begin(p, &t));
    tx_send(t, "b", 0, "out-aborted");
    CHECK_OK(mql_txn_send_offsets(t, c));
    CHECK_OK(mql_txn_abort(t));
    mql_txn_free(t);
    CHECK(committed(mq, "g", "in", 0) == MQL_OFFSET_UNKNOWN);

    /* Committed: both, and the offsets only at the commit. */
    uint64_t b0 = end_of(mq, "b", 0);
    CHECK_OK(mql_txn_begin(p, &t));
    tx_send(t, "b", 0, "out-1");
    CHECK_OK(mql_txn_send_offsets(t, c));
    CHECK(committed(mq, "g", "in", 0) == MQL_OFFSET_UNKNOWN);
    CHECK_OK(mql_txn_commit(t, NULL, 0));
    mql_txn_free(t);
    CHECK(committed(mq, "g", "in", 0) == 2);
    CHECK(end_of(mq, "b", 0) > b0);
    CHECK(reads(mq, "b", 0, "b0-1,b0-2,out-1"));

    /* Explicit offsets for another group, with metadata. */
    CHECK_OK(mql_txn_begin(p, &t));
    mql_committed_offset o[2] = {{"in", 0, 1, "first", 0}, {"in", 0, 3, "later wins", 0}};
    CHECK_OK(mql_txn_send_offsets_to(t, "other", o, 2));
    /* Bad entries add nothing and leave the transaction open. */
    mql_committed_offset past = {"in", 0, 99, NULL, 0};
    CHECK_FAIL(mql_txn_send_offsets_to(t, "other", &past, 1), MQL_OFFSET_OUT_OF_RANGE, "99");
    mql_committed_offset unknown = {"nope", 0, 0, NULL, 0};
    CHECK_FAIL(mql_txn_send_offsets_to(t, "other", &unknown, 1), MQL_UNKNOWN_TOPIC, "nope");
    CHECK_FAIL(mql_txn_send_offsets_to(t, "", o, 1), MQL_INVALID_ARGUMENT, "group");
    CHECK_OK(mql_txn_send_offsets_to(t, "other", NULL, 0));
    CHECK(committed(mq, "other", "in", 0) == MQL_OFFSET_UNKNOWN);
    CHECK_OK(mql_txn_commit(t, NULL, 0));
    mql_txn_free(t);
    mql_consumer *oc;
    CHECK_OK(mql_consumer_new(mq, "other", NULL, &oc));
    uint64_t off;
    char meta[32];
    CHECK_OK(mql_committed(oc, "in", 0, &off, meta, sizeof meta, NULL));
    CHECK(off == 3 && strcmp(meta, "later wins") == 0);
    mql_consumer_free(oc);

    /* A consumer without a group has no offsets to send. */
    mql_consumer *alone;
    CHECK_OK(mql_consumer_new(mq, NULL, NULL, &alone));
    CHECK_OK(mql_assign(alone, "in", 0));
    CHECK_OK(mql_txn_begin(p, &t));
    CHECK_FAIL(mql_txn_send_offsets(t, alone), MQL_INVALID_ARGUMENT, "group_id");
    mql_txn_free(t);
    mql_consumer_free(alone);
    mql_consumer_free(c);
    mql_producer_free(p);
}

static void newer_producer_fences_older(mql_broker *mq) {
    uint64_t a1 = end_of(mq, "a", 1);
    mql_producer *old = txn_producer(mq, "fence", 0);
    mql_txn *t;
    CHECK_OK(mql_txn_begin(old, &t));
    tx_send(t, "a", 1, "from-old");
    mql_producer *newer = txn_producer(mq, "fence", 0);
    CHECK_FAIL(mql_txn_commit(t, NULL, 0), MQL_PRODUCER_FENCED, "fenced");
    mql_txn_free(t);
    CHECK_FAIL(mql_txn_begin(old, &t), MQL_PRODUCER_FENCED, "fenced");
    CHECK(end_of(mq, "a", 1) == a1);
    CHECK_OK(mql_txn_begin(newer, &t));
    tx_send(t, "a", 1, "from-new");
    CHECK_OK(mql_txn_commit(t, NULL, 0));
    mql_txn_free(t);
    CHECK(reads(mq, "a", 1, "a1-1,from-new"));
    mql_producer_free(old);
    mql_producer_free(newer);
}

static void too_large_and_bad_arguments(mql_broker *mq) {
    mql_producer *p = txn_producer(mq, "small", 300);
    static char big[200];
    memset(big, 'x', sizeof big);
    mql_txn *t;
    CHECK_OK(mql_txn_begin(p, &t));
    mql_record r = record("b", 0, "");
    r.value = big;
    r.value_len = 100;
    CHECK_OK(mql_txn_send(t, &r));
    r.value_len = 200;
    CHECK_FAIL(mql_txn_send(t, &r), MQL_TRANSACTION_TOO_LARGE, "limit of 300");
    size_t n;
    CHECK_OK(mql_txn_len(t, &n));
    CHECK(n == 1); /* not added; still open */

    /* Bad records: typed errors, nothing added. */
    r = record("nope", -1, "v");
    CHECK_FAIL(mql_txn_send(t, &r), MQL_UNKNOWN_TOPIC, "nope");
    r = record("b", 5, "v");
    CHECK_FAIL(mql_txn_send(t, &r), MQL_UNKNOWN_PARTITION, "5");
    r = record("b", -2, "v");
    CHECK_FAIL(mql_txn_send(t, &r), MQL_INVALID_ARGUMENT, "record->partition");
    r = record("b", 0, "v");
    r.sequence = 1;
    r.has_sequence = true;
    CHECK_FAIL(mql_txn_send(t, &r), MQL_INVALID_ARGUMENT, "sequence");
    CHECK_OK(mql_txn_len(t, &n));
    CHECK(n == 1);

    /* NULL arguments. */
    CHECK_FAIL(mql_txn_send(NULL, &r), MQL_NULL_ARGUMENT, "`txn` is NULL");
    CHECK_FAIL(mql_txn_send(t, NULL), MQL_NULL_ARGUMENT, "`record` is NULL");
    r.topic = NULL;
    CHECK_FAIL(mql_txn_send(t, &r), MQL_NULL_ARGUMENT, "`record->topic` is NULL");
    CHECK_FAIL(mql_txn_begin(NULL, &t), MQL_NULL_ARGUMENT, "`producer` is NULL");
    CHECK_FAIL(mql_txn_begin(p, NULL), MQL_NULL_ARGUMENT, "`out` is NULL");
    CHECK_FAIL(mql_txn_send_offsets(t, NULL), MQL_NULL_ARGUMENT, "`consumer` is NULL");
    CHECK_FAIL(mql_txn_send_offsets_to(t, NULL, NULL, 0), MQL_NULL_ARGUMENT, "`group` is NULL");
    CHECK_FAIL(mql_txn_send_offsets_to(t, "g", NULL, 1), MQL_NULL_ARGUMENT, "`offsets` is NULL");
    CHECK_FAIL(mql_txn_commit(NULL, NULL, 0), MQL_NULL_ARGUMENT, "`txn` is NULL");
    CHECK_FAIL(mql_txn_abort(NULL), MQL_NULL_ARGUMENT, "`txn` is NULL");
    CHECK_FAIL(mql_txn_len(t, NULL), MQL_NULL_ARGUMENT, "`out` is NULL");

    mql_metadata md;
    CHECK_OK(mql_txn_commit(t, &md, 1));
    CHECK(md.partition == 0);
    mql_txn_free(t);
    mql_producer_free(p);

    /* A producer without a transactional id runs no transactions. */
    mql_producer *plain;
    CHECK_OK(mql_producer_new(mq, NULL, &plain));
    t = NULL;
    CHECK_FAIL(mql_txn_begin(plain, &t), MQL_INVALID_ARGUMENT, "transactional_id");
    CHECK(t == NULL);
    mql_producer_free(plain);

    /* Config setters. */
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_FAIL(mql_producer_config_set_transactional_id(pc, "bad/name"), MQL_INVALID_ARGUMENT,
               "transactional_id");
    CHECK_FAIL(mql_producer_config_set_max_transaction_bytes(pc, 0), MQL_INVALID_ARGUMENT,
               "max_transaction_bytes");
    CHECK_OK(mql_producer_config_set_transactional_id(pc, NULL));
    CHECK_OK(mql_producer_config_set_transaction_timeout_ms(pc, 0));
    CHECK_FAIL(mql_producer_config_set_transactional_id(NULL, "x"), MQL_NULL_ARGUMENT, "`config` is NULL");
    CHECK_FAIL(mql_producer_config_set_max_transaction_bytes(NULL, 1), MQL_NULL_ARGUMENT,
               "`config` is NULL");
    CHECK_FAIL(mql_producer_config_set_transaction_timeout_ms(NULL, 1), MQL_NULL_ARGUMENT,
               "`config` is NULL");
    mql_producer_config_free(pc);
}

static void transaction_timeout(mql_broker *mq) {
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_transactional_id(pc, "slow"));
    CHECK_OK(mql_producer_config_set_transaction_timeout_ms(pc, 1));
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, pc, &p));
    mql_producer_config_free(pc);
    uint64_t b0 = end_of(mq, "b", 0);
    mql_txn *t;
    CHECK_OK(mql_txn_begin(p, &t));
    tx_send(t, "b", 0, "too-late");
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    CHECK_FAIL(mql_txn_commit(t, NULL, 0), MQL_TIMEOUT, "");
    mql_txn_free(t);
    CHECK(end_of(mq, "b", 0) == b0);
    mql_producer_free(p);
}

static void isolation_levels(mql_broker *mq) {
    mql_consumer_config *cc;
    CHECK_OK(mql_consumer_config_new(&cc));
    CHECK_FAIL(mql_consumer_config_set_isolation_level(cc, 7), MQL_INVALID_ARGUMENT, "7");
    CHECK_FAIL(mql_consumer_config_set_isolation_level(cc, -1), MQL_INVALID_ARGUMENT, "-1");
    CHECK_FAIL(mql_consumer_config_set_isolation_level(NULL, MQL_READ_COMMITTED), MQL_NULL_ARGUMENT,
               "`config` is NULL");
    CHECK_OK(mql_consumer_config_set_isolation_level(cc, MQL_READ_UNCOMMITTED));
    CHECK_OK(mql_consumer_config_set_isolation_level(cc, MQL_READ_COMMITTED));
    mql_consumer_config_free(cc);

    /* An aborted transaction between committed ones. */
    mql_producer *p = txn_producer(mq, "iso", 0);
    mql_txn *t;
    CHECK_OK(mql_txn_begin(p, &t));
    tx_send(t, "b", 0, "iso-1");
    CHECK_OK(mql_txn_commit(t, NULL, 0));
    mql_txn_free(t);
    CHECK_OK(mql_txn_begin(p, &t));
    tx_send(t, "b", 0, "iso-aborted");
    mql_txn_free(t);
    CHECK_OK(mql_txn_begin(p, &t));
    tx_send(t, "b", 0, "iso-2");
    CHECK_OK(mql_txn_commit(t, NULL, 0));
    mql_txn_free(t);
    mql_producer_free(p);

    char committed_view[1024], uncommitted_view[1024];
    read_all(mq, "b", 0, MQL_READ_COMMITTED, committed_view, sizeof committed_view);
    read_all(mq, "b", 0, MQL_READ_UNCOMMITTED, uncommitted_view, sizeof uncommitted_view);
    CHECK(strcmp(committed_view, uncommitted_view) == 0);
    CHECK(strstr(committed_view, "iso-aborted") == NULL);
    CHECK(strstr(committed_view, "b0-1,b0-2,out-1,") == committed_view && strstr(committed_view, ",iso-1,iso-2") != NULL);

    /* A group member that read everything has no lag, markers and all. */
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, "lag", NULL, &c));
    CHECK_OK(mql_assign(c, "b", 0));
    mql_message *m;
    int got = 0;
    while (mql_poll(c, 200, &m) == MQL_OK) {
        mql_message_free(m);
        got++;
    }
    CHECK(got > 0);
    uint64_t lag = 99;
    CHECK_OK(mql_lag(c, "b", 0, &lag));
    CHECK(lag == 0);
    mql_consumer_free(c);
}

int main(int argc, char **argv) {
    mql_broker *mq = open_data(scratch_dir(argc, argv), "data");
    make_topic(mq, "a", 2);
    make_topic(mq, "b", 1);
    commit_across_topics_and_partitions(mq);
    abort_and_free_write_nothing(mq);
    offsets_commit_with_the_transaction(mq);
    newer_producer_fences_older(mq);
    too_large_and_bad_arguments(mq);
    transaction_timeout(mq);
    isolation_levels(mq);
    CHECK_OK(mql_close(mq));
    printf("transactions: ok\n");
    return 0;
}
