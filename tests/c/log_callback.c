/* The engine's log records reach a C callback (mql_set_log_callback, with
 * the level of mql_set_log_level), and what recovery repaired is readable
 * per partition (mql_partition_recovery): a data directory whose active
 * segment was damaged while closed is cut on reopen, which the callback
 * hears about as a warning. */
#include <pthread.h>

#include "check.h"

/* What the callback saw; it may run on any thread. */
struct seen {
    pthread_mutex_t lock;
    int records;
    int warnings_of_truncation;
    int bad_level;
    int bad_target;
    mql_status nested_set; /* mql_set_log_callback from inside the callback */
    mql_status nested_level;
    int try_nested;
    char last[512];
};

static void on_log(void *user_data, mql_log_level level, const char *target, const char *message) {
    struct seen *s = user_data;
    pthread_mutex_lock(&s->lock);
    s->records++;
    if (level < MQL_LOG_ERROR || level > MQL_LOG_TRACE) s->bad_level++;
    if (target == NULL || strncmp(target, "mqlite", 6) != 0) s->bad_target++;
    if (level == MQL_LOG_WARN && message != NULL && strstr(message, "truncated") != NULL)
        s->warnings_of_truncation++;
    snprintf(s->last, sizeof s->last, "%s", message != NULL ? message : "(null)");
    if (s->try_nested) {
        s->nested_set = mql_set_log_callback(NULL, NULL);
        s->nested_level = mql_set_log_level(MQL_LOG_OFF);
    }
    pthread_mutex_unlock(&s->lock);
}

static void reset(struct seen *s) {
    pthread_mutex_lock(&s->lock);
    s->records = s->warnings_of_truncation = s->bad_level = s->bad_target = 0;
    s->nested_set = s->nested_level = MQL_OK;
    s->try_nested = 0;
    s->last[0] = '\0';
    pthread_mutex_unlock(&s->lock);
}

static const char VALUE[] = "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz";

/* Flips a byte inside the last copy of VALUE in the active segment of t/0,
 * so that the last batch fails its CRC at the next open, and removes the
 * partition's recovery point. */
static void damage(const char *dir) {
    char path[4400];
    snprintf(path, sizeof path, "%s/data/topics/t/0/00000000000000000000.log", dir);
    FILE *f = fopen(path, "r+b");
    if (f == NULL) FAIL_AT("cannot open %s", path);
    CHECK(fseek(f, 0, SEEK_END) == 0);
    long size = ftell(f);
    CHECK(size > 0);
    char *bytes = malloc((size_t)size);
    CHECK(bytes != NULL);
    CHECK(fseek(f, 0, SEEK_SET) == 0);
    CHECK(fread(bytes, 1, (size_t)size, f) == (size_t)size);
    size_t n = strlen(VALUE);
    long at = -1;
    for (long i = 0; i + (long)n <= size; i++)
        if (memcmp(bytes + i, VALUE, n) == 0) at = i;
    if (at < 0) FAIL_AT("the record's value is not in %s", path);
    long pos = at + (long)n / 2;
    CHECK(fseek(f, pos, SEEK_SET) == 0);
    CHECK(fputc(bytes[pos] ^ 0xFF, f) != EOF);
    CHECK(fclose(f) == 0);
    free(bytes);
    /* As a crash before any flush leaves it: the bad batch is then a torn
     * tail, which recovery cuts with a warning (after a clean close it
     * would be corruption, reported as an error). */
    snprintf(path, sizeof path, "%s/data/topics/t/0/recovery.point", dir);
    CHECK(remove(path) == 0);
}

/* dir/name in exclusive mode, by name: the damage below is made by removing
 * the recovery point, which that mode's open checks (shared mode checks the
 * logs after a process's crash or a restart). */
static mql_broker *open_exclusive_dir(const char *dir, const char *name) {
    char path[4096];
    join_path(path, sizeof path, dir, name);
    mql_broker *mq = NULL;
    CHECK_OK(open_exclusive(path, &mq));
    return mq;
}

/* Writes `n` more records to t/0 (made if missing), closes cleanly and
 * damages the last one. */
static void write_and_damage(const char *dir, int n) {
    mql_broker *mq = open_exclusive_dir(dir, "data");
    uint32_t count;
    if (mql_topic_partition_count(mq, "t", &count) != MQL_OK) make_topic(mq, "t", 1);
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, NULL, &p));
    for (int i = 0; i < n; i++) send_to(p, "t", 0, VALUE);
    mql_producer_free(p);
    CHECK_OK(mql_close(mq));
    damage(dir);
}

