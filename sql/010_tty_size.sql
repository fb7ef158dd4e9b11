-- labvm migration 010 (issue #26): POST /api/sessions/{id}/tty-size keeps at
-- most one agent request in flight per session, across every labvm.fcgi
-- process, as grades and probes do (sql/009): the lease tty_until. A request
-- that finds it taken leaves its size here, numbered (tty_seq), and answers
-- 202 at once; the holder sends each machine's newest size (tty_seq beyond
-- tty_sent, the number of the last one sent) before it lets the lease go.
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS tty_until timestamptz;
ALTER TABLE session_vms ADD COLUMN IF NOT EXISTS tty_cols integer;
ALTER TABLE session_vms ADD COLUMN IF NOT EXISTS tty_rows integer;
ALTER TABLE session_vms ADD COLUMN IF NOT EXISTS tty_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE session_vms ADD COLUMN IF NOT EXISTS tty_sent bigint NOT NULL DEFAULT 0;
