/* mql_producer_next_sequence: the first application sequence not written
 * to any partition. Sequences sent to their partitions in a crafted order
 * leave a gap (3, meant for partition 0, is missing while 4 and 5 were
 * written): next_sequence answers 3 where last_sequence + 1 would skip it,
 * also after reopening; re-sending from it fills the gap and writes nothing
 * twice. Argument checks: NULL handle and output, a producer that is not
 * idempotent, a closed broker. */
#include "check.h"

#define PARTS 3

static mql_producer *named(mql_broker *mq, const char *name) {
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_name(pc, name));
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, pc, &p));
    mql_producer_config_free(pc);
    return p;
}

/* Sends sequence `seq` to partition seq % PARTS; returns whether it was a
 * duplicate. */
static bool send_seq(mql_producer *p, int64_t seq) {
    char value[32];
    int n = snprintf(value, sizeof value, "seq-%lld", (long long)seq);
    mql_record r = MQL_RECORD_INIT;
    r.topic = "t";
    r.partition = seq % PARTS;
    r.value = value;
    r.value_len = (size_t)n;
    r.sequence = seq;
    r.has_sequence = true;
    mql_metadata md;
    CHECK_OK(mql_send_record(p, &r, &md));
    CHECK(md.partition == (uint32_t)(seq % PARTS));
    return md.duplicate;
}

static uint64_t total(mql_broker *mq) {
    uint64_t n = 0;
    for (uint32_t q = 0; q < PARTS; q++) n += end_of(mq, "t", q);
    return n;
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq = open_data(dir, "data");
    make_topic(mq, "t", PARTS);

    /* Argument checks change nothing. */
    int64_t next = 77, last = 77;
    CHECK_FAIL(mql_producer_next_sequence(NULL, &next), MQL_NULL_ARGUMENT, "producer");
    mql_producer *p = named(mq, "ingest");
    CHECK_FAIL(mql_producer_next_sequence(p, NULL), MQL_NULL_ARGUMENT, "out");
    CHECK(next == 77);
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_idempotent(pc, false));
    mql_producer *plain;
    CHECK_OK(mql_producer_new(mq, pc, &plain));
    mql_producer_config_free(pc);
    CHECK_FAIL(mql_producer_next_sequence(plain, &next), MQL_INVALID_ARGUMENT, "idempotent");
    CHECK(next == 77);
    mql_producer_free(plain);

    /* Nothing written yet. */
    CHECK_OK(mql_producer_next_sequence(p, &next));
    CHECK(next == 0);
    /* 0, 1, 2, 4, 5 written, 3 lost: the first gap. */
    const int64_t written[] = {0, 1, 2, 4, 5};
    for (size_t i = 0; i < sizeof written / sizeof written[0]; i++) CHECK(!send_seq(p, written[i]));
    CHECK_OK(mql_producer_next_sequence(p, &next));
    CHECK_OK(mql_producer_last_sequence(p, &last));
    CHECK(next == 3 && last == 5);
    mql_producer_free(p);
    CHECK_OK(mql_close(mq));

    /* After reopening: the same answer; re-sending from it fills the gap. */
    mq = open_data(dir, "data");
    p = named(mq, "ingest");
    CHECK_OK(mql_producer_next_sequence(p, &next));
    CHECK(next == 3);
    for (int64_t s = next; s < 9; s++) CHECK(send_seq(p, s) == (s == 4 || s == 5));
    CHECK(total(mq) == 9);
    CHECK_OK(mql_producer_next_sequence(p, &next));
    CHECK(next == 9);
    /* A closed producer handle still answers; a closed broker does not. */
    CHECK_OK(mql_producer_close(p));
    CHECK_OK(mql_producer_next_sequence(p, &next));
    CHECK(next == 9);
    CHECK_OK(mql_close(mq));
    next = 77;
    CHECK_FAIL(mql_producer_next_sequence(p, &next), MQL_CLOSED, "closed");
    CHECK(next == 77);
    mql_producer_free(p);
    printf("ok\n");
    return 0;
}
