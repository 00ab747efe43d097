-- The fleet's two group roles, made once by an administrator (a superuser, e.g.
-- `sudo -u postgres psql DB -f deploy/postgres/roles.sql`) after `edgebench fleet init` has
-- created schema edgebench. Login roles join them (docs/fleet.md):
--   edgebench_board:  one login role per board; it adds results and ends runs only under the
--                     hosts edgebench.board_hosts lists for it, never reads results back nor
--                     deletes them;
--   edgebench_reader: dashboards and analysts; SELECT on the views only.
CREATE ROLE edgebench_board NOLOGIN;
GRANT USAGE ON SCHEMA edgebench TO edgebench_board;
GRANT SELECT ON edgebench.schema_version TO edgebench_board;
GRANT INSERT ON edgebench.runs, edgebench.trials, edgebench.iterations,
    edgebench.power_samples, edgebench.trial_memory, edgebench.trial_rail_energy,
    edgebench.run_provenance, edgebench.trial_clocks, edgebench.trial_output
    TO edgebench_board;
-- What `push` must see to skip what the server holds: ids and UUIDs, and a run's end
-- (ON CONFLICT ... DO UPDATE reads the status and end it sets); row-level security shows a
-- board only its own runs and trials.
GRANT SELECT (id, uuid, status, ended_at) ON edgebench.runs TO edgebench_board;
GRANT UPDATE (status, ended_at) ON edgebench.runs TO edgebench_board;
GRANT SELECT (id, uuid) ON edgebench.trials TO edgebench_board;

CREATE ROLE edgebench_reader NOLOGIN;
GRANT USAGE ON SCHEMA edgebench TO edgebench_reader;
GRANT SELECT ON edgebench.trial_summary, edgebench.board_workload_summary,
    edgebench.gpu_cpu_speedup TO edgebench_reader;
