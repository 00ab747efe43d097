-- v9: an imported iteration's loss and time as its log wrote them.
ALTER TABLE iterations ADD COLUMN loss_text TEXT;
ALTER TABLE iterations ADD COLUMN step_s_text TEXT;
