-- labvm migration 007 (issue #13): leases that keep one student's slow or
-- frozen lab from holding the class's workers, the VMI a session's agent
-- token may be sent to, and console tickets used once across bridges.

-- At most one readiness probe and one grade in flight per session, across
-- every labvm.fcgi process: a conditional UPDATE takes the lease until the
-- given time (a crashed holder's lease simply runs out).
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS probe_until timestamptz;
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS grade_until timestamptz;

-- The per-user start rate limit counts a user's recent starts.
CREATE INDEX IF NOT EXISTS sessions_user_created
	ON sessions (environment, user_name, created_at);

-- The VMI the agent address belongs to (metadata.uid): a new VMI (the VM
-- was powered off and on) is re-read before the token goes anywhere.
ALTER TABLE session_vms ADD COLUMN IF NOT EXISTS vmi_uid text;

-- Console tickets are single-use in every labvm-console process, across
-- restarts: the bridge records each ticket's nonce here before relaying.
CREATE TABLE IF NOT EXISTS console_tickets_used (
	nonce       text PRIMARY KEY,
	expires_at  timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS console_tickets_used_expires ON console_tickets_used (expires_at);
