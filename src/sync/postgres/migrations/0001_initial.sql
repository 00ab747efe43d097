-- v1: the board tables with server ids (identity columns), PostgreSQL types, and the views.
CREATE SCHEMA IF NOT EXISTS edgebench;

CREATE TABLE edgebench.schema_version (
    version           integer PRIMARY KEY,
    applied_at        timestamptz NOT NULL DEFAULT now(),
    edgebench_version text NOT NULL
);

CREATE TABLE edgebench.runs (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    uuid              text NOT NULL UNIQUE,
    host              text NOT NULL,
    started_at        timestamptz NOT NULL,
    ended_at          timestamptz,
    status            text NOT NULL,
    config_toml       text NOT NULL,
    edgebench_version text NOT NULL,
    git_commit        text NOT NULL,
    candle_version    text NOT NULL,
    cpu_threads       bigint NOT NULL,
    cpu_model         text,
    os                text NOT NULL,
    board             text,
    power_total       text,
    baseline_power_w  double precision,
    baseline_s        double precision,
    power_scope       text,
    pushed_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX runs_host ON edgebench.runs (host);

CREATE TABLE edgebench.trials (
    id                          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    uuid                        text NOT NULL UNIQUE,
    run_id                      bigint NOT NULL REFERENCES edgebench.runs (id) ON DELETE CASCADE,
    net                         text NOT NULL,
    device                      text NOT NULL,
    batch                       bigint NOT NULL,
    epochs                      bigint NOT NULL,
    images                      bigint NOT NULL,
    dataset                     text NOT NULL,
    iterations_planned          bigint NOT NULL,
    iterations_done             bigint NOT NULL,
    warmup_iterations           bigint NOT NULL,
    status                      text NOT NULL,
    error                       text,
    started_at                  timestamptz NOT NULL,
    ended_at                    timestamptz,
    time_per_image_s            double precision,
    time_per_image_spread_s     double precision,
    images_per_s                double precision,
    loss_first                  double precision,
    loss_last                   double precision,
    loss_anomaly                boolean NOT NULL,
    energy_j                    double precision,
    avg_power_w                 double precision,
    energy_per_image_j          double precision,
    edp_js                      double precision,
    swap_pressure               boolean,
    peak_rss_bytes              bigint,
    dynamic_energy_j            double precision,
    power_samples               bigint,
    power_rate_hz               double precision,
    power_jitter_s              double precision,
    power_incomplete            boolean,
    power_gap_s                 double precision,
    throttled                   boolean,
    throttle_note               text,
    power_low_samples           bigint,
    power_note                  text,
    workload                    text NOT NULL,
    params                      jsonb NOT NULL,
    time_per_iteration_s        double precision,
    time_per_iteration_spread_s double precision,
    total_time_s                double precision,
    gflop_per_s                 double precision,
    metrics                     jsonb,
    peak_gpu_bytes              bigint,
    repetition                  bigint NOT NULL,
    pushed_at                   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX trials_run ON edgebench.trials (run_id);
CREATE INDEX trials_key ON edgebench.trials (workload, net, device, batch);
CREATE INDEX trials_started ON edgebench.trials (started_at);

-- The two large tables carry no foreign key: a per-row check would halve COPY's rate, and each
-- trial's rows arrive in the transaction of the trial row they belong to.
CREATE TABLE edgebench.iterations (
    trial_id    bigint NOT NULL,
    step        bigint NOT NULL,
    epoch       bigint NOT NULL,
    loss        double precision,
    lr          double precision,
    data_s      double precision NOT NULL,
    step_s      double precision NOT NULL,
    t_start_ns  bigint NOT NULL,
    t_end_ns    bigint NOT NULL,
    energy_j    double precision,
    loss_text   text,
    step_s_text text,
    PRIMARY KEY (trial_id, step)
);

CREATE TABLE edgebench.trial_memory (
    trial_id                bigint PRIMARY KEY REFERENCES edgebench.trials (id) ON DELETE CASCADE,
    mem_estimate_bytes      bigint,
    mem_limit_bytes         bigint,
    swap_in_pages           bigint,
    swap_out_pages          bigint,
    major_faults            bigint,
    swapped_bytes_max       bigint,
    mem_available_min_bytes bigint,
    psi_memory_some_us      bigint,
    psi_memory_full_us      bigint,
    memory_note             text
);

CREATE TABLE edgebench.power_samples (
    trial_id bigint NOT NULL,
    source   text NOT NULL,
    rail     text NOT NULL,
    t_ns     bigint NOT NULL,
    volts    double precision,
    amps     double precision,
    watts    double precision NOT NULL
);
CREATE INDEX power_samples_trial ON edgebench.power_samples (trial_id);

CREATE TABLE edgebench.trial_rail_energy (
    trial_id bigint NOT NULL REFERENCES edgebench.trials (id) ON DELETE CASCADE,
    rail     text NOT NULL,
    energy_j double precision NOT NULL,
    in_total boolean NOT NULL,
    PRIMARY KEY (trial_id, rail)
);

CREATE TABLE edgebench.run_provenance (
    run_id bigint NOT NULL REFERENCES edgebench.runs (id) ON DELETE CASCADE,
    key    text NOT NULL,
    value  text NOT NULL,
    PRIMARY KEY (run_id, key)
);

CREATE TABLE edgebench.trial_clocks (
    trial_id    bigint NOT NULL REFERENCES edgebench.trials (id) ON DELETE CASCADE,
    key         text NOT NULL,
    start_value double precision NOT NULL,
    min_value   double precision NOT NULL,
    max_value   double precision NOT NULL,
    end_value   double precision NOT NULL,
    PRIMARY KEY (trial_id, key)
);

CREATE TABLE edgebench.trial_output (
    trial_id bigint NOT NULL REFERENCES edgebench.trials (id) ON DELETE CASCADE,
    stream   text NOT NULL,
    tail     text NOT NULL,
    PRIMARY KEY (trial_id, stream)
);

-- One row per trial with its board and the headline numbers.
CREATE VIEW edgebench.trial_summary AS
SELECT r.host, r.board, r.uuid AS run_uuid, t.uuid AS trial_uuid, t.workload, t.net, t.device,
       t.batch, t.repetition, t.status, t.started_at, t.ended_at, t.iterations_done,
       t.time_per_image_s, t.images_per_s, t.time_per_iteration_s, t.energy_j,
       t.energy_per_image_j, t.avg_power_w, t.edp_js, t.gflop_per_s, t.swap_pressure,
       t.throttled, r.edgebench_version
FROM edgebench.trials t
JOIN edgebench.runs r ON r.id = t.run_id;

-- Per board and configuration: how many trials, how many ok, the median time per image and
-- the mean energy per image of the ok ones.
CREATE VIEW edgebench.board_workload_summary AS
SELECT host, board, workload, net, device, batch,
       count(*) AS trials,
       count(*) FILTER (WHERE status = 'ok') AS trials_ok,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY time_per_image_s)
           FILTER (WHERE status = 'ok') AS median_time_per_image_s,
       avg(energy_per_image_j) FILTER (WHERE status = 'ok') AS mean_energy_per_image_j,
       max(started_at) AS last_started_at
FROM edgebench.trial_summary
GROUP BY host, board, workload, net, device, batch;

-- CPU over GPU (`cuda`, the device name the boards record) median time per image.
CREATE VIEW edgebench.gpu_cpu_speedup AS
SELECT c.host, c.board, c.workload, c.net, c.batch,
       c.median_time_per_image_s AS cpu_time_per_image_s,
       g.median_time_per_image_s AS gpu_time_per_image_s,
       c.median_time_per_image_s / NULLIF(g.median_time_per_image_s, 0) AS speedup
FROM edgebench.board_workload_summary c
JOIN edgebench.board_workload_summary g
  ON g.host = c.host AND g.board IS NOT DISTINCT FROM c.board AND g.workload = c.workload
 AND g.net = c.net AND g.batch = c.batch
WHERE c.device = 'cpu' AND g.device = 'cuda'
  AND c.median_time_per_image_s IS NOT NULL AND g.median_time_per_image_s IS NOT NULL;
