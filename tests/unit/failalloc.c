/* failalloc.c - an LD_PRELOAD shim that makes one allocation of a live
 * process fail when a test asks for it (t525: the console bridge's 1011
 * "out of memory"). Nothing of it is compiled into labvm: the shipped
 * binaries have no fault-injection knob.
 *
 *   LD_PRELOAD=build/tests/libfailalloc.so LABVM_FAILALLOC=/path/trigger prog
 *
 * While the trigger file does not exist nothing changes. Once it exists, the
 * next malloc(), calloc() or realloc() that is called by the program's own
 * code (the main executable; lws, OpenSSL, libpq, cJSON and libc keep
 * working) and asks for at least N bytes (N: the decimal number in the file,
 * 0 when it is empty) returns NULL with errno ENOMEM, and the shim removes
 * the file. So each trigger makes exactly one allocation fail (unlink()
 * decides between threads), and the file's disappearance tells the test
 * that it fired.
 *
 * With an AddressSanitizer build, add verify_asan_link_order=0 to
 * ASAN_OPTIONS: the shim comes before libasan and calls its allocator, so
 * ASan still sees (and LeakSanitizer still checks) every allocation. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *malloc(size_t n);
void *calloc(size_t k, size_t n);
void *realloc(void *p, size_t n);
void free(void *p);

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);

/* what dlsym() allocates while the real functions are being looked up */
static _Alignas(max_align_t) unsigned char boot[8192];
static size_t boot_used;
static __thread int resolving __attribute__((tls_model("initial-exec")));

static char trigger[PATH_MAX];
#define MAX_SEGS 8
static uintptr_t seg_lo[MAX_SEGS], seg_hi[MAX_SEGS];
static int nsegs;

static int first_object(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	(void)data;
	/* the first object is the program itself */
	for (int i = 0; i < info->dlpi_phnum && nsegs < MAX_SEGS; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
			seg_lo[nsegs] = info->dlpi_addr + ph->p_vaddr;
			seg_hi[nsegs] = seg_lo[nsegs] + ph->p_memsz;
			nsegs++;
		}
	}
	return 1;
}

__attribute__((constructor)) static void failalloc_init(void)
{
	const char *p = getenv("LABVM_FAILALLOC");
	if (!p || !*p || strlen(p) >= sizeof trigger)
		return;
	dl_iterate_phdr(first_object, NULL);
	memcpy(trigger, p, strlen(p) + 1);
}

static void resolve(void)
{
	resolving = 1;
	real_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
	real_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
	real_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
	real_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
	resolving = 0;
	if (!real_malloc || !real_calloc || !real_realloc || !real_free)
		abort();
}

static void *boot_alloc(size_t n)
{
	size_t a = _Alignof(max_align_t);
	n = (n + a - 1) / a * a;
	if (n > sizeof boot - boot_used)
		return NULL;
	void *p = boot + boot_used;
	boot_used += n;
	return p;
}

static int is_boot(const void *p)
{
	return (const unsigned char *)p >= boot && (const unsigned char *)p < boot + sizeof boot;
}

static int from_program(const void *caller)
{
	uintptr_t a = (uintptr_t)caller;
	for (int i = 0; i < nsegs; i++)
		if (a >= seg_lo[i] && a < seg_hi[i])
			return 1;
	return 0;
}

/* 1: this allocation fails (the trigger is used up) */
static int should_fail(size_t n, const void *caller)
{
	if (!trigger[0] || !from_program(caller))
		return 0;
	int saved = errno, fail = 0;
	int fd = open(trigger, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		char buf[32];
		ssize_t r = read(fd, buf, sizeof buf - 1);
		close(fd);
		buf[r > 0 ? r : 0] = '\0';
		unsigned long long min = strtoull(buf, NULL, 10);
		fail = n >= min && unlink(trigger) == 0;
	}
	errno = fail ? ENOMEM : saved;
	return fail;
}

void *malloc(size_t n)
{
	if (!real_malloc) {
		if (resolving)
			return boot_alloc(n);
		resolve();
	}
	if (should_fail(n, __builtin_return_address(0)))
		return NULL;
	return real_malloc(n);
}

void *calloc(size_t k, size_t n)
{
	if (!real_calloc) {
		if (resolving)
			return boot_alloc(k && n > SIZE_MAX / k ? SIZE_MAX : k * n); /* zeroed */
		resolve();
	}
	if (should_fail(k && n > SIZE_MAX / k ? SIZE_MAX : k * n, __builtin_return_address(0)))
		return NULL;
	return real_calloc(k, n);
}

void *realloc(void *p, size_t n)
{
	if (!real_realloc)
		resolve();
	if (is_boot(p)) { /* never given back; copied out */
		size_t left = (size_t)(boot + sizeof boot - (unsigned char *)p);
		void *q = malloc(n);
		if (q)
			memcpy(q, p, n < left ? n : left);
		return q;
	}
	if (should_fail(n, __builtin_return_address(0)))
		return NULL;
	return real_realloc(p, n);
}

void free(void *p)
{
	if (!p || is_boot(p))
		return;
	if (!real_free)
		resolve();
	real_free(p);
}
