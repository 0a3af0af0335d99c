/* Flow control and stored offsets: mql_pause / mql_resume / mql_paused (a
 * paused partition yields nothing while the others still do; resuming
 * continues at the right offset; pausing a partition not assigned is
 * MQL_INVALID_ARGUMENT and pauses nothing); mql_store_offsets with auto
 * offset store off (commits, automatic ones included, take only what was
 * stored); mql_commit_async (the callback gets the outcome, once, and may
 * call the consumer); all of them from a rebalance callback. */
#include "check.h"

static uint32_t partition_of(mql_consumer *c, uint64_t *offset) {
    mql_message *m;
    CHECK_OK(mql_poll(c, 1000, &m));
    uint32_t p = mql_message_partition(m);
    if (offset != NULL) *offset = mql_message_offset(m);
    mql_message_free(m);
    return p;
}

static uint64_t committed_of(mql_consumer *c, uint32_t partition) {
    uint64_t o = 777;
    CHECK_OK(mql_committed(c, "t", partition, &o, NULL, 0, NULL));
    return o;
}

static void pause_and_resume(mql_broker *mq) {
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, NULL, NULL, &c));
    CHECK_OK(mql_assign(c, "t", 0));
    CHECK_OK(mql_assign(c, "t", 1));
    size_t n = 99;
    CHECK_OK(mql_paused(c, NULL, 0, &n));
    CHECK(n == 0);

    uint64_t first_offset;
    uint32_t paused = partition_of(c, &first_offset); /* the rest of the fetch is held */
    CHECK(first_offset == 0);
    mql_topic_partition pp = {"t", paused};
    CHECK_OK(mql_pause(c, &pp, 1));
    CHECK_OK(mql_pause(c, &pp, 1)); /* pausing again changes nothing */
    mql_topic_partition list[4];
    CHECK_OK(mql_paused(c, list, 4, &n));
    CHECK(n == 1 && strcmp(list[0].topic, "t") == 0 && list[0].partition == paused);

    /* Bad input pauses nothing, not even the valid entries before it. */
    mql_topic_partition bad[2] = {{"t", 1 - paused}, {"t", 7}};
    CHECK_FAIL(mql_pause(c, bad, 2), MQL_INVALID_ARGUMENT, "not assigned");
    mql_topic_partition other_topic = {"nope", 0};
    CHECK_FAIL(mql_pause(c, &other_topic, 1), MQL_INVALID_ARGUMENT, "not assigned");
    mql_topic_partition null_topic = {NULL, 0};
    CHECK_FAIL(mql_pause(c, &null_topic, 1), MQL_NULL_ARGUMENT, "partitions[0].topic");
    CHECK_FAIL(mql_resume(c, bad, 2), MQL_INVALID_ARGUMENT, "not assigned");
    CHECK_OK(mql_paused(c, list, 4, &n));
    CHECK(n == 1 && list[0].partition == paused);
    CHECK_OK(mql_pause(c, NULL, 0)); /* nothing to pause */

    /* The other partition is read to its end; the paused one yields nothing. */
    for (int i = 0; i < 20; i++) CHECK(partition_of(c, NULL) == 1 - paused);
    mql_message *m = NULL;
    CHECK_STATUS(mql_poll(c, 0, &m), MQL_TIMEOUT);
    uint64_t pos = 0;
    CHECK_OK(mql_position(c, "t", paused, &pos));
    CHECK(pos == 1);

    /* Resumed: it continues at offset 1, nothing skipped or repeated. */
    CHECK_OK(mql_resume(c, &pp, 1));
    CHECK_OK(mql_paused(c, NULL, 0, &n));
    CHECK(n == 0);
    for (uint64_t want = 1; want < 20; want++) {
        uint64_t o;
        CHECK(partition_of(c, &o) == paused);
        CHECK(o == want);
    }
    CHECK_STATUS(mql_poll(c, 0, &m), MQL_TIMEOUT);

    /* Only for a live consumer. */
    CHECK_OK(mql_consumer_close(c));
    CHECK_FAIL(mql_pause(c, &pp, 1), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_paused(c, list, 4, &n), MQL_CLOSED, "closed");
    mql_consumer_free(c);
}

