/* lowtide sender: sends messages of every importance, then shows cancellation.
 *
 *   lowtide_sender --to IP:PORT [--count N] [--blockers N] [--blocker-bytes B]
 *
 * 1. `count` messages of 1000 bytes, importance i % 8, each tagged with its importance in
 *    its first byte (the receiver checks the tag against the importance it received).
 * 2. `blockers` bulk messages of importance 0, then one more (the "victim") behind them,
 *    cancelled at once: while the backlog is queued, cancellation must succeed.
 * Waits until everything else is written, closes, and prints what happened:
 *   cancel stream=S seq=Q status=0
 *   cancelled-event stream=S seq=Q reason=1 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lowtide.h>

static void check(lowtide_status s, const char *what) {
  if (s != LOWTIDE_OK) {
    fprintf(stderr, "sender: %s failed (%d): %s\n", what, (int)s, lowtide_last_error());
    exit(2);
  }
}

int main(int argc, char **argv) {
  const char *to = NULL;
  long count = 100, blockers = 0, blocker_bytes = 256 * 1024;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--to")) to = argv[i + 1];
    else if (!strcmp(argv[i], "--count")) count = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--blockers")) blockers = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--blocker-bytes")) blocker_bytes = atol(argv[i + 1]);
    else to = NULL, i = argc;
  }
  if (!to || count < 0 || blockers < 0 || blocker_bytes < 1) {
    fprintf(stderr, "usage: %s --to IP:PORT [--count N] [--blockers N] [--blocker-bytes B]\n",
            argv[0]);
    return 2;
  }

  lowtide_ctx ctx;
  lowtide_channel ch;
  uint64_t stream;
  check(lowtide_ctx_new(1, &ctx), "lowtide_ctx_new");
  check(lowtide_connect(ctx, to, NULL, 5000, &ch), "lowtide_connect");
  check(lowtide_open_stream(ch, 1.0, &stream), "lowtide_open_stream");

  uint8_t small[1000];
  memset(small, 0, sizeof small);
  for (long i = 0; i < count; i++) {
    uint8_t importance = (uint8_t)(i % 8);
    small[0] = importance;
    memcpy(small + 1, &i, sizeof i);
    check(lowtide_send(ch, stream, small, sizeof small, importance, 0, NULL), "lowtide_send");
  }

  lowtide_msg_id victim = {0};
  int cancelled = 0;
  if (blockers > 0) {
    uint8_t *bulk = calloc(1, (size_t)blocker_bytes); /* tag 0 = importance 0 */
    for (long i = 0; i < blockers; i++)
      check(lowtide_send(ch, stream, bulk, (size_t)blocker_bytes, 0, 0, NULL), "lowtide_send");
    check(lowtide_send(ch, stream, small, sizeof small, 0, 0, &victim), "lowtide_send");
    lowtide_status s = lowtide_cancel(ch, victim);
    printf("cancel stream=%llu seq=%llu status=%d\n", (unsigned long long)victim.stream,
           (unsigned long long)victim.seq, (int)s);
    cancelled = s == LOWTIDE_OK;
    free(bulk);
  }

  /* Wait until every message not cancelled is written, watching the events. */
  int fd;
  check(lowtide_channel_fd(ch, &fd), "lowtide_channel_fd");
  uint64_t expected_written = (uint64_t)(count + blockers);
  lowtide_stats st;
  for (;;) {
    check(lowtide_get_stats(ch, &st), "lowtide_get_stats");
    if (st.messages_written >= expected_written) break;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 100) < 0 && errno != EINTR) return 2;
    lowtide_event e;
    while (lowtide_poll_event(ch, &e) == LOWTIDE_OK) {
      if (e.kind == LOWTIDE_EVENT_CANCELLED)
        printf("cancelled-event stream=%llu seq=%llu reason=%u bytes=%llu\n",
               (unsigned long long)e.stream, (unsigned long long)e.seq, e.cancel_reason,
               (unsigned long long)e.bytes);
      if (e.kind == LOWTIDE_EVENT_FINISHED) {
        fprintf(stderr, "sender: channel finished early: %s\n", e.text);
        return 1;
      }
    }
  }
  printf("written %llu messages, cancelled_unsent=%llu cancelled_partial=%llu\n",
         (unsigned long long)st.messages_written, (unsigned long long)st.cancelled_unsent,
         (unsigned long long)st.cancelled_partial);

  /* Close and drain the remaining events until FINISHED. */
  check(lowtide_close(ch, 0, "done"), "lowtide_close");
  for (;;) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    poll(&p, 1, -1);
    lowtide_event e;
    lowtide_status s;
    while ((s = lowtide_poll_event(ch, &e)) == LOWTIDE_OK) {
      if (e.kind == LOWTIDE_EVENT_CANCELLED)
        printf("cancelled-event stream=%llu seq=%llu reason=%u bytes=%llu\n",
               (unsigned long long)e.stream, (unsigned long long)e.seq, e.cancel_reason,
               (unsigned long long)e.bytes);
      if (e.kind == LOWTIDE_EVENT_FINISHED) {
        printf("finished code=%lld %s\n", (long long)e.code, e.text);
        check(lowtide_channel_free(ch), "lowtide_channel_free");
        check(lowtide_ctx_free(ctx), "lowtide_ctx_free");
        return blockers > 0 && !cancelled ? 1 : 0;
      }
    }
  }
}
