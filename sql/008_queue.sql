-- labvm migration 008: the waiting line (issue #20). Idempotent.
--
-- A student refused only for capacity may join the line of the lesson's
-- capacity pool ('vm': VM seats; 'pod': Pod seats). A waiting row is the
-- user's open session (the one-session rule counts it) and its id becomes the
-- session's id when it is admitted, so the page keeps polling one URL.
-- Order is seq (the join's commit order under the user's lock). A place lapses
-- when last_seen_at (the student's last poll) is older than queue_lapse_s.

CREATE TABLE IF NOT EXISTS session_queue (
	id              uuid PRIMARY KEY,
	seq             bigserial NOT NULL,
	user_name       text NOT NULL,
	lesson          text NOT NULL,
	environment     text NOT NULL,
	pool            text NOT NULL DEFAULT 'vm' CHECK (pool IN ('vm', 'pod')),
	seats           integer NOT NULL DEFAULT 1 CHECK (seats > 0),
	state           text NOT NULL DEFAULT 'waiting'
	                CHECK (state IN ('waiting', 'admitted', 'left', 'lapsed', 'failed')),
	joined_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
	last_seen_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
	-- the estimate shown when the student joined (for the bench's error figure)
	estimate_at     timestamptz,
	bound_at        timestamptz,
	ended_at        timestamptz,   -- admitted, left, lapsed or failed
	error           text
);

-- One place per user and environment (the backstop behind the user lock).
CREATE UNIQUE INDEX IF NOT EXISTS session_queue_one_per_user
	ON session_queue (environment, user_name) WHERE state = 'waiting';

CREATE INDEX IF NOT EXISTS session_queue_line
	ON session_queue (environment, pool, seq) WHERE state = 'waiting';
