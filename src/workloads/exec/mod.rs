//! The external-command workload: any framework's training run measured with edgebench's
//! instruments. The command's log lines become iteration records ([`parse`]), old logs in the
//! layout of the Caffe/TensorFlow study scripts are imported ([`import`]), and config entries
//! expand into commands run in their own process group ([`command`]).

pub mod command;
pub mod import;
pub mod parse;
