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
-- board_hosts, nor the hosts of runs. A superuser counts as a member of every role, so it is
-- let through by name.
CREATE FUNCTION edgebench.may_write_host(who name, target_host text) RETURNS boolean
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT NOT EXISTS (
               SELECT 1 FROM pg_roles g
               WHERE g.rolname = 'edgebench_board' AND pg_has_role(who, g.oid, 'MEMBER'))
        OR EXISTS (
               SELECT 1 FROM pg_roles u WHERE u.rolname = who AND (u.rolsuper OR u.rolbypassrls))
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

-- The views, from the same definitions as `results --json`: each trial's item (`image` for
-- cnn, exec and infer, `sample` for mlp, `execution` for ops, `tick` for idle), its time,
-- energy and EDP per item from the stored per-trial columns (`energy_per_image_j` holds energy per iteration
-- for a workload whose items are not images: divided by the items of an iteration, and no
-- energy per image for it), and keys that hold each workload's parameters and the engine.
DROP VIEW edgebench.gpu_cpu_speedup;
DROP VIEW edgebench.board_workload_summary;
DROP VIEW edgebench.trial_summary;

CREATE VIEW edgebench.trial_summary AS
WITH itemised AS (
    SELECT t.*, i.item,
           CASE i.item
               WHEN 'image' THEN coalesce(
                   CASE WHEN jsonb_typeof(t.metrics -> 'images_per_step') = 'number'
                             AND (t.metrics ->> 'images_per_step')::numeric > 0
                        THEN (t.metrics ->> 'images_per_step')::numeric::bigint END,
                   CASE WHEN t.batch > 0 THEN t.batch END)
               WHEN 'sample' THEN greatest(t.batch, 1)
               ELSE 1
           END AS items_per_iteration,
           -- Only CNN training and the commands given them have epochs and images.
           CASE t.workload
               WHEN 'cnn' THEN true
               WHEN 'exec' THEN coalesce(t.metrics -> 'imported_log', 'null'::jsonb) = 'null'::jsonb
                                AND coalesce(t.metrics -> 'given_epochs', 'true'::jsonb) <> 'false'::jsonb
               ELSE false
           END AS epochs_given,
           CASE t.workload
               WHEN 'cnn' THEN true
               WHEN 'exec' THEN coalesce(t.metrics -> 'imported_log', 'null'::jsonb) = 'null'::jsonb
                                AND coalesce(t.metrics -> 'given_images', 'true'::jsonb) <> 'false'::jsonb
               ELSE false
           END AS images_given,
           CASE WHEN jsonb_typeof(t.metrics -> 'window_s') = 'number'
                THEN (t.metrics ->> 'window_s')::float8 END AS window_s,
           CASE WHEN jsonb_typeof(t.metrics -> 'window_steps') = 'number'
                THEN (t.metrics ->> 'window_steps')::float8 END AS window_steps
    FROM edgebench.trials t
    CROSS JOIN LATERAL (SELECT CASE t.workload WHEN 'mlp' THEN 'sample'
                                               WHEN 'ops' THEN 'execution'
                                               WHEN 'idle' THEN 'tick'
                                               ELSE 'image' END AS item) i
), windowed AS (
    SELECT x.*,
           CASE WHEN x.window_s IS NOT NULL AND x.window_steps * x.items_per_iteration > 0
                THEN x.window_steps * x.items_per_iteration END AS window_items
    FROM itemised x
), per_item AS (
    -- As `results --json`: the measured window over its items; a trial stored without a
    -- window keeps the median step time and the stored energy per iteration.
    SELECT x.*,
           CASE WHEN x.window_items IS NOT NULL THEN x.window_s / x.window_items
                WHEN x.item = 'image' THEN x.time_per_image_s
                ELSE x.time_per_iteration_s / coalesce(x.items_per_iteration, 1) END
               AS time_per_item_s,
           CASE WHEN x.window_items IS NOT NULL THEN x.energy_j / x.window_items
                WHEN x.item = 'image' THEN x.energy_per_image_j
                ELSE x.energy_per_image_j / coalesce(x.items_per_iteration, 1) END
               AS energy_per_item_j,
           CASE WHEN x.epochs_given THEN x.epochs END AS epochs_shown,
           CASE WHEN x.images_given THEN x.images END AS images_shown
    FROM windowed x
)
SELECT r.host, r.board, r.uuid AS run_uuid, p.uuid AS trial_uuid, p.workload,
       p.params ->> 'engine' AS engine, p.params, p.net, p.device, p.batch,
       p.epochs_shown AS epochs, p.images_shown AS images,
       p.dataset, p.repetition, p.status, p.started_at, p.ended_at, p.iterations_done, p.item,
       p.items_per_iteration, p.time_per_item_s, p.energy_per_item_j,
       p.energy_per_item_j * p.time_per_item_s AS edp_per_item_js, p.time_per_image_s,
       p.images_per_s, p.time_per_iteration_s, p.energy_j,
       CASE p.item WHEN 'image' THEN p.energy_per_image_j END AS energy_per_image_j,
       p.avg_power_w, p.edp_js, p.gflop_per_s, p.swap_pressure, p.throttled,
       r.edgebench_version
