/* Descriptors and mappings (Linux: /proc/self/fd, /proc/self/maps): a
 * constant number of descriptors per partition, none per sealed segment,
 * none at all after mql_close though a producer, a consumer and a message
 * made from the broker are still alive. The live message keeps its segment
 * mapped (its bytes stay readable) until it is freed. The same when the
 * consumer handed out one message and holds the rest of what it fetched
 * (over many segments): the held messages are dropped at mql_close. */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <limits.h>
#include <unistd.h>

#include "check.h"

#define PARTITIONS 2

/* Descriptors open on files under `root` (a canonical path), the data
 * directory's lock file aside. */
static int fds_under(const char *root) {
    /* The directory's own locks, one each whatever the partitions. */
    char lock[PATH_MAX], live[PATH_MAX];
    join_path(lock, sizeof lock, root, "LOCK");
    join_path(live, sizeof live, root, "LIVE");
    size_t n = strlen(root);
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL);
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char link[PATH_MAX], target[PATH_MAX];
        join_path(link, sizeof link, "/proc/self/fd", e->d_name);
        ssize_t len = readlink(link, target, sizeof target - 1);
        if (len < 0) continue;
        target[len] = '\0';
        if (strncmp(target, root, n) == 0 && target[n] == '/' && strcmp(target, lock) != 0 &&
            strcmp(target, live) != 0)
            count++;
    }
    closedir(d);
    return count;
}

/* Mappings of files under `root`. */
static int maps_under(const char *root) {
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f != NULL);
    size_t n = strlen(root);
    char line[PATH_MAX + 256];
    int count = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        const char *path = strchr(line, '/');
        if (path != NULL && strncmp(path, root, n) == 0 && path[n] == '/') count++;
    }
    fclose(f);
    return count;
}

static void send_round(mql_producer *p, int n) {
    char value[300];
    memset(value, 'x', sizeof value);
    for (int i = 0; i < n; i++) {
        mql_record r = MQL_RECORD_INIT;
        r.topic = "t";
        r.partition = (uint32_t)(i % PARTITIONS);
        r.value = value;
        r.value_len = sizeof value;
        CHECK_OK(mql_send_record(p, &r, NULL));
    }
}

/* Sealed segments of topic t on disk: its .log files but the active one
 * of each partition. */
static size_t sealed_segments(const char *root) {
    size_t sealed = 0;
    for (int part = 0; part < PARTITIONS; part++) {
        char pdir[PATH_MAX];
        int w = snprintf(pdir, sizeof pdir, "%s/topics/t/%d", root, part);
        CHECK(w > 0 && (size_t)w < sizeof pdir);
        DIR *d = opendir(pdir);
        CHECK(d != NULL);
        size_t logs = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            size_t n = strlen(e->d_name);
            if (n == 24 && strcmp(e->d_name + 20, ".log") == 0) logs++;
        }
        closedir(d);
        CHECK(logs >= 1);
        sealed += logs - 1;
    }
    return sealed;
}

/* Opens `name` under `dir` in exclusive mode, its canonical path into
 * `root`, with topic t of PARTITIONS partitions of small segments. */
static mql_broker *open_scene(const char *dir, const char *name, char *root) {
    char data[PATH_MAX];
    join_path(data, sizeof data, dir, name);
    /* Exclusive mode, by name: the counts are that mode's (a shared-mode
     * process also holds its process file and the partitions' tail pages). */
    mql_broker *mq = NULL;
    CHECK_OK(open_exclusive(data, &mq));
    CHECK(realpath(data, root) != NULL);
    mql_topic_config *tc;
    CHECK_OK(mql_topic_config_new(PARTITIONS, &tc));
    CHECK_OK(mql_topic_config_set_segment_bytes(tc, 4096));
    CHECK_OK(mql_topic_create(mq, "t", tc));
    mql_topic_config_free(tc);
    return mq;
}

