/*
 * floor-relay: the least a broker can do under `agent-fleet bench broker`,
 * to measure what the load generator and the kernel cost on a machine.
 *
 * It answers register with registered, routes send to the session named by
 * "to" (delivery_accepted to the sender, message to the recipient) and turns
 * message_received into delivered: one thread, one blocking epoll, blocking
 * writes, no validation, no scopes, no rate limit, no timeouts, no state on
 * disk. It is NOT an intercom broker: it trusts every frame and serves only
 * the frames the benchmark sends. Compared with agent-fleet's broker and the
 * TypeScript reference in one run (contrib/bench/with-floor-relay.sh), its
 * figures bound what any broker's ratio against the reference can be there.
 *
 *   cc -O2 -o floor-relay floor-relay.c && ./floor-relay SOCKET
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

enum { MAX_FD = 4096, FRAME_MAX = 1 << 20, PENDING = 1 << 16, ID_MAX = 600 };

struct conn {
	char id[ID_MAX]; /* the registered session id; "" before register */
	char *in;        /* bytes read, not yet a whole frame */
	size_t len;
};

struct pending {
	int sender; /* descriptor of the sender; -1: free */
	char message_id[ID_MAX];
};

static struct conn *conns[MAX_FD];
static int max_fd; /* the highest descriptor served, bounding the scan for a recipient */
static struct pending pending[PENDING];
static unsigned long next_delivery = 1;
static char out[FRAME_MAX + 4];

/* str copies the JSON string value after key (which ends with the opening
 * quote) into dst. The benchmark's ids need no escapes. */
static int str(const char *p, size_t n, const char *key, char *dst, size_t max) {
	const char *q = memmem(p, n, key, strlen(key));
	size_t i = 0;
	if (!q)
		return -1;
	for (q += strlen(key); q < p + n && *q != '"' && i < max - 1; q++)
		dst[i++] = *q;
	dst[i] = 0;
	return (int)i;
}

/* send_frame writes one length-prefixed frame, blocking until it is out. */
static void send_frame(int fd, const char *json, size_t n) {
	uint32_t h = htonl((uint32_t)n);
	size_t off = 0;
	memcpy(out, &h, 4);
	memcpy(out + 4, json, n);
	while (off < n + 4) {
		ssize_t w = write(fd, out + off, n + 4 - off);
		if (w <= 0)
			return; /* the peer is gone: its EOF closes it */
		off += (size_t)w;
	}
}

static char frame_buf[FRAME_MAX + 1024];

static void handle(int fd, struct conn *c, const char *p, size_t n) {
	char type[64];
	int m;
	if (str(p, n, "\"type\":\"", type, sizeof type) < 0)
		return;
	if (!strcmp(type, "register")) {
		str(p, n, "\"sessionId\":\"", c->id, sizeof c->id);
		m = snprintf(frame_buf, sizeof frame_buf,
			     "{\"type\":\"registered\",\"sessionId\":\"%s\",\"protocol\":\"pi-intercom\",\"version\":4}", c->id);
		send_frame(fd, frame_buf, (size_t)m);
	} else if (!strcmp(type, "send")) {
		/* {"type":"send","to":T,"message":{…}}: message is the last member. */
		char to[ID_MAX], message_id[ID_MAX];
		const char *msg = memmem(p, n, "\"message\":", 10);
		size_t msg_len;
		int r = -1;
		unsigned long d;
		if (!msg || str(p, n, "\"to\":\"", to, sizeof to) < 0)
			return;
		msg += 10;
		msg_len = (size_t)(p + n - 1 - msg);
		if (str(msg, msg_len, "\"id\":\"", message_id, sizeof message_id) < 0)
			return;
		for (int i = 0; i <= max_fd && r < 0; i++)
			if (conns[i] && !strcmp(conns[i]->id, to))
				r = i;
		if (r < 0)
			return;
		d = next_delivery++;
		pending[d % PENDING].sender = fd;
		strcpy(pending[d % PENDING].message_id, message_id);
		m = snprintf(frame_buf, sizeof frame_buf,
			     "{\"type\":\"delivery_accepted\",\"messageId\":\"%s\",\"deliveryId\":\"d%lu\"}", message_id, d);
		send_frame(fd, frame_buf, (size_t)m);
		m = snprintf(frame_buf, sizeof frame_buf,
			     "{\"type\":\"message\",\"deliveryId\":\"d%lu\",\"from\":{\"id\":\"%s\"},\"message\":", d, c->id);
		if ((size_t)m + msg_len + 1 > sizeof frame_buf)
			return;
		memcpy(frame_buf + m, msg, msg_len);
		m += (int)msg_len;
		frame_buf[m++] = '}';
		send_frame(r, frame_buf, (size_t)m);
	} else if (!strcmp(type, "message_received")) {
		char id[32];
		struct pending *pd;
		unsigned long d;
		if (str(p, n, "\"deliveryId\":\"d", id, sizeof id) < 0)
			return;
		d = strtoul(id, NULL, 10);
		pd = &pending[d % PENDING];
		if (pd->sender < 0)
			return;
		m = snprintf(frame_buf, sizeof frame_buf,
			     "{\"type\":\"delivered\",\"messageId\":\"%s\",\"deliveryId\":\"d%lu\"}", pd->message_id, d);
		send_frame(pd->sender, frame_buf, (size_t)m);
		pd->sender = -1;
	}
}

