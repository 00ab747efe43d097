//! Time at the bottom of the stack: CLOCK_MONOTONIC for everything that must line up across
//! processes (iterations, power, memory and clock samples), RFC 3339 text for the records.

/// CLOCK_MONOTONIC in nanoseconds: shared by every process on the host, so power and memory
/// samplers in another process line up with iteration boundaries.
pub(crate) fn monotonic_ns() -> i64 {
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
pub(crate) fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    rfc3339(secs)
}

/// Seconds since the epoch -> "YYYY-MM-DDTHH:MM:SS.mmmZ", rounded to the millisecond (humantime
/// truncates, so the rounding happens here).
pub(crate) fn rfc3339(secs: f64) -> String {
    let ms = (secs * 1000.0).round().max(0.0) as u64;
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_millis(at).to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(super::rfc3339(0.0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::rfc3339(1_764_107_000.25), "2025-11-25T21:43:20.250Z");
        assert_eq!(super::rfc3339(951_782_400.0), "2000-02-29T00:00:00.000Z");
        assert_eq!(
            super::rfc3339(59.9996),
            "1970-01-01T00:01:00.000Z",
            "rounded, not cut"
        );
        let text = super::rfc3339(1_764_107_000.25);
        let back = humantime::parse_rfc3339_weak(&text).unwrap();
        assert_eq!(
            super::rfc3339(
                back.duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_secs_f64()
            ),
            text
        );
    }

    #[test]
    fn monotonic_clock_never_goes_back() {
        let a = super::monotonic_ns();
        let b = super::monotonic_ns();
        assert!(a > 0 && b >= a);
    }
}
