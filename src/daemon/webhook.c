/* --events-webhook URL: each security event POSTed to an operator's endpoint as it happens,
 * its body signed (X-Cordon-Signature: sha256=<hex of HMAC-SHA256(key, body)>, the key
 * --events-webhook-key FILE, made at first start in <state-dir>/events-webhook.key when not
 * given), one request at a time in order, retried with backoff (0.5 s doubling to 30 s,
 * WEBHOOK_ATTEMPTS tries, then that event is dropped), from a bounded queue (past
 * WEBHOOK_QUEUE events the oldest is dropped: a dead endpoint costs bounded memory). All of
 * it is libevent's asynchronous HTTP client on the loop: nothing waits. http:// only. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "basic/log.h"
#include "basic/secmem.h"
#include "daemon/daemon.h"

#define WEBHOOK_QUEUE 1024
#define WEBHOOK_ATTEMPTS 8
#define WEBHOOK_TIMEOUT_S 5
#define WEBHOOK_KEY_LEN 32

static struct {
	char host[256], path[1024], hostport[300];
	uint16_t port;
	uint8_t *key;
	struct evhttp_connection *conn;
	char *q[WEBHOOK_QUEUE];
	size_t head, n;
	unsigned attempts;
	bool busy;
	struct event *retry;
	uint64_t sent, failed, dropped;
} W;

/* http://HOST[:PORT][/PATH] */
static int parse_url(const char *url)
{
	const char *p = url + strlen("http://");
	if (strncmp(url, "http://", 7) != 0)
		return -EINVAL;
	size_t hl = strcspn(p, ":/");
	if (hl == 0 || hl >= sizeof(W.host))
		return -EINVAL;
	memcpy(W.host, p, hl);
	W.host[hl] = '\0';
	p += hl;
	unsigned long port = 80;
	if (*p == ':') {
		char *end;
		port = strtoul(p + 1, &end, 10);
		if (end == p + 1 || port == 0 || port > 65535)
			return -EINVAL;
		p = end;
	}
	W.port = (uint16_t)port;
	snprintf(W.path, sizeof(W.path), "%s", *p ? p : "/");
	snprintf(W.hostport, sizeof(W.hostport), "%s:%u", W.host, W.port);
	return *p && *p != '/' ? -EINVAL : 0;
}

static void send_next(void);

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
	send_next();
}

static void pop(void)
{
	free(W.q[W.head]);
	W.q[W.head] = NULL;
	W.head = (W.head + 1) % WEBHOOK_QUEUE;
	W.n--;
	W.attempts = 0;
}

static void on_done(struct evhttp_request *req, void *arg)
{
	int code = req ? evhttp_request_get_response_code(req) : 0;
	W.busy = false;
	if (code >= 200 && code < 300) {
		W.sent++;
		pop();
		send_next();
		return;
	}
	W.failed++;
	if (++W.attempts >= WEBHOOK_ATTEMPTS) {
		log_warning("events webhook %s: no 2xx after %d tries (last %d): an event dropped", W.hostport,
			    WEBHOOK_ATTEMPTS, code);
		W.dropped++;
		pop();
		send_next();
		return;
	}
	unsigned ms = 500u << (W.attempts - 1);
	struct timeval tv = {ms > 30000 ? 30 : ms / 1000, ms > 30000 ? 0 : (ms % 1000) * 1000};
	evtimer_add(W.retry, &tv);
}

static void sign(const char *body, size_t len, char hex[2 * EVP_MAX_MD_SIZE + 1])
{
	uint8_t mac[EVP_MAX_MD_SIZE];
	unsigned n = 0;
	hex[0] = '\0';
	if (HMAC(EVP_sha256(), W.key, WEBHOOK_KEY_LEN, (const uint8_t *)body, len, mac, &n))
		for (unsigned i = 0; i < n; i++)
			snprintf(hex + 2 * i, 3, "%02x", mac[i]);
}

static void send_next(void)
{
	char hex[2 * EVP_MAX_MD_SIZE + 1], sig[2 * EVP_MAX_MD_SIZE + 8];
	if (W.busy || !W.n || evtimer_pending(W.retry, NULL))
		return;
	const char *body = W.q[W.head];
	struct evhttp_request *req = evhttp_request_new(on_done, NULL);
	if (!req)
		return;
	sign(body, strlen(body), hex);
	snprintf(sig, sizeof(sig), "sha256=%s", hex);
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	evhttp_add_header(h, "Host", W.hostport);
	evhttp_add_header(h, "Content-Type", "application/json");
	evhttp_add_header(h, "Connection", "close"); /* a connection per event: no stale keep-alive to trip on */
	evhttp_add_header(h, "X-Cordon-Signature", sig);
	evbuffer_add(evhttp_request_get_output_buffer(req), body, strlen(body));
	if (evhttp_make_request(W.conn, req, EVHTTP_REQ_POST, W.path) < 0) { /* frees req */
		on_done(NULL, NULL);
		return;
	}
	W.busy = true;
}

void webhook_push(const char *line, size_t len)
{
	if (!W.conn)
		return;
	char *copy = strndup(line, len);
	if (!copy)
		return;
	if (W.n == WEBHOOK_QUEUE) { /* the oldest goes, unless it is the one in flight */
		size_t victim = (W.head + (W.busy || W.attempts ? 1 : 0)) % WEBHOOK_QUEUE;
		free(W.q[victim]);
		for (size_t i = victim; i != (W.head + W.n - 1) % WEBHOOK_QUEUE; i = (i + 1) % WEBHOOK_QUEUE)
			W.q[i] = W.q[(i + 1) % WEBHOOK_QUEUE];
		W.n--;
		W.dropped++;
	}
	W.q[(W.head + W.n++) % WEBHOOK_QUEUE] = copy;
	send_next();
}

int webhook_start(void)
{
	char path[4200];
	if (!D.cfg.events_webhook)
		return 0;
	if (parse_url(D.cfg.events_webhook) < 0) {
		log_error("--events-webhook '%s': expected http://HOST[:PORT][/PATH]", D.cfg.events_webhook);
		return -EINVAL;
	}
	snprintf(path, sizeof(path), "%s/events-webhook.key", D.cfg.state_dir);
	const char *kf = D.cfg.events_webhook_key ? D.cfg.events_webhook_key : path;
	int r = (W.key = secmem_new(SECMEM_PAGE)) ? secmem_key_file(kf, W.key, WEBHOOK_KEY_LEN) : -ENOMEM;
	if (r < 0) {
		log_error("--events-webhook-key %s: %s", kf, r == -EINVAL ? "not a key of 32 bytes" : strerror(-r));
		return r;
	}
	W.conn = evhttp_connection_base_new(D.base, NULL, W.host, W.port);
	W.retry = evtimer_new(D.base, on_retry, NULL);
	if (!W.conn || !W.retry)
		return -ENOMEM;
	evhttp_connection_set_timeout(W.conn, WEBHOOK_TIMEOUT_S);
	return 0;
}

void webhook_metrics(FILE *out)
{
	fprintf(out, "# HELP cordon_events_webhook_total Security events given to the webhook, by outcome.\n"
		     "# TYPE cordon_events_webhook_total counter\n"
		     "cordon_events_webhook_total{outcome=\"sent\"} %llu\n"
		     "cordon_events_webhook_total{outcome=\"failed_attempt\"} %llu\n"
		     "cordon_events_webhook_total{outcome=\"dropped\"} %llu\n",
		     (unsigned long long)W.sent, (unsigned long long)W.failed, (unsigned long long)W.dropped);
}
