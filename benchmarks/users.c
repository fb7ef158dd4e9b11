/* users.c - the students a run acts as: a "user:password" file, or a
 * name format with one %d from --first and the one password; the passwords
 * are wiped when freed. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static char **file_users, **file_passwords;
static int nfile_users;

int bench_users_load(struct opts *o)
{
	if (o->users_file) {
		char *text = util_read_file(o->users_file, 1 << 20, NULL);
		char *save = NULL;
		if (!text) {
			fprintf(stderr, "labvm-bench: cannot read %s: %s\n", o->users_file,
			        strerror(errno));
			return -1;
		}
		for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
			util_rstrip(l);
			char *colon = strchr(l, ':');
			if (!*l || *l == '#')
				continue;
			if (!colon || colon == l) {
				fprintf(stderr, "labvm-bench: %s: lines must be user:password\n",
				        o->users_file);
				explicit_bzero(text, strlen(text));
				free(text);
				return -1;
			}
			*colon = '\0';
			file_users =
			    xrealloc(file_users, sizeof *file_users * (size_t)(nfile_users + 1));
			file_passwords = xrealloc(file_passwords, sizeof *file_passwords *
			                                              (size_t)(nfile_users + 1));
			file_users[nfile_users] = xstrdup(l);
			file_passwords[nfile_users] = xstrdup(colon + 1);
			nfile_users++;
			explicit_bzero(colon + 1, strlen(colon + 1));
		}
		free(text);
		if (!nfile_users) {
			fprintf(stderr, "labvm-bench: %s holds no users\n", o->users_file);
			return -1;
		}
		return 0;
	}
	const char *pct = strstr(o->user_format, "%d");
	if (!pct || strchr(pct + 2, '%') || strchr(o->user_format, '%') != pct) {
		fprintf(stderr, "labvm-bench: --user-format needs exactly one %%d\n");
		return -1;
	}
	if (!o->password) {
		fprintf(stderr, "labvm-bench: no password: give --password-file or set "
		                "LABVM_PASSWORD (or --users-file)\n");
		return -1;
	}
	return 0;
}

int bench_user_count(const struct opts *o)
{
	return o->users_file ? nfile_users : o->user_count;
}

void bench_user(const struct opts *o, int i, char out[64])
{
	if (o->users_file)
		snprintf(out, 64, "%s", file_users[i % nfile_users]);
	else {
		/* the format was checked in bench_users_load: one %d, nothing else */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
		snprintf(out, 64, o->user_format, o->first + i % o->user_count);
#pragma GCC diagnostic pop
	}
}

const char *bench_password(const struct opts *o, int i)
{
	return o->users_file ? file_passwords[i % nfile_users] : o->password;
}

void bench_users_free(void)
{
	for (int i = 0; i < nfile_users; i++) {
		free(file_users[i]);
		explicit_bzero(file_passwords[i], strlen(file_passwords[i]));
		free(file_passwords[i]);
	}
	free(file_users);
	free(file_passwords);
}
