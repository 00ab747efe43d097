//! `edgebench import logs`: other frameworks' training logs, as trials of the exec workload.

use super::{input, usage, Outcome};
use edgebench::host::HostPaths;
use edgebench::store::Store;
use std::path::Path;

/// Every log read and checked before the database is opened, then one transaction.
pub(crate) fn logs(
    dir: &Path,
    parser: &str,
    engine: &str,
    from: Option<String>,
    db: &Path,
    host: &HostPaths,
) -> Outcome {
    use edgebench::workloads::exec::import;
    let from = from.unwrap_or_else(|| host.hostname());
    let prepared = import::prepare(&import::LogImport {
        dir,
        parser,
        engine,
        host: &from,
    })
    .map_err(usage)?;
    for log in prepared.logs.iter().filter(|l| l.untimed_lines > 0) {
        tracing::warn!(
            "{}: {} step line(s) without a time of their own or a timestamp left out",
            log.path.display(),
            log.untimed_lines
        );
    }
    let mut store = Store::open(db).map_err(input)?;
    let outcome = prepared.write(&mut store)?;
    let name = |i: usize| {
        let path = &prepared.logs[i].path;
        path.file_name()
            .unwrap_or(path.as_os_str())
            .to_string_lossy()
            .into_owned()
    };
    for (i, host, run) in &outcome.already {
        println!(
            "{}: already imported (host {host}, run {run}); skipped",
            name(*i)
        );
    }
    for &i in &outcome.written {
        let t = &prepared.trials[i];
        let per_image = t
            .summary
            .time_per_image_s
            .map_or("-".to_string(), |s| format!("{:.3}", s * 1e3));
        println!(
            "{}: {} {} batch {}, {} records, {per_image} ms/image",
            name(i),
            t.key.net,
            t.key.device,
            t.key.batch,
            t.iterations.len()
        );
    }
    match &outcome.run_uuid {
        Some(run) => println!(
            "imported {} log(s) as engine {engine}, host {from} (run {run}); {} already there -> {}",
            outcome.written.len(),
            outcome.already.len(),
            db.display()
        ),
        None => println!(
            "nothing imported: all {} log(s) of {} are already in {}",
            outcome.already.len(),
            dir.display(),
            db.display()
        ),
    }
    Ok(0)
}
