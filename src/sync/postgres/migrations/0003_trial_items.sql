-- v3: what a trial's workload says of its rows, pushed with the trial: the item one unit of its
-- work is, how an iteration counts its items (`batch`: the batch or a command's logged images,
-- time and energy stored per image; `batch_per_iteration`: the batch, stored per iteration;
-- `one`), and whether its trials run epochs over a data set. The views read these instead of
-- deriving them from the workload's name, so a workload added to the agents needs no change
-- here; a trial pushed before this version keeps NULL there and the name rule of the
-- workloads of that time.
ALTER TABLE edgebench.trials
    ADD COLUMN item text CHECK (length(item) BETWEEN 1 AND 32),
    ADD COLUMN per_iteration text
        CHECK (per_iteration IN ('batch', 'batch_per_iteration', 'one')),
    ADD COLUMN over_dataset boolean;

-- The views as before, from those columns.
DROP VIEW edgebench.gpu_cpu_speedup;
DROP VIEW edgebench.board_workload_summary;
DROP VIEW edgebench.trial_summary;

CREATE VIEW edgebench.trial_summary AS
WITH described AS (
    SELECT t.*,
           coalesce(t.item, CASE t.workload WHEN 'mlp' THEN 'sample'
                                            WHEN 'ops' THEN 'execution'
                                            WHEN 'idle' THEN 'tick'
                                            WHEN 'infer' THEN 'sample'
                                            ELSE 'image' END) AS item_of,
           coalesce(t.per_iteration, CASE t.workload WHEN 'mlp' THEN 'batch_per_iteration'
                                                     WHEN 'ops' THEN 'one'
                                                     WHEN 'idle' THEN 'one'
                                                     ELSE 'batch' END) AS per_iteration_of,
           coalesce(t.over_dataset, t.workload IN ('cnn', 'exec')) AS over_dataset_of
    FROM edgebench.trials t
), itemised AS (
    SELECT d.*,
           CASE d.per_iteration_of
               WHEN 'batch' THEN coalesce(
                   CASE WHEN jsonb_typeof(d.metrics -> 'images_per_step') = 'number'
                             AND (d.metrics ->> 'images_per_step')::numeric > 0
                        THEN (d.metrics ->> 'images_per_step')::numeric::bigint END,
                   CASE WHEN d.batch > 0 THEN d.batch END)
               WHEN 'batch_per_iteration' THEN greatest(d.batch, 1)
               ELSE 1
           END AS items_per_iteration,
           -- Only trials over a data set have epochs and images, unless a command's metrics
           -- say it was given none or the trial is an imported log.
           d.over_dataset_of
               AND coalesce(d.metrics -> 'imported_log', 'null'::jsonb) = 'null'::jsonb
               AND coalesce(d.metrics -> 'given_epochs', 'true'::jsonb) <> 'false'::jsonb
               AS epochs_given,
           d.over_dataset_of
               AND coalesce(d.metrics -> 'imported_log', 'null'::jsonb) = 'null'::jsonb
               AND coalesce(d.metrics -> 'given_images', 'true'::jsonb) <> 'false'::jsonb
               AS images_given,
           CASE WHEN jsonb_typeof(d.metrics -> 'window_s') = 'number'
                THEN (d.metrics ->> 'window_s')::float8 END AS window_s,
           CASE WHEN jsonb_typeof(d.metrics -> 'window_steps') = 'number'
                THEN (d.metrics ->> 'window_steps')::float8 END AS window_steps
    FROM described d
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
                WHEN x.per_iteration_of = 'batch' THEN x.time_per_image_s
                ELSE x.time_per_iteration_s / coalesce(x.items_per_iteration, 1) END
               AS time_per_item_s,
           CASE WHEN x.window_items IS NOT NULL THEN x.energy_j / x.window_items
                WHEN x.per_iteration_of = 'batch' THEN x.energy_per_image_j
                ELSE x.energy_per_image_j / coalesce(x.items_per_iteration, 1) END
               AS energy_per_item_j,
           CASE WHEN x.epochs_given THEN x.epochs END AS epochs_shown,
           CASE WHEN x.images_given THEN x.images END AS images_shown
    FROM windowed x
)
SELECT r.host, r.board, r.uuid AS run_uuid, p.uuid AS trial_uuid, p.workload,
       p.params ->> 'engine' AS engine, p.params, p.net, p.device, p.batch,
       p.epochs_shown AS epochs, p.images_shown AS images,
       p.dataset, p.repetition, p.status, p.started_at, p.ended_at, p.iterations_done,
       p.item_of AS item, p.items_per_iteration, p.time_per_item_s, p.energy_per_item_j,
       p.energy_per_item_j * p.time_per_item_s AS edp_per_item_js, p.time_per_image_s,
       p.images_per_s, p.time_per_iteration_s, p.energy_j,
       CASE p.per_iteration_of WHEN 'batch' THEN p.energy_per_image_j END AS energy_per_image_j,
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
