/* lowtide receiver: accepts one channel and prints every message with its importance.
 *
 *   lowtide_receiver [--listen IP:PORT] [--pause-ms N] [--config JSON]
 *
 * Prints "listening IP:PORT" once bound, then one line per message:
 *   msg stream=S seq=Q importance=I len=L tag=T
 * where T is the importance the sender wrote into the payload's first byte (the examples'
 * convention), and a summary at the end. Exits 1 if any message's importance differs from its
 * tag. --pause-ms waits that long before reading (so a sender's backlog stays queued). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lowtide.h>

static int check(lowtide_status s, const char *what) {
  if (s != LOWTIDE_OK) {
    fprintf(stderr, "receiver: %s failed (%d): %s\n", what, (int)s, lowtide_last_error());
    exit(2);
  }
  return 0;
}

/* Waits until fd is readable. */
static void wait_readable(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  while (poll(&p, 1, -1) < 0 && errno == EINTR) {
  }
}

int main(int argc, char **argv) {
  const char *listen_addr = "127.0.0.1:0", *config = NULL;
  long pause_ms = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--listen")) listen_addr = argv[i + 1];
    else if (!strcmp(argv[i], "--pause-ms")) pause_ms = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--config")) config = argv[i + 1];
    else {
      fprintf(stderr, "usage: %s [--listen IP:PORT] [--pause-ms N] [--config JSON]\n", argv[0]);
      return 2;
    }
  }

  lowtide_ctx ctx;
  lowtide_listener listener;
  lowtide_channel ch;
  char addr[64];
  int fd;
  check(lowtide_ctx_new(1, &ctx), "lowtide_ctx_new");
  check(lowtide_listen(ctx, listen_addr, config, &listener), "lowtide_listen");
  check(lowtide_listener_addr(listener, addr, sizeof addr), "lowtide_listener_addr");
  printf("listening %s\n", addr);
  fflush(stdout);

  check(lowtide_listener_fd(listener, &fd), "lowtide_listener_fd");
  lowtide_status s;
  while ((s = lowtide_accept(listener, &ch)) == LOWTIDE_AGAIN) wait_readable(fd);
  check(s, "lowtide_accept");
  check(lowtide_listener_free(listener), "lowtide_listener_free");

  if (pause_ms > 0) {
    struct timespec t = {.tv_sec = pause_ms / 1000, .tv_nsec = (pause_ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
  }

  size_t cap = 64 * 1024;
  uint8_t *buf = malloc(cap);
  unsigned long messages = 0, mismatches = 0, peer_cancelled = 0;
  int finished = 0;
  check(lowtide_channel_fd(ch, &fd), "lowtide_channel_fd");
  while (!finished) {
    wait_readable(fd);
    lowtide_message m;
    while ((s = lowtide_recv(ch, buf, cap, &m)) != LOWTIDE_AGAIN && s != LOWTIDE_ERR_CLOSED) {
      if (s == LOWTIDE_ERR_BUFFER_TOO_SMALL) { /* grow and take it again */
        cap = (size_t)m.len;
        buf = realloc(buf, cap);
        continue;
      }
      check(s, "lowtide_recv");
      int tag = m.len > 0 ? buf[0] : -1;
      printf("msg stream=%llu seq=%llu importance=%u len=%llu tag=%d\n",
             (unsigned long long)m.stream, (unsigned long long)m.seq, m.importance,
             (unsigned long long)m.len, tag);
      messages++;
      mismatches += tag != m.importance;
    }
    lowtide_event e;
    while ((s = lowtide_poll_event(ch, &e)) == LOWTIDE_OK) {
      if (e.kind == LOWTIDE_EVENT_PEER_CANCELLED) {
        peer_cancelled++;
        printf("peer-cancelled stream=%llu seq=%llu bytes=%llu\n", (unsigned long long)e.stream,
               (unsigned long long)e.seq, (unsigned long long)e.bytes);
      } else if (e.kind == LOWTIDE_EVENT_CLOSED) {
        printf("closed by_peer=%u code=%lld reason=%s\n", e.flag, (long long)e.code, e.text);
      } else if (e.kind == LOWTIDE_EVENT_FINISHED) {
        printf("finished code=%lld %s\n", (long long)e.code, e.text);
        finished = 1;
      }
    }
  }
  /* FINISHED comes after the last message. */
  lowtide_message m;
  while (lowtide_recv(ch, buf, cap, &m) == LOWTIDE_OK) messages++;

  printf("received %lu messages, %lu importance mismatches, %lu peer cancellations\n", messages,
         mismatches, peer_cancelled);
  free(buf);
  check(lowtide_channel_free(ch), "lowtide_channel_free");
  check(lowtide_ctx_free(ctx), "lowtide_ctx_free");
  return mismatches == 0 ? 0 : 1;
}
