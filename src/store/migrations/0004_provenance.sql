-- v4: provenance per run, clocks and throttling per trial (see the table docs in `schema.rs`).
ALTER TABLE trials ADD COLUMN throttled INTEGER CHECK (throttled IN (0, 1));
ALTER TABLE trials ADD COLUMN throttle_note TEXT;

CREATE TABLE run_provenance (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    key    TEXT NOT NULL,
    value  TEXT NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;

CREATE TABLE trial_clocks (
    trial_id    INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
    key         TEXT NOT NULL,
    start_value REAL NOT NULL,
    min_value   REAL NOT NULL,
    max_value   REAL NOT NULL,
    end_value   REAL NOT NULL,
    PRIMARY KEY (trial_id, key)
) WITHOUT ROWID;
