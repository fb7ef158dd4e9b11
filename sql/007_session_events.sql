-- labvm migration 007: the session's event log, for GET /api/sessions/{id}/events.
-- Idempotent.
--
-- Every stage or state change of a session (whoever makes it: labvm.fcgi,
-- the reaper, an operator's UPDATE) appends one row here in the same
-- transaction, with a snapshot of the session row, and notifies channel
-- labvm_session_event with the session id. seq is the event's id on the
-- stream: a reconnect with Last-Event-ID = seq gets exactly the rows after
-- it, so nothing is lost or repeated, whichever process serves the reconnect.
CREATE TABLE IF NOT EXISTS session_events (
	seq             bigserial PRIMARY KEY,
	session_id      uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	at              timestamptz NOT NULL DEFAULT clock_timestamp(),
	snapshot        jsonb NOT NULL          -- to_jsonb(the sessions row) after the change
);

CREATE INDEX IF NOT EXISTS session_events_session ON session_events (session_id, seq);

CREATE OR REPLACE FUNCTION labvm_session_event() RETURNS trigger
	LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO session_events (session_id, snapshot) VALUES (NEW.id, to_jsonb(NEW));
	PERFORM pg_notify('labvm_session_event', NEW.id::text);
	RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS sessions_event_insert ON sessions;
CREATE TRIGGER sessions_event_insert
	AFTER INSERT ON sessions
	FOR EACH ROW EXECUTE FUNCTION labvm_session_event();

DROP TRIGGER IF EXISTS sessions_event_update ON sessions;
CREATE TRIGGER sessions_event_update
	AFTER UPDATE OF state, stage ON sessions
	FOR EACH ROW
	WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.stage IS DISTINCT FROM NEW.stage)
	EXECUTE FUNCTION labvm_session_event();

-- A machine's own stage (session_vms.stage) is an event of its session too
-- when the session has several machines (with one, the session's stage is
-- the machine's and already makes the event): the session row as it is,
-- and the notification.
CREATE OR REPLACE FUNCTION labvm_session_vm_event() RETURNS trigger
	LANGUAGE plpgsql AS $$
BEGIN
	IF (SELECT count(*) FROM session_vms WHERE session_id = NEW.session_id) < 2 THEN
		RETURN NULL;
	END IF;
	INSERT INTO session_events (session_id, snapshot)
		SELECT s.id, to_jsonb(s) FROM sessions s WHERE s.id = NEW.session_id;
	PERFORM pg_notify('labvm_session_event', NEW.session_id::text);
	RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS session_vms_event_update ON session_vms;
CREATE TRIGGER session_vms_event_update
	AFTER UPDATE OF stage ON session_vms
	FOR EACH ROW
	WHEN (OLD.stage IS DISTINCT FROM NEW.stage)
	EXECUTE FUNCTION labvm_session_vm_event();
