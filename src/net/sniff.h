/* Sniffers: the destination name at the start of a connection from a sandbox, read without
 * terminating TLS or rewriting anything, for the egress proxy's policy decision.
 *
 * The proxy reads into a buffer and calls a sniffer over everything it has so far: -EAGAIN
 * means read more (the sniffer never asks for more than SNIFF_TLS_WAIT_MAX or
 * SNIFF_HTTP_MAX bytes: beyond those it says -EBADMSG), any other error means refuse. The
 * input is hostile; both functions are pure, never read past @len, and write @ret only on
 * success. A name comes back lowercase, LDH, without a trailing dot, and never an IP literal:
 * the proxy dials names, so a connection by address goes through egress_match_addr() instead.
 *
 * The name only decides where the proxy connects; once the bytes are relayed, later requests
 * on the same connection (HTTP keep-alive, a different Host, a TLS renegotiation) go to the
 * same upstream address, which the proxy chose.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define SNIFF_TLS_MAX 16384 /* the largest ClientHello handshake message, header included */
/* What sniff_tls_sni() waits for: a full SNIFF_TLS_MAX message plus the headers of a dozen
 * records (a real client uses one or two). */
#define SNIFF_TLS_WAIT_MAX (SNIFF_TLS_MAX + 64)
#define SNIFF_HTTP_MAX 16384 /* request line and headers, up to and including CRLFCRLF */

/* Reads the SNI host_name from a TLS ClientHello at the start of @buf (one record, or
 * several carrying one handshake message). Returns 0 and the name in @ret (@size bytes, at
 * least 254 for any name; -ENOBUFS when it does not fit); -EAGAIN when more bytes are
 * needed; -ENOENT for a well-formed ClientHello without server_name; -EBADMSG when it is not
 * TLS or is malformed (lengths that lie, a second server_name extension, more than one name
 * or a name type other than host_name, a name that is an IP literal or not LDH), or when the
 * message is not complete within the first SNIFF_TLS_WAIT_MAX bytes. Pass the bytes that are
 * contiguous at @buf; it reassembles a split message in SNIFF_TLS_MAX bytes of stack. */
int sniff_tls_sni(const uint8_t *buf, size_t len, char *ret, size_t size);

/* Reads the Host header of an HTTP/1.0 or 1.1 request at the start of @buf. Returns 0 with
 * the host in @ret_host (-ENOBUFS when it does not fit in @size) and the port (default 80)
 * in @ret_port; -EAGAIN while the head is incomplete (no CRLFCRLF yet and fewer than
 * SNIFF_HTTP_MAX bytes); -ENOENT when there is no Host header; -EBADMSG when malformed: a bad
 * request line (CONNECT and other non-path targets included), a bare LF or other control
 * bytes, folded lines, space before a colon, two Host headers, an absolute-form target
 * whose host or port differs from Host, a head over SNIFF_HTTP_MAX, a Host that is an IP
 * literal (IPv6 [..] included), not LDH, or carries userinfo ("a@b"). Parsing is strict on
 * purpose: where the proxy and the upstream server could disagree about the host, refuse. */
int sniff_http_host(const uint8_t *buf, size_t len, char *ret_host, size_t size,
		    uint16_t *ret_port);
