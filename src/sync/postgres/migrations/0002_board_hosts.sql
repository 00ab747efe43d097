-- v2: a role per job. A member of the role `edgebench_board` (one login role per board) writes
-- runs only under the hosts `board_hosts` lists for it, and trials and their small rows only
-- under those runs; it sees only those. Any other role is limited by its grants alone; the
-- owner (and a superuser) bypasses row-level security. Iterations and power samples arrive by
-- COPY, which row-level security would refuse: the board role's grants cover them.
CREATE TABLE edgebench.board_hosts (
    role_name name NOT NULL,
    host      text NOT NULL,
    PRIMARY KEY (role_name, host)
);

-- Whether `who` may write under `target_host`. SECURITY DEFINER: a board role may not read
-- board_hosts, nor the hosts of runs.
CREATE FUNCTION edgebench.may_write_host(who name, target_host text) RETURNS boolean
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT NOT EXISTS (
               SELECT 1 FROM pg_roles g
               WHERE g.rolname = 'edgebench_board' AND pg_has_role(who, g.oid, 'MEMBER'))
        OR EXISTS (
               SELECT 1 FROM edgebench.board_hosts b
               WHERE b.role_name = who AND b.host = target_host)
$$;

CREATE FUNCTION edgebench.may_write_run(who name, run bigint) RETURNS boolean
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT edgebench.may_write_host(who, (SELECT r.host FROM edgebench.runs r WHERE r.id = run))
$$;

CREATE FUNCTION edgebench.may_write_trial(who name, trial bigint) RETURNS boolean
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT edgebench.may_write_host(who, (
        SELECT r.host FROM edgebench.trials t JOIN edgebench.runs r ON r.id = t.run_id
        WHERE t.id = trial))
$$;

ALTER TABLE edgebench.runs ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_host ON edgebench.runs
    USING (edgebench.may_write_host(current_user, host))
    WITH CHECK (edgebench.may_write_host(current_user, host));

ALTER TABLE edgebench.trials ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_host ON edgebench.trials
    USING (edgebench.may_write_run(current_user, run_id))
    WITH CHECK (edgebench.may_write_run(current_user, run_id));

ALTER TABLE edgebench.run_provenance ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_host ON edgebench.run_provenance
    USING (edgebench.may_write_run(current_user, run_id))
    WITH CHECK (edgebench.may_write_run(current_user, run_id));

ALTER TABLE edgebench.trial_memory ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_host ON edgebench.trial_memory
    USING (edgebench.may_write_trial(current_user, trial_id))
    WITH CHECK (edgebench.may_write_trial(current_user, trial_id));

ALTER TABLE edgebench.trial_rail_energy ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_host ON edgebench.trial_rail_energy
    USING (edgebench.may_write_trial(current_user, trial_id))
    WITH CHECK (edgebench.may_write_trial(current_user, trial_id));

ALTER TABLE edgebench.trial_clocks ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_host ON edgebench.trial_clocks
    USING (edgebench.may_write_trial(current_user, trial_id))
    WITH CHECK (edgebench.may_write_trial(current_user, trial_id));

ALTER TABLE edgebench.trial_output ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_host ON edgebench.trial_output
    USING (edgebench.may_write_trial(current_user, trial_id))
    WITH CHECK (edgebench.may_write_trial(current_user, trial_id));
