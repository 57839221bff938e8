/* Seccomp policy: parse the line format of policy/seccomp.policy, check it, and compile it
 * with libseccomp to one classic BPF program. Build-time only. */
#include <errno.h>
#include <linux/netlink.h>
#include <sched.h>
#include <seccomp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "policy/seccomp_policy.h"

#define POLICY_MAX_RULES 2048
#define RULE_MAX_CONDS	 6
#define POLICY_LINE_MAX	 4096
#define SYSCALL_NR_MAX	 1024 /* x86_64 numbers are below 512 */

/* The action that ends a pass undecided. seccomp_policy_compile() rewrites every return of
 * it into a jump to the next pass, so it never reaches the kernel. No rule may use TRACE. */
#define ACT_NEXT_PASS SCMP_ACT_TRACE(0xc0de)

enum pass { PASS_DENY, PASS_ALLOW, PASS_FALLBACK, _PASS_MAX };

struct rule {
	unsigned line;
	enum pass pass;
	uint32_t action;
	int nr;
	unsigned n_conds;
	struct scmp_arg_cmp conds[RULE_MAX_CONDS];
};

struct seccomp_policy {
	const char *name;
	uint32_t default_action;
	uint32_t badarch_action;
	bool has_default, has_badarch;
	size_t n_rules;
	struct rule rules[POLICY_MAX_RULES];
};

static const struct {
	const char *name;
	int value;
} errno_names[] = {
    {"EPERM", EPERM},
    {"ENOSYS", ENOSYS},
    {"EACCES", EACCES},
    {"EINVAL", EINVAL},
    {"EAFNOSUPPORT", EAFNOSUPPORT},
    {"EOPNOTSUPP", EOPNOTSUPP},
};

/* Names usable as argument values, so that the policy reads like the man pages. */
/* clang-format off */
#define SYM(s) { #s, (uint64_t)(s) }
static const struct {
	const char *name;
	uint64_t value;
} symbols[] = {
	SYM(AF_UNIX), SYM(AF_INET), SYM(AF_INET6), SYM(AF_NETLINK), SYM(AF_PACKET),
	SYM(AF_VSOCK), SYM(AF_ALG), SYM(AF_KEY),
	SYM(SOCK_STREAM), SYM(SOCK_DGRAM), SYM(SOCK_RAW), SYM(SOCK_SEQPACKET),
	SYM(NETLINK_ROUTE),
	SYM(CLONE_NEWNS), SYM(CLONE_NEWCGROUP), SYM(CLONE_NEWUTS), SYM(CLONE_NEWIPC),
	SYM(CLONE_NEWUSER), SYM(CLONE_NEWPID), SYM(CLONE_NEWNET), SYM(CLONE_NEWTIME),
	SYM(TIOCSTI), SYM(TIOCLINUX),
	SYM(PER_LINUX), SYM(PER_LINUX32), SYM(UNAME26),
};
/* clang-format on */

static const struct {
	const char *name;
	enum scmp_compare op;
} ops[] = {
    {"==", SCMP_CMP_EQ}, {"!=", SCMP_CMP_NE}, {"<", SCMP_CMP_LT},
    {"<=", SCMP_CMP_LE}, {">", SCMP_CMP_GT},  {">=", SCMP_CMP_GE},
};

static const struct {
	const char *verb;
	enum pass pass;
	bool takes_action;
} verbs[] = {
    {"deny", PASS_DENY, true},
    {"allow", PASS_ALLOW, false},
    {"fallback", PASS_FALLBACK, true},
};

struct seccomp_policy *seccomp_policy_free(struct seccomp_policy *p)
{
	free(p);
	return NULL;
}

static int perr(const struct seccomp_policy *p, unsigned line, struct cordon_err *err,
		const char *what, const char *tok)
{
	return cordon_err_setf(err, -EINVAL, "%s:%u: %s '%s'", p->name, line, what, tok ? tok : "");
}

