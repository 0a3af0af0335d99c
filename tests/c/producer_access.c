/* Access modes of named producers (exclusive, wait-for-exclusive, shared,
 * exclusive-with-fencing) and automatic numbering from an initial
 * sequence: the setters' checks, MQL_PRODUCER_BUSY changing nothing,
 * MQL_TIMEOUT of a waiting producer, shared producers sending together,
 * and numbering that continues after a restart. */
#include "check.h"

static mql_producer *with_mode(mql_broker *mq, const char *name, int mode, int64_t max_block_ms,
                               mql_status want) {
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    if (name) CHECK_OK(mql_producer_config_set_name(pc, name));
    CHECK_OK(mql_producer_config_set_access_mode(pc, mode));
    if (max_block_ms >= 0) CHECK_OK(mql_producer_config_set_max_block_ms(pc, (uint64_t)max_block_ms));
    mql_producer *p = NULL;
    CHECK_STATUS(mql_producer_new(mq, pc, &p), want);
    mql_producer_config_free(pc);
    CHECK((p != NULL) == (want == MQL_OK));
    return p;
}

static mql_producer *numbered(mql_broker *mq, int64_t first) {
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_name(pc, "num"));
    CHECK_OK(mql_producer_config_set_initial_sequence(pc, first));
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, pc, &p));
    mql_producer_config_free(pc);
    return p;
}

static int64_t last_of(mql_producer *p) {
    int64_t last = -7;
    CHECK_OK(mql_producer_last_sequence(p, &last));
    return last;
}

static int64_t next_of(mql_producer *p) {
    int64_t next = -7;
    CHECK_OK(mql_producer_next_auto_sequence(p, &next));
    return next;
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq = open_data(dir, "data");
    make_topic(mq, "t", 1);

    /* --- setters --- */
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_FAIL(mql_producer_config_set_access_mode(pc, 4), MQL_INVALID_ARGUMENT, "access mode");
    CHECK_FAIL(mql_producer_config_set_access_mode(pc, -1), MQL_INVALID_ARGUMENT, "access mode");
    CHECK_FAIL(mql_producer_config_set_initial_sequence(pc, -1), MQL_INVALID_ARGUMENT, "initial_sequence");
    /* Anonymous: only the default mode, no numbering. */
    CHECK_OK(mql_producer_config_set_access_mode(pc, MQL_ACCESS_MODE_EXCLUSIVE));
    mql_producer *p = NULL;
    CHECK_FAIL(mql_producer_new(mq, pc, &p), MQL_INVALID_ARGUMENT, "named");
    CHECK_OK(mql_producer_config_set_access_mode(pc, MQL_ACCESS_MODE_EXCLUSIVE_WITH_FENCING));
    CHECK_OK(mql_producer_config_set_initial_sequence(pc, 0));
    CHECK_FAIL(mql_producer_new(mq, pc, &p), MQL_INVALID_ARGUMENT, "named");
    /* Shared with numbering is refused. */
    CHECK_OK(mql_producer_config_set_name(pc, "s"));
    CHECK_OK(mql_producer_config_set_access_mode(pc, MQL_ACCESS_MODE_SHARED));
    CHECK_FAIL(mql_producer_new(mq, pc, &p), MQL_INVALID_ARGUMENT, "shared");
    CHECK(p == NULL);
    mql_producer_config_free(pc);

    /* --- exclusive --- */
    mql_producer *a = with_mode(mq, "x", MQL_ACCESS_MODE_EXCLUSIVE, -1, MQL_OK);
    int16_t epoch = -1, epoch2 = -1;
    CHECK_OK(mql_producer_epoch(a, &epoch));
    with_mode(mq, "x", MQL_ACCESS_MODE_EXCLUSIVE, -1, MQL_PRODUCER_BUSY);
    with_mode(mq, "x", MQL_ACCESS_MODE_SHARED, -1, MQL_PRODUCER_BUSY);
    with_mode(mq, "x", MQL_ACCESS_MODE_EXCLUSIVE_WITH_FENCING, -1, MQL_PRODUCER_BUSY);
    CHECK(strstr(mql_last_error(), "busy") != NULL);
    with_mode(mq, "x", MQL_ACCESS_MODE_WAIT_FOR_EXCLUSIVE, 50, MQL_TIMEOUT);
    send_to(a, "t", 0, "still works"); /* not fenced */
    CHECK_OK(mql_producer_epoch(a, &epoch2));
    CHECK(epoch2 == epoch);
    mql_producer_free(a); /* lets the name go */
    mql_producer *b = with_mode(mq, "x", MQL_ACCESS_MODE_WAIT_FOR_EXCLUSIVE, 50, MQL_OK);
    CHECK_OK(mql_producer_epoch(b, &epoch2));
    CHECK(epoch2 == epoch + 1);
    mql_producer_free(b);

    /* --- shared --- */
    mql_producer *s1 = with_mode(mq, "s", MQL_ACCESS_MODE_SHARED, -1, MQL_OK);
    mql_producer *s2 = with_mode(mq, "s", MQL_ACCESS_MODE_SHARED, -1, MQL_OK);
    with_mode(mq, "s", MQL_ACCESS_MODE_EXCLUSIVE, -1, MQL_PRODUCER_BUSY);
    mql_record r = MQL_RECORD_INIT;
    r.topic = "t";
    r.value = "q";
    r.value_len = 1;
    r.sequence = 3;
    r.has_sequence = true;
    mql_metadata md1, md2;
    CHECK_OK(mql_send_record(s1, &r, &md1));
    CHECK_OK(mql_send_record(s2, &r, &md2)); /* the same sequence from the other */
    CHECK(!md1.duplicate && md2.duplicate && md2.offset == md1.offset);
    send_to(s1, "t", 0, "one");
    send_to(s2, "t", 0, "two"); /* neither fenced */
    send_to(s1, "t", 0, "one");
    mql_producer_free(s1);
    mql_producer_free(s2);

    /* --- automatic numbering --- */
    mql_producer *n = numbered(mq, 100);
    CHECK(next_of(n) == 100);
    send_to(n, "t", 0, "n0");
    send_to(n, "t", 0, "n1");
    CHECK(last_of(n) == 101);
    mql_producer_free(n);
    n = numbered(mq, 5); /* lower: continues after the last */
    CHECK(next_of(n) == 102);
    send_to(n, "t", 0, "n2");
    mql_producer_free(n);
    CHECK_OK(mql_close(mq));
    mq = open_data(dir, "data");
    n = numbered(mq, 0); /* after reopening the directory */
    CHECK(next_of(n) == 103);
    r.sequence = 500; /* an explicit one moves the counter past it */
    CHECK_OK(mql_send_record(n, &r, &md1));
    CHECK(!md1.duplicate && next_of(n) == 501);
    mql_producer_free(n);
    mql_producer *plain = with_mode(mq, "plain", MQL_ACCESS_MODE_EXCLUSIVE_WITH_FENCING, -1, MQL_OK);
    CHECK(next_of(plain) == -1);
    mql_producer_free(plain);

    CHECK_OK(mql_close(mq));
    return 0;
}