static mql_consumer *storing_member(mql_broker *mq, bool auto_store) {
    mql_consumer_config *cc;
    CHECK_OK(mql_consumer_config_new(&cc));
    CHECK_OK(mql_consumer_config_set_enable_auto_commit(cc, true));
    CHECK_OK(mql_consumer_config_set_enable_auto_offset_store(cc, auto_store));
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, "g", cc, &c));
    mql_consumer_config_free(cc);
    CHECK_OK(mql_assign(c, "t", 0));
    return c;
}

static void stored_offsets(mql_broker *mq) {
    mql_consumer *c = storing_member(mq, false);
    /* Ten handed out, five processed (stored): at least once. */
    for (uint64_t i = 0; i < 10; i++) {
        mql_message *m;
        CHECK_OK(mql_poll(c, 1000, &m));
        CHECK(mql_message_offset(m) == i);
        if (i < 5) {
            mql_partition_offset po = {"t", 0, i + 1};
            CHECK_OK(mql_store_offsets(c, &po, 1));
        }
        mql_message_free(m);
    }
    CHECK_OK(mql_commit(c));
    CHECK(committed_of(c, 0) == 5);

    /* All or nothing. */
    mql_partition_offset bad[2] = {{"t", 0, 8}, {"t", 1, 1}};
    CHECK_FAIL(mql_store_offsets(c, bad, 2), MQL_INVALID_ARGUMENT, "not assigned");
    CHECK_OK(mql_commit(c));
    CHECK(committed_of(c, 0) == 5);
    mql_partition_offset null_topic = {NULL, 0, 1};
    CHECK_FAIL(mql_store_offsets(c, &null_topic, 1), MQL_NULL_ARGUMENT, "offsets[0].topic");
    CHECK_OK(mql_store_offsets(c, NULL, 0));

    /* Closing auto-commits what was stored, not what was handed out. */
    mql_partition_offset po = {"t", 0, 7};
    CHECK_OK(mql_store_offsets(c, &po, 1));
    CHECK_OK(mql_consumer_close(c));
    CHECK_FAIL(mql_store_offsets(c, &po, 1), MQL_CLOSED, "closed");
    mql_consumer_free(c);
    c = storing_member(mq, false);
    uint64_t o;
    partition_of(c, &o);
    CHECK(o == 7);
    mql_consumer_free(c);

    /* With the automatic store on (the default), storing is refused. */
    c = storing_member(mq, true);
    CHECK_FAIL(mql_store_offsets(c, &po, 1), MQL_INVALID_ARGUMENT, "enable_auto_offset_store");
    mql_consumer_free(c);
    /* And without a group. */
    mql_consumer_config *cc;
    CHECK_OK(mql_consumer_config_new(&cc));
    CHECK_OK(mql_consumer_config_set_enable_auto_offset_store(cc, false));
    CHECK_OK(mql_consumer_new(mq, NULL, cc, &c));
    mql_consumer_config_free(cc);
    CHECK_OK(mql_assign(c, "t", 0));
    CHECK_FAIL(mql_store_offsets(c, &po, 1), MQL_INVALID_ARGUMENT, "group_id");
    mql_consumer_free(c);
}

/* What a commit callback saw. */
struct report {
    int calls;
    mql_status status;
    char text[256];
    uint64_t committed; /* read back from inside the callback */
    mql_consumer *consumer;
};

static void on_commit(void *user_data, mql_status status, const char *error_message) {
    struct report *r = user_data;
    r->calls++;
    r->status = status;
    snprintf(r->text, sizeof r->text, "%s", error_message == NULL ? "(null)" : error_message);
    if (status == MQL_OK) r->committed = committed_of(r->consumer, 0);
}

