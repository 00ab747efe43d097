-- v7: `iterations.lr` may be NULL (SQLite cannot drop a NOT NULL, so the table is rebuilt),
-- and the end of an external command's output.
CREATE TABLE iterations_v7 (
    trial_id   INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
    step       INTEGER NOT NULL,
    epoch      INTEGER NOT NULL,
    loss       REAL,
    lr         REAL,
    data_s     REAL NOT NULL,
    step_s     REAL NOT NULL,
    t_start_ns INTEGER NOT NULL,
    t_end_ns   INTEGER NOT NULL,
    energy_j   REAL,
    PRIMARY KEY (trial_id, step)
) WITHOUT ROWID;
INSERT INTO iterations_v7 SELECT trial_id, step, epoch, loss, lr, data_s, step_s, t_start_ns, t_end_ns, energy_j FROM iterations;
DROP TABLE iterations;
ALTER TABLE iterations_v7 RENAME TO iterations;
CREATE TABLE trial_output (
    trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
    stream   TEXT NOT NULL,
    tail     TEXT NOT NULL,
    PRIMARY KEY (trial_id, stream)
);
