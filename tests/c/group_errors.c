/* Invalid consumer-group settings and uses: bad strategy names, client ids
 * and intervals, bad patterns, a group whose members ask for different
 * strategies, out-of-range group-info indices, and every call on a closed
 * consumer. Also the by_config strategy. */
#include "check.h"

static mql_consumer *with_strategy(mql_broker *mq, const char *group, const char *strategy) {
    mql_consumer_config *cc;
    CHECK_OK(mql_consumer_config_new(&cc));
    CHECK_OK(mql_consumer_config_set_assignment_strategy(cc, strategy));
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, group, cc, &c));
    mql_consumer_config_free(cc);
    return c;
}

int main(int argc, char **argv) {
    mql_broker *mq = open_data(scratch_dir(argc, argv), "data");
    make_topic(mq, "t", 2);
    fill(mq, "t", 2, 2);

    /* Settings. */
    mql_consumer_config *cc;
    CHECK_OK(mql_consumer_config_new(&cc));
    CHECK_FAIL(mql_consumer_config_set_assignment_strategy(cc, "fastest"), MQL_INVALID_ARGUMENT,
               "assignment strategy");
    CHECK_FAIL(mql_consumer_config_set_assignment_strategy(cc, ""), MQL_INVALID_ARGUMENT, "strategy");
    const char *good[] = {"averagely", "range", "round_robin", "Round-Robin", "by_circle",
                          "consistent_hash", "sticky", "by_config"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        CHECK_OK(mql_consumer_config_set_assignment_strategy(cc, good[i]));
    CHECK_FAIL(mql_consumer_config_set_client_id(cc, "a/b"), MQL_INVALID_ARGUMENT, "client_id");
    CHECK_FAIL(mql_consumer_config_set_client_id(cc, ""), MQL_INVALID_ARGUMENT, "client_id");
    CHECK_FAIL(mql_consumer_config_set_client_id(cc, "caf\xc3"), MQL_INVALID_UTF8, "UTF-8");
    CHECK_FAIL(mql_consumer_config_set_max_poll_interval_ms(cc, 0), MQL_INVALID_ARGUMENT,
               "max_poll_interval_ms");
    CHECK_OK(mql_consumer_config_set_auto_commit_interval_ms(cc, 0));
    mql_consumer_config_free(cc);
    mql_consumer *c = NULL;
    CHECK_FAIL(mql_consumer_new(mq, "bad/group", NULL, &c), MQL_INVALID_ARGUMENT, "group_id");
    CHECK(c == NULL);
    mql_group_info *g = NULL;
    CHECK_FAIL(mql_describe_group(mq, "..", &g), MQL_INVALID_ARGUMENT, "group");
    CHECK(g == NULL);

    /* A group's files are named after it: at most 243 bytes, and in
     * broadcast mode group id, '+' and client id together. */
    char name[245];
    memset(name, 'g', 244);
    name[244] = '\0';
    CHECK_FAIL(mql_consumer_new(mq, name, NULL, &c), MQL_INVALID_ARGUMENT, "at most 243");
    CHECK(c == NULL);
    CHECK_FAIL(mql_describe_group(mq, name, &g), MQL_INVALID_ARGUMENT, "at most 243");
    name[243] = '\0';
    CHECK_OK(mql_consumer_new(mq, name, NULL, &c));
    mql_consumer_free(c);
    c = NULL;
    CHECK_OK(mql_consumer_config_new(&cc));
    name[242] = '\0'; /* "g" + "+" + 242 bytes: 245 */
    CHECK_OK(mql_consumer_config_set_client_id(cc, name));
    CHECK_OK(mql_consumer_config_set_broadcast(cc, true));
    CHECK_FAIL(mql_consumer_new(mq, "g", cc, &c), MQL_INVALID_ARGUMENT, "at most 243");
    CHECK(c == NULL);
    mql_consumer_config_free(cc);

    /* Patterns. */
    CHECK_OK(mql_consumer_new(mq, "g", NULL, &c));
    CHECK_FAIL(mql_subscribe_pattern(c, "t("), MQL_INVALID_ARGUMENT, "invalid topic pattern");
    CHECK_FAIL(mql_subscribe_pattern(c, "[z-a]"), MQL_INVALID_ARGUMENT, "invalid topic pattern");
    CHECK_FAIL(mql_subscribe_pattern(c, "\xff"), MQL_INVALID_UTF8, "pattern");
    CHECK_OK(mql_subscribe(c, "t"));
    CHECK_FAIL(mql_subscribe_pattern(c, "("), MQL_INVALID_ARGUMENT, "pattern");
    size_t n = 0;
    CHECK_OK(mql_assignment(c, NULL, 0, &n));
    CHECK(n == 2); /* the failed pattern changed nothing */
    mql_consumer_free(c);

    /* Every member of a group must ask for the same strategy. */
    mql_consumer *a = with_strategy(mq, "s", "sticky"), *b = with_strategy(mq, "s", "range");
    CHECK_OK(mql_subscribe(a, "t"));
    CHECK_FAIL(mql_subscribe(b, "t"), MQL_INVALID_ARGUMENT, "strategy");
    mql_consumer_free(b);
    mql_consumer_free(a);

    /* by_config: each member gets what it asks for. */
    mql_consumer *want[2];
    for (uint32_t i = 0; i < 2; i++) {
        CHECK_OK(mql_consumer_config_new(&cc));
        CHECK_OK(mql_consumer_config_set_assignment_strategy(cc, "by_config"));
        CHECK_OK(mql_consumer_config_add_wanted_partition(cc, "t", 1 - i));
        CHECK_OK(mql_consumer_config_add_wanted_partition(cc, "t", 1 - i)); /* twice: harmless */
        CHECK_OK(mql_consumer_new(mq, "bc", cc, &want[i]));
        mql_consumer_config_free(cc);
        CHECK_OK(mql_subscribe(want[i], "t"));
    }
    mql_message *m;
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 2; i++) {
            mql_status st = mql_poll(want[i], 0, &m);
            if (st == MQL_OK) mql_message_free(m);
            else CHECK(st == MQL_TIMEOUT);
        }
    for (uint32_t i = 0; i < 2; i++) {
        mql_topic_partition tp[2];
        CHECK_OK(mql_assignment(want[i], tp, 2, &n));
        CHECK(n == 1 && tp[0].partition == 1 - i);
        mql_consumer_free(want[i]);
    }

    /* Group info indices. */
    CHECK_OK(mql_describe_group(mq, "bc", &g));
    CHECK(mql_group_info_member_count(g) == 0);
    const char *id;
    mql_topic_partition tp;
    mql_committed_offset co;
    CHECK_FAIL(mql_group_info_member(g, 0, &id, &n), MQL_INVALID_ARGUMENT, "out of range");
    CHECK_FAIL(mql_group_info_member_partition(g, 0, 0, &tp), MQL_INVALID_ARGUMENT, "out of range");
    CHECK_FAIL(mql_group_info_committed(g, 5, &co), MQL_INVALID_ARGUMENT, "out of range");
    mql_group_info_free(g);

    /* A closed consumer. */
    CHECK_OK(mql_consumer_new(mq, "g", NULL, &c));
    CHECK_OK(mql_subscribe(c, "t"));
    CHECK_OK(mql_poll(c, 1000, &m));
    mql_message_free(m);
    CHECK_OK(mql_consumer_close(c));
    CHECK_OK(mql_describe_group(mq, "g", &g));
    CHECK(mql_group_info_member_count(g) == 0); /* it left */
    mql_group_info_free(g);
    uint64_t u = 777;
    mql_committed_offset one = {"t", 0, 0, NULL, 0};
    mql_partition_timestamp q = {"t", 0, 0};
    CHECK_FAIL(mql_poll(c, 0, &m), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_subscribe(c, "t"), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_subscribe_pattern(c, "t"), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_assign(c, "t", 0), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_unsubscribe(c), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_seek(c, "t", 0, 0), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_seek_to_beginning(c, "t", 0), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_seek_to_end(c, "t", 0), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_position(c, "t", 0, &u), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_commit(c), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_commit_offsets(c, &one, 1), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_committed(c, "t", 0, &u, NULL, 0, NULL), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_lag(c, "t", 0, &u), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_assignment(c, NULL, 0, &n), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_offsets_for_times(c, &q, 1, &u), MQL_CLOSED, "closed");
    CHECK(u == 777);
    char buf[16] = "x";
    CHECK_OK(mql_consumer_member_id(c, buf, sizeof buf, &n));
    CHECK(n == 0 && buf[0] == '\0'); /* no longer a member */
    mql_consumer_stats stats;
    CHECK_OK(mql_consumer_get_stats(c, &stats));
    CHECK(stats.records == 1);
    CHECK_OK(mql_consumer_close(c));
    mql_consumer_free(c);

    /* After mql_close, consumers report MQL_CLOSED too. */
    CHECK_OK(mql_consumer_new(mq, "g", NULL, &c));
    CHECK_OK(mql_subscribe(c, "t"));
    CHECK_OK(mql_close(mq));
    CHECK_FAIL(mql_commit(c), MQL_CLOSED, "closed");
    CHECK_OK(mql_consumer_close(c));
    mql_consumer_free(c);
    puts("group_errors: ok");
    return 0;
}
