-- v5: what a run's power total covers, and trials too short for the power sensor.
ALTER TABLE runs ADD COLUMN power_scope TEXT;
ALTER TABLE trials ADD COLUMN power_low_samples INTEGER;
ALTER TABLE trials ADD COLUMN power_note TEXT;
