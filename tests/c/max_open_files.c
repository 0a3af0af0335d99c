/* The data directory's descriptor limit (mql_config_set_max_open_files):
 * 0 is refused and changes nothing; a limit far below the number of
 * partitions still writes and reads every partition, and the process
 * holds no more descriptors than the limit allows. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>

#include "check.h"

#define PARTITIONS 30
#define LIMIT 2

static int open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL);
    int n = 0;
    while (readdir(d) != NULL) n++;
    closedir(d);
    return n;
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    mql_config *cfg;
    CHECK_OK(mql_config_new(&cfg));
    CHECK_OK(mql_config_set_prefault(cfg, false));
    CHECK_FAIL(mql_config_set_max_open_files(cfg, 0), MQL_INVALID_CONFIG, "max_open_files");
    CHECK_OK(mql_config_set_max_open_files(cfg, LIMIT));
    int before = open_fds();
    mql_broker *mq;
    CHECK_OK(mql_open(argv[1], cfg, &mq));
    mql_config_free(cfg);

    mql_topic_config *tc;
    CHECK_OK(mql_topic_config_new(PARTITIONS, &tc));
    CHECK_OK(mql_topic_create(mq, "t", tc));
    mql_topic_config_free(tc);

    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, NULL, &p));
    int most = open_fds();
    char value[32];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < PARTITIONS; i++) {
            mql_record r = MQL_RECORD_INIT;
            r.topic = "t";
            r.partition = i;
            int len = snprintf(value, sizeof value, "%d-%d", i, round);
            r.value = value;
            r.value_len = (size_t)len;
            CHECK_OK(mql_send_record(p, &r, NULL));
            int now = open_fds();
            if (now > most) most = now;
        }
    }
    CHECK_OK(mql_producer_flush(p));
    mql_producer_free(p);

    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, NULL, NULL, &c));
    CHECK_OK(mql_subscribe(c, "t"));
    int got = 0;
    mql_message *m;
    while (got < 3 * PARTITIONS && mql_poll(c, 1000, &m) == MQL_OK) {
        got++;
        mql_message_free(m);
    }
    CHECK(got == 3 * PARTITIONS);
    mql_consumer_free(c);
    /* The limit, the directory lock, and one file opened for a call. */
    CHECK(most <= before + LIMIT + 2);
    CHECK_OK(mql_close(mq));
    return 0;
}
