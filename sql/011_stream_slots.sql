-- labvm migration 011 (issue #26): at most stream_max_per_user event streams
-- (GET /api/sessions/{id}/events) per user, across every labvm.fcgi process
-- and host. Each open stream holds one of its user's numbered slots here;
-- the process that holds it (holder: host/pid/nonce) renews expires_at
-- while the stream is open and deletes the row when it ends. A process that
-- died leaves rows that expire (a minute) and are taken over; a taker of a
-- free slot and a racing one meet at the primary key.
CREATE TABLE IF NOT EXISTS stream_slots (
	environment text NOT NULL,
	user_name   text NOT NULL,
	slot        integer NOT NULL,
	holder      text NOT NULL,
	expires_at  timestamptz NOT NULL,
	PRIMARY KEY (environment, user_name, slot)
);
CREATE INDEX IF NOT EXISTS stream_slots_holder ON stream_slots (holder);
