-- labvm schema, migration 004: an operator may end a session (the operator
-- page): end_reason 'operator'. Idempotent.
ALTER TABLE sessions DROP CONSTRAINT IF EXISTS sessions_end_reason_check;
ALTER TABLE sessions ADD CONSTRAINT sessions_end_reason_check
	CHECK (end_reason IN ('user', 'expired', 'failed', 'orphaned', 'operator'));
