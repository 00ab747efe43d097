-- v2: what memory did to each trial (see `src/memory/verdict.rs` for the rule).
CREATE TABLE trial_memory (
    trial_id                INTEGER PRIMARY KEY REFERENCES trials(id) ON DELETE CASCADE,
    mem_estimate_bytes      INTEGER,
    mem_limit_bytes         INTEGER,
    swap_in_pages           INTEGER,
    swap_out_pages          INTEGER,
    major_faults            INTEGER,
    swapped_bytes_max       INTEGER,
    mem_available_min_bytes INTEGER,
    psi_memory_some_us      INTEGER,
    psi_memory_full_us      INTEGER,
    memory_note             TEXT
);
