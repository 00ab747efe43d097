-- A board's least-privilege role: it may add results and end its runs, never read back the
-- results or delete them. Run as the database owner after the owner's first `edgebench push`
-- (which creates the schema); `edgebench_board` is the role's name, change it to suit.
CREATE ROLE edgebench_board LOGIN;
GRANT USAGE ON SCHEMA edgebench TO edgebench_board;
GRANT SELECT ON edgebench.schema_version TO edgebench_board;
GRANT INSERT ON edgebench.runs, edgebench.trials, edgebench.iterations,
    edgebench.power_samples, edgebench.trial_memory, edgebench.trial_rail_energy,
    edgebench.run_provenance, edgebench.trial_clocks, edgebench.trial_output
    TO edgebench_board;
-- What `push` must see to skip what the server holds: ids and UUIDs, and a run's end
-- (ON CONFLICT ... DO UPDATE reads the status and end it sets).
GRANT SELECT (id, uuid, status, ended_at) ON edgebench.runs TO edgebench_board;
GRANT UPDATE (status, ended_at) ON edgebench.runs TO edgebench_board;
GRANT SELECT (id, uuid) ON edgebench.trials TO edgebench_board;