/* mql_poll hands out ONE message; the consumer holds the rest of its fetch
 * (hundreds of messages over many segments). mql_close releases every
 * descriptor and the held messages' mappings: only the handed-out message
 * keeps one, until it is freed. */
static void held_messages(const char *dir) {
    char root[PATH_MAX];
    mql_broker *mq = open_scene(dir, "held", root);
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, NULL, &p));
    send_round(p, 1000);
    CHECK_OK(mql_producer_flush(p));
    CHECK(sealed_segments(root) >= 50);
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, NULL, NULL, &c));
    CHECK_OK(mql_subscribe(c, "t"));
    mql_message *first = NULL, *m = NULL;
    CHECK_OK(mql_poll(c, 1000, &first));
    CHECK(mql_message_offset(first) == 0);
    int before = maps_under(root);
    CHECK_OK(mql_close(mq));
    int maps = maps_under(root);
    printf("one message handed out, the rest held: %d maps; after mql_close: %d fds, %d maps\n", before,
           fds_under(root), maps);
    CHECK(before > 3); /* many segments mapped, the held messages' among them */
    CHECK(fds_under(root) == 0);
    CHECK(maps >= 1 && maps <= 3);
    size_t len = 0;
    const char *v = mql_message_value(first, &len);
    CHECK(len == 300 && v[0] == 'x' && v[299] == 'x');
    mql_message_free(first);
    CHECK(maps_under(root) == 0);
    CHECK_FAIL(mql_poll(c, 0, &m), MQL_CLOSED, "closed");
    CHECK(fds_under(root) == 0 && maps_under(root) == 0);
    mql_consumer_free(c);
    mql_producer_free(p);
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    char root[PATH_MAX];
    mql_broker *mq = open_scene(dir, "data", root);
    CHECK(fds_under(root) == PARTITIONS); /* the active segment's log */

    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_acks(pc, -1));
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, pc, &p));
    mql_producer_config_free(pc);
    send_round(p, 100);
    int fds_few = fds_under(root);
    size_t sealed_few = sealed_segments(root);
    send_round(p, 1000);
    int fds_many = fds_under(root);
    size_t sealed_many = sealed_segments(root);
    printf("%zu sealed segments: %d fds; %zu sealed: %d fds, %d maps\n", sealed_few, fds_few, sealed_many,
           fds_many, maps_under(root));
    CHECK(sealed_many >= sealed_few + 50);
    CHECK(fds_few == 2 * PARTITIONS); /* flushed: the recovery point too */
    CHECK(fds_many == fds_few);

    /* Read everything; keep the first message, free the others (the
     * consumer's buffer is empty once mql_poll times out). */
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, NULL, NULL, &c));
    CHECK_OK(mql_subscribe(c, "t"));
    mql_message *first = NULL, *m = NULL;
    CHECK_OK(mql_poll(c, 1000, &first));
    size_t read = 1;
    while (mql_poll(c, 0, &m) == MQL_OK) {
        mql_message_free(m);
        read++;
    }
    CHECK(read == 1100);

    CHECK_OK(mql_close(mq));
    int maps = maps_under(root);
    printf("after mql_close, one live message: %d fds, %d maps\n", fds_under(root), maps);
    CHECK(fds_under(root) == 0);
    CHECK(maps >= 1 && maps <= 3);
    size_t len = 0;
    const char *v = mql_message_value(first, &len);
    CHECK(len == 300 && v[0] == 'x' && v[299] == 'x');
    mql_message_free(first);
    CHECK(maps_under(root) == 0);
    /* The producer and the consumer are still alive, and closed. */
    CHECK_FAIL(mql_send(p, "t", NULL, 0, "x", 1, NULL), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_poll(c, 0, &m), MQL_CLOSED, "closed");
    CHECK(fds_under(root) == 0 && maps_under(root) == 0);
    mql_producer_free(p);
    mql_consumer_free(c);
    held_messages(dir);
    puts("resources: ok");
    return 0;
}
