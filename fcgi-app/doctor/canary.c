/* canary.c - labvm-doctor's check 6: a canary lab end to end (issue #31).
 *
 * What it will do: start one session of a small built-in lesson in a
 * `doctor` environment (so the reaper's environment rule keeps it apart
 * from every real one), two at once; see each reach ready and open its
 * console through labvm-console's own path; run a grader step; from inside
 * the guest, try the fence (the other canary's agent on agent_port, the API
 * server and the backend refused, the internet allowed or a warn); end and
 * reclaim both, with the time each stage took. It starts labs the way the
 * start does, so it comes with core/provision.c (issue #27); this build has
 * none, and says so rather than pretend. */
#include "doctor.h"

void check_canary(struct doc *d)
{
	doc_line(d, DOC_WARN,
	         d->canary ? "try one lab by hand before the class (make try-lesson against this "
	                     "cluster, or start a lab and grade it)"
	                   : NULL,
	         "skipped: the canary lab was not run (%s): a lab's start, console and grading and "
	         "the fence between labs are not tried end to end",
	         d->canary ? "not built yet in this version" : "--no-canary");
}
