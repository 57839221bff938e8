/* The relays, in the order they are asked: the first whose ->wants accepts a connection
 * carries it. "raw" takes anything and stays last. */
#include "basic/cleanup.h"
#include "net/egress/egress.h"

static const struct relay_ops *const relays[] = {
	&relay_tls,
	&relay_http,
	&relay_raw,
};

static const struct relay_ops *relay_for(const struct conn *c)
{
	for (size_t i = 0; i < ELEMENTSOF(relays); i++)
		if (!relays[i]->wants || relays[i]->wants(c))
			return relays[i];
	return &relay_raw;
}

void relay_start(struct conn *c)
{
	/* The deadline for the first bytes ends here: a read timeout left on a relayed
	 * connection would stop libevent reading the sandbox's side for good after a quiet
	 * spell (it disables EV_READ on timeout). */
	bufferevent_set_timeouts(c->in, NULL, NULL);
	/* Whatever the relay, the sandbox's bytes per second are shared by all its
	 * connections. */
	bufferevent_add_to_rate_limit_group(c->in, c->s->group);
	bufferevent_add_to_rate_limit_group(c->out, c->s->group);
	c->relay = relay_for(c);
	c->relay->start(c);
}
