-- labvm migration 012 (issue #28): idle labs give their seat back. Idempotent.
--
-- last_activity_at: the last console input (recorded by the console bridges,
-- at most every few seconds per session), grade, console ticket, "I'm still
-- here" (POST /activity) or extension; set when the session becomes ready.
-- idle_s: the lesson's idle_minutes (or the configured default) in seconds
-- at the press, 0 = never ended for idleness; extend_s and extensions_left:
-- what POST /extend adds to expires_at, and how often it still may. Kept on
-- the row, so the one deadline rule (session_due) reads nothing else, and a
-- lesson edited meanwhile does not change a running session.
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS last_activity_at timestamptz;
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS idle_s integer NOT NULL DEFAULT 0
	CHECK (idle_s >= 0);
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS extend_s integer NOT NULL DEFAULT 0
	CHECK (extend_s >= 0);
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS extensions_left integer NOT NULL DEFAULT 0
	CHECK (extensions_left >= 0);

-- end_reason 'idle' (and 'teacher', issue #29's, so that the two migrations
-- may land in either order)
ALTER TABLE sessions DROP CONSTRAINT IF EXISTS sessions_end_reason_check;
ALTER TABLE sessions ADD CONSTRAINT sessions_end_reason_check
	CHECK (end_reason IN ('user', 'expired', 'failed', 'orphaned', 'operator', 'idle',
	                      'teacher'));
