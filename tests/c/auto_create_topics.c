/* Topic creation on first use: off by default (MQL_UNKNOWN_TOPIC); on, a
 * send, mql_assign and mql_subscribe create the topic with
 * default_partitions partitions; invalid names create nothing; the
 * setters check their values. */
#include "check.h"

static mql_broker *open_auto(const char *dir, const char *name, uint32_t partitions) {
    char path[4096];
    join_path(path, sizeof path, dir, name);
    mql_config *cfg;
    CHECK_OK(mql_config_new(&cfg));
    CHECK_OK(mql_config_set_retention_check_interval_ms(cfg, 0));
    CHECK_FAIL(mql_config_set_default_partitions(cfg, 0), MQL_INVALID_CONFIG, "default_partitions");
    CHECK_FAIL(mql_config_set_default_partitions(cfg, 100001), MQL_INVALID_CONFIG, "default_partitions");
    CHECK_OK(mql_config_set_auto_create_topics(cfg, true));
    CHECK_OK(mql_config_set_default_partitions(cfg, partitions));
    mql_broker *mq;
    CHECK_OK(mql_open(path, cfg, &mq));
    mql_config_free(cfg);
    return mq;
}

static uint32_t partitions_of(mql_broker *mq, const char *topic) {
    uint32_t n = 0;
    CHECK_OK(mql_topic_partition_count(mq, topic, &n));
    return n;
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_metadata md;

    /* --- off by default --- */
    mql_broker *off = open_data(dir, "off");
    mql_producer *p;
    CHECK_OK(mql_producer_new(off, NULL, &p));
    CHECK_STATUS(mql_send(p, "missing", NULL, 0, "v", 1, &md), MQL_UNKNOWN_TOPIC);
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(off, NULL, NULL, &c));
    CHECK_STATUS(mql_assign(c, "missing", 0), MQL_UNKNOWN_TOPIC);
    CHECK_STATUS(mql_topic_partition_count(off, "missing", &(uint32_t){0}), MQL_UNKNOWN_TOPIC);
    mql_consumer_free(c);
    mql_producer_free(p);
    CHECK_OK(mql_close(off));

    /* --- on --- */
    mql_broker *mq = open_auto(dir, "on", 3);
    CHECK_OK(mql_producer_new(mq, NULL, &p));
    CHECK_OK(mql_send(p, "sent", NULL, 0, "v", 1, &md));
    CHECK(md.offset == 0);
    CHECK(partitions_of(mq, "sent") == 3);
    CHECK_OK(mql_consumer_new(mq, NULL, NULL, &c));
    CHECK_OK(mql_assign(c, "assigned", 2));
    CHECK(partitions_of(mq, "assigned") == 3);
    CHECK_OK(mql_subscribe(c, "subscribed"));
    CHECK(partitions_of(mq, "subscribed") == 3);
    /* Invalid names: the typed error, nothing created. */
    CHECK_FAIL(mql_send(p, "bad name", NULL, 0, "v", 1, &md), MQL_INVALID_TOPIC_NAME, "bad name");
    CHECK_FAIL(mql_assign(c, "bad/name", 0), MQL_INVALID_TOPIC_NAME, "bad/name");
    CHECK_STATUS(mql_topic_partition_count(mq, "bad name", &(uint32_t){0}), MQL_UNKNOWN_TOPIC);
    mql_consumer_free(c);
    mql_producer_free(p);
    CHECK_OK(mql_close(mq));
    return 0;
}
