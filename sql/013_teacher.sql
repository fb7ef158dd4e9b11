-- labvm migration 013 (issue #29): the teacher's room. Idempotent.
--
-- grade_steps: every grade is kept, one row per grader step of each grade
-- (session, machine, step, passed, time), written in the same statement
-- that records the session's last_grade (api_grade.c), so the history and
-- the last grade never disagree.
CREATE TABLE IF NOT EXISTS grade_steps (
	id          bigserial PRIMARY KEY,
	session_id  uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	graded_at   timestamptz NOT NULL,
	ord         integer NOT NULL,           -- the step's place in the lesson's grader
	machine     text,                       -- NULL for a single-machine lesson
	step        text NOT NULL,
	passed      boolean NOT NULL
);
CREATE INDEX IF NOT EXISTS grade_steps_session ON grade_steps (session_id, graded_at, ord);

-- grades: the same grades, one row each (the class view reads these: 200
-- students x 10 grades is 2,000 rows, not 16,000): passed, total, and the
-- results in the grade's step order, one character per step ('1' passed,
-- '0' not).
CREATE TABLE IF NOT EXISTS grades (
	id          bigserial PRIMARY KEY,
	session_id  uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	graded_at   timestamptz NOT NULL,
	passed      integer NOT NULL,
	total       integer NOT NULL,
	results     text NOT NULL CHECK (results ~ '^[01]*$')
);
CREATE INDEX IF NOT EXISTS grades_session ON grades (session_id, graded_at);

-- teacher_audit: every teacher action (watch, take over, extend, reset,
-- end), who did it, on which session of which student and lesson, when.
CREATE TABLE IF NOT EXISTS teacher_audit (
	id          bigserial PRIMARY KEY,
	at          timestamptz NOT NULL DEFAULT clock_timestamp(),
	environment text NOT NULL,
	teacher     text NOT NULL,
	action      text NOT NULL CHECK (action IN ('watch', 'take_over', 'extend', 'reset', 'end')),
	lesson      text NOT NULL,
	session_id  uuid NOT NULL,
	student     text NOT NULL,
	detail      jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS teacher_audit_lesson ON teacher_audit (environment, lesson, at);

-- console_watchers: who has a teacher's console open on a session now
-- (labvm-console writes a row when a teacher's connection attaches and
-- deletes it when it closes; `bridge` is the bridge's console_listen, and a
-- bridge that starts deletes its own leftovers). The session's `watchers`
-- column follows these rows (the trigger below), so the session JSON and
-- its event stream carry them without a join.
CREATE TABLE IF NOT EXISTS console_watchers (
	bridge      text NOT NULL,
	conn_id     bigint NOT NULL,
	session_id  uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	vm_name     text NOT NULL,
	user_name   text NOT NULL,
	mode        text NOT NULL CHECK (mode IN ('view', 'control')),
	since       timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (bridge, conn_id)
);
CREATE INDEX IF NOT EXISTS console_watchers_session ON console_watchers (session_id);

ALTER TABLE sessions ADD COLUMN IF NOT EXISTS watchers jsonb NOT NULL DEFAULT '[]';

CREATE OR REPLACE FUNCTION labvm_watchers_sync() RETURNS trigger
	LANGUAGE plpgsql AS $$
DECLARE
	sid uuid;
BEGIN
	IF TG_OP = 'DELETE' THEN
		sid := OLD.session_id;
	ELSE
		sid := NEW.session_id;
	END IF;
	-- one entry per (user, mode, machine), the earliest since
	UPDATE sessions SET watchers = coalesce((
		SELECT jsonb_agg(jsonb_build_object('user', user_name, 'mode', mode,
		                                    'vm', vm_name, 'since', labvm_ts(since))
		                 ORDER BY since, user_name)
		FROM (SELECT user_name, mode, vm_name, min(since) AS since FROM console_watchers
		      WHERE session_id = sid GROUP BY user_name, mode, vm_name) w), '[]')
	WHERE id = sid;
	RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS console_watchers_sync ON console_watchers;
CREATE TRIGGER console_watchers_sync
	AFTER INSERT OR DELETE ON console_watchers
	FOR EACH ROW EXECUTE FUNCTION labvm_watchers_sync();

-- a change of watchers is an event of the session's stream (sql/007)
DROP TRIGGER IF EXISTS sessions_event_watchers ON sessions;
CREATE TRIGGER sessions_event_watchers
	AFTER UPDATE OF watchers ON sessions
	FOR EACH ROW
	WHEN (OLD.watchers IS DISTINCT FROM NEW.watchers
	      AND OLD.state IS NOT DISTINCT FROM NEW.state
	      AND OLD.stage IS NOT DISTINCT FROM NEW.stage)
	EXECUTE FUNCTION labvm_session_event();

-- end reasons: a teacher's end ('teacher') and a teacher's reset ('reset');
-- 'idle' is issue #28's (sql/012)
ALTER TABLE sessions DROP CONSTRAINT IF EXISTS sessions_end_reason_check;
ALTER TABLE sessions ADD CONSTRAINT sessions_end_reason_check
	CHECK (end_reason IN ('user', 'expired', 'failed', 'orphaned', 'operator', 'idle',
	                      'teacher', 'reset'));

-- the class view: a lesson's sessions of the day
CREATE INDEX IF NOT EXISTS sessions_lesson_day ON sessions (environment, lesson, created_at);