static void drop(int ep, int fd) {
	epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
	close(fd);
	for (int i = 0; i < PENDING; i++)
		if (pending[i].sender == fd)
			pending[i].sender = -1;
	free(conns[fd]->in);
	free(conns[fd]);
	conns[fd] = NULL;
}

int main(int argc, char **argv) {
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	struct epoll_event ev = {.events = EPOLLIN}, events[64];
	int ls, ep;
	if (argc != 2 || strlen(argv[1]) >= sizeof addr.sun_path) {
		fprintf(stderr, "usage: floor-relay SOCKET (at most %zu bytes)\n", sizeof addr.sun_path - 1);
		return 2;
	}
	for (int i = 0; i < PENDING; i++)
		pending[i].sender = -1;
	strcpy(addr.sun_path, argv[1]);
	unlink(argv[1]);
	ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ls < 0 || bind(ls, (struct sockaddr *)&addr, sizeof addr) || listen(ls, 128)) {
		perror("floor-relay: listen");
		return 1;
	}
	ep = epoll_create1(EPOLL_CLOEXEC);
	ev.data.fd = ls;
	epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
	for (;;) {
		int n = epoll_wait(ep, events, 64, -1);
		for (int i = 0; i < n; i++) {
			int fd = events[i].data.fd;
			struct conn *c;
			ssize_t r;
			size_t off = 0;
			if (fd == ls) {
				int cfd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
				if (cfd < 0)
					continue;
				if (cfd >= MAX_FD) {
					close(cfd);
					continue;
				}
				if (cfd > max_fd)
					max_fd = cfd;
				conns[cfd] = calloc(1, sizeof *conns[cfd]);
				conns[cfd]->in = malloc(FRAME_MAX + 4);
				ev.data.fd = cfd;
				epoll_ctl(ep, EPOLL_CTL_ADD, cfd, &ev);
				continue;
			}
			c = conns[fd];
			r = read(fd, c->in + c->len, FRAME_MAX + 4 - c->len);
			if (r <= 0) {
				drop(ep, fd);
				continue;
			}
			c->len += (size_t)r;
			while (c->len - off >= 4) {
				uint32_t size;
				memcpy(&size, c->in + off, 4);
				size = ntohl(size);
				if (size > FRAME_MAX) {
					drop(ep, fd);
					c = NULL;
					break;
				}
				if (c->len - off < 4 + (size_t)size)
					break;
				handle(fd, c, c->in + off + 4, size);
				off += 4 + size;
			}
			if (c) {
				memmove(c->in, c->in + off, c->len - off);
				c->len -= off;
			}
		}
	}
}