static int parse_action(const char *tok, uint32_t *ret)
{
	if (!tok)
		return -EINVAL;
	if (strcmp(tok, "kill") == 0) {
		*ret = SCMP_ACT_KILL_PROCESS;
		return 0;
	}
	for (size_t i = 0; i < ELEMENTSOF(errno_names); i++)
		if (strcmp(tok, errno_names[i].name) == 0) {
			*ret = SCMP_ACT_ERRNO(errno_names[i].value);
			return 0;
		}
	return -EINVAL;
}

static int parse_one_value(const char *tok, uint64_t *ret)
{
	char *end;

	for (size_t i = 0; i < ELEMENTSOF(symbols); i++)
		if (strcmp(tok, symbols[i].name) == 0) {
			*ret = symbols[i].value;
			return 0;
		}
	if (*tok < '0' || *tok > '9')
		return -EINVAL;
	errno = 0;
	*ret = strtoull(tok, &end, 0);
	return errno || *end ? -EINVAL : 0;
}

/* A value is a number or a symbol, or several joined by '|' (no spaces). */
static int parse_value(const char *tok, uint64_t *ret)
{
	char buf[256], *save = NULL, *part;
	uint64_t v = 0, one;

	if (!tok || strlen(tok) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, tok);
	for (part = strtok_r(buf, "|", &save); part; part = strtok_r(NULL, "|", &save)) {
		if (parse_one_value(part, &one) < 0)
			return -EINVAL;
		v |= one;
	}
	*ret = v;
	return 0;
}

static int parse_arg(const char *tok, unsigned *ret)
{
	if (!tok || tok[0] != 'a' || tok[1] < '0' || tok[1] > '5' || tok[2])
		return -EINVAL;
	*ret = (unsigned)(tok[1] - '0');
	return 0;
}

static int parse_op(const char *tok, enum scmp_compare *ret)
{
	for (size_t i = 0; tok && i < ELEMENTSOF(ops); i++)
		if (strcmp(tok, ops[i].name) == 0) {
			*ret = ops[i].op;
			return 0;
		}
	return -EINVAL;
}

/* "aN OP VALUE" or "aN & MASK == VALUE", tokens separated by blanks. */
static int parse_cond(char *s, struct scmp_arg_cmp *ret)
{
	char *save = NULL, *t[6] = {};
	size_t n = 0;
	unsigned arg;
	enum scmp_compare op;
	uint64_t a, b;

	for (char *tok = strtok_r(s, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save))
		if (n < ELEMENTSOF(t))
			t[n++] = tok;
	if (parse_arg(t[0], &arg) < 0)
		return -EINVAL;
	if (n == 3 && parse_op(t[1], &op) == 0 && parse_value(t[2], &a) == 0) {
		*ret = (struct scmp_arg_cmp){.arg = arg, .op = op, .datum_a = a};
		return 0;
	}
	if (n == 5 && strcmp(t[1], "&") == 0 && strcmp(t[3], "==") == 0 &&
	    parse_value(t[2], &a) == 0 && parse_value(t[4], &b) == 0) {
		*ret = (struct scmp_arg_cmp){
		    .arg = arg, .op = SCMP_CMP_MASKED_EQ, .datum_a = a, .datum_b = b};
		return 0;
	}
	return -EINVAL;
}

static int parse_conds(struct seccomp_policy *p, unsigned line, char *s, struct rule *r,
		       struct cordon_err *err)
{
	char *save = NULL;

	for (char *c = strtok_r(s, ",", &save); c; c = strtok_r(NULL, ",", &save)) {
		char shown[128];

		/* parse_cond() cuts @c up: keep it whole for the message. */
		snprintf(shown, sizeof(shown), "%s", c + strspn(c, " \t"));
		if (r->n_conds >= RULE_MAX_CONDS)
			return perr(p, line, err, "too many conditions at", shown);
		if (parse_cond(c, &r->conds[r->n_conds]) < 0)
			return perr(p, line, err, "bad condition", shown);
		r->n_conds++;
	}
	return 0;
}

