/* A member removed from its group for not polling within
 * max_poll_interval_ms is told it lost its partitions (MQL_REBALANCE_LOST,
 * never a revoke): a commit from the callback fails with MQL_COMMIT_FAILED,
 * no auto-commit runs, and the consumer joins the group again under a new
 * member id. */
#define _POSIX_C_SOURCE 200809L
#include <time.h>

#include "check.h"

static int lost_calls, revoke_calls;
static mql_topic_partition lost_part;
static mql_status commit_in_lost;

static void on_rebalance(void *user_data, mql_consumer *c, mql_rebalance_event event,
                         const mql_topic_partition *parts, size_t n) {
    (void)user_data;
    CHECK(n > 0 && parts != NULL);
    if (event == MQL_REBALANCE_REVOKE) revoke_calls++;
    if (event != MQL_REBALANCE_LOST) return;
    lost_calls++;
    /* One partition in the checked phase; a member slowed down (valgrind on
     * a loaded machine) can also be removed while the group forms, with
     * both. */
    CHECK(n == 1 || n == 2);
    lost_part = parts[0];
    mql_committed_offset off = {parts[0].topic, parts[0].partition, 1, NULL, 0};
    commit_in_lost = mql_commit_offsets(c, &off, 1);
}

static mql_consumer *member(mql_broker *mq, const char *name, int listen) {
    mql_consumer_config *cc;
    CHECK_OK(mql_consumer_config_new(&cc));
    CHECK_OK(mql_consumer_config_set_enable_auto_commit(cc, true));
    CHECK_OK(mql_consumer_config_set_max_poll_interval_ms(cc, 200));
    CHECK_OK(mql_consumer_config_set_client_id(cc, name));
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, "g", cc, &c));
    mql_consumer_config_free(cc);
    if (listen) CHECK_OK(mql_consumer_set_rebalance_callback(c, on_rebalance, NULL));
    CHECK_OK(mql_subscribe(c, "t"));
    return c;
}

static size_t owned(mql_consumer *c) {
    size_t count = 99;
    CHECK_OK(mql_assignment(c, NULL, 0, &count));
    return count;
}

/* Polls `c` (dropping what it reads) for up to 10 ms. */
static void poll_once(mql_consumer *c) {
    mql_message *m = NULL;
    mql_status st = mql_poll(c, 10, &m);
    CHECK(st == MQL_OK || st == MQL_TIMEOUT);
    mql_message_free(m);
}

static void member_id(mql_consumer *c, char *out, size_t size) {
    size_t len;
    CHECK_OK(mql_consumer_member_id(c, out, size, &len));
    CHECK(len < size);
}

int main(int argc, char **argv) {
    mql_broker *mq = open_data(scratch_dir(argc, argv), "data");
    make_topic(mq, "t", 2);
    fill(mq, "t", 2, 3);

    mql_consumer *a = member(mq, "a", 1);
    mql_consumer *b = member(mq, "b", 0);
    for (int i = 0; i < 500 && !(owned(a) == 1 && owned(b) == 1); i++) {
        poll_once(a);
        poll_once(b);
    }
    CHECK(owned(a) == 1 && owned(b) == 1);
    char before[128], after[128];
    member_id(a, before, sizeof before);
    revoke_calls = 0;
    lost_calls = 0; /* only the loss below counts */
    commit_in_lost = MQL_OK;

    /* Only b polls: a is removed after 200 ms and b takes both. */
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (owned(b) < 2) {
        poll_once(b);
        clock_gettime(CLOCK_MONOTONIC, &now);
        CHECK(now.tv_sec - start.tv_sec < 10);
    }
    uint64_t committed_before[2];
    for (uint32_t p = 0; p < 2; p++) CHECK_OK(mql_committed(b, "t", p, &committed_before[p], NULL, 0, NULL));

    /* a's next fetch (after it hands out what it buffered): told it lost
     * its partition, cannot commit it. */
    for (int i = 0; i < 10 && lost_calls == 0; i++) poll_once(a);
    CHECK(lost_calls == 1 && revoke_calls == 0);
    CHECK(strcmp(lost_part.topic, "t") == 0 && lost_part.partition < 2);
    CHECK(commit_in_lost == MQL_COMMIT_FAILED);
    for (uint32_t p = 0; p < 2; p++) {
        uint64_t c;
        CHECK_OK(mql_committed(b, "t", p, &c, NULL, 0, NULL));
        CHECK(c == committed_before[p]); /* no auto-commit by a */
    }
    member_id(a, after, sizeof after);
    CHECK(strcmp(before, after) != 0);

    /* It joined again: the two share the partitions once more. */
    for (int i = 0; i < 500 && !(owned(a) == 1 && owned(b) == 1); i++) {
        poll_once(a);
        poll_once(b);
    }
    CHECK(owned(a) == 1 && owned(b) == 1);

    mql_consumer_free(a);
    mql_consumer_free(b);
    CHECK_OK(mql_close(mq));
    puts("group_lost: ok");
    return 0;
}
