-- v6: a trial is (workload, device, parameters); workload-neutral timing and metrics.
ALTER TABLE trials ADD COLUMN workload TEXT NOT NULL DEFAULT 'cnn';
ALTER TABLE trials ADD COLUMN params TEXT NOT NULL DEFAULT '{}';
ALTER TABLE trials ADD COLUMN time_per_iteration_s REAL;
ALTER TABLE trials ADD COLUMN time_per_iteration_spread_s REAL;
ALTER TABLE trials ADD COLUMN total_time_s REAL;
ALTER TABLE trials ADD COLUMN gflop_per_s REAL;
ALTER TABLE trials ADD COLUMN metrics TEXT;