static void check_zero(const mql_recovery_stats *r) {
    CHECK(r->truncated_bytes == 0 && r->dropped_batches == 0 && r->torn_tails == 0);
    CHECK(r->corruptions == 0 && r->lost_records == 0 && r->quarantined_bytes == 0);
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    struct seen s = {.lock = PTHREAD_MUTEX_INITIALIZER};

    /* Levels: MQL_LOG_OFF to MQL_LOG_TRACE, nothing else. */
    CHECK_FAIL(mql_set_log_level(-1), MQL_INVALID_ARGUMENT, "got -1");
    CHECK_FAIL(mql_set_log_level(6), MQL_INVALID_ARGUMENT, "MQL_LOG_TRACE");
    for (int l = MQL_LOG_OFF; l <= MQL_LOG_TRACE; l++) CHECK_OK(mql_set_log_level(l));
    CHECK_OK(mql_set_log_level(MQL_LOG_WARN));
    /* No callback yet: turning it off again is fine. */
    CHECK_OK(mql_set_log_callback(NULL, NULL));

    /* A clean directory: recovery found nothing, and nothing is logged. */
    CHECK_OK(mql_set_log_callback(on_log, &s));
    mql_broker *mq = open_exclusive_dir(dir, "data");
    make_topic(mq, "t", 1);
    fill(mq, "t", 1, 3);
    mql_recovery_stats rec;
    memset(&rec, 0x5A, sizeof rec);
    CHECK_FAIL(mql_partition_recovery(mq, "nope", 0, &rec), MQL_UNKNOWN_TOPIC, "nope");
    CHECK_FAIL(mql_partition_recovery(mq, "t", 1, &rec), MQL_UNKNOWN_PARTITION, "1");
    CHECK(rec.truncated_bytes == 0x5A5A5A5A5A5A5A5AULL); /* untouched on failure */
    CHECK_OK(mql_partition_recovery(mq, "t", 0, &rec));
    check_zero(&rec);
    CHECK_OK(mql_close(mq));
    mq = open_exclusive_dir(dir, "data");
    CHECK_OK(mql_partition_recovery(mq, "t", 0, &rec));
    check_zero(&rec);
    CHECK_OK(mql_close(mq));
    CHECK(s.records == 0);

    /* Damage: the reopen cuts the last batch and warns about it. */
    write_and_damage(dir, 5);
    mq = open_exclusive_dir(dir, "data");
    CHECK(s.warnings_of_truncation == 1);
    if (s.bad_level != 0 || s.bad_target != 0) FAIL_AT("bad level or target; last message: %s", s.last);
    CHECK(strstr(s.last, "00000000000000000000.log") != NULL); /* names the file */
    CHECK_OK(mql_partition_recovery(mq, "t", 0, &rec));
    CHECK(rec.truncated_bytes > 0 && rec.dropped_batches >= 1);
    CHECK(end_of(mq, "t", 0) < 3 + 5); /* the damaged record is gone */
    CHECK_OK(mql_close(mq));

    /* Below the level: MQL_LOG_ERROR does not get the warning. */
    reset(&s);
    write_and_damage(dir, 2);
    CHECK_OK(mql_set_log_level(MQL_LOG_ERROR));
    mq = open_exclusive_dir(dir, "data");
    CHECK(s.records == 0);
    CHECK_OK(mql_partition_recovery(mq, "t", 0, &rec));
    CHECK(rec.truncated_bytes > 0); /* it did happen */
    CHECK_OK(mql_close(mq));

    /* MQL_LOG_OFF neither; MQL_LOG_TRACE does. */
    write_and_damage(dir, 2);
    CHECK_OK(mql_set_log_level(MQL_LOG_OFF));
    mq = open_exclusive_dir(dir, "data");
    CHECK_OK(mql_close(mq));
    CHECK(s.records == 0);
    write_and_damage(dir, 2);
    CHECK_OK(mql_set_log_level(MQL_LOG_TRACE));
    mq = open_exclusive_dir(dir, "data");
    CHECK_OK(mql_close(mq));
    CHECK(s.warnings_of_truncation == 1);

    /* The callback may not change the settings (that would deadlock). */
    reset(&s);
    s.try_nested = 1;
    write_and_damage(dir, 2);
    mq = open_exclusive_dir(dir, "data");
    CHECK_OK(mql_close(mq));
    CHECK(s.warnings_of_truncation == 1);
    CHECK(s.nested_set == MQL_INVALID_ARGUMENT && s.nested_level == MQL_INVALID_ARGUMENT);

    /* NULL turns logging off: the callback is no longer called. */
    reset(&s);
    CHECK_OK(mql_set_log_level(MQL_LOG_WARN));
    CHECK_OK(mql_set_log_callback(NULL, NULL));
    write_and_damage(dir, 2);
    mq = open_exclusive_dir(dir, "data");
    CHECK_OK(mql_partition_recovery(mq, "t", 0, &rec));
    CHECK(rec.truncated_bytes > 0);
    CHECK_OK(mql_close(mq));
    CHECK(s.records == 0);

    /* And on again. */
    CHECK_OK(mql_set_log_callback(on_log, &s));
    write_and_damage(dir, 2);
    mq = open_exclusive_dir(dir, "data");
    CHECK_OK(mql_close(mq));
    CHECK(s.warnings_of_truncation == 1);
    CHECK_OK(mql_set_log_callback(NULL, NULL));
    pthread_mutex_destroy(&s.lock);
    printf("log_callback: ok\n");
    return 0;
}
