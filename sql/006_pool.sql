-- labvm migration 006: the warm pool (issue #18). Idempotent.
--
-- pool_vms: every lab VM made ahead of a press, from creation until it is
-- claimed (then it is a session's VM for good: never pooled again) or
-- deleted (stale, failed, surplus, yielded to a student).
CREATE TABLE IF NOT EXISTS pool_vms (
	vm_name         text PRIMARY KEY,
	secret_name     text NOT NULL,
	environment     text NOT NULL,
	lesson          text NOT NULL,
	lesson_hash     text NOT NULL,          -- the lesson's content hash at creation
	agent_token     text NOT NULL,          -- per-VM bearer token; becomes the session's
	disk_source     text NOT NULL CHECK (disk_source IN ('golden', 'containerdisk', 'datavolume')),
	disk_fallback_reason text,
	ip              text,
	state           text NOT NULL DEFAULT 'starting'
	                CHECK (state IN ('starting', 'ready', 'claimed', 'deleted')),
	created_at      timestamptz NOT NULL DEFAULT now(),
	ready_at        timestamptz,
	claimed_at      timestamptz,
	session_id      uuid,
	deleted_at      timestamptz,
	delete_reason   text CHECK (delete_reason IN ('lesson_changed', 'lesson_gone', 'too_old',
	                       'surplus', 'setup_failed', 'not_ready', 'vanished', 'yielded',
	                       'create_failed')),
	error           text
);

CREATE INDEX IF NOT EXISTS pool_vms_idle
	ON pool_vms (environment, lesson, state) WHERE state IN ('starting', 'ready');

-- Operators warm a lesson for a class: N VMs from a time until a time.
CREATE TABLE IF NOT EXISTS pool_warm (
	id              bigserial PRIMARY KEY,
	environment     text NOT NULL,
	lesson          text NOT NULL,
	count           integer NOT NULL CHECK (count > 0 AND count <= 1000),
	from_at         timestamptz NOT NULL,
	until_at        timestamptz NOT NULL,
	created_by      text,
	created_at      timestamptz NOT NULL DEFAULT now(),
	CHECK (until_at > from_at)
);

-- A session started from a pool VM names it.
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS pool_vm text;
