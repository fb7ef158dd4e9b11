/* admission_decide(): the admission rule as a table of cases
 * (tests/unit/test_admission.table), after pgbouncer's test/hba_test.c:
 * each line gives the facts and what the decision must answer; a case that
 * does not hold prints "FAIL on line N: expected X got Y". One test point
 * per line, and a few about the table itself (it has cases; every verdict
 * name reads back). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admission.h"
#include "unit.h"

#define TABLE "tests/unit/test_admission.table"

static int parse_who(const char *w, enum admission_who *out)
{
	static const char *const names[] = {"press", "place", "pool_fill", "view"};
	for (int i = 0; i < 4; i++)
		if (strcmp(w, names[i]) == 0) {
			*out = (enum admission_who)i;
			return 0;
		}
	return -1;
}

/* One FACT=VALUE into f; -1 when it names no fact. */
static int set_fact(struct admission_facts *f, const char *key, long v)
{
	static const struct {
		const char *key;
		size_t off;
		int is_long;
	} keys[] = {
#define L(k, field) {k, offsetof(struct admission_facts, field), 1}
#define I(k, field)                                                                                \
	{                                                                                          \
		k, offsetof(struct admission_facts, field), 0                                      \
	}
	    L("seats", seats),          L("cap", capacity),        L("rate_max", rate_max),
	    I("claimable", claimable),  I("yieldable", yieldable), I("open", open_session),
	    L("recent", recent_starts), L("retry", rate_retry_s),  I("in_line", in_line),
	    I("never", never_fits),     L("line", line_ahead),     I("claimed", pool_claimed),
	    I("locked", locked),        L("in_use", in_use),       L("idle", pool_idle),
	    I("yielded", yielded),
#undef L
#undef I
	};
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		if (strcmp(keys[i].key, key) != 0)
			continue;
		char *p = (char *)f + keys[i].off;
		if (keys[i].is_long)
			*(long *)p = v;
		else
			*(int *)p = (int)v;
		return 0;
	}
	return -1;
}

/* One expected figure (when the case names it): appended to both texts. */
static int expect(int has, const char *key, long got_v, long want_v, char *got, char *exp)
{
	if (!has)
		return 1;
	snprintf(got + strlen(got), 160 - strlen(got), " %s=%ld", key, got_v);
	snprintf(exp + strlen(exp), 160 - strlen(exp), " %s=%ld", key, want_v);
	return got_v == want_v;
}

int main(int argc, char **argv)
{
	const char *src = getenv("LABVM_SRC");
	char path[4096];
	if (argc > 1)
		snprintf(path, sizeof path, "%s", argv[1]);
	else
		snprintf(path, sizeof path, "%s%s%s", src ? src : "", src ? "/" : "", TABLE);
	FILE *fp = fopen(path, "r");
	CHECK(fp != NULL, "the table %s is readable", path);
	if (!fp)
		return unit_done();

	char line[1024];
	int lineno = 0, cases = 0, failures = 0;
	int seen[ADM_NEVER_FITS_NODES + 1] = {0};
	while (fgets(line, sizeof line, fp)) {
		lineno++;
		line[strcspn(line, "\r\n")] = '\0';
		char *text = line + strspn(line, " \t");
		if (!*text || *text == '#')
			continue;
		char copy[1024];
		snprintf(copy, sizeof copy, "%s", text);
		struct admission_facts f;
		enum admission_who who = ADM_PRESS;
		char *save = NULL, *tok = strtok_r(text, " \t", &save);
		const char *bad = NULL;
		if (!tok || parse_who(tok, &who) < 0)
			bad = "no WHO";
		admission_facts_init(&f, who, 1, 8);
		int after = 0, want = -1;
		long want_retry = 0, want_short = 0, want_free = 0;
		int has_retry = 0, has_short = 0, has_free = 0;
		while (!bad && (tok = strtok_r(NULL, " \t", &save))) {
			if (strcmp(tok, "=>") == 0) {
				after = 1;
				continue;
			}
			char *eq = strchr(tok, '=');
			if (after && want < 0 && !eq) {
				want = admission_verdict_parse(tok);
				if (want < 0)
					bad = "an unknown verdict";
				continue;
			}
			if (!eq) {
				bad = "a token without =";
				continue;
			}
			*eq = '\0';
			char *end;
			long v = strtol(eq + 1, &end, 10);
			if (*end) {
				bad = "a value that is not a number";
			} else if (!after) {
				if (set_fact(&f, tok, v) < 0)
					bad = "an unknown fact";
			} else if (strcmp(tok, "retry") == 0) {
				want_retry = v, has_retry = 1;
			} else if (strcmp(tok, "short") == 0) {
				want_short = v, has_short = 1;
			} else if (strcmp(tok, "free") == 0) {
				want_free = v, has_free = 1;
			} else {
				bad = "an unknown expectation";
			}
		}
		if (!bad && want < 0)
			bad = "no verdict after =>";
		if (bad) {
			CHECK(0, "line %d: %s (%s)", lineno, copy, bad);
			failures++;
			continue;
		}
		cases++;
		seen[want]++;
		struct admission a = admission_decide(&f);
		char got[160], exp[160];
		snprintf(got, sizeof got, "%s", admission_verdict_str(a.verdict));
		snprintf(exp, sizeof exp, "%s",
		         admission_verdict_str((enum admission_verdict)want));
		int ok = (int)a.verdict == want;
		ok &= expect(has_retry, "retry", a.retry_after_s, want_retry, got, exp);
		ok &= expect(has_short, "short", a.short_by, want_short, got, exp);
		ok &= expect(has_free, "free", a.free_now, want_free, got, exp);
		CHECK(ok, "line %d: %s", lineno, copy);
		if (!ok) {
			printf("# FAIL on line %d: expected '%s' got '%s'\n", lineno, exp, got);
			failures++;
		}
	}
	fclose(fp);
	CHECK(cases >= 60, "the table has its cases (%d)", cases);
	/* every answer the rule can give is some case's */
	int missing = 0;
	for (int v = 0; v <= ADM_NEVER_FITS_NODES; v++)
		if (!seen[v]) {
			printf("# no case answers %s\n",
			       admission_verdict_str((enum admission_verdict)v));
			missing++;
		}
	CHECK(missing == 0, "every verdict is a case's answer (%d missing)", missing);
	int round = 1;
	for (int v = 0; v <= ADM_NEVER_FITS_NODES; v++)
		round &=
		    admission_verdict_parse(admission_verdict_str((enum admission_verdict)v)) == v;
	CHECK(round && admission_verdict_parse("nonsense") == -1,
	      "verdict names read back, an unknown name is -1");
	if (failures)
		printf("# admission test failures: %d\n", failures);
	return unit_done();
}
