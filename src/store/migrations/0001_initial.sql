-- v1: runs, trials and their iterations.
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO meta (key, value) VALUES ('application', 'edgebench');

CREATE TABLE runs (
    id                INTEGER PRIMARY KEY,
    uuid              TEXT NOT NULL UNIQUE,
    host              TEXT NOT NULL,
    started_at        TEXT NOT NULL,
    ended_at          TEXT,
    status            TEXT NOT NULL,
    config_toml       TEXT NOT NULL,
    edgebench_version TEXT NOT NULL,
    git_commit        TEXT NOT NULL,
    candle_version    TEXT NOT NULL,
    cpu_threads       INTEGER NOT NULL,
    cpu_model         TEXT,
    os                TEXT NOT NULL
);

CREATE TABLE trials (
    id                      INTEGER PRIMARY KEY,
    uuid                    TEXT NOT NULL UNIQUE,
    run_id                  INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    net                     TEXT NOT NULL,
    device                  TEXT NOT NULL,
    batch                   INTEGER NOT NULL,
    epochs                  INTEGER NOT NULL,
    images                  INTEGER NOT NULL,
    dataset                 TEXT NOT NULL,
    iterations_planned      INTEGER NOT NULL,
    iterations_done         INTEGER NOT NULL DEFAULT 0,
    warmup_iterations       INTEGER NOT NULL,
    status                  TEXT NOT NULL,
    error                   TEXT,
    started_at              TEXT NOT NULL,
    ended_at                TEXT,
    time_per_image_s        REAL,
    time_per_image_spread_s REAL,
    images_per_s            REAL,
    loss_first              REAL,
    loss_last               REAL,
    loss_anomaly            INTEGER NOT NULL DEFAULT 0 CHECK (loss_anomaly IN (0, 1)),
    energy_j                REAL,
    avg_power_w             REAL,
    energy_per_image_j      REAL,
    edp_js                  REAL,
    swap_pressure           INTEGER CHECK (swap_pressure IN (0, 1)),
    peak_rss_bytes          INTEGER
);
CREATE INDEX trials_key ON trials (net, device, batch, epochs, images, dataset, status);
CREATE INDEX trials_run ON trials (run_id);

CREATE TABLE iterations (
    trial_id   INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
    step       INTEGER NOT NULL,
    epoch      INTEGER NOT NULL,
    loss       REAL,
    lr         REAL NOT NULL,
    data_s     REAL NOT NULL,
    step_s     REAL NOT NULL,
    t_start_ns INTEGER NOT NULL,
    t_end_ns   INTEGER NOT NULL,
    PRIMARY KEY (trial_id, step)
) WITHOUT ROWID;
