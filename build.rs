//! Records provenance at build time: the git commit and the candle version actually locked;
//! lists the workloads' own integration tests for the `it` test binary.

use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| !o.stdout.is_empty())
        .unwrap_or(false);
    let commit = if dirty {
        format!("{commit}-dirty")
    } else {
        commit
    };
    println!("cargo:rustc-env=EDGEBENCH_GIT_COMMIT={commit}");

    let lock = std::fs::read_to_string("Cargo.lock").unwrap_or_default();
    let candle = lock
        .split("[[package]]")
        .find(|p| p.contains("name = \"candle-core\""))
        .and_then(|p| p.lines().find(|l| l.starts_with("version = ")))
        .map(|l| {
            l.trim_start_matches("version = ")
                .trim_matches('"')
                .to_string()
        })
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=EDGEBENCH_CANDLE_VERSION={candle}");
    workload_tests();
    println!("cargo:rerun-if-changed=Cargo.lock");
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/index");
}

/// A workload keeps its integration tests in its folder (`src/workloads/<name>/it.rs`);
/// `tests/it/main.rs` includes the module list written here, so adding a workload's tests
/// touches nothing outside its folder.
fn workload_tests() {
    let root = std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let mut names: Vec<String> = std::fs::read_dir(root.join("src/workloads"))
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .filter(|e| e.path().join("it.rs").is_file())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let modules: String = names
        .iter()
        .map(|name| {
            let path = root.join("src/workloads").join(name).join("it.rs");
            format!("#[path = {:?}]\nmod {name};\n", path.display().to_string())
        })
        .collect();
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    std::fs::write(out.join("workload_tests.rs"), modules).expect("cannot write OUT_DIR");
    println!("cargo:rerun-if-changed=src/workloads");
}
