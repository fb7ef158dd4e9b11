-- labvm schema, migration 003: event counters for the Prometheus endpoint.
-- Idempotent.
--
-- Everything that can be derived at scrape time is (sessions by state, starts,
-- stage durations, failures: from the sessions table; capacity: from the
-- cluster). What cannot be derived (refusals, console tickets, reaper passes
-- and deletions, and the cluster/agent/database call histograms) is counted
-- here, shared by every labvm.fcgi process on every host: a scrape of any
-- process sees the sum. Each event is one UPSERT adding to a row; call
-- histograms are added in batches of deltas (one UPSERT per process every few
-- seconds). A histogram is stored as its cumulative _bucket rows (labels
-- carry le), _sum and _count.

CREATE TABLE IF NOT EXISTS metric_counters (
	environment text NOT NULL,
	name        text NOT NULL,            -- e.g. labvm_start_refusals_total
	labels      text NOT NULL DEFAULT '', -- Prometheus label text: reason="capacity_full"
	value       double precision NOT NULL DEFAULT 0,
	updated_at  timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (environment, name, labels)
);
