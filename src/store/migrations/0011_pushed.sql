-- v11: which trials a central PostgreSQL holds (see the table docs in `schema.rs`).
CREATE TABLE pushed (
    trial_uuid TEXT NOT NULL,
    target     TEXT NOT NULL,
    pushed_at  TEXT NOT NULL,
    PRIMARY KEY (trial_uuid, target)
) WITHOUT ROWID;
