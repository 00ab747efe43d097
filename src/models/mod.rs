//! The networks: declarative BVLC definitions (`spec`), the candle network built from them
//! (`net`), and a registry by name.

pub(crate) mod alexnet;
pub(crate) mod googlenet;
pub(crate) mod net;
pub(crate) mod spec;

pub use net::Param;
pub use net::{ConvImpl, Network};
pub use spec::{NetSpec, NetSummary};

use std::sync::OnceLock;

/// Every network edgebench knows, built once (GoogLeNet's layer names are leaked on build).
pub fn all() -> &'static [NetSpec] {
    static NETS: OnceLock<Vec<NetSpec>> = OnceLock::new();
    NETS.get_or_init(|| vec![alexnet::spec(), googlenet::spec()])
}

pub fn names() -> Vec<&'static str> {
    all().iter().map(|n| n.name).collect()
}

/// Looks a network up by name (case-insensitive).
pub fn by_name(name: &str) -> Option<&'static NetSpec> {
    all().iter().find(|n| n.name.eq_ignore_ascii_case(name))
}