static int add_rule(struct seccomp_policy *p, const struct rule *tmpl, const char *name,
		    struct cordon_err *err)
{
	int nr = seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86_64, name);

	if (nr == __NR_SCMP_ERROR || nr < 0 || nr >= SYSCALL_NR_MAX)
		return perr(p, tmpl->line, err, "unknown x86_64 syscall", name);
	if (p->n_rules >= POLICY_MAX_RULES)
		return perr(p, tmpl->line, err, "too many rules at", name);
	p->rules[p->n_rules] = *tmpl;
	p->rules[p->n_rules].nr = nr;
	p->n_rules++;
	return 0;
}

static int parse_directive(struct seccomp_policy *p, unsigned line, const char *verb,
			   const char *action, const char *extra, struct cordon_err *err)
{
	bool is_default = strcmp(verb, "default") == 0;
	uint32_t *dst = is_default ? &p->default_action : &p->badarch_action;
	bool *seen = is_default ? &p->has_default : &p->has_badarch;

	if (*seen)
		return perr(p, line, err, "repeated directive", verb);
	if (extra || parse_action(action, dst) < 0)
		return perr(p, line, err, "expected one errno name or kill after", verb);
	*seen = true;
	return 0;
}

static int parse_rule(struct seccomp_policy *p, unsigned line, char *head, char *conds,
		      struct cordon_err *err)
{
	char *save = NULL, *verb = strtok_r(head, " \t", &save);
	struct rule r = {.line = line, .action = SCMP_ACT_ALLOW};
	size_t v = 0, n_names = 0;
	int k;

	while (v < ELEMENTSOF(verbs) && strcmp(verb, verbs[v].verb) != 0)
		v++;
	if (v == ELEMENTSOF(verbs))
		return perr(p, line, err, "unknown verb", verb);
	r.pass = verbs[v].pass;
	if (verbs[v].takes_action && parse_action(strtok_r(NULL, " \t", &save), &r.action) < 0)
		return perr(p, line, err, "expected an errno name or kill after", verb);
	if (conds && (k = parse_conds(p, line, conds, &r, err)) < 0)
		return k;
	for (char *name = strtok_r(NULL, " \t", &save); name; name = strtok_r(NULL, " \t", &save)) {
		if ((k = add_rule(p, &r, name, err)) < 0)
			return k;
		n_names++;
	}
	return n_names ? 0 : perr(p, line, err, "no syscall named after", verb);
}

static int parse_line(struct seccomp_policy *p, unsigned line, char *s, struct cordon_err *err)
{
	char *hash = strchr(s, '#'), *colon, *save = NULL, copy[POLICY_LINE_MAX];
	const char *verb;

	if (hash)
		*hash = '\0';
	colon = strchr(s, ':');
	if (colon)
		*colon++ = '\0';
	strcpy(copy, s);
	verb = strtok_r(copy, " \t\r\n", &save);
	if (!verb)
		return colon ? perr(p, line, err, "condition without a rule", colon) : 0;
	if (strcmp(verb, "default") == 0 || strcmp(verb, "badarch") == 0) {
		const char *action = strtok_r(NULL, " \t\r\n", &save);
		const char *extra = strtok_r(NULL, " \t\r\n", &save);
		if (colon)
			return perr(p, line, err, "no condition allowed on", verb);
		return parse_directive(p, line, verb, action, extra, err);
	}
	s[strcspn(s, "\r\n")] = '\0';
	if (colon)
		colon[strcspn(colon, "\r\n")] = '\0';
	return parse_rule(p, line, s, colon, err);
}

int seccomp_policy_parse(FILE *f, const char *name, struct seccomp_policy **ret_policy,
			 struct cordon_err *err)
{
	struct seccomp_policy *p = calloc(1, sizeof(*p));
	char buf[POLICY_LINE_MAX];
	unsigned line = 0;
	int r;

