-- v3: power and energy (see the table docs in `schema.rs`).
ALTER TABLE runs ADD COLUMN board TEXT;
ALTER TABLE runs ADD COLUMN power_total TEXT;
ALTER TABLE runs ADD COLUMN baseline_power_w REAL;
ALTER TABLE runs ADD COLUMN baseline_s REAL;

ALTER TABLE trials ADD COLUMN dynamic_energy_j REAL;
ALTER TABLE trials ADD COLUMN power_samples INTEGER;
ALTER TABLE trials ADD COLUMN power_rate_hz REAL;
ALTER TABLE trials ADD COLUMN power_jitter_s REAL;
ALTER TABLE trials ADD COLUMN power_incomplete INTEGER CHECK (power_incomplete IN (0, 1));
ALTER TABLE trials ADD COLUMN power_gap_s REAL;

ALTER TABLE iterations ADD COLUMN energy_j REAL;

CREATE TABLE power_samples (
    trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
    source   TEXT NOT NULL,
    rail     TEXT NOT NULL,
    t_ns     INTEGER NOT NULL,
    volts    REAL,
    amps     REAL,
    watts    REAL NOT NULL
);
CREATE INDEX power_samples_trial ON power_samples (trial_id, rail, t_ns);

CREATE TABLE trial_rail_energy (
    trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
    rail     TEXT NOT NULL,
    energy_j REAL NOT NULL,
    in_total INTEGER NOT NULL CHECK (in_total IN (0, 1)),
    PRIMARY KEY (trial_id, rail)
) WITHOUT ROWID;