static void commit_async(mql_broker *mq) {
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, "async", NULL, &c));
    CHECK_OK(mql_assign(c, "t", 0));
    for (int i = 0; i < 3; i++) partition_of(c, NULL);
    struct report r = {0, MQL_PANIC, "", 0, c};
    CHECK_OK(mql_commit_async(c, on_commit, &r));
    CHECK(r.calls == 1 && r.status == MQL_OK && strcmp(r.text, "(null)") == 0);
    CHECK(r.committed == 3); /* durable when the callback runs */
    CHECK(committed_of(c, 0) == 3);

    /* No callback: refused, nothing committed. */
    partition_of(c, NULL);
    CHECK_FAIL(mql_commit_async(c, NULL, &r), MQL_NULL_ARGUMENT, "callback");
    CHECK(committed_of(c, 0) == 3 && r.calls == 1);

    /* A failure is returned and reported. */
    mql_consumer *alone;
    CHECK_OK(mql_consumer_new(mq, NULL, NULL, &alone));
    CHECK_OK(mql_assign(alone, "t", 0));
    struct report r2 = {0, MQL_OK, "", 0, alone};
    CHECK_FAIL(mql_commit_async(alone, on_commit, &r2), MQL_INVALID_ARGUMENT, "group_id");
    CHECK(r2.calls == 1 && r2.status == MQL_INVALID_ARGUMENT && strstr(r2.text, "group_id") != NULL);
    mql_consumer_free(alone);

    CHECK_OK(mql_consumer_close(c));
    struct report r3 = {0, MQL_OK, "", 0, c};
    CHECK_FAIL(mql_commit_async(c, on_commit, &r3), MQL_CLOSED, "closed");
    CHECK(r3.calls == 1 && r3.status == MQL_CLOSED);
    mql_consumer_free(c);
}

/* What the rebalance callback did. */
struct in_rebalance {
    int assigns, revokes;
    size_t paused_seen;
    struct report commit;
};

static void on_rebalance(void *user_data, mql_consumer *c, mql_rebalance_event event,
                         const mql_topic_partition *partitions, size_t n) {
    struct in_rebalance *r = user_data;
    if (event == MQL_REBALANCE_ASSIGN && n > 0) {
        r->assigns++;
        mql_topic_partition one = {"t", 1};
        CHECK_OK(mql_pause(c, &one, 1));
        CHECK_OK(mql_paused(c, NULL, 0, &r->paused_seen));
        mql_partition_offset po = {"t", 0, 3};
        CHECK_OK(mql_store_offsets(c, &po, 1));
    } else if (event == MQL_REBALANCE_REVOKE) {
        r->revokes++;
        r->commit.consumer = c;
        CHECK_OK(mql_commit_async(c, on_commit, &r->commit));
    }
    (void)partitions;
}

static void from_a_rebalance_callback(mql_broker *mq) {
    mql_consumer_config *cc;
    CHECK_OK(mql_consumer_config_new(&cc));
    CHECK_OK(mql_consumer_config_set_enable_auto_commit(cc, false));
    CHECK_OK(mql_consumer_config_set_enable_auto_offset_store(cc, false));
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, "in-callback", cc, &c));
    mql_consumer_config_free(cc);
    struct in_rebalance r = {0, 0, 0, {0, MQL_PANIC, "", 0, NULL}};
    CHECK_OK(mql_consumer_set_rebalance_callback(c, on_rebalance, &r));
    CHECK_OK(mql_subscribe(c, "t"));
    /* Paused on assign: only partition 0 is read. */
    for (int i = 0; i < 20; i++) CHECK(partition_of(c, NULL) == 0);
    mql_message *m = NULL;
    CHECK_STATUS(mql_poll(c, 0, &m), MQL_TIMEOUT);
    CHECK(r.assigns == 1 && r.paused_seen == 1);
    /* The revoke on close commits what was stored in the assign. */
    CHECK_OK(mql_consumer_close(c));
    CHECK(r.revokes == 1 && r.commit.calls == 1 && r.commit.status == MQL_OK && r.commit.committed == 3);
    mql_consumer_free(c);
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq = open_data(dir, "data");
    make_topic(mq, "t", 2);
    fill(mq, "t", 2, 20);
    pause_and_resume(mq);
    stored_offsets(mq);
    commit_async(mq);
    from_a_rebalance_callback(mq);
    CHECK_OK(mql_close(mq));
    return 0;
}
