//! edgebench: trains the classic CNNs with candle, sweeping batch sizes, and logs every
//! iteration to SQLite. Data flows one way: config -> plan -> runner/train -> store -> report.

pub mod ops;