	if (!p)
		return cordon_err_set(err, -ENOMEM, "policy");
	p->name = name;
	while (fgets(buf, sizeof(buf), f)) {
		line++;
		if (!strchr(buf, '\n') && !feof(f)) {
			seccomp_policy_free(p);
			return cordon_err_setf(err, -E2BIG, "%s:%u: line too long", name, line);
		}
		r = parse_line(p, line, buf, err);
		if (r < 0) {
			seccomp_policy_free(p);
			return r;
		}
	}
	if (!p->has_default || !p->has_badarch) {
		seccomp_policy_free(p);
		return cordon_err_setf(err, -EINVAL, "%s: 'default' and 'badarch' are required",
				       name);
	}
	*ret_policy = p;
	return 0;
}

/* Per syscall and pass: has an unconditional (U) or conditional (C) rule. */
enum { U = 1, C = 2 };

static int rule_err(const struct seccomp_policy *p, const struct rule *r, const char *what,
		    struct cordon_err *err)
{
	_cleanup_free_ char *name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_X86_64, r->nr);

	return perr(p, r->line, err, what, name);
}

/* libseccomp silently lets an unconditional rule erase the conditional rules of the same
 * syscall (or be erased), so this is refused within a pass. */
static int check_same_pass(const struct seccomp_policy *p, const struct rule *r,
			   unsigned char s[_PASS_MAX], struct cordon_err *err)
{
	unsigned char kind = r->n_conds ? C : U;

	if ((s[r->pass] & U) || (kind == U && s[r->pass]))
		return rule_err(p, r, "unconditional rule mixed with others in one pass:", err);
	s[r->pass] |= kind;
	return 0;
}

/* Rules that cannot take effect are mistakes; say so instead of compiling them. */
static int check_cross_pass(const struct seccomp_policy *p, const struct rule *r,
			    const unsigned char s[_PASS_MAX], struct cordon_err *err)
{
	if (r->pass == PASS_FALLBACK && r->n_conds)
		return rule_err(p, r, "fallback takes no condition:", err);
	if (r->pass == PASS_FALLBACK && !(s[PASS_ALLOW] & C))
		return rule_err(p, r, "fallback without a conditional allow:", err);
	if (r->pass != PASS_DENY && (s[PASS_DENY] & U))
		return rule_err(p, r, "rule made dead by an unconditional deny:", err);
	return 0;
}

static int policy_check(const struct seccomp_policy *p, struct cordon_err *err)
{
	_cleanup_free_ unsigned char(*seen)[_PASS_MAX] = calloc(SYSCALL_NR_MAX, sizeof(*seen));
	const struct rule *r;
	int k;

	if (!seen)
		return cordon_err_set(err, -ENOMEM, "policy");
	for (r = p->rules; r < p->rules + p->n_rules; r++)
		if ((k = check_same_pass(p, r, seen[r->nr], err)) < 0)
			return k;
	for (r = p->rules; r < p->rules + p->n_rules; r++)
		if ((k = check_cross_pass(p, r, seen[r->nr], err)) < 0)
			return k;
	return 0;
}

static int pass_add_rules(const struct seccomp_policy *p, enum pass pass, scmp_filter_ctx ctx,
			  struct cordon_err *err)
{
	for (const struct rule *r = p->rules; r < p->rules + p->n_rules; r++) {
		int k;

		if (r->pass != pass)
			continue;
		k = seccomp_rule_add_exact_array(ctx, r->action, r->nr, r->n_conds, r->conds);
		if (k < 0)
			return cordon_err_set(err, k, "%s:%u: libseccomp rejected the rule",
					      p->name, r->line);
	}
	return 0;
}

