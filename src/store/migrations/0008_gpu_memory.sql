-- v8: the trial's peak GPU memory (see the table docs in `schema.rs`).
ALTER TABLE trials ADD COLUMN peak_gpu_bytes INTEGER;
