//! The kernels' tuning knobs, read from the environment once per process. They exist for
//! comparisons (Winograd against im2col) and for tuning on other CPUs; the defaults are the
//! values measured best on the boards (see docs/kernels.md, "Tuning variables").

use std::sync::OnceLock;

/// Every tuning knob of the kernels. `tuning()` holds the process's values, read from the
/// environment by `Tuning::from_env` the first time a kernel asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// `EDGEBENCH_CONV_COLS` (default 256): target GEMM columns when the im2col convolution
    /// puts several images of a small feature map side by side; 1 = one image per GEMM.
    pub conv_cols: usize,
    /// `EDGEBENCH_WINOGRAD` (default on): `0` turns the Winograd convolutions off, so every
    /// convolution takes the im2col path.
    pub winograd: bool,
    /// `EDGEBENCH_WINOGRAD_TILE` (default by map size: F(4x4) on maps of at least 48, else
    /// F(2x2)): `2` or `4` sets the output tile side for every Winograd layer; other values
    /// are ignored.
    pub winograd_tile: Option<usize>,
    /// `EDGEBENCH_WINOGRAD_TILES` (default 196): target tile columns per Winograd GEMM block;
    /// 0 is ignored.
    pub winograd_tiles: usize,
    /// `EDGEBENCH_WINOGRAD_CHUNK_KB` (default 1024, half of a 2 MB L2): size in KiB of the
    /// Winograd forward's output-channel chunks.
    pub winograd_chunk_kb: usize,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            conv_cols: crate::conv::MIN_COLS,
            winograd: true,
            winograd_tile: None,
            winograd_tiles: crate::winograd::TILES,
            winograd_chunk_kb: 1024,
        }
    }
}

impl Tuning {
    /// The knobs from the `EDGEBENCH_*` variables above; unset or unparsable ones keep their
    /// default.
    pub fn from_env() -> Tuning {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Tuning {
        let default = Tuning::default();
        let number = |name: &str| var(name).and_then(|v| v.parse::<usize>().ok());
        Tuning {
            conv_cols: number("EDGEBENCH_CONV_COLS").unwrap_or(default.conv_cols),
            winograd: var("EDGEBENCH_WINOGRAD").is_none_or(|v| v != "0"),
            winograd_tile: match var("EDGEBENCH_WINOGRAD_TILE").as_deref() {
                Some("2") => Some(2),
                Some("4") => Some(4),
                _ => default.winograd_tile,
            },
            winograd_tiles: number("EDGEBENCH_WINOGRAD_TILES")
                .filter(|&t| t > 0)
                .unwrap_or(default.winograd_tiles),
            winograd_chunk_kb: number("EDGEBENCH_WINOGRAD_CHUNK_KB")
                .unwrap_or(default.winograd_chunk_kb),
        }
    }
}

/// The process's tuning, read from the environment on first use and fixed from then on.
pub fn tuning() -> &'static Tuning {
    static TUNING: OnceLock<Tuning> = OnceLock::new();
    TUNING.get_or_init(Tuning::from_env)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Tuning {
        Tuning::from_vars(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn unset_variables_keep_the_defaults() {
        assert_eq!(with(&[]), Tuning::default());
        let d = Tuning::default();
        assert_eq!((d.conv_cols, d.winograd_tiles), (256, 196));
        assert!(d.winograd && d.winograd_tile.is_none());
        assert_eq!(d.winograd_chunk_kb, 1024);
    }

    #[test]
    fn variables_set_their_knob() {
        let t = with(&[
            ("EDGEBENCH_CONV_COLS", "1"),
            ("EDGEBENCH_WINOGRAD", "0"),
            ("EDGEBENCH_WINOGRAD_TILE", "2"),
            ("EDGEBENCH_WINOGRAD_TILES", "128"),
            ("EDGEBENCH_WINOGRAD_CHUNK_KB", "512"),
        ]);
        let want = Tuning {
            conv_cols: 1,
            winograd: false,
            winograd_tile: Some(2),
            winograd_tiles: 128,
            winograd_chunk_kb: 512,
        };
        assert_eq!(t, want);
        assert_eq!(
            with(&[("EDGEBENCH_WINOGRAD_TILE", "4")]).winograd_tile,
            Some(4)
        );
        assert!(with(&[("EDGEBENCH_WINOGRAD", "1")]).winograd);
        assert!(with(&[("EDGEBENCH_WINOGRAD", "")]).winograd);
    }

    #[test]
    fn values_out_of_range_or_unparsable_are_ignored() {
        let t = with(&[
            ("EDGEBENCH_CONV_COLS", "many"),
            ("EDGEBENCH_WINOGRAD_TILE", "3"),
            ("EDGEBENCH_WINOGRAD_TILES", "0"),
            ("EDGEBENCH_WINOGRAD_CHUNK_KB", "-1"),
        ]);
        assert_eq!(t, Tuning::default());
    }
}
