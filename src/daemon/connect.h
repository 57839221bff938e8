/* Connect-RPC (connectrpc.com/docs/protocol) with the JSON codec, as E2B's envd speaks it: the
 * envelope of a streaming call, the error codes, and (connect.c) a unary or server-streaming
 * answer over an evhttp request.
 *
 *   Unary:  POST /pkg.Service/Method, Content-Type: application/json, the message as the
 *           body; 200 and the answer's JSON, or an HTTP status and {"code", "message"}.
 *   Stream: Content-Type: application/connect+json; the request is one envelope
 *           (flags:1, length:4 big-endian, JSON) and so is each message of the answer
 *           (200); the last envelope has flag END and holds {} or {"error": {...}}.
 *
 * The envelope reader (connectenv.c) is pure: no allocation, bytes from any client.
 *
 *   struct connect_frame f;
 *   int r = connect_envelope_single(body, len, CONNECT_MAX_MESSAGE, &f);
 *   if (r < 0) ... -EBADMSG: not one whole envelope; -EMSGSIZE: over the limit;
 *                  -EOPNOTSUPP: compressed (we offer no compression)
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spec/api.h"

#define CONNECT_MAX_MESSAGE   API_MAX_BODY /* bytes of one request message */
#define CONNECT_ENVELOPE_HEAD 5
#define CONNECT_FLAG_COMPRESSED 0x01
#define CONNECT_FLAG_END	0x02

enum connect_code {
	CONNECT_OK = 0,
	CONNECT_CANCELED,
	CONNECT_UNKNOWN,
	CONNECT_INVALID_ARGUMENT,
	CONNECT_DEADLINE_EXCEEDED,
	CONNECT_NOT_FOUND,
	CONNECT_ALREADY_EXISTS,
	CONNECT_PERMISSION_DENIED,
	CONNECT_RESOURCE_EXHAUSTED,
	CONNECT_FAILED_PRECONDITION,
	CONNECT_ABORTED,
	CONNECT_OUT_OF_RANGE,
	CONNECT_UNIMPLEMENTED,
	CONNECT_INTERNAL,
	CONNECT_UNAVAILABLE,
	CONNECT_DATA_LOSS,
	CONNECT_UNAUTHENTICATED,
	_CONNECT_CODE_MAX
};

struct connect_frame {
	uint8_t flags;
	const uint8_t *data; /* inside the caller's buffer */
	uint32_t len;
};

/* The envelope at the start of @p: bytes it takes (> 0), 0 when incomplete; -EBADMSG for
 * flags we do not know, -EMSGSIZE past @max bytes of message. */
int connect_envelope_next(const uint8_t *p, size_t len, size_t max, struct connect_frame *ret);
/* @p must be exactly one message envelope (a server-streaming call's request). */
int connect_envelope_single(const uint8_t *p, size_t len, size_t max, struct connect_frame *ret);
/* The 5 bytes that go before a message of @len bytes. */
void connect_envelope_head(uint8_t head[CONNECT_ENVELOPE_HEAD], uint8_t flags, uint32_t len);

const char *connect_code_name(enum connect_code c); /* "not_found" */
int connect_code_status(enum connect_code c);       /* its HTTP status in a unary answer */
enum connect_code connect_code_from_api(enum api_error e);
/* Connect-Timeout-Ms: 1..10 digits of milliseconds; -EINVAL otherwise. */
int connect_timeout_parse(const char *s, uint64_t *ret_ms);

/* ---- answers (connect.c): over an evhttp request ---- */

struct evhttp_request;
struct evbuffer;
struct svc_reply;
struct svc_err;
typedef struct json_t json_t;

/* How an answer is rendered: Connect unary (errors: an HTTP status and {"code": "not_found",
 * "message"}), Connect server-streaming (200; errors in the END envelope), E2B's envd REST
 * (/files: errors as an HTTP status and {"code": 404, "message"}), or NDJSON: REST whose
 * stream is JSON lines (the code interpreter's /execute), with a keepalive line every
 * CONNECT_NDJSON_KEEPALIVE_S seconds. */
enum connect_mode { CONNECT_MODE_UNARY, CONNECT_MODE_STREAM, CONNECT_MODE_REST, CONNECT_MODE_NDJSON };
#define CONNECT_NDJSON_KEEPALIVE_S 5

/* What a call makes of the service's answers. Every hook is optional; without one, a JSON
 * answer goes to the client as it is, bytes as they are, an error as the mode renders it. A
 * hook answers the client (connect_answer*) or goes on with another service call, passing it
 * connect_reply() again: one service answer is pending at a time. */
struct connect_call;
struct connect_ops {
	void (*json)(struct connect_call *cc, int status, json_t *body); /* @body stolen */
	void (*bytes)(struct connect_call *cc, const char *type, struct evbuffer *buf);
	void (*error)(struct connect_call *cc, const struct svc_err *err);
	/* A stream's NDJSON line: the message to send (NULL: none); *@ret_end when it is the
	 * last (the stream then ends well when its source ends it). In NDJSON mode an array is
	 * several lines, and the source's last line (stream_sink.end) comes here too. */
	json_t *(*line)(struct connect_call *cc, json_t *line, bool *ret_end);
	/* The stream's first message, sent as soon as the service's stream begins (NULL: none;
	 * returned new). */
	json_t *(*start)(struct connect_call *cc);
	/* NDJSON mode: the last line of a stream that did not end well (NULL: none). */
	json_t *(*failed)(struct connect_call *cc, const char *msg);
	void (*free)(void *arg); /* of cc->arg, once the call is over */
};

struct connect_call {
	struct evhttp_request *req;
	const struct connect_ops *ops;
	void *arg;
	enum connect_mode mode;
};

/* A call on @req (Connect-Timeout-Ms and Keepalive-Ping-Interval read from it); NULL without
 * memory, with 500 answered and @arg left to the caller. */
struct connect_call *connect_call_new(struct evhttp_request *req, enum connect_mode mode,
				      const struct connect_ops *ops, void *arg);
/* The svc_reply for @cc's next service call (service.h). A service call that failed at once
 * (returned -1) leaves it unused: answer the error with connect_answer_svc_err(). */
struct svc_reply *connect_reply(struct connect_call *cc);
/* These end the call (and free it): */
void connect_answer(struct connect_call *cc, int status, json_t *msg); /* steals; NULL: empty */
void connect_answer_bytes(struct connect_call *cc, const char *type, struct evbuffer *buf);
void connect_answer_error(struct connect_call *cc, enum connect_code code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void connect_answer_svc_err(struct connect_call *cc, const struct svc_err *err);
/* An error answered on @req with no call (a request refused before there is one); for REST,
 * @status is the HTTP status and @code is not used. */
void connect_refuse(struct evhttp_request *req, enum connect_mode mode, enum connect_code code,
		    int status, const char *msg);
