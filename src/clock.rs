//! Time at the bottom of the stack: CLOCK_MONOTONIC for everything that must line up across
//! processes (iterations, power, memory and clock samples), RFC 3339 text for the records.

/// CLOCK_MONOTONIC in nanoseconds: shared by every process on the host, so power and memory
/// samplers in another process line up with iteration boundaries.
pub fn monotonic_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// The wall clock now as RFC 3339 UTC ("YYYY-MM-DDTHH:MM:SS.mmmZ"); the store sorts these as
/// text.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    rfc3339(secs)
}

/// Seconds since the epoch -> "YYYY-MM-DDTHH:MM:SS.mmmZ" (civil-from-days, Howard Hinnant),
/// without pulling in a date crate.
pub fn rfc3339(secs: f64) -> String {
    let days = (secs / 86_400.0).floor() as i64;
    let rem = secs - days as f64 * 86_400.0;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let ms = (rem * 1000.0).round() as i64;
    let (h, mi, s, ms) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{ms:03}Z")
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(super::rfc3339(0.0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::rfc3339(1_764_107_000.25), "2025-11-25T21:43:20.250Z");
        assert_eq!(super::rfc3339(951_782_400.0), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn monotonic_clock_never_goes_back() {
        let a = super::monotonic_ns();
        let b = super::monotonic_ns();
        assert!(a > 0 && b >= a);
    }
}
