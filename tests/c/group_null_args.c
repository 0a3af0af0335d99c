/* NULL for every pointer argument of the consumer-group functions:
 * MQL_NULL_ARGUMENT (or the documented no-op / neutral value), and nothing
 * written. */
#include "check.h"

static char dummy;
#define SENTINEL ((void *)&dummy)

#define CHECK_NULL(call)                                                  \
    do {                                                                  \
        CHECK_STATUS(call, MQL_NULL_ARGUMENT);                            \
        CHECK(mql_last_error_code() == MQL_NULL_ARGUMENT);                \
        CHECK(strstr(mql_last_error(), "NULL") != NULL);                  \
    } while (0)

static void on_rebalance(void *ud, mql_consumer *c, mql_rebalance_event ev, const mql_topic_partition *p, size_t n) {
    (void)ud, (void)c, (void)ev, (void)p, (void)n;
}

int main(int argc, char **argv) {
    mql_broker *mq = open_data(scratch_dir(argc, argv), "data");
    make_topic(mq, "t", 1);
    fill(mq, "t", 1, 2);

    /* --- config --- */
    mql_consumer_config *cc;
    CHECK_OK(mql_consumer_config_new(&cc));
    CHECK_NULL(mql_consumer_config_set_client_id(NULL, "x"));
    CHECK_NULL(mql_consumer_config_set_client_id(cc, NULL));
    CHECK_NULL(mql_consumer_config_set_assignment_strategy(NULL, "sticky"));
    CHECK_NULL(mql_consumer_config_set_assignment_strategy(cc, NULL));
    CHECK_NULL(mql_consumer_config_add_wanted_partition(NULL, "t", 0));
    CHECK_NULL(mql_consumer_config_add_wanted_partition(cc, NULL, 0));
    CHECK_NULL(mql_consumer_config_set_enable_auto_commit(NULL, false));
    CHECK_NULL(mql_consumer_config_set_auto_commit_interval_ms(NULL, 1));
    CHECK_NULL(mql_consumer_config_set_max_poll_interval_ms(NULL, 1));
    CHECK_NULL(mql_consumer_config_set_broadcast(NULL, true));
    CHECK_OK(mql_consumer_config_set_enable_auto_commit(cc, false));
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, "g", cc, &c));
    mql_consumer_config_free(cc);

    /* --- subscription and positions --- */
    CHECK_NULL(mql_subscribe_pattern(NULL, "t"));
    CHECK_NULL(mql_subscribe_pattern(c, NULL));
    CHECK_NULL(mql_consumer_set_rebalance_callback(NULL, on_rebalance, NULL));
    CHECK_OK(mql_consumer_set_rebalance_callback(c, NULL, SENTINEL)); /* NULL: none */
    CHECK_OK(mql_subscribe(c, "t"));
    mql_topic_partition tp = {SENTINEL, 777};
    size_t n = 777;
    CHECK_NULL(mql_assignment(NULL, &tp, 1, &n));
    CHECK_NULL(mql_assignment(c, NULL, 1, &n)); /* NULL needs capacity 0 */
    CHECK_NULL(mql_assignment(c, &tp, 1, NULL));
    CHECK(tp.topic == SENTINEL && tp.partition == 777 && n == 777);
    CHECK_OK(mql_assignment(c, NULL, 0, &n));
    CHECK(n == 1);
    CHECK_NULL(mql_seek_to_beginning(NULL, "t", 0));
    CHECK_NULL(mql_seek_to_beginning(c, NULL, 0));
    CHECK_NULL(mql_seek_to_end(NULL, "t", 0));
    CHECK_NULL(mql_seek_to_end(c, NULL, 0));
    mql_partition_timestamp q[2] = {{"t", 0, 0}, {NULL, 0, 0}};
    uint64_t offs[2] = {777, 777};
    CHECK_NULL(mql_offsets_for_times(NULL, q, 1, offs));
    CHECK_NULL(mql_offsets_for_times(c, NULL, 1, offs));
    CHECK_NULL(mql_offsets_for_times(c, q, 1, NULL));
    CHECK_NULL(mql_offsets_for_times(c, q, 2, offs)); /* q[1].topic */
    CHECK(strstr(mql_last_error(), "query[1].topic") != NULL);
    CHECK(offs[0] == 777 && offs[1] == 777);
    CHECK_OK(mql_offsets_for_times(c, NULL, 0, NULL));

    /* Nothing consumed by the failed calls: poll starts at 0. */
    mql_message *m;
    CHECK_OK(mql_poll(c, 1000, &m));
    CHECK(mql_message_offset(m) == 0);
    mql_message_free(m);

    /* --- waker, stats, member id --- */
    mql_waker *w = SENTINEL;
    CHECK_NULL(mql_consumer_waker(NULL, &w));
    CHECK_NULL(mql_consumer_waker(c, NULL));
    CHECK(w == SENTINEL);
    CHECK_NULL(mql_waker_wakeup(NULL));
    mql_waker_free(NULL);
    mql_consumer_stats stats;
    memset(&stats, 0x5A, sizeof stats);
    mql_consumer_stats before = stats;
    CHECK_NULL(mql_consumer_get_stats(NULL, &stats));
    CHECK_NULL(mql_consumer_get_stats(c, NULL));
    CHECK(memcmp(&stats, &before, sizeof stats) == 0);
    char buf[64] = "untouched";
    n = 777;
    CHECK_NULL(mql_consumer_member_id(NULL, buf, sizeof buf, &n));
    CHECK_NULL(mql_consumer_member_id(c, NULL, sizeof buf, &n)); /* NULL needs length 0 */
    CHECK(strcmp(buf, "untouched") == 0 && n == 777);
    CHECK_OK(mql_consumer_member_id(c, NULL, 0, &n)); /* the length only */
    CHECK(n > 0);
    CHECK_OK(mql_consumer_member_id(c, buf, sizeof buf, NULL)); /* the text only */
    CHECK(strlen(buf) == n);

    /* --- commits --- */
    CHECK_NULL(mql_commit(NULL));
    mql_committed_offset co = {"t", 0, 1, NULL, 0}; /* NULL metadata: none */
    mql_committed_offset no_topic = {NULL, 0, 1, "m", 0};
    CHECK_NULL(mql_commit_offsets(NULL, &co, 1));
    CHECK_NULL(mql_commit_offsets(c, NULL, 1));
    CHECK_NULL(mql_commit_offsets(c, &no_topic, 1));
    CHECK(strstr(mql_last_error(), "offsets[0].topic") != NULL);
    uint64_t off = 777;
    size_t len = 777;
    CHECK_NULL(mql_committed(NULL, "t", 0, &off, buf, sizeof buf, &len));
    CHECK_NULL(mql_committed(c, NULL, 0, &off, buf, sizeof buf, &len));
    CHECK_NULL(mql_committed(c, "t", 0, NULL, buf, sizeof buf, &len));
    CHECK_NULL(mql_committed(c, "t", 0, &off, NULL, sizeof buf, &len));
    CHECK(off == 777 && len == 777);
    CHECK_OK(mql_committed(c, "t", 0, &off, NULL, 0, NULL));
    CHECK(off == MQL_OFFSET_UNKNOWN); /* none of the failed calls committed */
    CHECK_OK(mql_commit_offsets(c, &co, 1));
    CHECK_OK(mql_committed(c, "t", 0, &off, buf, sizeof buf, &len));
    CHECK(off == 1 && len == 0 && buf[0] == '\0');
    CHECK_OK(mql_commit_offsets(c, NULL, 0));
    uint64_t lag = 777;
    CHECK_NULL(mql_lag(NULL, "t", 0, &lag));
    CHECK_NULL(mql_lag(c, NULL, 0, &lag));
    CHECK_NULL(mql_lag(c, "t", 0, NULL));
    CHECK(lag == 777);

    /* --- group descriptions --- */
    mql_group_info *g = SENTINEL;
    CHECK_NULL(mql_describe_group(NULL, "g", &g));
    CHECK_NULL(mql_describe_group(mq, NULL, &g));
    CHECK_NULL(mql_describe_group(mq, "g", NULL));
    CHECK(g == SENTINEL);
    CHECK_OK(mql_describe_group(mq, "g", &g));
    mql_group_info_free(NULL);
    CHECK(mql_group_info_name(NULL) == NULL);
    CHECK(mql_group_info_generation(NULL) == 0);
    CHECK(mql_group_info_member_count(NULL) == 0);
    CHECK(mql_group_info_committed_count(NULL) == 0);
    const char *id = SENTINEL;
    n = 777;
    CHECK_NULL(mql_group_info_member(NULL, 0, &id, &n));
    CHECK_NULL(mql_group_info_member(g, 0, NULL, &n));
    CHECK_NULL(mql_group_info_member(g, 0, &id, NULL));
    CHECK((const void *)id == SENTINEL && n == 777);
    tp.topic = SENTINEL;
    CHECK_NULL(mql_group_info_member_partition(NULL, 0, 0, &tp));
    CHECK_NULL(mql_group_info_member_partition(g, 0, 0, NULL));
    CHECK(tp.topic == SENTINEL);
    co.topic = SENTINEL;
    CHECK_NULL(mql_group_info_committed(NULL, 0, &co));
    CHECK_NULL(mql_group_info_committed(g, 0, NULL));
    CHECK(co.topic == SENTINEL);
    CHECK_OK(mql_group_info_member(g, 0, &id, &n));
    CHECK(n == 1);
    CHECK_OK(mql_group_info_member_partition(g, 0, 0, &tp));
    CHECK(strcmp(tp.topic, "t") == 0 && tp.partition == 0);
    CHECK_OK(mql_group_info_committed(g, 0, &co));
    CHECK(co.offset == 1);
    mql_group_info_free(g);

    /* --- close --- */
    CHECK_NULL(mql_consumer_close(NULL));
    CHECK_OK(mql_consumer_close(c));
    mql_consumer_free(c);
    CHECK_OK(mql_close(mq));
    puts("group_null_args: ok");
    return 0;
}
