/* Processor arguments: NULL arguments are MQL_NULL_ARGUMENT and _free(NULL)
 * does nothing; a consumer without a group, or with nothing subscribed, is
 * MQL_INVALID_ARGUMENT and stays usable; invalid config fields are
 * MQL_INVALID_ARGUMENT (a dead-letter topic with an invalid name
 * MQL_INVALID_TOPIC_NAME, and no topic is created). */
#include "check.h"

static bool never(void *user_data, const mql_message *m) {
    (void)user_data;
    (void)m;
    return true;
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq = open_data(dir, "data");
    make_topic(mq, "t", 1);
    fill(mq, "t", 1, 3);

    mql_processor *proc = NULL;
    mql_stopper *stopper = NULL;
    mql_processor_stats st;

    /* A consumer without a group cannot commit what it processed. */
    mql_consumer *alone;
    CHECK_OK(mql_consumer_new(mq, NULL, NULL, &alone));
    CHECK_OK(mql_assign(alone, "t", 0));
    CHECK_FAIL(mql_processor_new(alone, NULL, &proc), MQL_INVALID_ARGUMENT, "group_id");
    CHECK(proc == NULL);
    mql_message *m;
    CHECK_OK(mql_poll(alone, 1000, &m)); /* not lent */
    CHECK(mql_message_offset(m) == 0);
    mql_message_free(m);
    mql_consumer_free(alone);

    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, "g", NULL, &c));
    CHECK_FAIL(mql_processor_new(c, NULL, &proc), MQL_INVALID_ARGUMENT, "no subscription");
    CHECK_OK(mql_subscribe(c, "t"));

    /* NULL arguments. */
    CHECK_FAIL(mql_processor_new(NULL, NULL, &proc), MQL_NULL_ARGUMENT, "consumer");
    CHECK_FAIL(mql_processor_new(c, NULL, NULL), MQL_NULL_ARGUMENT, "out");
    CHECK_FAIL(mql_processor_run(NULL, never, NULL, &st), MQL_NULL_ARGUMENT, "processor");
    CHECK_FAIL(mql_processor_stopper(NULL, &stopper), MQL_NULL_ARGUMENT, "processor");
    CHECK_FAIL(mql_stopper_stop(NULL), MQL_NULL_ARGUMENT, "stopper");
    mql_processor_free(NULL);
    mql_stopper_free(NULL);

    /* Invalid settings. */
    mql_processor_config pc = MQL_PROCESSOR_CONFIG_INIT;
    pc.threads = 0;
    CHECK_FAIL(mql_processor_new(c, &pc, &proc), MQL_INVALID_ARGUMENT, "threads");
    pc = (mql_processor_config)MQL_PROCESSOR_CONFIG_INIT;
    pc.mode = 7;
    CHECK_FAIL(mql_processor_new(c, &pc, &proc), MQL_INVALID_ARGUMENT, "mode");
    pc = (mql_processor_config)MQL_PROCESSOR_CONFIG_INIT;
    pc.max_retries = -5;
    CHECK_FAIL(mql_processor_new(c, &pc, &proc), MQL_INVALID_ARGUMENT, "max_retries");
    pc = (mql_processor_config)MQL_PROCESSOR_CONFIG_INIT;
    pc.max_in_flight = 0;
    CHECK_FAIL(mql_processor_new(c, &pc, &proc), MQL_INVALID_ARGUMENT, "max_in_flight");
    pc = (mql_processor_config)MQL_PROCESSOR_CONFIG_INIT;
    pc.commit_interval_ms = 0;
    CHECK_FAIL(mql_processor_new(c, &pc, &proc), MQL_INVALID_ARGUMENT, "commit_interval_ms");
    pc = (mql_processor_config)MQL_PROCESSOR_CONFIG_INIT;
    pc.dead_letter_topic = "no/such name";
    CHECK_FAIL(mql_processor_new(c, &pc, &proc), MQL_INVALID_TOPIC_NAME, "no/such name");
    CHECK(proc == NULL);
    mql_name_list *names = NULL;
    CHECK_OK(mql_topics(mq, &names));
    CHECK(mql_name_list_len(names) == 1); /* nothing created */
    mql_name_list_free(names);

    /* Defaults (NULL config); a NULL handler; freed without a run. */
    CHECK_OK(mql_processor_new(c, NULL, &proc));
    CHECK_FAIL(mql_processor_run(proc, NULL, NULL, &st), MQL_NULL_ARGUMENT, "handler");
    CHECK_FAIL(mql_processor_stopper(proc, NULL), MQL_NULL_ARGUMENT, "out");
    mql_processor_free(proc);

    /* The consumer is back, with nothing skipped. */
    CHECK_OK(mql_poll(c, 1000, &m));
    CHECK(mql_message_offset(m) == 0);
    mql_message_free(m);

    /* Closed: MQL_CLOSED. */
    CHECK_OK(mql_consumer_close(c));
    CHECK_FAIL(mql_processor_new(c, NULL, &proc), MQL_CLOSED, "closed");
    mql_consumer_free(c);
    CHECK_OK(mql_close(mq));
    puts("processor_errors: ok");
    return 0;
}