static int pass_build(const struct seccomp_policy *p, enum pass pass, uint32_t def,
		      scmp_filter_ctx *ret, struct cordon_err *err)
{
	scmp_filter_ctx ctx = seccomp_init(def);
	int k;

	if (!ctx)
		return cordon_err_setf(err, -EINVAL, "seccomp_init failed");
	/* Only the native arch is in the filter, so i386 (int 0x80) meets the bad-arch action. */
	k = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, p->badarch_action);
	/* A binary search over syscall numbers instead of ~150 compares in a row on the
	 * hottest path of every sandboxed process. */
	if (k == 0)
		k = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
	if (k < 0)
		cordon_err_set(err, k, "seccomp_attr_set");
	else
		k = pass_add_rules(p, pass, ctx, err);
	if (k < 0) {
		seccomp_release(ctx);
		return k;
	}
	*ret = ctx;
	return 0;
}

static int pass_export(scmp_filter_ctx ctx, struct sock_filter **ret, size_t *ret_len)
{
	_cleanup_close_ int fd = memfd_create("seccomp-bpf", MFD_CLOEXEC);
	_cleanup_free_ struct sock_filter *insns = NULL;
	struct stat st;
	int k;

	if (fd < 0)
		return -errno;
	k = seccomp_export_bpf(ctx, fd);
	if (k < 0)
		return k;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (st.st_size <= 0 || st.st_size % sizeof(struct sock_filter))
		return -EIO;
	insns = malloc(st.st_size);
	if (!insns)
		return -ENOMEM;
	if (pread(fd, insns, st.st_size, 0) != st.st_size)
		return -EIO;
	*ret = TAKE_PTR(insns);
	*ret_len = st.st_size / sizeof(struct sock_filter);
	return 0;
}

/* Appends @in to @out, turning each "return ACT_NEXT_PASS" into a jump past its end. */
static void pass_link(const struct sock_filter *in, size_t n, bool last, struct sock_filter *out)
{
	for (size_t i = 0; i < n; i++) {
		out[i] = in[i];
		if (!last && in[i].code == (BPF_RET | BPF_K) && in[i].k == ACT_NEXT_PASS)
			out[i] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JA, n - i - 1, 0, 0);
	}
}

static int pass_compile(const struct seccomp_policy *p, enum pass pass, struct sock_filter **ret,
			size_t *ret_len, struct cordon_err *err)
{
	bool last = pass == _PASS_MAX - 1;
	scmp_filter_ctx ctx = NULL;
	int k;

	k = pass_build(p, pass, last ? p->default_action : ACT_NEXT_PASS, &ctx, err);
	if (k < 0)
		return k;
	k = pass_export(ctx, ret, ret_len);
	seccomp_release(ctx);
	return k < 0 ? cordon_err_set(err, k, "seccomp_export_bpf") : 0;
}

int seccomp_policy_compile(const struct seccomp_policy *p, struct sock_filter **ret_insns,
			   size_t *ret_len, struct cordon_err *err)
{
	struct sock_filter *out = NULL, *tmp;
	size_t len = 0;
	int k;

	if (seccomp_arch_native() != SCMP_ARCH_X86_64)
		return cordon_err_setf(err, -EOPNOTSUPP, "only x86_64 is supported");
	if ((k = policy_check(p, err)) < 0)
		return k;
	for (enum pass pass = 0; pass < _PASS_MAX; pass++) {
		_cleanup_free_ struct sock_filter *insns = NULL;
		size_t n = 0;

		if ((k = pass_compile(p, pass, &insns, &n, err)) < 0)
			break;
		tmp = realloc(out, (len + n) * sizeof(*out));
		if (!tmp) {
			k = cordon_err_set(err, -ENOMEM, "policy");
			break;
		}
		out = tmp;
		pass_link(insns, n, pass == _PASS_MAX - 1, out + len);
		len += n;
	}
	if (k == 0 && len > BPF_MAXINSNS)
		k = cordon_err_setf(err, -E2BIG, "filter has %zu instructions, max %d", len,
				    BPF_MAXINSNS);
	if (k < 0) {
		free(out);
		return k;
	}
	*ret_insns = out;
	*ret_len = len;
	return 0;
}
