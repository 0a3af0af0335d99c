/* Commits: mql_commit commits what mql_poll handed out (not what was
 * fetched into the buffer); mql_commit_offsets stores metadata, read back
 * with mql_committed (snprintf-like copying); committed offsets survive
 * reopening the data directory and a new member resumes there; lag and
 * stats; a commit without a group is MQL_INVALID_ARGUMENT, one of a
 * partition another member owns MQL_COMMIT_FAILED; commits made with
 * commit_acks 1 (written to the operating system, not synced) are read
 * back after a reopen, and a commit_acks out of range is refused. */
#include "check.h"

static mql_consumer *member(mql_broker *mq, const char *group, bool auto_commit) {
    mql_consumer_config *cc;
    CHECK_OK(mql_consumer_config_new(&cc));
    CHECK_OK(mql_consumer_config_set_enable_auto_commit(cc, auto_commit));
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, group, cc, &c));
    mql_consumer_config_free(cc);
    CHECK_OK(mql_subscribe(c, "t"));
    return c;
}

static uint64_t next_offset(mql_consumer *c) {
    mql_message *m;
    CHECK_OK(mql_poll(c, 1000, &m));
    uint64_t o = mql_message_offset(m);
    mql_message_free(m);
    return o;
}

static uint64_t committed_of(mql_consumer *c, uint32_t partition) {
    uint64_t o = 777;
    CHECK_OK(mql_committed(c, "t", partition, &o, NULL, 0, NULL));
    return o;
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq = open_data(dir, "data");
    make_topic(mq, "t", 1);
    fill(mq, "t", 1, 10);

    mql_consumer *c = member(mq, "g", false);
    CHECK(committed_of(c, 0) == MQL_OFFSET_UNKNOWN);
    uint64_t lag = 0;
    CHECK_OK(mql_lag(c, "t", 0, &lag));
    CHECK(lag == 10);

    /* One fetch gets all 10; C sees 3. */
    for (uint64_t i = 0; i < 3; i++) CHECK(next_offset(c) == i);
    uint64_t pos = 0;
    CHECK_OK(mql_position(c, "t", 0, &pos));
    CHECK(pos == 3);
    CHECK_OK(mql_lag(c, "t", 0, &lag));
    CHECK(lag == 7); /* from the position: what C saw */
    CHECK_OK(mql_commit(c));
    CHECK(committed_of(c, 0) == 3); /* not 10 */
    CHECK_OK(mql_lag(c, "t", 0, &lag));
    CHECK(lag == 7);
    mql_consumer_stats stats;
    CHECK_OK(mql_consumer_get_stats(c, &stats));
    CHECK(stats.records == 3 && stats.bytes == 3 * 3 && stats.polls == 3 && stats.commits == 1);
    CHECK(stats.rebalances == 1 && stats.skipped == 0 && stats.offset_resets == 0);
    /* The buffer survives the commit: reading goes on at 3. */
    CHECK(next_offset(c) == 3);
    CHECK_OK(mql_commit(c));
    CHECK(committed_of(c, 0) == 4);

    /* Explicit offsets with metadata. */
    mql_committed_offset co = {"t", 0, 5, "checkpoint-A", 0};
    CHECK_OK(mql_commit_offsets(c, &co, 1));
    char meta[64];
    size_t len = 0;
    uint64_t off = 0;
    CHECK_OK(mql_committed(c, "t", 0, &off, meta, sizeof meta, &len));
    CHECK(off == 5 && len == 12 && strcmp(meta, "checkpoint-A") == 0);
    char small[4];
    CHECK_OK(mql_committed(c, "t", 0, &off, small, sizeof small, &len));
    CHECK(len == 12 && strcmp(small, "che") == 0); /* cut short, NUL-terminated */
    len = 0;
    CHECK_OK(mql_committed(c, "t", 0, &off, NULL, 0, &len)); /* length only */
    CHECK(len == 12);
    CHECK_OK(mql_commit_offsets(c, NULL, 0)); /* nothing to commit */
    /* Metadata over the limit (4 KiB by default) is refused: nothing changes. */
    static char big[4098];
    memset(big, 'm', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    mql_committed_offset too_big = {"t", 0, 6, big, 0};
    CHECK_FAIL(mql_commit_offsets(c, &too_big, 1), MQL_INVALID_ARGUMENT, "max_commit_metadata_bytes");
    CHECK_OK(mql_committed(c, "t", 0, &off, meta, sizeof meta, &len));
    CHECK(off == 5 && len == 12);
    CHECK_OK(mql_lag(c, "t", 0, &lag));
    CHECK(lag == 5); /* from the committed offset */
    CHECK_OK(mql_consumer_get_stats(c, &stats));
    CHECK(stats.commits == 3);
    mql_consumer_free(c); /* auto-commit is off: 5 stays */

    /* Durable: reopen, and a new member of the group starts at 5. */
    CHECK_OK(mql_close(mq));
    mq = open_data(dir, "data");
    c = member(mq, "g", true);
    CHECK(committed_of(c, 0) == 5);
    CHECK_OK(mql_committed(c, "t", 0, &off, meta, sizeof meta, NULL));
    CHECK(strcmp(meta, "checkpoint-A") == 0);
    CHECK(next_offset(c) == 5);
    CHECK(next_offset(c) == 6);
    mql_group_info *g;
    CHECK_OK(mql_describe_group(mq, "g", &g));
    CHECK(mql_group_info_committed_count(g) == 1);
    CHECK_OK(mql_group_info_committed(g, 0, &co));
    CHECK(strcmp(co.topic, "t") == 0 && co.partition == 0 && co.offset == 5);
    CHECK(strcmp(co.metadata, "checkpoint-A") == 0 && co.timestamp > 0);
    mql_group_info_free(g);
    co = (mql_committed_offset){"t", 0, 5, NULL, 0}; /* its strings died with g */
    /* Freed with auto-commit on and 3 fetched messages not handed out:
     * commits 7, what C saw. */
    mql_consumer_free(c);
    c = member(mq, "g", false);
    CHECK(committed_of(c, 0) == 7);
    CHECK(next_offset(c) == 7);

    /* A consumer without a group cannot commit. */
    mql_consumer *alone;
    CHECK_OK(mql_consumer_new(mq, NULL, NULL, &alone));
    CHECK_OK(mql_assign(alone, "t", 0));
    CHECK(next_offset(alone) == 0);
    CHECK_FAIL(mql_commit(alone), MQL_INVALID_ARGUMENT, "group_id");
    CHECK_FAIL(mql_commit_offsets(alone, &co, 1), MQL_INVALID_ARGUMENT, "group_id");
    CHECK_FAIL(mql_committed(alone, "t", 0, &off, NULL, 0, NULL), MQL_INVALID_ARGUMENT, "group_id");
    CHECK_OK(mql_lag(alone, "t", 0, &lag)); /* from the position */
    CHECK(lag == 9);
    CHECK_FAIL(mql_lag(alone, "t", 1, &lag), MQL_INVALID_ARGUMENT, "not assigned");
    mql_consumer_free(alone);

    /* A partition owned by another member: MQL_COMMIT_FAILED, nothing
     * committed. */
    make_topic(mq, "two", 2);
    mql_consumer *x, *y;
    CHECK_OK(mql_consumer_new(mq, "h", NULL, &x));
    CHECK_OK(mql_subscribe(x, "two"));
    CHECK_OK(mql_consumer_new(mq, "h", NULL, &y));
    CHECK_OK(mql_subscribe(y, "two"));
    mql_message *m;
    CHECK_STATUS(mql_poll(x, 0, &m), MQL_TIMEOUT); /* x gives up two/1 */
    size_t n = 0;
    mql_topic_partition owned[2];
    CHECK_OK(mql_assignment(x, owned, 2, &n));
    CHECK(n == 1 && strcmp(owned[0].topic, "two") == 0 && owned[0].partition == 0);
    mql_committed_offset both[2] = {{"two", 0, 0, NULL, 0}, {"two", 1, 0, "m", 0}};
    CHECK_FAIL(mql_commit_offsets(x, both, 2), MQL_COMMIT_FAILED, "two/1");
    CHECK(strcmp(mql_status_str(MQL_COMMIT_FAILED), "MQL_COMMIT_FAILED") == 0);
    CHECK(MQL_COMMIT_FAILED == 500);
    uint64_t o = 777;
    CHECK_OK(mql_committed(x, "two", 0, &o, NULL, 0, NULL));
    CHECK(o == MQL_OFFSET_UNKNOWN); /* all or nothing */
    CHECK_OK(mql_commit_offsets(x, both, 1));
    both[0].partition = 7;
    CHECK_FAIL(mql_commit_offsets(x, both, 1), MQL_UNKNOWN_PARTITION, "partition 7");
    both[0].topic = "nope";
    CHECK_FAIL(mql_commit_offsets(x, both, 1), MQL_UNKNOWN_TOPIC, "nope");

    mql_consumer_free(x);
    mql_consumer_free(y);
    mql_consumer_free(c);

    /* commit_acks: 1 and 0 write the commit to the operating system,
     * -1 (the default) syncs it; anything else is refused. */
    mql_consumer_config *cc;
    CHECK_OK(mql_consumer_config_new(&cc));
    CHECK_FAIL(mql_consumer_config_set_commit_acks(cc, 2), MQL_INVALID_ARGUMENT, "acks");
    CHECK_FAIL(mql_consumer_config_set_commit_acks(cc, -2), MQL_INVALID_ARGUMENT, "acks");
    CHECK_OK(mql_consumer_config_set_commit_acks(cc, 1));
    CHECK_OK(mql_consumer_config_set_enable_auto_commit(cc, false));
    mql_consumer *quick;
    CHECK_OK(mql_consumer_new(mq, "quick", cc, &quick));
    mql_consumer_config_free(cc);
    CHECK_OK(mql_assign(quick, "t", 0));
    for (uint64_t i = 1; i <= 9; i++) {
        mql_committed_offset q = {"t", 0, i, NULL, 0};
        CHECK_OK(mql_commit_offsets(quick, &q, 1));
    }
    CHECK(committed_of(quick, 0) == 9);
    mql_consumer_free(quick);
    CHECK_OK(mql_close(mq));
    mq = open_data(dir, "data");
    CHECK_OK(mql_consumer_new(mq, "quick", NULL, &quick));
    CHECK(committed_of(quick, 0) == 9);
    mql_consumer_free(quick);
    CHECK_OK(mql_close(mq));
    puts("group_commit: ok");
    return 0;
}
