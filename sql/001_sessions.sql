-- labvm schema, migration 001: sessions and their VMs.
-- Idempotent: every statement can run again on a database that already has it.

CREATE TABLE IF NOT EXISTS sessions (
	id              uuid PRIMARY KEY,
	user_name       text NOT NULL,
	lesson          text NOT NULL,
	runtime         text NOT NULL CHECK (runtime IN ('vm', 'pod')),
	environment     text NOT NULL,
	state           text NOT NULL DEFAULT 'starting'
	                CHECK (state IN ('starting', 'ready', 'failed', 'ended')),
	-- how far the start got (kept when the session fails or ends)
	stage           text NOT NULL DEFAULT 'submitted'
	                CHECK (stage IN ('submitted', 'scheduling', 'booting', 'setting_up', 'ready')),
	disk_source     text CHECK (disk_source IN ('golden', 'containerdisk', 'datavolume')),
	disk_fallback_reason text
	                CHECK (disk_fallback_reason IN ('not_found', 'forbidden', 'importing',
	                       'single_node', 'image_mismatch', 'deleting', 'unavailable')),
	-- deadlines copied from the lesson at start, so a lesson edit never moves a running start
	running_timeout_s integer NOT NULL DEFAULT 150 CHECK (running_timeout_s > 0),
	ready_timeout_s   integer NOT NULL DEFAULT 300 CHECK (ready_timeout_s > 0),
	created_at      timestamptz NOT NULL DEFAULT now(),   -- the button press
	submitted_at    timestamptz,                          -- VM accepted by the cluster
	running_at      timestamptz,                          -- VMI phase Running seen
	ready_at        timestamptz,                          -- guest agent reported the ready flag
	ended_at        timestamptz,
	expires_at      timestamptz NOT NULL,
	end_reason      text CHECK (end_reason IN ('user', 'expired', 'failed', 'orphaned')),
	error           text,
	last_grade      jsonb,
	graded_at       timestamptz
);

-- One active session per user and environment: the backstop behind the advisory lock.
CREATE UNIQUE INDEX IF NOT EXISTS sessions_one_active_per_user
	ON sessions (environment, user_name) WHERE state IN ('starting', 'ready');

CREATE INDEX IF NOT EXISTS sessions_active
	ON sessions (environment, state) WHERE state IN ('starting', 'ready');

CREATE INDEX IF NOT EXISTS sessions_created
	ON sessions (environment, lesson, created_at);

-- The cluster objects of a session (one VM today; the table allows more).
CREATE TABLE IF NOT EXISTS session_vms (
	session_id      uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	vm_name         text NOT NULL,
	secret_name     text NOT NULL,
	agent_token     text NOT NULL,          -- per-VM bearer token of the guest agent
	ip              text,                   -- VMI status.interfaces[0].ipAddress once known
	created_at      timestamptz NOT NULL DEFAULT now(),
	deleted_at      timestamptz,
	PRIMARY KEY (session_id, vm_name)
);

CREATE UNIQUE INDEX IF NOT EXISTS session_vms_name ON session_vms (vm_name);

-- RFC 3339 UTC text of a timestamp, as the API shows it.
CREATE OR REPLACE FUNCTION labvm_ts(t timestamptz) RETURNS text
	LANGUAGE sql IMMUTABLE STRICT
	AS $$ SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') $$;

-- Whoever ends or fails a session (labvm.fcgi, the reaper, an operator's
-- UPDATE), labvm-console hears it on channel labvm_session and closes that
-- session's consoles.
CREATE OR REPLACE FUNCTION labvm_session_notify() RETURNS trigger
	LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_notify('labvm_session', NEW.id::text);
	RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS sessions_notify ON sessions;
CREATE TRIGGER sessions_notify
	AFTER UPDATE OF state ON sessions
	FOR EACH ROW
	WHEN (NEW.state IN ('ended', 'failed') AND OLD.state IS DISTINCT FROM NEW.state)
	EXECUTE FUNCTION labvm_session_notify();
