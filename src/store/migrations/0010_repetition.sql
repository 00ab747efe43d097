-- v10: the repetition index of a trial (see the table docs in `schema.rs`).
ALTER TABLE trials ADD COLUMN repetition INTEGER NOT NULL DEFAULT 1 CHECK (repetition >= 1);
