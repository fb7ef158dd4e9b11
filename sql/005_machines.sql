-- labvm migration 005: sessions of several machines (lessons with "machines")
-- and the session network. Idempotent.
--
-- Each VM of a session has its own readiness (stage, running_at, ready_at),
-- its own golden-disk decision and, for a multi-machine session, its machine
-- name and its address on the session network. The session's own stage and
-- times are those of the whole: running when every machine runs, ready when
-- every machine is ready.

ALTER TABLE session_vms ADD COLUMN IF NOT EXISTS machine text;
ALTER TABLE session_vms ADD COLUMN IF NOT EXISTS stage text NOT NULL DEFAULT 'submitted';
ALTER TABLE session_vms ADD COLUMN IF NOT EXISTS running_at timestamptz;
ALTER TABLE session_vms ADD COLUMN IF NOT EXISTS ready_at timestamptz;
ALTER TABLE session_vms ADD COLUMN IF NOT EXISTS disk_source text;
ALTER TABLE session_vms ADD COLUMN IF NOT EXISTS disk_fallback_reason text;
ALTER TABLE session_vms ADD COLUMN IF NOT EXISTS net_ip text;          -- address on the session network
-- the machine's place in the lesson (rows of one start share created_at)
ALTER TABLE session_vms ADD COLUMN IF NOT EXISTS ord integer NOT NULL DEFAULT 0;

DO $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'session_vms_stage_check') THEN
		ALTER TABLE session_vms ADD CONSTRAINT session_vms_stage_check
			CHECK (stage IN ('submitted', 'scheduling', 'booting', 'setting_up', 'ready'));
	END IF;
END $$;

-- The session's NetworkAttachmentDefinition (NULL: a single-machine session, none).
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS network text;