FROM per_item p
JOIN edgebench.runs r ON r.id = p.run_id;

-- Per board and trial key (as `results --json` groups repetitions: the host, the workload
-- with its parameters, net, device, batch, epochs, images, dataset): trials, and over the
-- newest ok trial of each repetition the median time and mean energy per item.
CREATE VIEW edgebench.board_workload_summary AS
WITH newest_ok AS (
    SELECT DISTINCT ON (host, workload, params, net, device, batch, epochs, images, dataset,
                        repetition) *
    FROM edgebench.trial_summary
    WHERE status = 'ok'
    ORDER BY host, workload, params, net, device, batch, epochs, images, dataset, repetition,
             started_at DESC, trial_uuid DESC
), ok AS (
    SELECT host, workload, params, net, device, batch, epochs, images, dataset,
           count(*) AS trials_ok,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY time_per_item_s) AS median_time_per_item_s,
           avg(energy_per_item_j) AS mean_energy_per_item_j,
           avg(edp_per_item_js) AS mean_edp_per_item_js
    FROM newest_ok
    GROUP BY host, workload, params, net, device, batch, epochs, images, dataset
)
SELECT s.host, max(s.board) AS board, s.workload, max(s.engine) AS engine, s.params, s.net,
       s.device, s.batch, s.epochs, s.images, s.dataset, max(s.item) AS item,
       count(*) AS trials, coalesce(max(ok.trials_ok), 0) AS trials_ok,
       max(ok.median_time_per_item_s) AS median_time_per_item_s,
       max(ok.mean_energy_per_item_j) AS mean_energy_per_item_j,
       max(ok.mean_edp_per_item_js) AS mean_edp_per_item_js,
       max(s.started_at) AS last_started_at
FROM edgebench.trial_summary s
LEFT JOIN ok
  ON ok.host = s.host AND ok.workload = s.workload AND ok.params = s.params AND ok.net = s.net
 AND ok.device = s.device AND ok.batch = s.batch AND ok.epochs IS NOT DISTINCT FROM s.epochs
 AND ok.images IS NOT DISTINCT FROM s.images AND ok.dataset = s.dataset
GROUP BY s.host, s.workload, s.params, s.net, s.device, s.batch, s.epochs, s.images, s.dataset;

-- CPU over GPU (`cuda`, the device name the boards record) median time per item, per board
-- and key: the same workload, engine and parameters (an external command's own text aside).
CREATE VIEW edgebench.gpu_cpu_speedup AS
SELECT c.host, c.board, c.workload, c.engine, c.params - 'command' AS params, c.net, c.batch,
       c.epochs, c.images, c.dataset, c.item,
       c.median_time_per_item_s AS cpu_time_per_item_s,
       g.median_time_per_item_s AS gpu_time_per_item_s,
       c.median_time_per_item_s / NULLIF(g.median_time_per_item_s, 0) AS speedup
FROM edgebench.board_workload_summary c
JOIN edgebench.board_workload_summary g
  ON g.host = c.host AND g.workload = c.workload
 AND g.engine IS NOT DISTINCT FROM c.engine
 AND g.params - 'command' = c.params - 'command'
 AND g.net = c.net AND g.batch = c.batch AND g.epochs IS NOT DISTINCT FROM c.epochs
 AND g.images IS NOT DISTINCT FROM c.images
 AND g.dataset = c.dataset
WHERE c.device = 'cpu' AND g.device = 'cuda'
  AND c.median_time_per_item_s IS NOT NULL AND g.median_time_per_item_s IS NOT NULL;

-- A reader role made before this schema version keeps its views.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'edgebench_reader') THEN
        GRANT SELECT ON edgebench.trial_summary, edgebench.board_workload_summary,
            edgebench.gpu_cpu_speedup TO edgebench_reader;
    END IF;
END
$$;
